using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

public class HostileInputTests
{
    private static long Drops(NodeCounters c) =>
        c.DroppedMalformed + c.DroppedFirewall + c.DroppedNotForMe + c.DroppedUnknownGroup +
        c.DroppedWrongView + c.DroppedNotMember + c.DroppedAfterShutdown + c.Duplicates;

    private static byte[] RandomBytes(Random random, int length)
    {
        byte[] b = new byte[length];
        random.NextBytes(b);
        return b;
    }

    /// <summary>A packet with a valid header (checksum included) and a random, non-empty body.</summary>
    private static byte[] GarbageBody(Random random, PacketKind kind, NodeId sender, GroupId group, int view, long number) =>
        new PacketWriter().Begin(new PacketHeader(kind, sender, group, view, number)).Tail(RandomBytes(random, 1 + random.Next(80))).Finish();

    /// <summary>Hands <paramref name="packet"/> to a target and checks that it threw nothing and counted a drop.</summary>
    private sealed class Feeder(TestCluster c)
    {
        public List<string> Uncounted { get; } = new();

        public void ToProcess(int i, ulong source, byte[] packet, string what)
        {
            long before = Drops(c[i].Counters);
            c.Inject(i, source, packet);
            if (Drops(c[i].Counters) == before) Uncounted.Add($"p{i} <- {what}");
        }

        public void ToOracle(ulong source, byte[] packet, string what)
        {
            long before = Drops(c.Oracle.Counters);
            c.InjectToOracle(source, packet);
            if (Drops(c.Oracle.Counters) == before) Uncounted.Add($"oracle <- {what}");
        }
    }

    /// <summary>One valid packet of every kind, as the real senders would build them (for truncation).</summary>
    private static IEnumerable<(PacketKind Kind, NodeId Sender, byte[] Packet)> ValidPackets(TestCluster c, int view)
    {
        NodeId oracle = c.Oracle.Self, p1 = c.Id(1), p0 = c.Id(0);
        GroupId g = TestCluster.G;
        PacketWriter W(PacketKind k, NodeId s, GroupId grp, long n = 0) => new PacketWriter().Begin(new PacketHeader(k, s, grp, view, n));
        yield return (PacketKind.Heartbeat, p1, W(PacketKind.Heartbeat, p1, default).Finish());
        yield return (PacketKind.HeartbeatAck, oracle, W(PacketKind.HeartbeatAck, oracle, default).Node(p0).Finish());
        yield return (PacketKind.MembershipUpdate, oracle, W(PacketKind.MembershipUpdate, oracle, default).Nodes([p1]).Finish());
        yield return (PacketKind.Expelled, oracle, W(PacketKind.Expelled, oracle, default).Node(p0).Finish());
        yield return (PacketKind.JoinRequest, p1, W(PacketKind.JoinRequest, p1, g).String(TestCluster.GroupName).Finish());
        yield return (PacketKind.LeaveRequest, p1, W(PacketKind.LeaveRequest, p1, g).Finish());
        yield return (PacketKind.LeaveDone, oracle, W(PacketKind.LeaveDone, oracle, g).Node(p0).Finish());
        yield return (PacketKind.StartFlush, oracle, W(PacketKind.StartFlush, oracle, g, 99).Node(p0).Nodes([p0, p1]).Finish());
        yield return (PacketKind.FlushDone, p1, W(PacketKind.FlushDone, p1, g).Finish());
        yield return (PacketKind.InstallView, oracle, W(PacketKind.InstallView, oracle, g).Node(p0).Nodes([p0, p1]).Nodes([]).Nodes([]).Finish());
        yield return (PacketKind.InstallAck, p1, W(PacketKind.InstallAck, p1, g).Finish());
        yield return (PacketKind.Data, p1, W(PacketKind.Data, p1, g, 1).I32(1).Tail("x"u8).Finish());
        yield return (PacketKind.Digest, p1, W(PacketKind.Digest, p1, g).Longs([0, 0]).Finish());
        yield return (PacketKind.Nak, p1, W(PacketKind.Nak, p1, g).I32(0).I64(1).I64(2).Finish());
        yield return (PacketKind.Wedge, p1, W(PacketKind.Wedge, p1, g, -1).Finish());
        yield return (PacketKind.FlushReport, p1, W(PacketKind.FlushReport, p1, g, 99).Longs([0, 0]).I32(0).U8(0).Finish());
        yield return (PacketKind.FlushCommit, p1, W(PacketKind.FlushCommit, p1, g, 99).Longs([0, 0]).I32(0).I32(0).Finish());
        yield return (PacketKind.CommitAck, p1, W(PacketKind.CommitAck, p1, g, 99).Finish());
        yield return (PacketKind.StabilityReport, p1, W(PacketKind.StabilityReport, p1, g).Longs([0, 0]).Finish());
        yield return (PacketKind.StabilityUpdate, p1, W(PacketKind.StabilityUpdate, p1, g, 1).Longs([0, 0]).Finish());
        yield return (PacketKind.StateChunk, p1, W(PacketKind.StateChunk, p1, g, 1).U8(1).Tail("x"u8).Finish());
        yield return (PacketKind.StateAck, p1, W(PacketKind.StateAck, p1, g, 1).Finish());
        yield return (PacketKind.Routed, p1, new PacketWriter().Begin(new PacketHeader(PacketKind.Routed, p1, g, 0, 2)).Nodes([c.Id(2), p1, p0])
            .Tail(W(PacketKind.ReplyAck, c.Id(2), g, 5).Node(p0).Finish()).Finish());
    }

