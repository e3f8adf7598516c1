using Isis.Diagnostics;
using System.Diagnostics;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Runtime;
using Isis.Serialization;

namespace Isis;

// Group, part 3 of 3: the Query family (requests with Send, OrderedSend or SafeSend ordering) and replies.
public sealed partial class Group
{
    // ---------------------------------------------------------------- Query

    /// <summary>
    /// How long queries of this group wait for replies, and what a slow member means then, unless
    /// a call passes its own. Defaults to 30 s with <see cref="QueryTimeoutAction.Abort"/>.
    /// </summary>
    public QueryTimeout QueryTimeout { get; set; } = new(TimeSpan.FromSeconds(30));

    /// <summary>
    /// Isis2-style query: <c>g.Query(nreplies, [timeout,] opcode, args..., new EOLMarker(), replyList1, replyList2...)</c>.
    /// The request is multicast like <see cref="Send"/>; each member's handler answers with
    /// <see cref="Reply"/>; the values of each reply are appended to the reply lists (value i to
    /// list i). Returns the number of replies with values.
    /// </summary>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="requestAndReplyLists">Optionally a <see cref="Isis.QueryTimeout"/>, then the request code, its arguments, an <see cref="EOLMarker"/>, and one <c>List&lt;T&gt;</c> per reply value.</param>
    /// <exception cref="QueryTimeoutException">The timeout passed with <see cref="QueryTimeoutAction.Abort"/>.</exception>
    /// <exception cref="QueryAbortedException">A member answered with <see cref="AbortReply"/>.</exception>
    public int Query(int nreplies, params object?[] requestAndReplyLists) => QueryIsis2(MessageKind.QuerySend, nameof(Query), nreplies, requestAndReplyLists);

    /// <summary>As <see cref="Query(int, object[])"/>, with the request delivered in OrderedSend's total order.</summary>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="requestAndReplyLists">Optionally a <see cref="Isis.QueryTimeout"/>, then the request code, its arguments, an <see cref="EOLMarker"/>, and one <c>List&lt;T&gt;</c> per reply value.</param>
    public int OrderedQuery(int nreplies, params object?[] requestAndReplyLists) => QueryIsis2(MessageKind.QueryOrdered, nameof(OrderedQuery), nreplies, requestAndReplyLists);

    /// <summary>As <see cref="Query(int, object[])"/>, with the request delivered in CausalSend's causal order: every member answers after the causal messages this member had delivered before asking.</summary>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="requestAndReplyLists">Optionally a <see cref="Isis.QueryTimeout"/>, then the request code, its arguments, an <see cref="EOLMarker"/>, and one <c>List&lt;T&gt;</c> per reply value.</param>
    public int CausalQuery(int nreplies, params object?[] requestAndReplyLists) => QueryIsis2(MessageKind.QueryCausal, nameof(CausalQuery), nreplies, requestAndReplyLists);

