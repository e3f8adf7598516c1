using System.Collections.Concurrent;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>State transfer on real runtimes: MakeChkpt / SendChkpt / EndOfChkpt at a member, LoadChkpt at the joiner.</summary>
public sealed class StateTransferTests
{
    private const int Put = 1;

    /// <summary>A replica of a dictionary, as an application keeps one: updates by Send, state by checkpoint.</summary>
    private sealed class Replica
    {
        public readonly Dictionary<string, string> State = new();
        public readonly Group Group;
        public int ViewsSeen;
        public int LoadedParts;
        public int UpdatesBeforeLoad = -1; // updates applied when the checkpoint's first part arrived

        public Replica(IsisRuntime runtime, string name)
        {
            Group = new Group(runtime, name);
            Group.Handlers[Put] += (Action<string, string>)((k, v) => { lock (State) State[k] = v; Updates++; });
            Group.ViewHandlers += (ViewHandler)(_ => ViewsSeen++);
            Group.MakeChkpt += (ChkptMaker)(_ =>
            {
                KeyValuePair<string, string>[] all;
                lock (State) all = [.. State];
                Group.SendChkpt(all.Length);
                foreach (var (k, v) in all) Group.SendChkpt(k, v);
                Group.EndOfChkpt();
            });
            Group.LoadChkpt += (Action<int>)(_ => { if (UpdatesBeforeLoad < 0) UpdatesBeforeLoad = Updates; LoadedParts++; });
            Group.LoadChkpt += (Action<string, string>)((k, v) => { lock (State) State[k] = v; LoadedParts++; });
        }

        public int Updates;

        public Dictionary<string, string> Snapshot()
        {
            lock (State) return new Dictionary<string, string>(State);
        }
    }

    [Fact]
    public async Task A_joiner_loads_the_members_state_before_its_first_view_and_then_stays_equal_under_traffic()
    {
        using var runtimes = new TestRuntimes();
        var first = new Replica(runtimes.Start(), "kv");
        var second = new Replica(runtimes.Start(), "kv");
        first.Group.Join();
        second.Group.Join();
        for (int i = 0; i < 300; i++) first.Group.Send(Put, "k" + i, "v" + i);

        // Traffic keeps flowing while the third process joins.
        using var stop = new CancellationTokenSource();
        var writer = Task.Run(() =>
        {
            int n = 0;
            while (!stop.IsCancellationRequested && n < 5_000) second.Group.Send(Put, "w" + (n % 50), "x" + n++);
        });
        var joiner = new Replica(runtimes.Start(), "kv");
        await joiner.Group.JoinAsync();
        // Join returned: the state was loaded before the view handlers saw the first view.
        Assert.Equal(1, joiner.ViewsSeen);
        Assert.Equal(0, joiner.UpdatesBeforeLoad); // no message was applied to the empty state before the checkpoint
        Assert.True(joiner.LoadedParts > 300, $"loaded {joiner.LoadedParts} parts");
        stop.Cancel();
        await writer;
        await first.Group.FlushAsync();
        await second.Group.FlushAsync();
        TestRuntimes.WaitUntil(() => Equal(first.Snapshot(), second.Snapshot()) && Equal(first.Snapshot(), joiner.Snapshot()),
            "the three replicas hold the same dictionary");
        Assert.Equal(350, joiner.Snapshot().Count);
    }

    [Fact]
    public void A_state_larger_than_the_window_and_the_memory_spool_streams_to_a_joiner_with_flow_control()
    {
        using var runtimes = new TestRuntimes();
        var first = new Replica(runtimes.Start(), "big");
        first.Group.Join();
        // 24 MiB: six windows of the maker, and past the joiner's 16 MiB in-memory spool (it goes to a temporary file).
        string value = new('x', 8 * 1024);
        lock (first.State)
        {
            for (int i = 0; i < 3 * 1024; i++) first.State["big" + i] = value + i;
        }
        var joiner = new Replica(runtimes.Start(), "big");
        joiner.Group.Join();
        Assert.True(Equal(first.Snapshot(), joiner.Snapshot()), "the joiner holds the maker's state");
        Assert.Equal(3 * 1024 + 1, joiner.LoadedParts);
    }

