using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Core.Wire;
using Isis.Simulation.Driving;

namespace Isis.Core.Tests.Membership;

/// <summary>
/// The membership service's log compaction, step by step on a perfect network of three dedicated
/// replicas: after many decisions the log holds only what follows the last snapshot, a replica
/// restarts from its compacted records, and a replica whose disk was replaced catches up from a
/// snapshot and a short tail instead of the whole log.
/// </summary>
public sealed class ReplicaCompactionTests
{
    private static readonly NodeId[] Founding = [new(1, 1), new(2, 1), new(3, 1)];

    private sealed class Service(ProtocolOptions options) : MemoryDriver
    {
        private readonly Queue<(ulong From, ulong To, byte[] Bytes)> _network = new();
        public readonly MembershipReplica?[] Replicas = new MembershipReplica?[3];
        /// <summary>Replica i's records on its disk.</summary>
        public List<byte[]> Durable(int i) => DiskOf(Founding[i].Endpoint).ReplicaRecords;

        public readonly List<NodeEvent>[] Events = [new(), new(), new()];
        public long Now;
        public long PacketsTo3, BytesTo3, SnapshotPacketsTo3, AppendPacketsTo3;
        /// <summary>The replica whose incoming packets are counted (the "3" of the counters).</summary>
        public int Watched = 2;

        public void Start(int i, bool fromDisk)
        {
            if (!fromDisk) Durable(i).Clear();
            Replicas[i] = new MembershipReplica(Founding[i], Founding, options, Now, fromDisk && Durable(i).Count > 0 ? Durable(i).ToList() : null);
            Drain();
        }

        public MembershipReplica Leader => Replicas.Single(r => r != null && r.IsActiveLeader)!;

        public void Run(long micros, Func<bool>? until = null)
        {
            long end = Now + micros;
            while (Now < end && !(until?.Invoke() ?? false))
            {
                Now += 1_000;
                foreach (MembershipReplica? r in Replicas) r?.Tick(Now);
                Drain();
            }
        }

        public void Drain()
        {
            while (true)
            {
                for (int i = 0; i < 3; i++)
                {
                    if (Replicas[i] is not { } r) continue;
                    Step(r);
                }
                if (_network.Count == 0) return;
                while (_network.TryDequeue(out var packet))
                {
                    int to = (int)packet.To - 1;
                    if (to == Watched)
                    {
                        PacketsTo3++;
                        BytesTo3 += packet.Bytes.Length;
                        if (PacketDecoder.TryReadHeader(packet.Bytes, out PacketHeader h) == HeaderVerdict.Ok)
                        {
                            if (h.Kind == PacketKind.ReplicaSnapshot) SnapshotPacketsTo3++;
                            if (h.Kind == PacketKind.ReplicaAppend) AppendPacketsTo3++;
                        }
                    }
                    Replicas[to]?.Receive(packet.From, packet.Bytes, Now);
                }
            }
        }

        protected override void Transmit(ulong from, in OutboundPacket packet) => _network.Enqueue((from, packet.Destination, packet.Bytes.ToArray()));

        protected override void Handle(IProtocolNode node, NodeEvent e, long time) => Events[(int)node.Endpoint - 1].Add(e);

        /// <summary>Expels <paramref name="count"/> incarnations (1,000 endpoints, rising incarnations): one decision each.</summary>
        public void Decide(int count)
        {
            for (int n = 0; n < count; n++)
            {
                Leader.Expel(new NodeId(10_000 + (ulong)(n % 1000), 1 + (uint)(n / 1000)));
                if (n % 256 == 255) Drain();
            }
            Drain();
        }
    }

