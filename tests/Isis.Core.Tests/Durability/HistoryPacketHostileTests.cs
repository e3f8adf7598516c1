using System.Text;
using Isis.Core.Durability;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests.Durability;

/// <summary>
/// Malformed and misdirected HistoryStatus / HistoryPlan / HistoryPull / HistoryChunk packets, fed
/// to members of a group with disk durability: each is dropped and counted, nothing throws, nothing
/// is sent in answer, and the member's history (current or not, its length, its plan and what it
/// has pulled) is unchanged.
/// </summary>
public class HistoryPacketHostileTests
{
    private static readonly GroupId G = TestCluster.G;
    private static readonly NodeId Stranger = new(77, 1);

    // ---------------------------------------------------------------- cluster helpers

    /// <summary>Process <paramref name="i"/> joins the group with disk durability and the given log (empty: a new log).</summary>
    private static GroupMember JoinDurable(TestCluster c, int i, List<byte[]>? log = null) =>
        c[i].Join(TestCluster.GroupName, c.Now, historyLog: log ?? new List<byte[]>());

    private static GroupMember Member(TestCluster c, int i) => c[i].FindGroup(G)!;

    /// <summary>Processes 0..n-1 join one after the other; each holds the history before the next joins.</summary>
    private static void FormDurableGroup(TestCluster c, int n)
    {
        for (int i = 0; i < n; i++)
        {
            GroupMember m = JoinDurable(c, i);
            int size = i + 1;
            c.RunUntil(() => m.View?.Members.Length == size && m.History!.Current);
        }
        c.RunUntil(() => Enumerable.Range(0, n).All(i => Member(c, i).View?.Members.Length == n && Member(c, i).History!.Current));
    }

    private static void SafeSend(TestCluster c, int i, string text) =>
        c[i].Send(G, Encoding.UTF8.GetBytes(text), c.Now, MessageKind.Safe);

    private static List<string> Replayed(TestCluster c, int i) =>
        c.Events[i].OfType<HistoryReplayed>().Select(r => Encoding.UTF8.GetString(r.Entry.Payload.Span)).ToList();

    /// <summary>What must not change: whether it holds the history, how much, its plan, and the rest of its state.</summary>
    private static string HistoryState(TestCluster c, int i)
    {
        DurableHistory h = Member(c, i).History!;
        return $"current={h.Current} count={h.Count} plan={h.Plan} {h.Describe()}";
    }

    private static PacketWriter W(PacketKind kind, NodeId sender, int view, long number = 0) =>
        new PacketWriter().Begin(new PacketHeader(kind, sender, G, view, number));

    /// <summary>A well-formed HistoryStatus body (as <see cref="HistoryStatus.Write"/> writes it).</summary>
    private static byte[] StatusBody(HistoryStatus s)
    {
        PacketWriter w = new PacketWriter().BeginRecord();
        s.Write(w);
        return w.FinishRecord();
    }

    private static PacketWriter PlanBody(PacketWriter w, HistoryPlanMode mode, NodeId source, long target, long epoch, NodeId founder, int foundedIn = 1,
        long trimmed = 0, NodeId provider = default, long providerCheckpoint = 0, byte reason = 0, NodeId[]? gaveUp = null) =>
        w.U8((byte)mode).Node(source).I64(target).I64(epoch).Node(founder).I32(foundedIn).I64(trimmed).Node(provider).I64(providerCheckpoint)
            .U8(reason).Nodes([]).I64(0).I32(0).Nodes(gaveUp ?? []).I64((long)HistoryDigest.Unknown);

    private static PacketWriter ChunkBody(PacketWriter w, long first, params string[] payloads)
    {
        w.I32(payloads.Length);
        for (int k = 0; k < payloads.Length; k++)
        {
            HistoryLog.WriteTransferred(w, new HistoryEntry(first + k, new NodeId(1, 1), 1, first + k, 0, Encoding.UTF8.GetBytes(payloads[k])));
        }
        return w.I64((long)HistoryDigest.Unknown); // the source's digest before the first entry
    }

    /// <summary>
    /// Feeds packets one at a time and checks each: no exception, the expected counter went up by
    /// exactly one, no packet was sent in answer, and the target's history state did not change.
    /// </summary>
    private sealed class Feeder(TestCluster c)
    {
        public int Fed { get; private set; }