    [Fact]
    public async Task The_typed_async_form_streams_MessagePack_parts_and_loads_them_before_the_first_view()
    {
        using var runtimes = new TestRuntimes();
        var prices = new Dictionary<string, decimal> { ["ACME"] = 12.5m, ["INIT"] = 3.25m, ["ZETA"] = 100m };
        var first = new Group(runtimes.Start(), "quotes");
        first.UseCheckpoint<Isis.Tests.Serialization.Quote>(_ => Quotes(prices), _ => ValueTask.CompletedTask);
        await first.JoinAsync();

        var loaded = new List<Isis.Tests.Serialization.Quote>();
        var joiner = new Group(runtimes.Start(), "quotes");
        int viewsBeforeLoad = -1, views = 0;
        joiner.ViewHandlers += (ViewHandler)(_ => views++);
        joiner.UseCheckpoint<Isis.Tests.Serialization.Quote>(_ => Quotes([]), async q =>
        {
            if (viewsBeforeLoad < 0) viewsBeforeLoad = views;
            await Task.Yield(); // a loader that really awaits
            loaded.Add(q);
        });
        await joiner.JoinAsync();
        Assert.Equal(0, viewsBeforeLoad);
        Assert.Equal(prices.OrderBy(p => p.Key).Select(p => (p.Key, p.Value)), loaded.Select(q => (q.Symbol, q.Price)));

        static async IAsyncEnumerable<Isis.Tests.Serialization.Quote> Quotes(Dictionary<string, decimal> from)
        {
            foreach (var (symbol, price) in from.OrderBy(p => p.Key))
            {
                await Task.Yield(); // a maker that really awaits (reading a store, say)
                yield return new Isis.Tests.Serialization.Quote(symbol, price);
            }
        }
    }

    [Fact]
    public void A_group_without_checkpoint_handlers_still_admits_joiners()
    {
        using var runtimes = new TestRuntimes();
        var groups = Enumerable.Range(0, 3).Select(_ => new Group(runtimes.Start(), "plain")).ToList();
        foreach (Group g in groups) g.Join();
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view everywhere");
    }

    [Fact]
    public void SendChkpt_outside_a_MakeChkpt_handler_says_where_it_belongs()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "misuse");
        g.Join();
        var e = Assert.Throws<InvalidOperationException>(() => g.SendChkpt(1));
        Assert.Contains("MakeChkpt", e.Message);
        Assert.Throws<InvalidOperationException>(() => g.EndOfChkpt());
    }

    [Fact]
    public void A_checkpoint_part_no_LoadChkpt_handler_takes_is_counted_as_a_mismatch()
    {
        using var runtimes = new TestRuntimes();
        var first = new Group(runtimes.Start(), "mismatch");
        first.MakeChkpt += (ChkptMaker)(_ => first.SendChkpt("only a string"));
        first.Join();
        IsisRuntime joinerRuntime = runtimes.Start();
        var joiner = new Group(joinerRuntime, "mismatch");
        joiner.LoadChkpt += (Action<int>)(_ => { });
        joiner.Join();
        Assert.Equal(1, joinerRuntime.GetStatistics().HandlerMismatches);
    }

    [Fact]
    public void The_spool_keeps_parts_in_order_in_memory_and_on_disk()
    {
        foreach (long limit in new long[] { 1 << 20, 100 })
        {
            using var spool = new CheckpointSpool(limit);
            for (int i = 0; i < 50; i++) spool.Add(BitConverter.GetBytes(i));
            spool.Add([]); // the end marker is not a part
            Assert.Equal(50, spool.Count);
            Assert.Equal(limit == 100, spool.OnDisk);
            Assert.Equal(Enumerable.Range(0, 50), spool.Parts().Select(p => BitConverter.ToInt32(p.Span)));
        }
    }

    private static bool Equal(Dictionary<string, string> a, Dictionary<string, string> b) =>
        a.Count == b.Count && a.All(e => b.TryGetValue(e.Key, out string? v) && v == e.Value);
}
