using System.Collections.Concurrent;

namespace Isis.Tests.Runtime;

public sealed class QueryTests
{
    private const int Lookup = 1, Pair = 2, Refuse = 3, Slow = 4, Nested = 5;

    private sealed class Cluster : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<Group> Groups = new();
        public readonly List<IsisRuntime> Members = new();
        public readonly ManualResetEventSlim Release = new(false);
        public readonly ManualResetEventSlim SlowEntered = new(false);
        public readonly ConcurrentQueue<Exception> HandlerErrors = new();

        public Cluster(int n)
        {
            for (int i = 0; i < n; i++)
            {
                IsisRuntime r = Runtimes.Start();
                var g = new Group(r, "q");
                int me = i;
                g.Handlers[Lookup] += (Action<string>)(key => g.Reply(key.Length * 10 + me));
                g.Handlers[Pair] += (Action)(() => g.Reply("member" + me, me));
                g.Handlers[Refuse] += (Action)(() => { if (me == 1) g.AbortReply("no such item"); else g.Reply(me); });
                g.Handlers[Slow] += (Action)(() =>
                {
                    if (me == n - 1)
                    {
                        SlowEntered.Set();
                        Release.Wait(TimeSpan.FromSeconds(20)); // the last member answers late
                    }
                    g.Reply(me);
                });
                g.Handlers[Nested] += (Action)(() =>
                {
                    try
                    {
                        if (me == 0) g.Query(Group.ALL, Lookup, "x", new EOLMarker(), new List<int>());
                        g.Reply(me);
                    }
                    catch (Exception e)
                    {
                        HandlerErrors.Enqueue(e);
                        g.Reply(-1);
                    }
                });
                g.Join();
                Groups.Add(g);
                Members.Add(r);
            }
            TestRuntimes.WaitUntil(() => Groups.All(g => g.GetView()?.Members.Length == n), $"a {n}-member view");
        }

        public void Dispose()
        {
            Release.Set();
            Runtimes.Dispose();
        }
    }

    [Fact]
    public void Isis2_form_collects_one_reply_per_member_into_the_reply_lists()
    {
        using var c = new Cluster(3);
        var values = new List<int>();
        int n = c.Groups[0].Query(Group.ALL, Lookup, "abc", new EOLMarker(), values);
        Assert.Equal(3, n);
        Assert.Equal([30, 31, 32], values.Order());
    }

    /// <summary>
    /// The blocking Isis2 forms of OrderedQuery and SafeQuery: the query takes its place in the
    /// total order of OrderedSends (SafeSends), so every member answers after the same updates.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Isis2_ordered_and_safe_forms_are_answered_after_the_same_updates_everywhere(bool safe)
    {
        using var runtimes = new TestRuntimes();
        const int Add = 1, Count = 2;
        var groups = new List<Group>();
        for (int i = 0; i < 3; i++)
        {
            var g = new Group(runtimes.Start(), safe ? "isis2-safe" : "isis2-ordered");
            int seen = 0; // touched by handlers only, which run one at a time
            g.Handlers[Add] += (Action)(() => seen++);
            g.Handlers[Count] += (Action)(() => g.Reply(seen));
            g.Join();
            groups.Add(g);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");
        Task updates = Task.Run(async () =>
        {
            for (int n = 0; n < 40; n++) await (safe ? groups[1].SafeSendAsync(Add) : groups[1].OrderedSendAsync(Add));
        });
        var answers = new List<int>();
        for (int q = 0; q < 5; q++)
        {
            var counts = new List<int>();
            int replies = await Task.Run(() => safe
                ? groups[q % 3].SafeQuery(Group.ALL, Count, new EOLMarker(), counts)
                : groups[q % 3].OrderedQuery(Group.ALL, Count, new EOLMarker(), counts)).WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal(3, replies);
            Assert.Single(counts.Distinct()); // one cut of the updates at every member
            answers.Add(counts[0]);
        }
        await updates.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal(answers.Order(), answers); // later queries see no fewer updates
        var last = new List<int>();
        Assert.Equal(3, await Task.Run(() => safe ? groups[2].SafeQuery(Group.ALL, Count, new EOLMarker(), last) : groups[2].OrderedQuery(Group.ALL, Count, new EOLMarker(), last)));
        Assert.Equal([40, 40, 40], last);
    }

    [Fact]
    public async Task Typed_async_forms_return_single_and_paired_values()
    {
        using var c = new Cluster(3);
        IReadOnlyList<int> single = await c.Groups[1].QueryAsync<int>(Group.ALL, Lookup, "ab").WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal([20, 21, 22], single.Order());
        IReadOnlyList<(string, int)> pairs = await c.Groups[2].QueryAsync<string, int>(Group.MAJORITY, Pair).WaitAsync(TimeSpan.FromSeconds(30));
        Assert.True(pairs.Count >= 2);
        Assert.All(pairs, p => Assert.Equal("member" + p.Item2, p.Item1));
        IReadOnlyList<int> ordered = await c.Groups[0].OrderedQueryAsync<int>(1, Lookup, "a").WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Single(ordered);
    }

    [Fact]
    public async Task An_abort_reply_fails_the_query_with_the_reason()
    {
        using var c = new Cluster(3);
        var e = await Assert.ThrowsAsync<QueryAbortedException>(() => c.Groups[0].QueryAsync<int>(Group.ALL, Refuse));
        Assert.Equal("no such item", e.Reason);
        Assert.Equal(c.Members[1].Address!, e.Member);
    }

    [Fact]
    public async Task A_timeout_either_aborts_naming_the_slow_member_or_counts_it_as_a_null_reply()
    {
        using var c = new Cluster(3);
        var e = await Assert.ThrowsAsync<QueryTimeoutException>(() =>
            c.Groups[0].QueryAsync<int>(Group.ALL, new QueryTimeout(TimeSpan.FromMilliseconds(500)), Slow));
        Assert.Equal([c.Members[2].Address!], e.MissingMembers);

        IReadOnlyList<int> partial = await c.Groups[0].QueryAsync<int>(Group.ALL, new QueryTimeout(TimeSpan.FromMilliseconds(500), QueryTimeoutAction.NullReply), Slow)
            .WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal([0, 1], partial.Order());
    }

    [Fact]
    public async Task ALL_stops_waiting_for_a_member_that_fails()
    {
        using var c = new Cluster(3);
        Task<IReadOnlyList<int>> query = c.Groups[0].QueryAsync<int>(Group.ALL, Slow); // member 2 holds its answer
        Assert.True(c.SlowEntered.Wait(TimeSpan.FromSeconds(30)), "member 2 got the request");
        c.Members[2].Crash();
        IReadOnlyList<int> replies = await query.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal([0, 1], replies.Order());
    }

    [Fact]
    public async Task A_handler_that_queries_its_own_group_gets_a_clear_error_and_the_group_keeps_working()
    {
        using var c = new Cluster(2);
        IReadOnlyList<int> replies = await c.Groups[1].QueryAsync<int>(Group.ALL, Nested).WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal(2, replies.Count);
        var error = Assert.IsType<InvalidOperationException>(Assert.Single(c.HandlerErrors));
        Assert.Contains("deadlock", error.Message);
        Assert.Equal(2, (await c.Groups[0].QueryAsync<int>(Group.ALL, Lookup, "z").WaitAsync(TimeSpan.FromSeconds(30))).Count);
    }

    [Fact]
    public void Misuse_is_refused_with_what_to_do()
    {
        using var c = new Cluster(1);
        Group g = c.Groups[0];
        Assert.Contains("positive number of replies", Assert.Throws<ArgumentOutOfRangeException>(() => g.Query(0, Lookup, "a", new EOLMarker(), new List<int>())).Message);
        Assert.Contains("EOLMarker", Assert.Throws<ArgumentException>(() => g.Query(Group.ALL, Lookup, "a", new List<int>())).Message);
        Assert.Contains("handler", Assert.Throws<InvalidOperationException>(() => g.Reply(1)).Message);
    }
}

