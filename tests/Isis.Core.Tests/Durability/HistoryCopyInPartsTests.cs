using Isis.Core.Durability;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;
using Isis.Simulation.Driving;

namespace Isis.Core.Tests.Durability;

/// <summary>
/// A long history, copied by a joiner and replayed by it and by a member restarting on its own log,
/// never in one step (issue 25: a joiner that encoded and fsynced a whole copied history, and handed
/// its whole replay over, in one step of its event loop sent no heartbeat for seconds and was
/// expelled). The copy is written aside in parts of bounded size as it arrives and replaces the log
/// only with its last part; the replay goes to the application in slices of bounded size, one per
/// tick, and what happens meanwhile waits behind it. Sizes are asserted, never times.
/// </summary>
public class HistoryCopyInPartsTests
{
    private const int Entries = 20_000;
    private const int PayloadBytes = 32;

    private static readonly ProtocolOptions Options = new()
    {
        HistoryChunkBytes = 4096,
        HistoryCopyPartBytes = 32 * 1024,
        HistoryReplaySliceEntries = 500,
        HistoryReplaySliceBytes = 1 << 20,
    };

    private static readonly GroupId G = TestCluster.G;

    /// <summary>A log written by an earlier incarnation of process 0, alone in the group's first view: <paramref name="entries"/> SafeSends.</summary>
    private static List<byte[]> LongLog(NodeId writer, int entries)
    {
        var w = new PacketWriter();
        var records = new List<byte[]>
        {
            HistoryLog.Incarnation(w, writer),
            HistoryLog.View(w, new HistoryViewRecord(new HistoryViewKey(1, 1), new Lineage(writer, 1), writer, [writer])),
        };
        for (int i = 1; i <= entries; i++)
        {
            byte[] payload = new byte[PayloadBytes];
            BitConverter.TryWriteBytes(payload, i);
            records.Add(HistoryLog.Entry(w, new HistoryEntry(i, writer, 1, i, 1, payload)));
        }
        return records;
    }

    /// <summary>What one step of a process produced that these tests look at.</summary>
    private sealed record Step(int Process, List<HistoryWrite> Writes, int Replayed, long ReplayedBytes);

    private static (TestCluster Cluster, List<Step> Steps) Cluster(ProtocolOptions options)
    {
        var c = new TestCluster(2, options);
        var steps = new List<Step>();
        c.AfterStep = (i, writes, events) =>
        {
            var replayed = events.OfType<HistoryReplayed>().ToList();
            if (writes.Count > 0 || replayed.Count > 0) steps.Add(new Step(i, writes, replayed.Count, replayed.Sum(r => (long)r.Entry.Payload.Length)));
        };
        return (c, steps);
    }

    /// <summary>Process i's history log on its disk (the cluster's, which the runtime's files mirror).</summary>
    private static MemoryHistoryLog LogOf(TestCluster c, int i) => c.Disk(i).HistoryLog(TestCluster.G);

    private static long Bytes(HistoryWrite w) => w.Records.Sum(r => (long)r.Length);

    /// <summary>Process 0 restarts on a long log of its own (a recovery: nobody else holds the history), then process 1 joins.</summary>
    private static (GroupMember Source, GroupMember Joiner) SourceThenJoiner(TestCluster c, List<Step> steps, out int sourceSteps)
    {
        NodeId earlier = c.Id(0);
        c.Restart(0);
        GroupMember source = c[0].Join(TestCluster.GroupName, c.Now, historyLog: LongLog(earlier, Entries));
        c.RunUntil(() => source.History!.Current && !source.Replaying);
        sourceSteps = steps.Count;
        GroupMember joiner = c[1].Join(TestCluster.GroupName, c.Now, historyLog: new List<byte[]>());
        return (source, joiner);
    }

