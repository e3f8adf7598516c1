using Isis.Collections;
using Isis.Tests.Runtime;

namespace Isis.Tests.Collections;

/// <summary>
/// Gossip reconciliation of replicated collections (issue 15, item 2), on real runtimes. A member
/// whose handlers stall (a real slow handler of the same group, as an overloaded application's
/// would) trails the others; gossip with a random peer repairs its history in bulk while it is
/// still stalled, without a view change, and the updates it receives late are dropped as
/// duplicates. The same across a view change, for lists, and whole epochs of the history are
/// dropped once every member holds them.
/// </summary>
public sealed class CollectionRepairTests
{
    private const int StallCode = 1;

    private static readonly ReplicatedCollectionOptions Gossip = new() { GossipInterval = TimeSpan.FromMilliseconds(100) };

    /// <summary>Whether a member's handlers are stalled right now, and whether a repair came while they were.</summary>
    private sealed class Stall
    {
        public volatile bool Asleep;
        public volatile bool RepairedWhileAsleep;
    }

    private static async Task<(Group Group, T Collection, Stall Stall)> Join<T>(TestRuntimes runtimes, string name, Func<Group, T> create)
    {
        var g = new Group(runtimes.Start(), name);
        T collection = create(g);
        var stall = new Stall();
        // Stalls the handlers of the member the message names, for the milliseconds it gives.
        g.Handlers[StallCode] += (Action<int, int>)((rank, ms) =>
        {
            if (g.GetView()!.GetMyRank() != rank) return;
            stall.Asleep = true;
            Thread.Sleep(ms);
            stall.Asleep = false;
        });
        await g.JoinAsync();
        return (g, collection, stall);
    }

    private static async Task<List<(Group Group, ReplicatedDictionary<string, int> Map, Stall Stall)>> Dictionaries(TestRuntimes runtimes, int n, string name, ReplicatedCollectionOptions options)
    {
        var all = new List<(Group, ReplicatedDictionary<string, int>, Stall)>();
        for (int i = 0; i < n; i++) all.Add(await Join(runtimes, name, g => new ReplicatedDictionary<string, int>(g, options)));
        TestRuntimes.WaitUntil(() => all.All(m => m.Item1.GetView()?.Members.Length == n), $"{n} members");
        return all;
    }

    private static void WaitForHistory(Func<IReadOnlyList<ReplicatedCollectionStatistics>> read, long length)
    {
        var deadline = DateTime.UtcNow.AddSeconds(60);
        IReadOnlyList<ReplicatedCollectionStatistics> now;
        while (!(now = read()).All(s => s.HistoryLength == length && s.Pending == 0))
        {
            if (DateTime.UtcNow > deadline) throw new TimeoutException($"not within 60 s: {length} updates in every member's history; " + string.Join("; ", now));
            Thread.Sleep(20);
        }
        Assert.All(now, s => Assert.Equal(0, s.Divergences));
    }

    private static void AssertSameHistory(IReadOnlyList<ReplicatedDictionary<string, int>> maps, long length)
    {
        WaitForHistory(() => maps.Select(m => m.Statistics).ToList(), length);
        var first = maps[0].OrderBy(p => p.Key).ToList();
        Assert.All(maps, m => Assert.Equal(first, m.OrderBy(p => p.Key).ToList()));
    }