public sealed class CancellationTests
{
    [Fact]
    public async Task Async_twins_stop_waiting_when_cancelled()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "cancel");
        using var hold = new ManualResetEventSlim(false);
        g.Handlers[1] += (Action)(() => { hold.Wait(TimeSpan.FromSeconds(20)); g.Reply(1); });
        g.Handlers[3] += (Action)(() => { hold.Wait(TimeSpan.FromSeconds(20)); g.Reply(1, 2); });
        g.Join();
        using var cts = new CancellationTokenSource();
        Task<IReadOnlyList<int>> query = g.QueryAsync<int>(Group.ALL, 1, [], cts.Token);
        cts.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => query);
        hold.Set();
        await g.SafeSendAsync(2, [], CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(20));
        // Every query twin takes a token: each stops waiting when it is cancelled (the handler is held)...
        hold.Reset();
        g.SetSafeSendThreshold(1);
        var pending = new List<(string Name, Func<CancellationToken, Task> Call)>
        {
            ("QueryAsync with a timeout", t => g.QueryAsync<int>(Group.ALL, new QueryTimeout(TimeSpan.FromSeconds(30), QueryTimeoutAction.Abort), 1, [], t)),
            ("QueryAsync<T1, T2>", t => g.QueryAsync<int, int>(Group.ALL, 3, [], t)),
            ("OrderedQueryAsync", t => g.OrderedQueryAsync<int>(Group.ALL, 1, [], t)),
            ("SafeQueryAsync", t => g.SafeQueryAsync<int>(Group.ALL, 1, [], t)),
        };
        foreach (var (name, call) in pending)
        {
            using var stop = new CancellationTokenSource();
            Task waiting = call(stop.Token);
            await Task.Delay(20);
            Assert.False(waiting.IsCompleted, $"{name} finished while its handler was held");
            stop.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting.WaitAsync(TimeSpan.FromSeconds(10)));
        }
        // ... and completes with the replies when it is not.
        hold.Set();
        Assert.Equal([1], await g.QueryAsync<int>(Group.ALL, new QueryTimeout(TimeSpan.FromSeconds(30), QueryTimeoutAction.Abort), 1, [], CancellationToken.None));
        Assert.Equal([1], await g.OrderedQueryAsync<int>(Group.ALL, 1, [], CancellationToken.None));
        Assert.Equal([1], await g.SafeQueryAsync<int>(Group.ALL, 1, [], CancellationToken.None));
        Assert.Equal([(1, 2)], await g.QueryAsync<int, int>(Group.ALL, 3, [], CancellationToken.None));
        // A one-member Flush can finish before the wait starts; a cancelled token must still win every time.
        for (int i = 0; i < 50; i++)
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => g.FlushAsync(new CancellationToken(canceled: true)));
    }
}