    [Fact]
    public void A_long_history_is_copied_in_bounded_parts_written_aside_and_replayed_in_bounded_slices_with_live_messages_after_it()
    {
        (TestCluster c, List<Step> steps) = Cluster(Options);
        (GroupMember source, GroupMember joiner) = SourceThenJoiner(c, steps, out int sourceSteps);

        // The restart replayed its own log in slices, the whole of it, once, in order, then said it holds it.
        List<Step> restart = steps.Take(sourceSteps).Where(s => s.Process == 0 && s.Replayed > 0).ToList();
        Assert.All(restart, s => Assert.InRange(s.Replayed, 1, Options.HistoryReplaySliceEntries));
        Assert.Equal(Entries, restart.Sum(s => s.Replayed));
        Assert.True(restart.Count >= Entries / Options.HistoryReplaySliceEntries, $"the restart replayed in {restart.Count} steps");
        AssertReplayedOnceInOrderThenReady(c.Events[0], Entries);

        // The joiner holds the history (its copy is durable) but still replays it: a SafeSend now
        // reaches its application after the last entry of the history.
        c.RunUntil(() => joiner.History!.Current);
        Assert.True(joiner.Replaying, "the joiner's replay of 20,000 entries in slices of 500 ended in the step that completed the copy");
        c[0].Send(G, "live"u8.ToArray(), c.Now, MessageKind.Safe);
        c.RunUntil(() => !joiner.Replaying && c.Events[1].OfType<MessageDelivered>().Any(d => d.Payload.Span.SequenceEqual("live"u8)));
        Assert.False(source.Replaying);

        List<Step> joinerSteps = steps.Skip(sourceSteps).Where(s => s.Process == 1).ToList();
        var writes = joinerSteps.SelectMany(s => s.Writes).Where(w => w.Stage != HistoryStage.None || w.Rewrite).ToList();
        // Written aside in parts as it arrived, then renamed over the log by its last part; never one whole rewrite.
        Assert.DoesNotContain(writes, w => w.Rewrite);
        Assert.Equal(HistoryStage.Begin, writes[0].Stage);
        Assert.Equal(HistoryStage.Commit, writes[^1].Stage);
        Assert.All(writes.Skip(1).SkipLast(1), w => Assert.Equal(HistoryStage.Continue, w.Stage));
        // Each part holds about HistoryCopyPartBytes: what arrived since the last, at most one chunk more.
        long bound = Options.HistoryCopyPartBytes + Options.HistoryChunkBytes + 4096;
        Assert.All(writes, w => Assert.InRange(Bytes(w), 0, bound));
        long total = writes.Sum(Bytes);
        Assert.True(writes.Count >= total / bound, $"{total} bytes in {writes.Count} writes");
        Assert.True(writes.Count >= 30, $"only {writes.Count} writes");
        // Every step wrote at most one part.
        Assert.All(joinerSteps, s => Assert.True(s.Writes.Count(w => w.Stage != HistoryStage.None) <= 1));

        // The disk holds the whole history, as this member's log of the view it copied in.
        HistoryLogImage image = HistoryLog.Read(LogOf(c, 1).Records);
        Assert.Equal(Entries + 1, image.Count); // and the live SafeSend, appended after the copy
        Assert.Equal(c.Id(1), image.LastView!.Me);
        Assert.Empty(LogOf(c, 1).Staged);

        // Replayed in slices, each bounded, the whole history once, in order; then the live message.
        List<Step> replay = joinerSteps.Where(s => s.Replayed > 0).ToList();
        Assert.All(replay, s => Assert.InRange(s.Replayed, 1, Options.HistoryReplaySliceEntries));
        Assert.True(replay.Count >= Entries / Options.HistoryReplaySliceEntries, $"the joiner replayed in {replay.Count} steps");
        AssertReplayedOnceInOrderThenReady(c.Events[1], Entries);
        int ready = c.Events[1].FindIndex(e => e is HistoryReady);
        int live = c.Events[1].FindIndex(e => e is MessageDelivered d && d.Payload.Span.SequenceEqual("live"u8));
        Assert.True(live > ready, "a message delivered during the replay reached the application before the history's end");
        Assert.Equal(c.Events[1].FindIndex(e => e is ViewInstalled), c.Events[1].FindIndex(e => e is ViewInstalled v && v.View.Members.Length == 2));
    }