    [Fact]
    public void HostileInputNeverThrowsIsCountedAndTheClusterStillWorks()
    {
        var c = new TestCluster(3);
        c.FormGroup(2);
        int view = c.CurrentView(0)!.Id;
        var random = new Random(20240601);
        var feed = new Feeder(c);
        ulong[] sources = [1, 2, 3, TestCluster.OracleEndpoint, 77];

        // 1. Random byte arrays, from every kind of source, to processes and to the oracle.
        for (int n = 0; n < 20_000; n++)
        {
            byte[] junk = RandomBytes(random, random.Next(200));
            ulong source = sources[n % sources.Length];
            if (n % 3 == 2) feed.ToOracle(source, junk, "random bytes");
            else feed.ToProcess(n % 3, source, junk, "random bytes");
        }

        // 2. Every truncation of a valid packet of every kind.
        foreach (var (kind, sender, packet) in ValidPackets(c, view))
        {
            for (int length = 0; length < packet.Length; length++)
            {
                byte[] cut = packet[..length];
                feed.ToProcess(0, sender.Endpoint, cut, $"{kind} truncated to {length}");
                feed.ToOracle(sender.Endpoint, cut, $"{kind} truncated to {length}");
            }
        }

        // 3. Valid headers (right checksum) with garbage bodies, of every kind, from the oracle, an
        //    unknown process, a member claiming another view, and a member of a group this process is not in.
        NodeId stranger = new(77, 1);
        foreach (PacketKind kind in Enum.GetValues<PacketKind>())
        {
            for (int n = 0; n < 50; n++)
            {
                long number = random.NextInt64(long.MinValue, long.MaxValue);
                feed.ToProcess(0, TestCluster.OracleEndpoint, GarbageBody(random, kind, c.Oracle.Self, TestCluster.G, view, number), $"{kind} garbage from the oracle");
                feed.ToProcess(0, 77, GarbageBody(random, kind, stranger, TestCluster.G, view, number), $"{kind} garbage from a stranger");
                feed.ToProcess(0, 2, GarbageBody(random, kind, c.Id(1), TestCluster.G, view + 1 + n, number), $"{kind} garbage for another view");
                feed.ToProcess(2, 2, GarbageBody(random, kind, c.Id(1), TestCluster.G, view, number), $"{kind} garbage to a non-member");
                feed.ToOracle(2, GarbageBody(random, kind, c.Id(1), TestCluster.G, view, number), $"{kind} garbage from a member");
                feed.ToOracle(77, GarbageBody(random, kind, stranger, TestCluster.G, view, number), $"{kind} garbage from a stranger");
            }
        }

        // Nearly every packet is counted; the few exceptions are listed in EveryRejectedPacketIsCounted.
        Assert.True(feed.Uncounted.Count < 20, string.Join("; ", feed.Uncounted.Distinct()));
        Assert.True(c[0].Counters.DroppedMalformed > 10_000 / 2);
        Assert.True(c[1].Counters.DroppedMalformed > 0 && c[2].Counters.DroppedMalformed > 0);
        Assert.True(c.Oracle.Counters.DroppedMalformed > 20_000 / 3);

        // Afterwards the cluster still forms a group and delivers Sends.
        c.RunFor(20_000);
        c.Join(2);
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => c.CurrentView(i)?.Members.Length == 3), limit: 2_000_000);
        for (int i = 0; i < 3; i++) c.Send(i, $"after{i}");
        c.RunFor(50_000);
        for (int i = 0; i < 3; i++)
        {
            List<string> d = c.Delivered(i, c.CurrentView(i)!.Id);
            Assert.Equal(3, d.Count);
            for (int s = 0; s < 3; s++) Assert.Contains($"{s}:1:after{s}", d);
        }
        Assert.All(c.Nodes, n => Assert.False(n.IsShutDown));
    }

    [Fact]
    public void EveryRejectedPacketIsCounted()
    {
        var c = new TestCluster(2);
        c.FormGroup(2);
        int view = c.CurrentView(0)!.Id;
        var random = new Random(7);
        var feed = new Feeder(c);
        // (1) An Expelled notice about some other incarnation, from a peer: well-formed, not for us.
        feed.ToProcess(0, 2, new PacketWriter().Begin(new PacketHeader(PacketKind.Expelled, c.Id(1), default, 0, 0)).Node(new NodeId(9, 9)).Finish(),
            "Expelled naming a stranger");
        // (2) and (3): garbage bodies of group kinds from a member of the current view.
        foreach (PacketKind kind in Enum.GetValues<PacketKind>().Where(k => k >= PacketKind.Data))
        {
            for (int n = 0; n < 50; n++)
            {
                // Attempt numbers below any real attempt, so a Wedge cannot wedge (see ForgedWedgeWithAHighAttemptBlocksEveryLaterFlush).
                feed.ToProcess(0, 2, GarbageBody(random, kind, c.Id(1), TestCluster.G, view, random.NextInt64(-1000, -2)), $"{kind} garbage from a member");
            }
        }
        Assert.Empty(feed.Uncounted.Distinct());
    }

    [Fact]
    public void GarbageBodiesOfEveryGroupKindFromAMemberInTheCurrentViewAreHarmless()
    {
        var c = new TestCluster(2);
        c.FormGroup(2);
        int view = c.CurrentView(0)!.Id;
        var random = new Random(7);
        long before = Drops(c[0].Counters);
        foreach (PacketKind kind in Enum.GetValues<PacketKind>().Where(k => k >= PacketKind.Data))
        {
            for (int n = 0; n < 200; n++)
            {
                // Negative attempt numbers: below every real attempt (a high one is a different story,
                // see ForgedWedgeWithAHighAttemptBlocksEveryLaterFlush).
                c.Inject(0, 2, GarbageBody(random, kind, c.Id(1), TestCluster.G, view, random.NextInt64(-1000, -2)));
            }
        }
        Assert.True(Drops(c[0].Counters) - before >= 4 * 200, "Data, Digest, Nak and FlushCommit garbage is counted");
        Assert.False(c[0].FindGroup(TestCluster.G)!.IsWedged);
        c.Send(1, "still works");
        c.Send(0, "me too");
        c.RunFor(20_000);
        Assert.Equal(["1:1:still works"], c.Delivered(0).Where(d => d.StartsWith("1:")));
        Assert.Equal(["0:1:me too"], c.Delivered(1).Where(d => d.StartsWith("0:")));
        Assert.Equal(0, c[1].FindGroup(TestCluster.G)!.UnstableOwnMessages);
    }
}

/// <summary>Well-formed packets a process must drop without calling them hostile.</summary>
public sealed class StaleServicePacketTests
{
    [Fact]
    public void A_service_packet_from_a_replica_outside_the_known_configuration_is_dropped_as_from_a_non_member_not_as_malformed()
    {
        var options = new Isis.Core.Node.ProtocolOptions();
        // The process knows the service at endpoint 100; a lone replica at 200 (a deposed leader,
        // say) answers its heartbeat.
        var process = new Isis.Core.Node.ProcessNode(new Isis.Core.Identity.NodeId(1, 1), 100, options, 0);
        byte[] heartbeat = process.TakeOutputs().To(100).Single();
        var stranger = new Isis.Core.Membership.MembershipReplica(new Isis.Core.Identity.NodeId(200, 1), options, 0);
        stranger.TakeOutputs();
        stranger.Receive(1, heartbeat, 10);
        byte[][] answers = [.. stranger.TakeOutputs().To(1)];
        Assert.NotEmpty(answers);

        foreach (byte[] answer in answers) process.Receive(200, answer, 20);

        Assert.Equal(0, process.Counters.DroppedMalformed);
        Assert.Equal(answers.Length, process.Counters.DroppedNotMember);
    }
}
