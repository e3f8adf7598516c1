using System.Diagnostics;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;

namespace Isis.Simulation;

/// <summary>What replacing a membership replica cost after many decisions (see <see cref="ReplicaCatchUpExperiment"/>).</summary>
/// <param name="Decisions">Decisions taken while the replaced replica was away.</param>
/// <param name="Packets">Packets the leader sent the replacement until it held every committed decision.</param>
/// <param name="Bytes">Their bytes.</param>
/// <param name="VirtualMicros">Protocol time the catch-up took (heartbeats and round trips; the network here is instant).</param>
/// <param name="WallMicros">Processing time of the catch-up on this machine (both replicas' steps, single thread).</param>
/// <param name="SnapshotIndex">Where the leader's snapshot was.</param>
/// <param name="CommitIndex">The leader's commit index, which the replacement reached.</param>
internal sealed record CatchUpResult(int Decisions, long Packets, long Bytes, long VirtualMicros, long WallMicros, long SnapshotIndex, long CommitIndex)
{
    public string Summary =>
        $"after {Decisions:N0} decisions the replacement caught up (commit index {CommitIndex:N0}, snapshot at {SnapshotIndex:N0}): "
        + $"{Packets:N0} packets, {Bytes:N0} bytes, {VirtualMicros / 1000.0:F1} ms of protocol time, {WallMicros / 1000.0:F1} ms of processing; "
        + $"at 1 Gbit/s the bytes take {Bytes * 8 / 1e6:F2} ms";
}

/// <summary>
/// Three dedicated membership replicas, driven through their sans-IO API on an instant network:
/// one is stopped, the other two take <c>decisions</c> decisions (expulsions of incarnations on
/// 1,000 endpoints), and the stopped one comes back with an empty disk (its machine replaced); the
/// experiment measures what its catch-up costs. The tool's figures go to docs/performance.md.
/// </summary>
internal static class ReplicaCatchUpExperiment
{
    public static CatchUpResult Run(int decisions, ProtocolOptions options)
    {
        NodeId[] founding = [new(1, 1), new(2, 1), new(3, 1)];
        var replicas = new MembershipReplica?[3];
        var driver = new InstantNetwork();
        Queue<(ulong From, ulong To, byte[] Bytes)> network = driver.InFlight;
        long now = 0, packetsTo3 = 0, bytesTo3 = 0;
        int away = -1; // the replica replaced
        void Drain()
        {
            while (true)
            {
                foreach (MembershipReplica? r in replicas)
                {
                    if (r == null) continue;
                    driver.StepOf(r);
                }
                if (network.Count == 0) return;
                while (network.TryDequeue(out var packet))
                {
                    if (packet.To == (ulong)away + 1 && replicas[away] != null)
                    {
                        packetsTo3++;
                        bytesTo3 += packet.Bytes.Length;
                    }
                    replicas[(int)packet.To - 1]?.Receive(packet.From, packet.Bytes, now);
                }
            }
        }
        void Run(long micros, Func<bool> until)
        {
            for (long end = now + micros; now < end && !until();)
            {
                now += 1_000;
                foreach (MembershipReplica? r in replicas) r?.Tick(now);
                Drain();
            }
        }

        for (int i = 0; i < 3; i++) replicas[i] = new MembershipReplica(founding[i], founding, options, now);
        Drain();
        Run(5_000_000, () => replicas.Any(r => r!.IsActiveLeader));
        MembershipReplica leader = replicas.First(r => r!.IsActiveLeader)!;
        away = Array.FindIndex(replicas, r => r != leader); // a follower
        replicas[away] = null;
        for (int n = 0; n < decisions; n++)
        {
            leader.Expel(new NodeId(10_000 + (ulong)(n % 1000), 1 + (uint)(n / 1000)));
            if (n % 256 == 255) Drain();
        }
        Drain();

        long startedAt = now;
        var clock = Stopwatch.StartNew();
        replicas[away] = new MembershipReplica(founding[away], founding, options, now);
        Drain();
        MembershipReplica replacement = replicas[away]!;
        Run(600_000_000, () => replacement.CommitIndex >= leader.CommitIndex);
        clock.Stop();
        return new CatchUpResult(decisions, packetsTo3, bytesTo3, now - startedAt, (long)clock.Elapsed.TotalMicroseconds, leader.SnapshotIndex, leader.CommitIndex);
    }

    /// <summary>The replicas' steps, run as every driver runs them, onto an instant network (their events are not looked at).</summary>
    private sealed class InstantNetwork : Driving.MemoryDriver
    {
        public Queue<(ulong From, ulong To, byte[] Bytes)> InFlight { get; } = new();

        public void StepOf(IProtocolNode node) => Step(node);

        protected override void Transmit(ulong from, in OutboundPacket packet) => InFlight.Enqueue((from, packet.Destination, packet.Bytes.ToArray()));

        protected override void Handle(IProtocolNode node, NodeEvent e, long time)
        {
        }
    }
}
