using System.Collections.Concurrent;

namespace Isis.Tests.Runtime;

/// <summary>
/// Deferred replies: a query handler takes <see cref="Group.DeferReply"/>, returns, and answers later
/// from another thread; the query's timeout and failure rules still apply, and misuse says what to do.
/// </summary>
public sealed class DeferredReplyTests
{
    private const int Ask = 1, AnswerNow = 2, AskTwice = 3;

    private sealed class Cluster : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<Group> Groups = new();
        public readonly List<IsisRuntime> Members = new();
        public readonly List<ConcurrentQueue<DeferredReply>> Owed = new();
        public readonly ConcurrentQueue<Exception> HandlerErrors = new();

        public Cluster(int n)
        {
            for (int i = 0; i < n; i++)
            {
                IsisRuntime r = Runtimes.Start();
                var g = new Group(r, "deferred");
                var owed = new ConcurrentQueue<DeferredReply>();
                int me = i;
                // The handler returns at once, owing its answer.
                g.Handlers[Ask] += (Action)(() => owed.Enqueue(g.DeferReply()));
                // A later message makes each member answer what it owes, from a thread of its own.
                g.Handlers[AnswerNow] += (Action)(() =>
                {
                    while (owed.TryDequeue(out DeferredReply? d)) _ = Task.Run(async () => { await Task.Delay(50); d.Reply(me * 10); });
                });
                g.Handlers[AskTwice] += (Action)(() =>
                {
                    DeferredReply d = g.DeferReply();
                    try { g.Reply(-1); } catch (InvalidOperationException e) { HandlerErrors.Enqueue(e); }
                    try { g.DeferReply(); } catch (InvalidOperationException e) { HandlerErrors.Enqueue(e); }
                    d.Reply(me);
                    try { d.NullReply(); } catch (InvalidOperationException e) { HandlerErrors.Enqueue(e); }
                });
                g.Join();
                Groups.Add(g);
                Members.Add(r);
                Owed.Add(owed);
            }
            TestRuntimes.WaitUntil(() => Groups.All(g => g.GetView()?.Members.Length == n), $"a {n}-member view");
        }

        public void Dispose() => Runtimes.Dispose();
    }

    [Fact]
    public async Task A_handler_returns_at_once_and_answers_later_from_another_thread()
    {
        using var c = new Cluster(3);
        Task<IReadOnlyList<int>> query = c.Groups[0].QueryAsync<int>(Group.ALL, Ask);
        TestRuntimes.WaitUntil(() => c.Owed.All(o => o.Count == 1), "every member owes its answer");
        // The handlers returned without answering, and no null reply went out for them.
        await Task.Delay(200);
        Assert.False(query.IsCompleted, "the query completed before any member answered");
        DeferredReply owed = Assert.Single(c.Owed[1]);
        Assert.Equal(c.Members[0].Address!, owed.Requester);
        Assert.Equal(c.Groups[1].GetView()!.ViewId, owed.ViewId);
        Assert.False(owed.IsAnswered);
        // The delivery threads are free: a later Send is delivered, and it releases the answers.
        c.Groups[2].Send(AnswerNow);
        IReadOnlyList<int> replies = await query.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal([0, 10, 20], replies.Order());
        Assert.True(owed.IsAnswered);
    }

    [Fact]
    public async Task An_answer_that_never_comes_times_out_naming_the_member_and_a_failed_member_is_not_waited_for()
    {
        using var c = new Cluster(3);
        var e = await Assert.ThrowsAsync<QueryTimeoutException>(() =>
            c.Groups[0].QueryAsync<int>(Group.ALL, new QueryTimeout(TimeSpan.FromMilliseconds(500)), Ask).WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal(3, e.MissingMembers.Count);
        foreach (var owed in c.Owed) owed.Clear();

        // Members 0 and 1 answer; member 2 fails owing its answer: ALL completes with the two.
        Task<IReadOnlyList<int>> query = c.Groups[0].QueryAsync<int>(Group.ALL, Ask);
        TestRuntimes.WaitUntil(() => c.Owed.All(o => o.Count == 1), "every member owes its answer");
        c.Owed[0].Single().Reply(0);
        c.Owed[1].Single().Reply(10);
        c.Members[2].Crash();
        Assert.Equal([0, 10], (await query.WaitAsync(TimeSpan.FromSeconds(30))).Order());
    }

    [Fact]
    public async Task Misuse_is_refused_with_what_to_do()
    {
        using var c = new Cluster(2);
        // Inside the handler: replying after deferring, deferring twice, and answering a handle twice.
        Assert.Equal([0, 1], (await c.Groups[0].QueryAsync<int>(Group.ALL, AskTwice).WaitAsync(TimeSpan.FromSeconds(30))).Order());
        TestRuntimes.WaitUntil(() => c.HandlerErrors.Count == 6, "three refusals at each member");
        Assert.All(c.HandlerErrors, e => Assert.Contains("replies once", e.Message));
        Assert.Equal(2, c.HandlerErrors.Count(e => e.Message.Contains("already answered or deferred the query; a member replies once (Reply called", StringComparison.Ordinal)));
        Assert.Equal(2, c.HandlerErrors.Count(e => e.Message.Contains("already answered or deferred the query; a member replies once (DeferReply called", StringComparison.Ordinal)));
        Assert.Equal(2, c.HandlerErrors.Count(e => e.Message.Contains("already answered the query from", StringComparison.Ordinal) && e.Message.Contains("NullReply called again", StringComparison.Ordinal)));

        // Outside a handler: DeferReply says how to answer later.
        Assert.Contains("call DeferReply() in the handler", Assert.Throws<InvalidOperationException>(() => c.Groups[1].DeferReply()).Message);

        // A handle answered after its member left the group: the requester no longer waits for it.
        Task<IReadOnlyList<int>> query = c.Groups[0].QueryAsync<int>(Group.ALL, Ask);
        TestRuntimes.WaitUntil(() => c.Owed.All(o => o.Count == 1), "both members owe their answer");
        await c.Groups[1].LeaveAsync().WaitAsync(TimeSpan.FromSeconds(30));
        var late = Assert.Throws<InvalidOperationException>(() => c.Owed[1].Single().Reply(1));
        Assert.Contains("left group 'deferred'", late.Message);
        Assert.Contains("Answer deferred queries before leaving", late.Message);
        c.Owed[0].Single().AbortReply("out of stock");
        Assert.Equal("out of stock", (await Assert.ThrowsAsync<QueryAbortedException>(() => query.WaitAsync(TimeSpan.FromSeconds(30)))).Reason);
    }
}