        public void Expect(int target, byte[] packet, Func<NodeCounters, long> counter, string what)
        {
            PacketDecoder.TryReadHeader(packet, out PacketHeader h);
            string stateBefore = HistoryState(c, target);
            long before = counter(c[target].Counters);
            int inFlight = c.InFlight;
            int events = c.Events[target].Count;
            c.Inject(target, h.Sender.Endpoint, packet);
            Assert.True(counter(c[target].Counters) == before + 1, $"{what}: not counted where expected");
            Assert.True(c.InFlight == inFlight, $"{what}: was answered");
            Assert.True(c.Events[target].Count == events, $"{what}: emitted events");
            Assert.Equal(stateBefore, HistoryState(c, target));
            Assert.False(c[target].IsShutDown, what);
            Fed++;
        }

        /// <summary>Every strict truncation of the packet's body (the header's length and checksum fixed up).</summary>
        public void ExpectEveryTruncationMalformed(int target, PacketKind kind, NodeId sender, int view, long number, byte[] body, string what)
        {
            for (int length = 0; length < body.Length; length++)
            {
                byte[] packet = W(kind, sender, view, number).Tail(body.AsSpan(0, length)).Finish();
                Expect(target, packet, n => n.DroppedMalformed, $"{what} truncated to {length} of {body.Length}");
            }
        }
    }

    // ---------------------------------------------------------------- members that hold the history

