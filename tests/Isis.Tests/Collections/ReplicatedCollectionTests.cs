using Isis.Collections;
using Isis.Tests.Runtime;

namespace Isis.Tests.Collections;

/// <summary>
/// Replicated collections on real runtimes (issue 15, item 1): updates multicast and pending, merged
/// in one order by the view's sequencer, pessimistic and optimistic reads, reading after an update,
/// a view change that merges what is left, and a joiner that receives the history.
/// </summary>
public sealed class ReplicatedCollectionTests
{
    private static async Task<List<(Group Group, ReplicatedDictionary<string, int> Map)>> Dictionaries(TestRuntimes runtimes, int n, string name, ReplicatedCollectionOptions? options = null)
    {
        var all = new List<(Group, ReplicatedDictionary<string, int>)>();
        for (int i = 0; i < n; i++)
        {
            var g = new Group(runtimes.Start(), name);
            var map = new ReplicatedDictionary<string, int>(g, options);
            await g.JoinAsync();
            all.Add((g, map));
        }
        TestRuntimes.WaitUntil(() => all.All(m => m.Item1.GetView()?.Members.Length == n), $"{n} members");
        return all;
    }

    [Fact]
    public async Task Concurrent_updates_at_every_member_merge_into_one_history_and_each_issuer_reads_after_its_own()
    {
        using var runtimes = new TestRuntimes();
        var replicas = await Dictionaries(runtimes, 3, "stock");
        // Every member updates the same 20 keys at once: the last merged write wins, the same everywhere.
        Task<OperationId[]>[] writers = replicas.Select((r, i) => Task.Run(async () =>
        {
            var ids = new List<OperationId>();
            for (int n = 0; n < 200; n++) ids.Add(await r.Map.SetAsync("k" + (n % 20), i * 1000 + n));
            return ids.ToArray();
        })).ToArray();
        OperationId[][] issued = await Task.WhenAll(writers);
        for (int i = 0; i < replicas.Count; i++)
        {
            // Reading after one's own last update: the history holds it, and everything it replaced.
            OperationId last = issued[i][^1];
            await replicas[i].Map.WaitForAsync(last).WaitAsync(TimeSpan.FromSeconds(30));
            Assert.True(replicas[i].Map.MergedCount >= 200);
        }
        foreach (OperationId id in issued.SelectMany(x => x)) await replicas[0].Map.WaitForAsync(id).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => replicas.All(r => r.Map.MergedCount == 600 && r.Map.PendingCount == 0), "600 updates merged everywhere");
        var first = replicas[0].Map.OrderBy(p => p.Key).ToList();
        Assert.Equal(20, first.Count);
        Assert.All(replicas, r => Assert.Equal(first, r.Map.OrderBy(p => p.Key).ToList()));
        Assert.All(replicas, r => Assert.Equal(first, r.Map.Optimistic.OrderBy(p => p.Key).ToList())); // nothing pending: the two views agree
    }

    [Fact]
    public async Task Pending_updates_show_in_optimistic_reads_only_until_a_view_change_merges_them_and_a_joiner_gets_the_history()
    {
        using var runtimes = new TestRuntimes();
        // A sequencer that never announces within the test: every update stays pending until a view change.
        var slow = new ReplicatedCollectionOptions { MergeInterval = TimeSpan.FromHours(1) };
        var replicas = await Dictionaries(runtimes, 2, "cart", slow);
        OperationId a = await replicas[0].Map.SetAsync("apples", 3);
        OperationId b = await replicas[1].Map.SetAsync("pears", 5);
        await replicas[1].Map.RemoveAsync("apples");
        TestRuntimes.WaitUntil(() => replicas.All(r => r.Map.PendingCount == 3), "three pending updates at both");
        Assert.All(replicas, r => Assert.Empty(r.Map)); // pessimistic: nothing merged
        Assert.Equal(5, replicas[0].Map.Optimistic["pears"]); // optimistic: pending applied in arrival order
        Task waiting = replicas[0].Map.WaitForAsync(a);
        Assert.False(waiting.IsCompleted);

        // A third member joins: the view change merges what is pending (in id order) at both, and the
        // joiner's checkpoint is that history.
        var g = new Group(runtimes.Start(), "cart");
        var joiner = new ReplicatedDictionary<string, int>(g, slow);
        await g.JoinAsync();
        await waiting.WaitAsync(TimeSpan.FromSeconds(30));
        await replicas[1].Map.WaitForAsync(b).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => replicas.All(r => r.Map.PendingCount == 0 && r.Map.MergedCount == 3), "merged at the view change");
        var expected = replicas[0].Map.OrderBy(p => p.Key).ToList();
        Assert.Contains(new KeyValuePair<string, int>("pears", 5), expected);
        Assert.Equal(expected, replicas[1].Map.OrderBy(p => p.Key).ToList());
        Assert.Equal(expected, joiner.OrderBy(p => p.Key).ToList());
        Assert.Equal(3, joiner.MergedCount); // it loaded the history with the positions it has everywhere
    }

    [Fact]
    public async Task When_the_sequencer_crashes_the_survivors_merge_what_it_left_the_same_way()
    {
        using var runtimes = new TestRuntimes();
        var replicas = await Dictionaries(runtimes, 3, "ledger", new ReplicatedCollectionOptions { MergeInterval = TimeSpan.FromMilliseconds(50) });
        for (int n = 0; n < 50; n++)
        {
            await replicas[1].Map.SetAsync("a" + n, n);
            await replicas[2].Map.SetAsync("b" + n, n);
        }
        replicas[0].Group.Runtime.Crash(); // the sequencer (the oldest member), with updates pending
        var survivors = replicas.Skip(1).ToList();
        TestRuntimes.WaitUntil(() => survivors.All(r => r.Group.GetView()?.Members.Length == 2), "a view without the sequencer", 30);
        OperationId last = await survivors[0].Map.SetAsync("after", 1);
        await survivors[1].Map.WaitForAsync(await survivors[1].Map.SetAsync("after2", 2)).WaitAsync(TimeSpan.FromSeconds(30));
        await survivors[0].Map.WaitForAsync(last).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => survivors.All(r => r.Map.Count == 102 && r.Map.PendingCount == 0), "every update merged at both survivors");
        Assert.Equal(survivors[0].Map.OrderBy(p => p.Key).ToList(), survivors[1].Map.OrderBy(p => p.Key).ToList());
    }

    [Theory]
    [InlineData(MergeOrdering.Ordered, "isis.ordered_send", "isis.safesend")]
    [InlineData(MergeOrdering.Safe, "isis.safesend", "isis.ordered_send")]
    public async Task Merge_lists_travel_by_the_chosen_ordering_and_every_member_merges_one_history(MergeOrdering ordering, string lists, string notLists)
    {
        string name = "ordering-" + ordering;
        var activities = new System.Collections.Concurrent.ConcurrentQueue<string>();
        using var listener = new System.Diagnostics.ActivityListener
        {
            ShouldListenTo = s => s.Name == "Isis",
            Sample = (ref System.Diagnostics.ActivityCreationOptions<System.Diagnostics.ActivityContext> _) => System.Diagnostics.ActivitySamplingResult.AllDataAndRecorded,
            ActivityStopped = a => { if ((string?)a.GetTagItem("isis.group") == name) activities.Enqueue(a.OperationName); },
        };
        System.Diagnostics.ActivitySource.AddActivityListener(listener);
        using var runtimes = new TestRuntimes();
        var replicas = await Dictionaries(runtimes, 3, name, new ReplicatedCollectionOptions { Ordering = ordering });
        OperationId[][] issued = await Task.WhenAll(replicas.Select((r, i) => Task.Run(async () =>
        {
            var ids = new List<OperationId>();
            for (int n = 0; n < 30; n++) ids.Add(await r.Map.SetAsync("k" + (n % 5), i * 100 + n));
            return ids.ToArray();
        })));
        foreach (var r in replicas)
        {
            foreach (OperationId id in issued.SelectMany(x => x)) await r.Map.WaitForAsync(id).WaitAsync(TimeSpan.FromSeconds(30));
        }
        TestRuntimes.WaitUntil(() => replicas.All(r => r.Map.MergedCount == 90), "90 updates merged everywhere");
        var first = replicas[0].Map.OrderBy(p => p.Key).ToList();
        Assert.All(replicas, r => Assert.Equal(first, r.Map.OrderBy(p => p.Key).ToList()));
        Assert.Contains(lists, activities); // the sequencer's lists, by the primitive asked for
        Assert.DoesNotContain(notLists, activities);
    }

    [Fact]
    public async Task A_wait_on_an_update_whose_issuer_left_completes_if_it_merged_and_faults_if_it_never_will()
    {
        using var runtimes = new TestRuntimes();
        var replicas = await Dictionaries(runtimes, 3, "waits");
        OperationId merged = await replicas[2].Map.SetAsync("k", 1);
        await replicas[0].Map.WaitForAsync(merged).WaitAsync(TimeSpan.FromSeconds(30));
        // Waits on the issuer's next update, which it will never send: one goes on, one is cancelled.
        OperationId neverSent = merged with { Sequence = merged.Sequence + 1 };
        Task open = replicas[0].Map.WaitForAsync(neverSent);
        using var cancel = new CancellationTokenSource();
        Task[] cancelled = Enumerable.Range(0, 100).Select(_ => replicas[1].Map.WaitForAsync(neverSent, cancel.Token)).ToArray();
        Assert.Equal(100, replicas[1].Map.Statistics.Waiting);
        await cancel.CancelAsync();
        foreach (Task t in cancelled) await Assert.ThrowsAnyAsync<OperationCanceledException>(() => t);
        Assert.Equal(0, replicas[1].Map.Statistics.Waiting); // cancelled waits are gone, not kept for ever

        await replicas[2].Group.LeaveAsync();
        var stay = replicas.Take(2).ToList();
        TestRuntimes.WaitUntil(() => stay.All(r => r.Group.GetView()?.Members.Length == 2), "a view without the issuer", 30);
        // The view that drops the issuer settles the wait: its next update is lost with it.
        var lost = await Assert.ThrowsAsync<UpdateLostException>(() => open.WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal(neverSent, lost.Id);
        Assert.Equal(0, replicas[0].Map.Statistics.Waiting);
        // After the view change: what it merged is in the history, what it never sent is lost.
        await replicas[1].Map.WaitForAsync(merged).WaitAsync(TimeSpan.FromSeconds(30));
        await Assert.ThrowsAsync<UpdateLostException>(() => replicas[1].Map.WaitForAsync(neverSent).WaitAsync(TimeSpan.FromSeconds(30)));

        // A member that joins after the issuer left answers the same way (its checkpoint says how far each issuer got).
        var g = new Group(runtimes.Start(), "waits");
        var joiner = new ReplicatedDictionary<string, int>(g);
        await g.JoinAsync();
        TestRuntimes.WaitUntil(() => g.GetView()?.Members.Length == 3, "the joiner in the view", 30);
        await joiner.WaitForAsync(merged).WaitAsync(TimeSpan.FromSeconds(30));
        await Assert.ThrowsAsync<UpdateLostException>(() => joiner.WaitForAsync(neverSent).WaitAsync(TimeSpan.FromSeconds(30)));
        // And an update of a member still in the group, merged before the joiner came, is in its history too.
        OperationId before = await replicas[0].Map.SetAsync("j", 2);
        await replicas[0].Map.WaitForAsync(before).WaitAsync(TimeSpan.FromSeconds(30));
        var g2 = new Group(runtimes.Start(), "waits");
        var second = new ReplicatedDictionary<string, int>(g2);
        await g2.JoinAsync();
        TestRuntimes.WaitUntil(() => g2.GetView()?.Members.Length == 4, "the second joiner in the view", 30);
        await second.WaitForAsync(before).WaitAsync(TimeSpan.FromSeconds(30));
        await Assert.ThrowsAsync<ArgumentException>(() => second.WaitForAsync(new OperationId("127.0.0.1:1/0", 1)));
    }

    [Fact]
    public async Task A_replicated_list_applies_index_updates_in_one_order_everywhere()
    {
        using var runtimes = new TestRuntimes();
        var lists = new List<ReplicatedList<string>>();
        for (int i = 0; i < 3; i++)
        {
            var g = new Group(runtimes.Start(), "queue");
            lists.Add(new ReplicatedList<string>(g));
            await g.JoinAsync();
        }
        TestRuntimes.WaitUntil(() => lists.All(l => l.Group.GetView()?.Members.Length == 3), "3 members");
        OperationId[][] issued = await Task.WhenAll(lists.Select((l, i) => Task.Run(async () =>
        {
            var ids = new List<OperationId>();
            for (int n = 0; n < 30; n++) ids.Add(await l.AddAsync($"{i}:{n}"));
            ids.Add(await l.InsertAsync(0, $"{i}:head"));
            ids.Add(await l.RemoveAtAsync(5));
            ids.Add(await l.SetAsync(1, $"{i}:set"));
            ids.Add(await l.RemoveAtAsync(10_000)); // out of range when merged: nothing, everywhere
            return ids.ToArray();
        })));
        foreach (var (l, ids) in lists.Zip(issued)) await l.WaitForAsync(ids[^1]).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => lists.All(l => l.MergedCount == 3 * 34 && l.PendingCount == 0), "every update merged everywhere");
        Assert.Equal(3 * 30 + 3 - 3, lists[0].Count);
        Assert.All(lists, l => Assert.Equal(lists[0].ToList(), l.ToList()));
        // Each sender's adds keep their order in the merged list (FIFO from each issuer).
        foreach (int i in Enumerable.Range(0, 3))
        {
            var mine = lists[0].Where(s => s.StartsWith($"{i}:", StringComparison.Ordinal) && !s.EndsWith("head", StringComparison.Ordinal) && !s.EndsWith("set", StringComparison.Ordinal))
                .Select(s => int.Parse(s[(s.IndexOf(':') + 1)..], System.Globalization.CultureInfo.InvariantCulture)).ToList();
            Assert.Equal(mine.Order(), mine);
        }
    }

    [Fact]
    public void Misuse_gets_an_exception_that_says_what_to_do()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "twice");
        _ = new ReplicatedDictionary<string, int>(g);
        var second = Assert.Throws<InvalidOperationException>(() => new ReplicatedList<int>(g));
        Assert.Contains("group of its own", second.Message);
        var notJoined = Assert.Throws<InvalidOperationException>(() => new ReplicatedDictionary<string, int>(new Group(runtimes.Start(), "x")).SetAsync("k", 1).AsTask().GetAwaiter().GetResult());
        Assert.Contains("Join()", notJoined.Message);
        g.Join();
        var late = Assert.Throws<InvalidOperationException>(() => new ReplicatedDictionary<string, int>(g));
        Assert.Contains("before Join()", late.Message);
    }
}