    /// <summary>Queries the group and returns each member's single reply value, typed.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <remarks>To stop waiting, use <c>WaitAsync(cancellationToken)</c> on the task; the query itself still completes or times out.</remarks>
    public async Task<IReadOnlyList<TReply>> QueryAsync<TReply>(int nreplies, int opcode, params object?[] args) =>
        (await QueryCore(MessageKind.QuerySend, nameof(QueryAsync), nreplies, QueryTimeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the query itself still completes or times out).</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task<IReadOnlyList<TReply>> QueryAsync<TReply>(int nreplies, int opcode, object?[] args, CancellationToken cancellationToken) =>
        StopWaitingWhenCancelled(QueryAsync<TReply>(nreplies, opcode, args), cancellationToken);

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with a timeout for this call.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="timeout">How long to wait and what a slow member means.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<TReply>> QueryAsync<TReply>(int nreplies, QueryTimeout timeout, int opcode, params object?[] args) =>
        (await QueryCore(MessageKind.QuerySend, nameof(QueryAsync), nreplies, timeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();

    /// <summary>As <see cref="QueryAsync{TReply}(int, QueryTimeout, int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the query itself still completes or times out).</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="timeout">How long to wait and what a slow member means.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task<IReadOnlyList<TReply>> QueryAsync<TReply>(int nreplies, QueryTimeout timeout, int opcode, object?[] args, CancellationToken cancellationToken) =>
        StopWaitingWhenCancelled(QueryAsync<TReply>(nreplies, timeout, opcode, args), cancellationToken);

    /// <summary>Queries the group; each member replies with two values.</summary>
    /// <typeparam name="T1">The type of the first reply value.</typeparam>
    /// <typeparam name="T2">The type of the second reply value.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<(T1, T2)>> QueryAsync<T1, T2>(int nreplies, int opcode, params object?[] args) =>
        (await QueryCore(MessageKind.QuerySend, nameof(QueryAsync), nreplies, QueryTimeout, opcode, args).ConfigureAwait(false))
            .Select(r => Values(r, [typeof(T1), typeof(T2)]))
            .Select(v => ((T1)v[0]!, (T2)v[1]!)).ToList();

    /// <summary>As <see cref="QueryAsync{T1, T2}(int, int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the query itself still completes or times out).</summary>
    /// <typeparam name="T1">The type of the first reply value.</typeparam>
    /// <typeparam name="T2">The type of the second reply value.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task<IReadOnlyList<(T1, T2)>> QueryAsync<T1, T2>(int nreplies, int opcode, object?[] args, CancellationToken cancellationToken) =>
        StopWaitingWhenCancelled(QueryAsync<T1, T2>(nreplies, opcode, args), cancellationToken);

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with the request delivered in OrderedSend's total order.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<TReply>> OrderedQueryAsync<TReply>(int nreplies, int opcode, params object?[] args) =>
        (await QueryCore(MessageKind.QueryOrdered, nameof(OrderedQueryAsync), nreplies, QueryTimeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();

    /// <summary>As <see cref="OrderedQueryAsync{TReply}(int, int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the query itself still completes or times out).</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task<IReadOnlyList<TReply>> OrderedQueryAsync<TReply>(int nreplies, int opcode, object?[] args, CancellationToken cancellationToken) =>
        StopWaitingWhenCancelled(OrderedQueryAsync<TReply>(nreplies, opcode, args), cancellationToken);

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with the request delivered in CausalSend's causal order.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<TReply>> CausalQueryAsync<TReply>(int nreplies, int opcode, params object?[] args) =>
        (await QueryCore(MessageKind.QueryCausal, nameof(CausalQueryAsync), nreplies, QueryTimeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();

    /// <summary>As <see cref="CausalQueryAsync{TReply}(int, int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the query itself still completes or times out).</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task<IReadOnlyList<TReply>> CausalQueryAsync<TReply>(int nreplies, int opcode, object?[] args, CancellationToken cancellationToken) =>
        StopWaitingWhenCancelled(CausalQueryAsync<TReply>(nreplies, opcode, args), cancellationToken);

    /// <summary>
    /// Queries one member: the request goes to <paramref name="member"/> only (FIFO with this
    /// member's Sends, as a P2PSend), and its handler's single reply value is returned. The group's
    /// <see cref="QueryTimeout"/> applies; if the member fails or leaves before answering, the query
    /// fails with a <see cref="QueryTimeoutException"/> naming it.
    /// </summary>
    /// <typeparam name="TReply">The type of the value the member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="member">The member that answers: in the current view.</param>
    /// <param name="opcode">The request code whose handler answers.</param>
    /// <param name="args">The request's arguments.</param>
    /// <exception cref="ArgumentException"><paramref name="member"/> is not in the current view.</exception>
    /// <exception cref="QueryAbortedException">The member answered with <see cref="AbortReply"/>.</exception>
    public Task<TReply> P2PQueryAsync<TReply>(Address member, int opcode, params object?[] args) =>
        // The destination is checked before the call returns: a wrong one is the caller's mistake, not the query's outcome.
        P2PQueryCore<TReply>(member, QueryCore(MessageKind.QuerySubset, nameof(P2PQueryAsync), 1, QueryTimeout, opcode, args, Destinations(nameof(P2PQueryAsync), [member])));

    private static async Task<TReply> P2PQueryCore<TReply>(Address member, Task<IReadOnlyList<QueryReply>> query)
    {
        IReadOnlyList<QueryReply> replies = await query.ConfigureAwait(false);
        if (replies.Count == 0)
        {
            throw new QueryTimeoutException($"{member} left the view (or answered with NullReply) before answering the P2PQuery.", [member]);
        }
        return (TReply)Values(replies[0], [typeof(TReply)])[0]!;
    }

    /// <summary>The blocking form of <see cref="P2PQueryAsync{TReply}"/> (not from a handler of this group: its reply could not run).</summary>
    /// <typeparam name="TReply">The type of the value the member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="member">The member that answers: in the current view.</param>
    /// <param name="opcode">The request code whose handler answers.</param>
    /// <param name="args">The request's arguments.</param>
    /// <returns>The member's reply value.</returns>
    /// <exception cref="ArgumentException"><paramref name="member"/> is not in the current view.</exception>
    /// <exception cref="QueryAbortedException">The member answered with <see cref="AbortReply"/>.</exception>
    /// <exception cref="QueryTimeoutException">It did not answer within the group's <see cref="QueryTimeout"/>, or left the view first.</exception>
    public TReply P2PQuery<TReply>(Address member, int opcode, params object?[] args)
    {
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, nameof(P2PQuery));
        return P2PQueryAsync<TReply>(member, opcode, args).GetAwaiter().GetResult();
    }

    /// <summary>Answers the query whose request this handler is handling. Call it once, from the handler.</summary>
    /// <param name="values">The reply values.</param>
    /// <exception cref="InvalidOperationException">Not inside a handler of a query of this group, or it already replied.</exception>
    public void Reply(params object?[] values) => SendReply(ReplyKind.Values, EncodeToArray(0, values), nameof(Reply));

    /// <summary>Answers the current query with no value: the requester counts the answer but gets nothing from it.</summary>
    /// <exception cref="InvalidOperationException">Not inside a handler of a query of this group, or it already replied.</exception>
    public void NullReply() => SendReply(ReplyKind.Null, [], nameof(NullReply));

    /// <summary>Answers the current query by aborting it: the requester's call throws a <see cref="QueryAbortedException"/> with <paramref name="reason"/>.</summary>
    /// <param name="reason">Why, for the requester.</param>
    /// <exception cref="InvalidOperationException">Not inside a handler of a query of this group, or it already replied.</exception>
    public void AbortReply(string reason) => SendReply(ReplyKind.Abort, System.Text.Encoding.UTF8.GetBytes(reason ?? ""), nameof(AbortReply));

    /// <summary>
    /// Takes the answer to the query this handler is handling, to give it later from any thread:
    /// the handler may return at once and start asynchronous work (a database call, a call to
    /// another group), then answer through the returned handle. The query's timeout and failure
    /// rules still apply; the handler no longer sends a null reply when it returns.
    /// </summary>
    /// <returns>The handle that answers the query, once.</returns>
    /// <exception cref="InvalidOperationException">Not inside a handler of a query of this group, or the handler already replied or deferred.</exception>
    public DeferredReply DeferReply()
    {
        var q = CurrentQuery(nameof(DeferReply));
        _currentQuery = q with { Replied = true };
        return new DeferredReply(this, q.Requester, q.QueryId, q.ViewId, q.Replayed);
    }

    private void SendReply(ReplyKind kind, byte[] payload, string operation)
    {
        var q = CurrentQuery(operation);
        _currentQuery = q with { Replied = true };
        RememberClientReply(kind, payload);
        if (q.Replayed) return; // a SafeQuery of the history, replayed: its requester stopped waiting long ago
        EventLoop loop = _runtime.RunningLoop();
        loop.Post(() => loop.Node.Reply(Id, q.Requester, q.QueryId, kind, payload, loop.Now));
    }

    private (NodeId Requester, long QueryId, int ViewId, bool Replied, bool Replayed) CurrentQuery(string operation)
    {
        if (_delivery?.IsCurrentThread != true || _currentQuery is not { } q)
        {
            throw new InvalidOperationException($"{operation} answers a query, so it must be called from a handler of group '{Name}' while it handles a Query request; this call is outside one. To answer later, call DeferReply() in the handler and answer through the handle it returns.");
        }
        if (q.Replied) throw new InvalidOperationException($"This handler already answered or deferred the query; a member replies once ({operation} called after that). Answer a deferred query through its DeferredReply.");
        return q;
    }

    internal byte[] EncodeReplyValues(object?[]? values) => EncodeToArray(0, values);

    /// <summary>A deferred answer, from any thread. False if this member is no longer in the group, so nobody waits for it.</summary>
    internal bool SendDeferredReply(NodeId requester, long queryId, ReplyKind kind, byte[] payload)
    {
        if (_state is not (GroupState.Joining or GroupState.Joined)) return false;
        EventLoop loop = _runtime.RunningLoop();
        loop.Post(() => loop.Node.Reply(Id, requester, queryId, kind, payload, loop.Now));
        return true;
    }

    private int QueryIsis2(MessageKind kind, string operation, int nreplies, object?[]? all)
    {
        all ??= [];
        int at = 0;
        QueryTimeout timeout = QueryTimeout;
        if (at < all.Length && all[at] is QueryTimeout t) { timeout = t; at++; }
        if (at >= all.Length || all[at] is not int opcode)
        {
            throw new ArgumentException($"{operation}: after the reply count (and an optional QueryTimeout) comes the request code (an int), then the arguments, new EOLMarker(), and the reply lists.");
        }
        at++;
        int eol = Array.FindIndex(all, at, a => a is EOLMarker);
        if (eol < 0) throw new ArgumentException($"{operation}: end the request arguments with new EOLMarker(), then pass one List<T> per reply value.");
        object?[] args = all[at..eol];
        var lists = new List<System.Collections.IList>();
        var elementTypes = new List<Type>();
        foreach (object? l in all[(eol + 1)..])
        {
            if (l is not System.Collections.IList list || l.GetType() is not { IsGenericType: true } lt || lt.GetGenericTypeDefinition() != typeof(List<>))
            {
                throw new ArgumentException($"{operation}: after new EOLMarker() pass only reply lists (List<T>), one per reply value; got {l?.GetType().Name ?? "null"}.");
            }
            lists.Add(list);
            elementTypes.Add(l.GetType().GetGenericArguments()[0]);
        }
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, operation);
        IReadOnlyList<QueryReply> replies = QueryCore(kind, operation, nreplies, timeout, opcode, args).GetAwaiter().GetResult();
        foreach (QueryReply r in replies)
        {
            object?[] values = Values(r, [.. elementTypes]);
            for (int i = 0; i < lists.Count; i++) lists[i].Add(values[i]);
        }
        return replies.Count;
    }

    /// <summary>Issues the query; completes with the replies that carry values.</summary>
    private Task<IReadOnlyList<QueryReply>> QueryCore(MessageKind kind, string operation, int nreplies, QueryTimeout timeout, int opcode, object?[]? args, NodeId[]? to = null)
    {
        if (nreplies <= 0 && nreplies != ALL && nreplies != MAJORITY)
        {
            throw new ArgumentOutOfRangeException(nameof(nreplies), nreplies,
                $"{operation} needs a positive number of replies, Group.ALL or Group.MAJORITY.");
        }
        ArgumentNullException.ThrowIfNull(timeout);
        EventLoop loop = _runtime.RunningLoop();
        if (_state is not (GroupState.Joining or GroupState.Joined)) throw NotJoinedError(operation);
        byte[] payload = EncodeToArray(opcode, args);
        if (payload.Length > _runtime.Options.MaxMessageSize) throw ExceptionFactory.MessageTooLarge(payload.Length, _runtime.Options.MaxMessageSize);
        if (kind == MessageKind.QuerySafe) CheckLogBound(8 + payload.Length); // a SafeQuery joins the durable history as a SafeSend does
        long id = Interlocked.Increment(ref _nextQueryId);
        var done = new TaskCompletionSource<IReadOnlyList<QueryReply>>(TaskCreationOptions.RunContinuationsAsynchronously);
        _queries[id] = done;
        var action = (Core.Groups.QueryTimeoutAction)timeout.Action;
        long micros = (long)timeout.After.TotalMicroseconds;
        WaitForWindow();
        Interlocked.Increment(ref _queuedSends.Value);
        loop.Post(() =>
        {
            Interlocked.Decrement(ref _queuedSends.Value);
            loop.CountSent();
            loop.Node.Query(Id, id, kind, payload, nreplies, micros, action, loop.Now, kind == MessageKind.QuerySafe ? _safeThreshold : 0, to);
        });
        IsisInstruments.Time(_runtime.Instruments.QueryDuration, done.Task, Name);
        using (Activity? a = _runtime.Instruments.Activities.StartActivity("isis.query"))
        {
            a?.SetTag("isis.group", Name);
            a?.SetTag("isis.opcode", opcode);
        }
        return done.Task;
    }

    /// <summary>The reply's values, checked against the types the caller expects.</summary>
    internal static object?[] Values(QueryReply reply, Type[] types)
    {
        if (!ArgumentCodec.TryReadHeader(reply.Payload, out _, out EncodedArguments args, out string? error))
        {
            throw new IsisException($"The reply from {reply.Replier} is malformed: {error}.");
        }
        if (args.Count != types.Length)
        {
            throw new IsisException($"The reply from {reply.Replier} carried {args.DescribeTypes()} but the caller expects {ArgumentCodec.DescribeTypes(types)}; make Reply's values match the query's reply types.");
        }
        var values = new object?[types.Length];
        for (int i = 0; i < types.Length; i++)
        {
            if (!args.TryMaterialize(i, types[i], out values[i], out string? why))
            {
                throw new IsisException($"The reply from {reply.Replier} carried {args.DescribeTypes()} but the caller expects {ArgumentCodec.DescribeTypes(types)}: {why}");
            }
        }
        return values;
    }

    internal void OnQueryCompleted(QueryCompleted q)
    {
        if (!_queries.TryRemove(q.QueryId, out var done)) return;
        switch (q.Outcome)
        {
            case QueryOutcome.Completed:
                done.TrySetResult(q.Replies.Where(r => r.Kind == ReplyKind.Values).ToList());
                break;
            case QueryOutcome.Aborted:
                QueryReply abort = q.Replies.First(r => r.Kind == ReplyKind.Abort);
                string reason = System.Text.Encoding.UTF8.GetString(abort.Payload);
                done.TrySetException(new QueryAbortedException($"Member {abort.Replier} aborted the query: {reason}", new Address(abort.Replier), reason));
                break;
            default:
                var missing = Array.ConvertAll(q.Missing, n => new Address(n));
                done.TrySetException(new QueryTimeoutException(
                    $"The query timed out without replies from {(missing.Length == 0 ? "the members it waited for" : string.Join(", ", (object[])missing))}; " +
                    "raise the timeout, or choose QueryTimeoutAction.NullReply or ExpelSlowMembers.", missing));
                break;
        }
    }
}
