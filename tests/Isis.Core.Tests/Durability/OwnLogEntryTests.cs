using Isis.Core.Durability;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests.Durability;

/// <summary>
/// A member coming back to a running group keeps its own log's entry wherever the source sends the
/// very same one (issue 25: a restarted member held its log's entries and a pulled copy of the
/// same entries at once). A log that holds other SafeSends at those indices is not used: the pulled
/// entries are kept.
/// </summary>
public class OwnLogEntryTests
{
    private const int Entries = 600;
    private const int Held = 450; // what the returning member's log holds

    private static readonly ProtocolOptions Options = new() { HistoryChunkBytes = 2048 };

    private static byte[] Payload(int i, byte salt) => [salt, (byte)i, (byte)(i >> 8), 7, 7, 7, 7, 7];

    private static List<byte[]> Log(NodeId writer, NodeId lineageFounder, NodeId[] members, int entries, NodeId sender, Func<int, byte[]> payload)
    {
        var w = new PacketWriter();
        var records = new List<byte[]>
        {
            HistoryLog.Incarnation(w, writer),
            HistoryLog.View(w, new HistoryViewRecord(new HistoryViewKey(1, 1), new Lineage(lineageFounder, 1), writer, members)),
        };
        for (int i = 1; i <= entries; i++) records.Add(HistoryLog.Entry(w, new HistoryEntry(i, sender, 1, i, 1, payload(i))));
        return records;
    }

    /// <summary>
    /// Process 0 holds the history (600 entries, from its own log); process 1 returns with a log of
    /// 450 entries of the same lineage, the same SafeSends (<paramref name="sameSafeSends"/>) or
    /// others at the same indices, and copies the history. Returns the first index of each pull it
    /// sent, its replay and its log as read at start.
    /// </summary>
    private static (List<long> Pulls, List<HistoryEntry> Replayed, ProcessNode Returning, List<byte[]> Own) Return(bool sameSafeSends, ProtocolMutations mutations = ProtocolMutations.None)
    {
        var c = new TestCluster(2, Options with { Mutations = mutations });
        NodeId first = c.Id(0), second = c.Id(1);
        c.Restart(0);
        c.Restart(1);
        GroupMember source = c[0].Join(TestCluster.GroupName, c.Now, historyLog: Log(first, first, [first], Entries, first, i => Payload(i, 1)));
        c.RunUntil(() => source.History!.Current && !source.Replaying);

        var pulls = new List<long>();
        c.DropWhere(e =>
        {
            if (e.Kind == PacketKind.HistoryPull && e.From == c[1].Endpoint) pulls.Add(e.Header.Number);
            return false;
        });
        // Other SafeSends at the same indices: sent by another process (their ids differ, as the history digest sees them).
        List<byte[]> own = sameSafeSends
            ? Log(second, first, [first, second], Held, first, i => Payload(i, 1))
            : Log(second, first, [first, second], Held, second, i => Payload(i, 2));
        GroupMember returning = c[1].Join(TestCluster.GroupName, c.Now, historyLog: own);
        c.RunUntil(() => returning.History!.Current && !returning.Replaying, limit: 20_000_000);
        List<HistoryEntry> replayed = c.Events[1].OfType<HistoryReplayed>().Select(r => r.Entry).ToList();
        return (pulls, replayed, c[1], own);
    }

    private static void AssertSourceHistory(List<HistoryEntry> replayed)
    {
        Assert.Equal(Enumerable.Range(1, Entries).Select(i => (long)i), replayed.Select(e => e.Index));
        Assert.All(replayed, e => Assert.Equal(Payload((int)e.Index, 1), e.Payload.ToArray()));
    }

    [Fact]
    public void A_returning_member_keeps_its_own_logs_entries_where_the_source_sends_the_same_ones()
    {
        (List<long> pulls, List<HistoryEntry> replayed, ProcessNode returning, List<byte[]> own) = Return(sameSafeSends: true);
        AssertSourceHistory(replayed);
        Assert.Equal(Held, returning.Counters.HistoryEntriesFromOwnLog);
        Assert.Contains(1L, pulls);
        // Held once: entries 1..450 are the ones its log read at start (slices of its records), not the pulled copies.
        for (int i = 0; i < Held; i++)
        {
            Assert.True(System.Runtime.InteropServices.MemoryMarshal.TryGetArray(replayed[i].Payload, out ArraySegment<byte> held));
            Assert.Same(own[2 + i], held.Array);
        }
        Assert.False(System.Runtime.InteropServices.MemoryMarshal.TryGetArray(replayed[Held].Payload, out ArraySegment<byte> past) && own.Contains(past.Array!));
    }

    [Fact]
    public void A_returning_member_whose_log_holds_other_SafeSends_at_those_indices_keeps_the_pulled_ones()
    {
        // Its log's SafeSends were lost by the group (their acceptors all delivered them and failed),
        // and the indices went to others.
        (_, List<HistoryEntry> replayed, ProcessNode returning, _) = Return(sameSafeSends: false);
        AssertSourceHistory(replayed);
        Assert.Equal(0, returning.Counters.HistoryEntriesFromOwnLog);
    }

    [Fact]
    public void Keeping_the_log_entries_without_comparing_them_replays_SafeSends_the_group_does_not_have()
    {
        (_, List<HistoryEntry> replayed, ProcessNode returning, _) = Return(sameSafeSends: false, ProtocolMutations.OwnLogEntryUnchecked);
        Assert.Equal(Held, returning.Counters.HistoryEntriesFromOwnLog);
        Assert.Equal(Payload(1, 2), replayed[0].Payload.ToArray()); // the broken rule: its own, not the group's
    }
}