    [Fact]
    public void Replay_slices_are_bounded_by_bytes_too()
    {
        ProtocolOptions options = Options with { HistoryReplaySliceEntries = 100_000, HistoryReplaySliceBytes = 10 * PayloadBytes };
        (TestCluster c, List<Step> steps) = Cluster(options);
        NodeId earlier = c.Id(0);
        c.Restart(0);
        GroupMember source = c[0].Join(TestCluster.GroupName, c.Now, historyLog: LongLog(earlier, 2_000));
        c.RunUntil(() => source.History!.Current && !source.Replaying);
        Assert.All(steps.Where(s => s.Replayed > 0), s => Assert.InRange(s.ReplayedBytes, 1, options.HistoryReplaySliceBytes));
        Assert.Equal(2_000, steps.Sum(s => s.Replayed));
    }

    /// <summary>
    /// The joiner crashes in the middle of its copy, with parts of it durable aside: its log is the
    /// one it had (here only its incarnation), which names no view in which it held the history, and
    /// its next incarnation copies the history anew and replays it once. With the mutation
    /// <see cref="ProtocolMutations.CopyOverLogInPlace"/> the same crash leaves a log that says this
    /// member held the history in that view while it holds only a prefix of it.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void A_joiner_that_crashes_in_the_middle_of_its_copy_leaves_its_old_log_and_copies_again(bool mutated)
    {
        ProtocolOptions options = mutated ? Options with { Mutations = ProtocolMutations.CopyOverLogInPlace } : Options;
        (TestCluster c, List<Step> steps) = Cluster(options);
        (GroupMember source, GroupMember joiner) = SourceThenJoiner(c, steps, out int sourceSteps);
        int parts = 0;
        Action<int, List<HistoryWrite>, List<NodeEvent>> record = c.AfterStep!;
        c.AfterStep = (i, writes, events) =>
        {
            record(i, writes, events);
            if (i != 1) return;
            parts += writes.Count(w => w.Records.Count > 10); // a part of the copy (staged, or in place with the mutation)
            if (parts >= 5) c.Stop(1); // crashed: nothing of its later steps reaches the disk
        };
        c.RunFor(200_000);
        Assert.True(c.IsStopped(1));
        Assert.False(joiner.History!.Current);
        List<byte[]> left = [.. LogOf(c, 1).Records]; // what a start reads: the copy aside is deleted
        HistoryLogImage image = HistoryLog.Read(left);
        if (mutated)
        {
            // The broken rule: a log that claims this member held the history in its view, with a prefix of it.
            Assert.NotNull(image.LastView);
            Assert.InRange(image.Count, 1, Entries - 1);
            return;
        }
        Assert.Null(image.LastView);
        Assert.Equal(0, image.Count);
        Assert.NotEmpty(LogOf(c, 1).Staged); // parts were durable aside, and are dropped at the next start

        // Its next incarnation starts from that log, copies the history again and replays it once.
        c.AfterStep = record;
        LogOf(c, 1).Staged.Clear(); // as the runtime deletes an unfinished copy aside when it opens the log
        int before = c.Events[1].Count;
        c.Restart(1);
        GroupMember again = c[1].Join(TestCluster.GroupName, c.Now, historyLog: left);
        c.RunUntil(() => again.History!.Current && !again.Replaying, limit: 20_000_000);
        AssertReplayedOnceInOrderThenReady(c.Events[1].Skip(before).ToList(), Entries);
        HistoryLogImage copied = HistoryLog.Read(LogOf(c, 1).Records);
        Assert.Equal(Entries, copied.Count);
        Assert.Equal(c.Id(1), copied.LastView!.Me);
        Assert.False(source.Replaying);
    }

    private static void AssertReplayedOnceInOrderThenReady(List<NodeEvent> events, long entries)
    {
        var replayed = events.OfType<HistoryReplayed>().Select(r => r.Entry.Index).ToList();
        Assert.Equal(Enumerable.Range(1, (int)entries).Select(i => (long)i), replayed);
        int lastReplay = events.FindLastIndex(e => e is HistoryReplayed);
        int ready = events.FindIndex(e => e is HistoryReady);
        Assert.True(ready > lastReplay, "HistoryReady came before the last replayed entry");
        Assert.Equal(entries, ((HistoryReady)events[ready]).Entries);
    }
}