    [Fact]
    public async Task Staleness_stays_near_the_gossip_interval_and_grows_while_no_peer_confirms_the_history()
    {
        using var runtimes = new TestRuntimes();
        var members = await Dictionaries(runtimes, 2, "staleness", Gossip);
        for (int n = 0; n < 50; n++) await members[0].Map.SetAsync("k" + n, n);
        TimeSpan fresh = TimeSpan.FromSeconds(1);
        TestRuntimes.WaitUntil(() => members.All(m => m.Map.Staleness < fresh), "gossip confirms both members current");

        // The second member's handlers stall for 4 s: it answers no pull, so the first cannot confirm
        // that it holds what its peer holds, and its bound grows (it cannot tell this from being cut off).
        members[0].Group.Send(StallCode, 1, 4_000);
        TestRuntimes.WaitUntil(() => members[1].Stall.Asleep, "the second member stalled");
        TestRuntimes.WaitUntil(() => members[0].Map.Staleness > TimeSpan.FromSeconds(1.5), "the first member's bound grows while no peer answers");
        TestRuntimes.WaitUntil(() => !members[1].Stall.Asleep && members[0].Map.Staleness < fresh, "confirmed again once the peer answers", 30);

        // Alone, a member holds everything there is.
        await members[1].Group.LeaveAsync();
        TestRuntimes.WaitUntil(() => members[0].Group.GetView()!.Members.Length == 1, "the first member alone");
        // The group's view is public as it installs; the collection takes it on its delivery thread, a moment later.
        TestRuntimes.WaitUntil(() => members[0].Map.Staleness == TimeSpan.Zero, "the collection sees itself alone, holding everything there is");
    }

    [Fact]
    public async Task A_member_whose_handlers_stall_is_repaired_by_a_peer_while_stalled_without_a_view_change()
    {
        using var runtimes = new TestRuntimes();
        var members = await Dictionaries(runtimes, 3, "quotes-stall", Gossip);
        var slow = members[2];
        var repairs = new List<HistoryRepairedEventArgs>();
        slow.Map.Repaired += (_, e) =>
        {
            lock (repairs) repairs.Add(e);
            if (slow.Stall.Asleep) slow.Stall.RepairedWhileAsleep = true;
        };
        int viewId = slow.Group.GetView()!.ViewId;

        members[0].Group.Send(StallCode, 2, 8_000);
        TestRuntimes.WaitUntil(() => slow.Stall.Asleep, "the member's handlers stalled");
        for (int n = 0; n < 600; n++) await members[n % 2].Map.SetAsync("k" + (n % 50), n);
        // Its own deliveries are stuck behind the stalled handler, yet its history catches up.
        TestRuntimes.WaitUntil(() => slow.Map.MergedCount == 600, "the stalled member's history repaired", 30);
        Assert.True(slow.Stall.Asleep, "the history must come by repair, while the handlers are still stalled");
        Assert.Equal(members[0].Map.OrderBy(p => p.Key).ToList(), slow.Map.OrderBy(p => p.Key).ToList());

        TestRuntimes.WaitUntil(() => !slow.Stall.Asleep, "the stall ends", 30);
        AssertSameHistory(members.Select(m => m.Map).ToList(), 600);
        ReplicatedCollectionStatistics stats = slow.Map.Statistics;
        Assert.True(slow.Stall.RepairedWhileAsleep);
        Assert.Equal(600, stats.RepairedEntries);
        Assert.True(stats.LateDuplicates >= 600, $"its own deliveries of the 600 updates are dropped as duplicates: {stats}");
        lock (repairs)
        {
            Assert.Equal(stats.RepairedEntries, repairs.Sum(r => r.Count));
            Assert.Equal(repairs.Count, stats.Repairs); // one Repaired event per repair that added entries
            Assert.Equal(0, repairs[0].FirstPosition);
            Assert.All(repairs, r => Assert.Contains(r.From, members.Take(2).Select(m => m.Group.GetView()!.Members[m.Group.GetView()!.GetMyRank()])));
        }
        Assert.All(members, m => Assert.Equal(viewId, m.Group.GetView()!.ViewId)); // no view change did it
        Assert.All(members.Take(2), m => Assert.Equal(0, m.Map.Statistics.RepairedEntries));
        Assert.False(stats.Trailing);
        Assert.True(stats.GossipRounds >= stats.Repairs, $"each repair came from a gossip round it started: {stats}");
        Assert.All(members, m => Assert.True(m.Map.Statistics.GossipRounds > 0, "every member gossips, trailing or not"));
    }