    [Fact]
    public void After_100000_decisions_a_replica_with_a_new_disk_catches_up_from_a_snapshot_and_a_short_tail()
    {
        var options = new ProtocolOptions();
        var service = new Service(options);
        for (int i = 0; i < 3; i++) service.Start(i, fromDisk: false);
        service.Run(2_000_000, () => service.Replicas.Any(r => r!.IsActiveLeader));
        int away = Array.FindIndex(service.Replicas, r => !r!.IsActiveLeader);
        service.Watched = away;
        service.Replicas[away] = null; // its host is gone: the other two decide on their own
        service.Decide(100_000);
        MembershipReplica leader = service.Leader;
        Assert.True(leader.CommitIndex > 100_000);

        // The log behind the last snapshot is gone, in memory and in the records.
        Assert.True(leader.SnapshotIndex >= leader.CommitIndex - options.ReplicaSnapshotInterval);
        Assert.True(leader.LogEntriesInMemory <= options.ReplicaSnapshotInterval, $"{leader.LogEntriesInMemory} entries in memory");
        int leaderIndex = Array.IndexOf(service.Replicas, leader);
        Assert.True(service.Durable(leaderIndex).Count <= options.ReplicaSnapshotInterval + 1, $"{service.Durable(leaderIndex).Count} records");
        // The expelled set is one entry per endpoint, not per expulsion.
        Assert.Equal(1000, leader.ExpelledEndpointCount);

        // A replacement host with an empty disk: the snapshot, then the tail, pipelined.
        long restartedAt = service.Now;
        service.PacketsTo3 = service.BytesTo3 = service.SnapshotPacketsTo3 = service.AppendPacketsTo3 = 0;
        service.Start(away, fromDisk: false);
        MembershipReplica replacement = service.Replicas[away]!;
        service.Run(2_000_000, () => replacement.CommitIndex == leader.CommitIndex);
        Assert.Equal(leader.CommitIndex, replacement.CommitIndex);
        long tail = leader.CommitIndex - leader.SnapshotIndex;
        Assert.Contains(service.Events[away], e => e is ReplicaSnapshotMade { Installed: true });
        // Without compaction it would take 100,000 / 64 appends, one batch per heartbeat (80 s);
        // now the snapshot's chunks and the tail's batches, within a few heartbeat periods.
        Assert.True(service.AppendPacketsTo3 <= tail / 64 + 10, $"{service.AppendPacketsTo3} appends for a tail of {tail}");
        Assert.True(service.Now - restartedAt <= 4 * options.ReplicaHeartbeatInterval, $"caught up after {service.Now - restartedAt} us");
        Assert.True(service.BytesTo3 < 4 * 1024 * 1024, $"{service.BytesTo3} bytes sent to the replacement");
        // It holds the same state: the same expulsions, by the highest incarnation per endpoint.
        Assert.Equal(1000, replacement.ExpelledEndpointCount);
        Assert.True(replacement.IsExpelled(new NodeId(10_999, 100)));
        Assert.False(replacement.IsExpelled(new NodeId(10_999, 101)));
    }

    [Fact]
    public void A_replica_restarts_from_its_snapshot_and_the_records_after_it_not_from_the_first_decision()
    {
        var options = new ProtocolOptions { ReplicaSnapshotInterval = 50 };
        var service = new Service(options);
        for (int i = 0; i < 3; i++) service.Start(i, fromDisk: false);
        service.Run(2_000_000, () => service.Replicas.Any(r => r!.IsActiveLeader));
        service.Decide(1_234);
        service.Run(100_000); // a heartbeat brings the followers the commit index
        int follower = Array.FindIndex(service.Replicas, r => !r!.IsActiveLeader);
        long committed = service.Replicas[follower]!.CommitIndex;
        int records = service.Durable(follower).Count;
        Assert.True(records <= 50 + 2, $"{records} records; snapshot at {service.Replicas[follower]!.SnapshotIndex}, committed {committed}, last {service.Replicas[follower]!.LogEntriesInMemory} in memory");

        service.Start(follower, fromDisk: true);
        MembershipReplica restarted = service.Replicas[follower]!;
        // Restored from the snapshot: its state has every expulsion the snapshot covers before any
        // entry is applied again, and only the entries after the snapshot are applied again.
        Assert.True(restarted.SnapshotIndex > committed - 50 - 2);
        Assert.True(restarted.IsExpelled(new NodeId(10_000, 1)));
        service.Events[follower].Clear();
        service.Run(1_000_000, () => restarted.CommitIndex >= committed);
        long reapplied = service.Events[follower].OfType<DecisionApplied>().Count(d => d.Index <= committed);
        Assert.True(reapplied <= 50 + 2, $"{reapplied} decisions applied again");
        Assert.Equal(service.Leader.ExpelledEndpointCount, restarted.ExpelledEndpointCount);
    }

