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