    [Fact]
    public void Malformed_or_misdirected_history_packets_to_members_holding_the_history_are_dropped_counted_and_change_nothing()
    {
        var c = new TestCluster(4); // process 3 never joins: a real process that is not a member
        FormDurableGroup(c, 3);
        SafeSend(c, 0, "one");
        SafeSend(c, 1, "two");
        SafeSend(c, 2, "three");
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => Member(c, i).History!.Count == 3));
        c.RunFor(50_000);

        int v = Member(c, 0).View!.Id;
        NodeId p0 = c.Id(0), p1 = c.Id(1), p2 = c.Id(2), outsider = c.Id(3);
        var feed = new Feeder(c);

        // ---- HistoryStatus, to the view's oldest member (process 0).
        byte[] status = StatusBody(new HistoryStatus(false, 2, new HistoryViewRecord(new HistoryViewKey(1, v), new Lineage(p0, 1), p1, [p0, p1, p2]), [p1]));
        feed.ExpectEveryTruncationMalformed(0, PacketKind.HistoryStatus, p1, v, 0, status, "status");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).Tail(status).U8(0).Finish(), n => n.DroppedMalformed, "status with a trailing byte");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(0).I64(-1).U8(0).Nodes([p1]).Finish(), n => n.DroppedMalformed, "status with a negative count");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(1).I64(0).U8(0).Nodes([p1]).Finish(), n => n.DroppedMalformed, "current status without a view");
        HistoryViewRecord view = new(new HistoryViewKey(1, v), new Lineage(p0, 1), p1, [p0, p1, p2]);
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).Tail(StatusBody(new HistoryStatus(true, 2, view, [p1], ForcedWithout: []))).Finish(), n => n.DroppedMalformed, "current status that allows a forced recovery");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).Tail(StatusBody(new HistoryStatus(false, 2, view, [p1], GaveUp: [NodeId.None]))).Finish(), n => n.DroppedMalformed, "status that gives up no incarnation (None)");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(0).I64(0).U8(0).I32(int.MaxValue).Node(p1).Finish(), n => n.DroppedMalformed, "status claiming 2^31 incarnations");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(0).I64(0).U8(0).I32(-3).Finish(), n => n.DroppedMalformed, "status with a negative incarnation count");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(0).I64(0).U8(1).I64(1).I32(v).Node(p0).I32(1).Node(p1).I32(int.MaxValue).Nodes([p1]).Finish(),
            n => n.DroppedMalformed, "status whose view claims 2^31 members");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(0).I64(0).U8(1).I64(0).I32(v).Node(p0).I32(1).Node(p1).Nodes([p1]).Nodes([p1]).Finish(),
            n => n.DroppedMalformed, "status whose view has epoch 0");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(0).I64(0).U8(1).I64(1).I32(-4).Node(p0).I32(1).Node(p1).Nodes([p1]).Nodes([p1]).Finish(),
            n => n.DroppedMalformed, "status whose view has a negative id");
        feed.Expect(0, W(PacketKind.HistoryStatus, outsider, v).Tail(status).Finish(), n => n.DroppedNotMember, "status from a process outside the view");
        feed.Expect(0, W(PacketKind.HistoryStatus, Stranger, v).Tail(status).Finish(), n => n.DroppedNotMember, "status from a stranger");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1 with { Incarnation = 9 }, v).Tail(status).Finish(), n => n.DroppedNotMember, "status from another incarnation of a member's endpoint");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v + 1).Tail(status).Finish(), n => n.DroppedWrongView, "status for a later view");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v - 1).Tail(status).Finish(), n => n.DroppedWrongView, "status for an earlier view");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, 0).Tail(status).Finish(), n => n.DroppedWrongView, "status for view 0");
        feed.Expect(1, W(PacketKind.HistoryStatus, p2, v).Tail(status).Finish(), n => n.DroppedNotForMe, "status to a member that is not the oldest");

        // ---- HistoryPlan, to process 1 (a plan may only come from the oldest member, process 0).
        byte[] plan = PlanBody(new PacketWriter().BeginRecord(), HistoryPlanMode.Transfer, p2, 3, 1, p0).FinishRecord();
        feed.ExpectEveryTruncationMalformed(1, PacketKind.HistoryPlan, p0, v, 0, plan, "plan");
        feed.Expect(1, W(PacketKind.HistoryPlan, p0, v).Tail(plan).U8(7).Finish(), n => n.DroppedMalformed, "plan with a trailing byte");
        foreach (byte mode in new byte[] { 0, 4, 255 })
        {
            feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), (HistoryPlanMode)mode, p2, 3, 1, p0).Finish(), n => n.DroppedMalformed, $"plan of mode {mode}");
        }
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, p2, -1, 1, p0).Finish(), n => n.DroppedMalformed, "plan with a negative target");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Recover, p2, 3, 1, p0, reason: 9).Finish(), n => n.DroppedMalformed, "plan with an unknown recovery reason");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Recover, p2, 3, 1, p0, gaveUp: [NodeId.None]).Finish(), n => n.DroppedMalformed, "plan that gives up no incarnation (None)");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, p2, long.MinValue, 1, p0).Finish(), n => n.DroppedMalformed, "plan with target long.MinValue");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Recover, p2, 3, 0, p0).Finish(), n => n.DroppedMalformed, "plan with epoch 0");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Recover, p2, 3, -1, p0).Finish(), n => n.DroppedMalformed, "plan with a negative epoch");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, outsider, 3, 1, p0).Finish(), n => n.DroppedMalformed, "plan naming a source outside the view");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, NodeId.None, 3, 1, p0).Finish(), n => n.DroppedMalformed, "plan naming no source");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, p2, 3, 1, p0, trimmed: 4, provider: p2, providerCheckpoint: 3).Finish(), n => n.DroppedMalformed, "plan trimmed past its target");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, p2, 3, 1, p0, trimmed: -1).Finish(), n => n.DroppedMalformed, "plan with a negative trim point");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, p2, 3, 1, p0, trimmed: 2, provider: p2, providerCheckpoint: 1).Finish(), n => n.DroppedMalformed, "plan whose checkpoint does not cover its trim point");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, p2, 3, 1, p0, trimmed: 2, provider: p2, providerCheckpoint: 4).Finish(), n => n.DroppedMalformed, "plan whose checkpoint runs past its target");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, p2, 3, 1, p0, trimmed: 2, provider: outsider, providerCheckpoint: 2).Finish(), n => n.DroppedMalformed, "plan naming a checkpoint provider outside the view");
        feed.Expect(1, W(PacketKind.HistoryPlan, p2, v).Tail(plan).Finish(), n => n.DroppedNotMember, "plan from a member that is not the oldest");
        feed.Expect(1, W(PacketKind.HistoryPlan, p1, v).Tail(plan).Finish(), n => n.DroppedNotMember, "plan 'from' the receiver itself");
        feed.Expect(2, W(PacketKind.HistoryPlan, p1, v).Tail(plan).Finish(), n => n.DroppedNotMember, "plan from rank 1 to rank 2");
        feed.Expect(1, W(PacketKind.HistoryPlan, outsider, v).Tail(plan).Finish(), n => n.DroppedNotMember, "plan from a process outside the view");
        feed.Expect(1, W(PacketKind.HistoryPlan, p0, v + 1).Tail(plan).Finish(), n => n.DroppedWrongView, "plan for a later view");
        feed.Expect(1, W(PacketKind.HistoryPlan, p0, v - 1).Tail(plan).Finish(), n => n.DroppedWrongView, "plan for an earlier view");

        // ---- HistoryPull, to process 0, which holds 3 entries.
        feed.ExpectEveryTruncationMalformed(0, PacketKind.HistoryPull, p1, v, 1, new PacketWriter().BeginRecord().I64(3).FinishRecord(), "pull");
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, 1).I64(3).U8(0).Finish(), n => n.DroppedMalformed, "pull with a trailing byte");
        foreach (long first in new[] { 0L, -1, long.MinValue })
        {
            feed.Expect(0, W(PacketKind.HistoryPull, p1, v, first).I64(3).Finish(), n => n.DroppedMalformed, $"pull from index {first}");
        }
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, 3).I64(2).Finish(), n => n.DroppedMalformed, "pull whose target is before its first index");
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, 2).I64(-5).Finish(), n => n.DroppedMalformed, "pull with a negative target");
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, 1).I64(4).Finish(), n => n.DroppedNotForMe, "pull past the end of the history");
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, 1).I64(long.MaxValue).Finish(), n => n.DroppedNotForMe, "pull up to long.MaxValue");
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, long.MaxValue).I64(long.MaxValue).Finish(), n => n.DroppedNotForMe, "pull from long.MaxValue");
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, (long)int.MaxValue + 2).I64((long)int.MaxValue + 2).Finish(), n => n.DroppedNotForMe, "pull past int range");
        feed.Expect(0, W(PacketKind.HistoryPull, outsider, v, 1).I64(3).Finish(), n => n.DroppedNotMember, "pull from a process outside the view");
        feed.Expect(0, W(PacketKind.HistoryPull, Stranger, v, 1).I64(3).Finish(), n => n.DroppedNotMember, "pull from a stranger");
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v + 1, 1).I64(3).Finish(), n => n.DroppedWrongView, "pull for a later view");

        // ---- HistoryChunk, to process 1, which already holds the history.
        byte[] chunk = ChunkBody(new PacketWriter().BeginRecord(), 1, "forged one", "forged two").FinishRecord();
        feed.ExpectEveryTruncationMalformed(1, PacketKind.HistoryChunk, p0, v, 1, chunk, "chunk");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).Tail(chunk).U8(0).Finish(), n => n.DroppedMalformed, "chunk with a trailing byte");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(-1).Finish(), n => n.DroppedMalformed, "chunk with a negative count");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(int.MaxValue).Tail(chunk.AsSpan(4)).Finish(), n => n.DroppedMalformed, "chunk claiming 2^31 entries");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(3).Tail(chunk.AsSpan(4)).Finish(), n => n.DroppedMalformed, "chunk claiming one entry more than it has");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 0).Tail(chunk).Finish(), n => n.DroppedMalformed, "chunk starting at index 0");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, -9).Tail(chunk).Finish(), n => n.DroppedMalformed, "chunk starting at a negative index");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(1).Node(NodeId.None).I32(1).I64(1).I32(0).Bytes("x"u8).Finish(), n => n.DroppedMalformed, "chunk entry without a sender");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(1).Node(p0).I32(1).I64(1).I32(-1).Bytes("x"u8).Finish(), n => n.DroppedMalformed, "chunk entry with a negative phi");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(1).Node(p0).I32(1).I64(0).I32(0).Bytes("x"u8).Finish(), n => n.DroppedMalformed, "chunk entry with sequence number 0");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(1).Node(p0).I32(1).I64(1).I32(0).I32(int.MaxValue).Finish(), n => n.DroppedMalformed, "chunk entry claiming a 2 GB payload");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).Tail(chunk).Finish(), n => n.Duplicates, "well-formed chunk to a member that holds the history");
        feed.Expect(1, W(PacketKind.HistoryChunk, outsider, v, 1).Tail(chunk).Finish(), n => n.DroppedNotMember, "chunk from a process outside the view");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v + 1, 1).Tail(chunk).Finish(), n => n.DroppedWrongView, "chunk for a later view");

        // ---- HistoryCheckpointPull, to process 0, which keeps no checkpoint.
        byte[] checkpointPull = new PacketWriter().BeginRecord().Node(p0).I32(1).I64(0).FinishRecord();
        feed.ExpectEveryTruncationMalformed(0, PacketKind.HistoryCheckpointPull, p1, v, 2, checkpointPull, "checkpoint pull");
        feed.Expect(0, W(PacketKind.HistoryCheckpointPull, p1, v, 2).Tail(checkpointPull).U8(0).Finish(), n => n.DroppedMalformed, "checkpoint pull with a trailing byte");
        feed.Expect(0, W(PacketKind.HistoryCheckpointPull, p1, v, 0).Tail(checkpointPull).Finish(), n => n.DroppedMalformed, "checkpoint pull of a checkpoint holding no entry");
        feed.Expect(0, W(PacketKind.HistoryCheckpointPull, p1, v, 2).Node(p0).I32(1).I64(-1).Finish(), n => n.DroppedMalformed, "checkpoint pull from a negative offset");
        feed.Expect(0, W(PacketKind.HistoryCheckpointPull, p1, v, 2).Tail(checkpointPull).Finish(), n => n.DroppedNotForMe, "checkpoint pull of a checkpoint it does not keep");
        feed.Expect(0, W(PacketKind.HistoryCheckpointPull, outsider, v, 2).Tail(checkpointPull).Finish(), n => n.DroppedNotMember, "checkpoint pull from a process outside the view");
        feed.Expect(0, W(PacketKind.HistoryCheckpointPull, p1, v + 1, 2).Tail(checkpointPull).Finish(), n => n.DroppedWrongView, "checkpoint pull for a later view");

        // ---- HistoryCheckpointChunk, to process 1, which already holds the history.
        byte[] checkpointChunk = new PacketWriter().BeginRecord().Node(p0).I32(1).I64(0).I64(3).Bytes("abc"u8).FinishRecord();
        feed.ExpectEveryTruncationMalformed(1, PacketKind.HistoryCheckpointChunk, p0, v, 2, checkpointChunk, "checkpoint chunk");
        feed.Expect(1, W(PacketKind.HistoryCheckpointChunk, p0, v, 2).Tail(checkpointChunk).U8(0).Finish(), n => n.DroppedMalformed, "checkpoint chunk with a trailing byte");
        feed.Expect(1, W(PacketKind.HistoryCheckpointChunk, p0, v, 2).Node(p0).I32(1).I64(0).I64(0).Bytes([]).Finish(), n => n.DroppedMalformed, "checkpoint chunk of an empty file");
        feed.Expect(1, W(PacketKind.HistoryCheckpointChunk, p0, v, 2).Node(p0).I32(1).I64(2).I64(3).Bytes("abc"u8).Finish(), n => n.DroppedMalformed, "checkpoint chunk running past the file's end");
        feed.Expect(1, W(PacketKind.HistoryCheckpointChunk, p0, v, 2).Node(p0).I32(1).I64(-1).I64(3).Bytes("abc"u8).Finish(), n => n.DroppedMalformed, "checkpoint chunk at a negative offset");
        feed.Expect(1, W(PacketKind.HistoryCheckpointChunk, p0, v, 0).Tail(checkpointChunk).Finish(), n => n.DroppedMalformed, "checkpoint chunk of a checkpoint holding no entry");
        feed.Expect(1, W(PacketKind.HistoryCheckpointChunk, p0, v, 2).Tail(checkpointChunk).Finish(), n => n.Duplicates, "well-formed checkpoint chunk to a member that holds the history");
        feed.Expect(1, W(PacketKind.HistoryCheckpointChunk, outsider, v, 2).Tail(checkpointChunk).Finish(), n => n.DroppedNotMember, "checkpoint chunk from a process outside the view");

        // ---- HistoryAllCurrent: only the oldest member says so.
        feed.Expect(1, W(PacketKind.HistoryAllCurrent, p0, v).U8(0).Finish(), n => n.DroppedMalformed, "all-current with a body");
        feed.Expect(1, W(PacketKind.HistoryAllCurrent, p2, v).Finish(), n => n.DroppedNotMember, "all-current from a member that is not the oldest");
        feed.Expect(1, W(PacketKind.HistoryAllCurrent, outsider, v).Finish(), n => n.DroppedNotMember, "all-current from a process outside the view");
        feed.Expect(1, W(PacketKind.HistoryAllCurrent, p0, v + 1).Finish(), n => n.DroppedWrongView, "all-current for a later view");

        Assert.True(feed.Fed > 180, $"only {feed.Fed} packets fed");

        // Nothing was replayed or logged from any of it, and the group still works: a SafeSend joins every member's history.
        Assert.All(Enumerable.Range(0, 3), i => Assert.DoesNotContain(Replayed(c, i), p => p.StartsWith("forged")));
        SafeSend(c, 2, "four");
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => Member(c, i).History!.Count == 4));
        Assert.All(c.Nodes.Take(3), n => Assert.False(n.IsShutDown));
    }

    [Fact]
    public void Random_garbage_in_history_packets_from_a_member_never_throws_is_counted_and_changes_no_history()
    {
        var c = new TestCluster(3);
        FormDurableGroup(c, 3);
        SafeSend(c, 0, "one");
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => Member(c, i).History!.Count == 1));
        c.RunFor(50_000);
        int v = Member(c, 0).View!.Id;
        string[] before = Enumerable.Range(0, 3).Select(i => HistoryState(c, i)).ToArray();
        var random = new Random(31337);
        PacketKind[] kinds = [PacketKind.HistoryStatus, PacketKind.HistoryPlan, PacketKind.HistoryPull, PacketKind.HistoryChunk];
        long malformed = c.Nodes.Sum(n => n.Counters.DroppedMalformed);
        int fed = 0;
        for (int n = 0; n < 4_000; n++)
        {
            int target = random.Next(3), from = (target + 1 + random.Next(2)) % 3;
            byte[] body = new byte[random.Next(0, 120)];
            random.NextBytes(body);
            if (body.Length >= 4 && random.Next(2) == 0) body[random.Next(4)] = 0; // small counts, so the element parsers run too
            PacketKind kind = kinds[random.Next(kinds.Length)];
            // Pull numbers past the history, so a random pull cannot be a valid request.
            long number = kind == PacketKind.HistoryPull ? random.NextInt64(2, long.MaxValue) : random.NextInt64(long.MinValue, long.MaxValue);
            c.Inject(target, c.Id(from).Endpoint, W(kind, c.Id(from), v, number).Tail(body).Finish());
            fed++;
        }
        Assert.True(c.Nodes.Sum(n => n.Counters.DroppedMalformed) - malformed > fed / 2, "most random bodies are malformed");
        Assert.Equal(before, Enumerable.Range(0, 3).Select(i => HistoryState(c, i)).ToArray());
        Assert.All(c.Nodes, n => Assert.False(n.IsShutDown));
        c.RunFor(100_000);
        SafeSend(c, 1, "two");
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => Member(c, i).History!.Count == 2));
    }

    // ---------------------------------------------------------------- a member copying the history

    [Fact]
    public void Hostile_chunks_to_a_member_in_the_middle_of_a_transfer_are_dropped_and_it_still_copies_the_real_history()
    {
        var c = new TestCluster(4);
        GroupMember founder = JoinDurable(c, 0);
        c.RunUntil(() => founder.History!.Current);
        foreach (string s in new[] { "alpha", "beta", "gamma" }) SafeSend(c, 0, s);
        c.RunUntil(() => founder.History!.Count == 3);
        GroupMember helper = JoinDurable(c, 2);
        c.RunUntil(() => helper.History!.Current && helper.History.Count == 3);

        // Process 1 joins, but no chunk reaches it: it waits with a Transfer plan from process 0 and nothing pulled.
        c.DropWhere(e => e.Kind == PacketKind.HistoryChunk && e.To == c.Id(1).Endpoint);
        GroupMember copier = JoinDurable(c, 1);
        c.RunUntil(() => copier.History!.Plan is { Mode: HistoryPlanMode.Transfer } && copier.View?.Members.Length == 3);
        c.RunFor(50_000);
        Assert.False(copier.History!.Current);
        Assert.Equal(c.Id(0), copier.History.Plan!.Source);
        Assert.Equal(3, copier.History.Plan.Target);
        Assert.Contains("pulled 0+0/3", copier.History.Describe());

        int v = copier.View!.Id;
        NodeId p0 = c.Id(0), p2 = c.Id(2), outsider = c.Id(3);
        var feed = new Feeder(c);
        byte[] chunk = ChunkBody(new PacketWriter().BeginRecord(), 1, "forged one", "forged two", "forged three").FinishRecord();
        feed.ExpectEveryTruncationMalformed(1, PacketKind.HistoryChunk, p0, v, 1, chunk, "chunk");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(-1).Finish(), n => n.DroppedMalformed, "chunk with a negative count");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(int.MaxValue).Tail(chunk.AsSpan(4)).Finish(), n => n.DroppedMalformed, "chunk claiming 2^31 entries");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).Tail(chunk).U8(1).Finish(), n => n.DroppedMalformed, "chunk with a trailing byte");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 0).Tail(chunk).Finish(), n => n.DroppedMalformed, "chunk starting at index 0");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).I32(1).Node(p0).I32(0).I64(1).I32(0).Bytes("x"u8).Finish(), n => n.DroppedMalformed, "chunk entry of view 0");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 2).Tail(ChunkBody(new PacketWriter().BeginRecord(), 2, "forged two").FinishRecord()).Finish(),
            n => n.Duplicates, "chunk that does not start where the transfer stands");
        feed.Expect(1, W(PacketKind.HistoryChunk, p2, v, 1).Tail(chunk).Finish(), n => n.Duplicates, "chunk from a member that is not the transfer's source");
        feed.Expect(1, W(PacketKind.HistoryChunk, outsider, v, 1).Tail(chunk).Finish(), n => n.DroppedNotMember, "chunk from a process outside the view");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v - 1, 1).Tail(chunk).Finish(), n => n.DroppedWrongView, "chunk for an earlier view");
        // A plan while one is being followed (even from the oldest member) changes nothing.
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p2, v), HistoryPlanMode.Fresh, p2, 0, 1, p2).Finish(), n => n.DroppedNotMember, "Fresh plan from rank 2");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Transfer, outsider, 3, 1, p0).Finish(), n => n.DroppedMalformed, "plan naming an outsider");
        // It does not serve what it does not hold.
        feed.Expect(1, W(PacketKind.HistoryPull, p2, v, 1).I64(1).Finish(), n => n.DroppedNotForMe, "pull to a member that does not hold the history");
        Assert.False(copier.History.Current);
        Assert.Empty(Replayed(c, 1));

        // Once chunks get through, it copies the real history, and only that.
        c.ClearDrops();
        c.RunUntil(() => copier.History.Current);
        Assert.Equal(["alpha", "beta", "gamma"], Replayed(c, 1));
        Assert.Equal(3, copier.History.Count);
        Assert.Equal(3, c.Events[1].OfType<HistoryReady>().Single().Entries);
    }

    // ---------------------------------------------------------------- members waiting to recover the history

    [Fact]
    public void A_plan_from_a_member_that_is_not_the_oldest_does_not_end_a_recovery_wait_and_hostile_statuses_do_not_count()
    {
        var c = new TestCluster(3);
        c.Restart(0); // process 0 is now the second incarnation of endpoint 1; its log was written by the first
        NodeId earlier = new(1, 1), gone = new(9, 1);
        var w = new PacketWriter();
        var log = new List<byte[]>
        {
            HistoryLog.Incarnation(w, earlier),
            HistoryLog.View(w, new HistoryViewRecord(new HistoryViewKey(1, 4), new Lineage(earlier, 1), earlier, [earlier, gone])),
            HistoryLog.Entry(w, new HistoryEntry(1, earlier, 4, 1, 0, "logged one"u8.ToArray())),
            HistoryLog.Entry(w, new HistoryEntry(2, gone, 4, 1, 0, "logged two"u8.ToArray())),
        };
        // The last view of the log had a member (gone) that never comes back: the group must wait for it.
        GroupMember oldest = JoinDurable(c, 0, log);
        GroupMember other = JoinDurable(c, 1);
        c.RunUntil(() => oldest.View?.Members.Length == 2 && other.View?.Members.Length == 2 && oldest.History!.Describe().Contains("statuses=2"));
        c.RunFor(50_000);
        Assert.Contains(c.Events[0].OfType<HistoryNotice>(), n => n.Kind == HistoryNoticeKind.Waiting && n.Text.Contains(gone.ToString()));
        Assert.False(oldest.History!.Current);
        Assert.False(other.History!.Current);
        Assert.Null(oldest.History.Plan);
        Assert.Null(other.History.Plan);

        int v = oldest.View!.Id;
        NodeId p0 = c.Id(0), p1 = c.Id(1), outsider = c.Id(2);
        var feed = new Feeder(c);
        // Plans that would end the wait at once, were they believed.
        foreach (HistoryPlanMode mode in Enum.GetValues<HistoryPlanMode>())
        {
            NodeId source = mode == HistoryPlanMode.Transfer ? p1 : p0;
            feed.Expect(0, PlanBody(W(PacketKind.HistoryPlan, p1, v), mode, source, 0, 2, p1).Finish(), n => n.DroppedNotMember, $"{mode} plan from rank 1 to rank 0");
            feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p1, v), mode, p1, 0, 2, p1).Finish(), n => n.DroppedNotMember, $"{mode} plan from rank 1 to itself");
            feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, outsider, v), mode, p1, 0, 2, p1).Finish(), n => n.DroppedNotMember, $"{mode} plan from outside the view");
        }
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), HistoryPlanMode.Fresh, p1, 0, 0, p1).Finish(), n => n.DroppedMalformed, "plan from the oldest with epoch 0");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v), (HistoryPlanMode)9, p1, 0, 2, p1).Finish(), n => n.DroppedMalformed, "plan from the oldest of an unknown mode");
        feed.Expect(1, PlanBody(W(PacketKind.HistoryPlan, p0, v + 1), HistoryPlanMode.Fresh, p1, 0, 2, p1).Finish(), n => n.DroppedWrongView, "plan from the oldest for the next view");

        // Statuses that, believed, would bring the missing member back or change the recovery.
        byte[] claimsGone = StatusBody(new HistoryStatus(false, 5, null, [gone]));
        feed.Expect(0, W(PacketKind.HistoryStatus, outsider, v).Tail(claimsGone).Finish(), n => n.DroppedNotMember, "status from outside the view naming the missing member");
        feed.Expect(0, W(PacketKind.HistoryStatus, gone, v).Tail(claimsGone).Finish(), n => n.DroppedNotMember, "status from the missing incarnation itself, which is not in this view");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).Tail(claimsGone.AsSpan(0, claimsGone.Length - 1)).Finish(), n => n.DroppedMalformed, "truncated status naming the missing member");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v).U8(0).I64(long.MinValue).U8(0).Nodes([gone]).Finish(), n => n.DroppedMalformed, "status with a negative count");
        feed.Expect(0, W(PacketKind.HistoryStatus, p1, v - 1).Tail(claimsGone).Finish(), n => n.DroppedWrongView, "status for an earlier view naming the missing member");
        feed.Expect(1, W(PacketKind.HistoryStatus, p0, v).Tail(claimsGone).Finish(), n => n.DroppedNotForMe, "status to the member that is not the oldest");

        // Nobody holds a history, so nobody serves one, and a chunk nobody asked for is not taken.
        feed.Expect(0, W(PacketKind.HistoryPull, p1, v, 1).I64(2).Finish(), n => n.DroppedNotForMe, "pull to a member waiting to recover");
        feed.Expect(1, W(PacketKind.HistoryChunk, p0, v, 1).Tail(ChunkBody(new PacketWriter().BeginRecord(), 1, "forged").FinishRecord()).Finish(),
            n => n.Duplicates, "chunk to a member without a plan");

        c.RunFor(200_000);
        Assert.False(oldest.History.Current);
        Assert.False(other.History.Current);
        Assert.Empty(c.Events[0].OfType<HistoryReady>());
        Assert.Empty(c.Events[1].OfType<HistoryReady>());
        Assert.Empty(Replayed(c, 0));
        Assert.Empty(Replayed(c, 1));
    }
}