    [Fact]
    public void Malformed_or_forged_snapshot_chunks_are_dropped_and_counted_cost_no_more_than_they_carry_and_leave_the_log_as_it_was()
    {
        var options = new ProtocolOptions { ReplicaSnapshotInterval = 50 };
        var service = new Service(options);
        for (int i = 0; i < 3; i++) service.Start(i, fromDisk: false);
        service.Run(2_000_000, () => service.Replicas.Any(r => r!.IsActiveLeader));
        service.Decide(200);
        service.Run(100_000);
        MembershipReplica leader = service.Leader;
        MembershipReplica follower = service.Replicas.First(r => !r!.IsActiveLeader)!;
        long term = leader.Term, committed = follower.CommitIndex;
        int chunk = 60 * 1024;

        // Sent in the leader's name, at its term, for a snapshot past what the follower holds.
        byte[] Chunk(long index, long snapshotTerm, int length, int offset, byte[] bytes) =>
            new PacketWriter().Begin(new PacketHeader(PacketKind.ReplicaSnapshot, leader.Self, default, 0, term))
                .I64(index).I64(snapshotTerm).I64(service.Now).I32(length).I32(offset).Bytes(bytes).Finish();
        byte[][] malformed =
        [
            Chunk(committed + 10, term, 100, 0, new byte[100])[..^5],          // cut short
            Chunk(committed + 10, term, 100, 1, new byte[99]),                  // offset not at a chunk boundary
            Chunk(committed + 10, term, 100, 0, new byte[60]),                  // shorter than the length says
            Chunk(committed + 10, term, 0, 0, []),                              // empty
            Chunk(committed + 10, term + 1, 100, 0, new byte[100]),             // a snapshot of a later term than the packet's
            Chunk(0, term, 100, 0, new byte[100]),                              // index 0
            Chunk(committed + 10, term, (1 << 30) + 1, 0, new byte[chunk]),     // longer than any snapshot
            Chunk(committed + 10, term, 100, 0, new byte[100]),                 // whole, but not a snapshot image: it does not install
        ];
        long dropped = follower.Counters.DroppedMalformed;
        foreach (byte[] packet in malformed) follower.Receive(leader.Self.Endpoint, packet, service.Now);
        Assert.Equal(dropped + malformed.Length, follower.Counters.DroppedMalformed);
        Assert.Equal(committed, follower.CommitIndex);

        // A first chunk that claims a gigabyte holds only the chunk it carries.
        byte[] claimsAGigabyte = Chunk(committed + 10, term, 1 << 30, 0, new byte[chunk]);
        long before = GC.GetAllocatedBytesForCurrentThread();
        follower.Receive(leader.Self.Endpoint, claimsAGigabyte, service.Now);
        Assert.True(GC.GetAllocatedBytesForCurrentThread() - before < 4 * chunk, $"{GC.GetAllocatedBytesForCurrentThread() - before} bytes allocated for one chunk");

        // The follower still has its log and goes on deciding with the others.
        service.Decide(100);
        service.Run(200_000, () => follower.CommitIndex == leader.CommitIndex);
        Assert.Equal(leader.CommitIndex, follower.CommitIndex);
        Assert.Equal(leader.ExpelledEndpointCount, follower.ExpelledEndpointCount);
    }

    [Fact]
    public void Expelling_an_incarnation_firewalls_every_earlier_one_on_its_endpoint_and_no_later_one()
    {
        var expelled = new ExpelledIncarnations();
        Assert.True(expelled.Add(new NodeId(7, 5)));
        Assert.True(expelled.Contains(new NodeId(7, 5)));
        Assert.True(expelled.Contains(new NodeId(7, 4)));
        Assert.False(expelled.Contains(new NodeId(7, 6)));
        Assert.False(expelled.Contains(new NodeId(8, 1)));
        Assert.False(expelled.Add(new NodeId(7, 3)));
        Assert.True(expelled.Add(new NodeId(7, 9)));
        Assert.Equal(1, expelled.Count);
    }
}