    [Fact]
    public async Task A_stalled_member_takes_what_the_last_view_left_from_a_peer_and_merges_the_same()
    {
        using var runtimes = new TestRuntimes();
        // Updates stay pending until a view change: what the view leaves is all of them.
        var options = new ReplicatedCollectionOptions { GossipInterval = TimeSpan.FromMilliseconds(100), MergeInterval = TimeSpan.FromHours(1) };
        var members = await Dictionaries(runtimes, 4, "quotes-view", options);
        var slow = members[2];
        members[0].Group.Send(StallCode, 2, 6_000);
        TestRuntimes.WaitUntil(() => slow.Stall.Asleep, "the member's handlers stalled");
        for (int n = 0; n < 200; n++) await members[n % 2].Map.SetAsync("k" + n, n);
        TestRuntimes.WaitUntil(() => members[1].Map.PendingCount == 200, "200 pending at a member that keeps up");
        await members[3].Group.LeaveAsync(); // the view change merges the 200 pending updates
        var survivors = members.Take(3).ToList();
        TestRuntimes.WaitUntil(() => slow.Map.MergedCount == 200, "the stalled member repaired with the merge of the last view", 30);
        Assert.True(slow.Stall.Asleep, "the merge must come by repair, while the handlers are still stalled");

        // When its handlers go on, it comes through the view change itself and finds the merge already in.
        AssertSameHistory(survivors.Select(m => m.Map).ToList(), 200);
        TestRuntimes.WaitUntil(() => !slow.Stall.Asleep && slow.Group.GetView()!.Members.Length == 3, "the stall ends and the view is installed", 30);
        OperationId last = await slow.Map.SetAsync("after", 1);
        await members[0].Group.LeaveAsync(); // pending until a view change (the merge interval is an hour)
        var rest = survivors.Skip(1).ToList();
        await rest[1].Map.WaitForAsync(last).WaitAsync(TimeSpan.FromSeconds(30));
        AssertSameHistory(rest.Select(m => m.Map).ToList(), 201);
        Assert.Equal(200, slow.Map.Statistics.RepairedEntries);
    }

    [Fact]
    public async Task A_stalled_member_of_a_replicated_list_is_repaired_in_the_same_order()
    {
        using var runtimes = new TestRuntimes();
        var members = new List<(Group Group, ReplicatedList<string> List, Stall Stall)>();
        for (int i = 0; i < 3; i++) members.Add(await Join(runtimes, "log-stall", g => new ReplicatedList<string>(g, Gossip)));
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 3), "3 members");
        members[0].Group.Send(StallCode, 1, 6_000);
        TestRuntimes.WaitUntil(() => members[1].Stall.Asleep, "the member's handlers stalled");
        for (int n = 0; n < 150; n++)
        {
            await members[0].List.AddAsync("a" + n);
            await members[2].List.InsertAsync(n % 3, "i" + n);
            if (n % 10 == 0) await members[2].List.RemoveAtAsync(1);
        }
        TestRuntimes.WaitUntil(() => members[1].List.MergedCount == 315, "the stalled member's list repaired", 30);
        Assert.True(members[1].Stall.Asleep);
        Assert.Equal(members[0].List.ToList(), members[1].List.ToList());
        WaitForHistory(() => members.Select(m => m.List.Statistics).ToList(), 315);
        Assert.All(members, m => Assert.Equal(members[0].List.ToList(), m.List.ToList()));
    }

    [Fact]
    public async Task Whole_epochs_are_dropped_once_every_member_holds_them()
    {
        using var runtimes = new TestRuntimes();
        var members = await Dictionaries(runtimes, 3, "quotes-epochs", new ReplicatedCollectionOptions { GossipInterval = TimeSpan.FromMilliseconds(50) });
        const int updates = 5_000;
        Task[] writers = members.Select((m, i) => Task.Run(async () =>
        {
            for (int n = 0; n < updates / 3 + (i < updates % 3 ? 1 : 0); n++) await m.Map.SetAsync("k" + (n % 100), n);
        })).ToArray();
        await Task.WhenAll(writers);
        AssertSameHistory(members.Select(m => m.Map).ToList(), updates);
        // Gossip tells every member the others' lengths; then all but the last (partial) epoch goes.
        TestRuntimes.WaitUntil(() => members.All(m => m.Map.Statistics.RetainedFrom == updates - updates % 1_024), "old epochs dropped everywhere");
        Assert.All(members, m => Assert.Equal(updates % 1_024, m.Map.Statistics.RetainedEntries));
    }
}
