using System.Collections.Concurrent;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Diagnostics;
using Isis.Dispatch;
using Isis.Runtime;
using Isis.Serialization;
using Microsoft.Extensions.Logging;

namespace Isis;

/// <summary>
/// A process group: register handlers, <see cref="Join"/>, then multicast with <see cref="Send"/>.
/// Every member installs the same sequence of views, and between two views all surviving members
/// deliver the same messages; each sender's messages arrive in the order it sent them.
/// </summary>
/// <remarks>
/// Handlers and view handlers run on this group's delivery thread, one at a time, in delivery
/// order. Register handlers before <see cref="Join"/> so that no message finds the group without them.
/// </remarks>
public sealed class Group
{
    /// <summary>Reply count meaning "every member of the view in which the request is delivered" (members that fail or leave are not waited for).</summary>
    public const int ALL = -1;

    /// <summary>Reply count meaning "a majority of the view in which the request is delivered".</summary>
    public const int MAJORITY = -2;

    private readonly IsisRuntime _runtime;
    private readonly object _gate = new();
    private readonly ManualResetEventSlim _windowOpen = new(true);
    private GroupState _state = GroupState.New;
    private TaskCompletionSource? _joined;
    private TaskCompletionSource? _left;
    private DeliveryThread? _delivery;
    private volatile View? _view;
    private long _queuedSends;
    private long _window;
    private long _nextFlushToken;
    private long _nextQueryId;
    private int _safeThreshold; // 0 = every member of the view
    private SafeSendDurability _durability = SafeSendDurability.Memory;
    private string? _logDirectory;
    private TimeSpan _replayAfter;
    private List<(int Phi, byte[] Payload)>? _replay;
    private readonly ConcurrentQueue<TaskCompletionSource> _safeSends = new();
    private readonly ConcurrentDictionary<long, TaskCompletionSource<IReadOnlyList<QueryReply>>> _queries = new();

    // The query whose request the delivery thread is handling now (null otherwise): what Reply answers.
    private (NodeId Requester, long QueryId, bool Replied)? _currentQuery;
    private readonly ConcurrentDictionary<long, TaskCompletionSource> _flushes = new();

    private enum GroupState { New, Joining, Joined, Leaving, Left }

    /// <summary>Creates a group handle in the default runtime (<see cref="IsisSystem"/>).</summary>
    /// <param name="name">The group's name: processes that join the same name form one group.</param>
    public Group(string name) : this(IsisSystem.Runtime, name)
    {
    }

    /// <summary>Creates a group handle in <paramref name="runtime"/>.</summary>
    /// <param name="runtime">The runtime this process uses.</param>
    /// <param name="name">The group's name: processes that join the same name form one group.</param>
    public Group(IsisRuntime runtime, string name)
    {
        ArgumentNullException.ThrowIfNull(runtime);
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        _runtime = runtime;
        Name = name;
        Id = GroupId.FromName(name);
    }

    /// <summary>The group's name.</summary>
    public string Name { get; }

    internal GroupId Id { get; }

    /// <summary>Message handlers by request code: <c>g.Handlers[CODE] += (Action&lt;string, int&gt;)((s, n) => ...)</c>.</summary>
    public HandlerCollection Handlers { get; } = new();

    /// <summary>View handlers: <c>g.ViewHandlers += (ViewHandler)(v => ...)</c>.</summary>
    public ViewHandlerList ViewHandlers
    {
        get => _viewHandlers;
        set
        {
            ArgumentNullException.ThrowIfNull(value);
            if (!ReferenceEquals(value, _viewHandlers))
            {
                throw new InvalidOperationException("ViewHandlers can only be extended with += or reduced with -=.");
            }
        }
    }

    private readonly ViewHandlerList _viewHandlers = new();

    /// <summary>
    /// When a handler throws, this member leaves the group, because its replica may now differ
    /// from the others. Set to false to log the exception and keep going. Defaults to true.
    /// </summary>
    public bool LeaveOnHandlerException { get; set; } = true;

    /// <summary>
    /// Raised (on the delivery thread) for a message that matched no handler: the arguments'
    /// types did not fit any handler of its request code, or nothing is registered for that code.
    /// Every member makes the same decision, so replicas stay identical.
    /// </summary>
    public event EventHandler<UndeliverableMessageEventArgs>? Undeliverable;

    /// <summary>The current view, or null before the first view is installed.</summary>
    public View? GetView() => _view;

    // ---------------------------------------------------------------- join and leave

    /// <summary>Joins the group; returns once the first view containing this process is installed.</summary>
    /// <exception cref="IsisException">The group is already joined, or the runtime is not running.</exception>
    public void Join()
    {
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, nameof(Join));
        JoinAsync().GetAwaiter().GetResult();
    }

    /// <summary>Joins the group; completes once the first view containing this process is installed.</summary>
    /// <param name="cancellationToken">Stops waiting (the join itself goes on).</param>
    public Task JoinAsync(CancellationToken cancellationToken = default)
    {
        EventLoop loop = _runtime.RunningLoop();
        TaskCompletionSource joined;
        lock (_gate)
        {
            if (_state == GroupState.Left) throw ExceptionFactory.RejoinAfterLeave(Name);
            if (_state != GroupState.New) throw ExceptionFactory.AlreadyJoined(Name);
            _runtime.Register(this);
            if (_durability == SafeSendDurability.Disk) OpenSafeSendLog();
            _state = GroupState.Joining;
            _joined = joined = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            _delivery = new DeliveryThread(Name);
        }
        bool disk = _durability == SafeSendDurability.Disk;
        loop.Post(() => loop.Node.Join(Name, loop.Now, disk));
        return joined.Task.WaitAsync(cancellationToken);
    }

    /// <summary>Leaves the group; returns once the membership service has installed a view without this process.</summary>
    public void Leave()
    {
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, nameof(Leave));
        LeaveAsync().GetAwaiter().GetResult();
    }

    /// <summary>Leaves the group; completes once the membership service has installed a view without this process.</summary>
    /// <param name="cancellationToken">Stops waiting (the leave itself goes on).</param>
    public Task LeaveAsync(CancellationToken cancellationToken = default)
    {
        EventLoop loop = _runtime.RunningLoop();
        TaskCompletionSource left;
        lock (_gate)
        {
            if (_state is GroupState.Leaving or GroupState.Left) return _left!.Task.WaitAsync(cancellationToken);
            if (_state == GroupState.New) throw ExceptionFactory.NotJoined(Name, nameof(Leave));
            _state = GroupState.Leaving;
            _left = left = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        loop.Post(() => loop.Node.Leave(Id, loop.Now));
        return left.Task.WaitAsync(cancellationToken);
    }

    // ---------------------------------------------------------------- Send

    /// <summary>
    /// Multicasts a message to the group: FIFO from this sender, delivered here at once (no network
    /// wait), non-durable (if this process and every process that received it fail, it may be
    /// lost). The arguments must match the parameter types of a handler registered for <paramref name="opcode"/>.
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    /// <remarks>Blocks while this member has <see cref="IsisOptions.MaxUnstableMessages"/> messages not yet stable (flow control).</remarks>
    public void Send(int opcode, params object?[] args) => Multicast(MessageKind.Send, nameof(Send), opcode, args);

    /// <summary>
    /// Multicasts a message in one total order across all senders of the group, consistent with each
    /// sender's own order: every member delivers all OrderedSends of a view in the same sequence.
    /// Non-durable like <see cref="Send"/>. Not delivered here at once: it waits for its place in the
    /// order (set by the oldest member of the view).
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    /// <remarks>Blocks while this member has <see cref="IsisOptions.MaxUnstableMessages"/> messages not yet stable (flow control).</remarks>
    public void OrderedSend(int opcode, params object?[] args) => Multicast(MessageKind.Ordered, nameof(OrderedSend), opcode, args);

    // ---------------------------------------------------------------- SafeSend

    /// <summary>
    /// Sets phi, the number of acceptors (the first phi members of the view) that must hold a
    /// SafeSend before any member delivers it. Defaults to every member. A SafeSend delivered
    /// anywhere is delivered by every member that survives into the next view, even if its sender
    /// and up to phi-1 acceptors crash.
    /// </summary>
    /// <param name="phi">At least 1, and at most the number of members when the SafeSend is issued.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="phi"/> is below 1, or above the current view's size.</exception>
    public void SetSafeSendThreshold(int phi)
    {
        if (phi < 1) throw new ArgumentOutOfRangeException(nameof(phi), phi, "The SafeSend threshold is a number of acceptors: at least 1.");
        if (_view is { } v && phi > v.Members.Length) throw ExceptionFactory.ThresholdAboveGroupSize(Name, phi, v.Members.Length);
        _safeThreshold = phi;
    }

    /// <summary>
    /// Chooses where this member, as a SafeSend acceptor, keeps what it acknowledges. Call before
    /// <see cref="Join"/>. With <see cref="SafeSendDurability.Disk"/>, acknowledged SafeSends
    /// survive a crash of every member, and are delivered again when the group is formed anew.
    /// </summary>
    /// <param name="durability">Memory (the default) or Disk.</param>
    /// <param name="directory">For Disk: a directory of this member's own (each member needs its own); created if missing.</param>
    /// <param name="replayAfter">
    /// For Disk: how long a member that founds the group again waits before replaying its log, so
    /// that the other restarted members can join and receive the replay (members joining later get
    /// the group's state by state transfer, not by the replay). Defaults to 2 seconds.
    /// </param>
    /// <exception cref="InvalidOperationException">The group is already joined.</exception>
    /// <exception cref="ArgumentException">Disk without a directory.</exception>
    public void SetSafeSendDurability(SafeSendDurability durability, string? directory = null, TimeSpan? replayAfter = null)
    {
        lock (_gate)
        {
            if (_state != GroupState.New) throw new InvalidOperationException($"Set the SafeSend durability of group '{Name}' before Join().");
            if (durability == SafeSendDurability.Disk && string.IsNullOrWhiteSpace(directory))
            {
                throw new ArgumentException("Disk durability needs a directory of this member's own, for example Path.Combine(dataRoot, memberName).", nameof(directory));
            }
            _durability = durability;
            _logDirectory = directory;
            _replayAfter = replayAfter ?? TimeSpan.FromSeconds(2);
        }
    }

    /// <summary>This member's acceptor log, with disk durability (written by the event loop).</summary>
    internal SafeSendLog? SafeSendLog { get; private set; }

    private string LogPath(string suffix) =>
        Path.Combine(_logDirectory!, string.Concat(Name.Select(c => char.IsLetterOrDigit(c) || c is '-' or '_' ? c : '_')) + suffix);

    /// <summary>
    /// Before joining with disk durability: what the last incarnation logged becomes the replay
    /// source (kept until replayed), and a fresh log starts.
    /// </summary>
    private void OpenSafeSendLog()
    {
        Directory.CreateDirectory(_logDirectory!);
        string log = LogPath(".safelog"), replay = LogPath(".safelog.replay");
        if (File.Exists(log))
        {
            // An unfinished earlier replay stays the source; otherwise the last log becomes it.
            if (!File.Exists(replay)) File.Move(log, replay);
            else File.Delete(log);
        }
        _replay = SafeSendLog.Read(replay);
        SafeSendLog = new SafeSendLog(log);
    }

    /// <summary>
    /// On the first view: if this member founds the group (it is alone in its first view: every
    /// earlier member is gone), the group's history restarts from its log; otherwise the running
    /// group already has it.
    /// </summary>
    private void MaybeReplay(View first)
    {
        List<(int Phi, byte[] Payload)>? replay = _replay;
        _replay = null;
        if (replay == null) return;
        string source = LogPath(".safelog.replay");
        if (first.Members.Length != 1 || replay.Count == 0)
        {
            File.Delete(source);
            return;
        }
        // Off the event loop: sending waits on flow control like any caller.
        _ = Task.Run(async () =>
        {
            await Task.Delay(_replayAfter).ConfigureAwait(false); // let the other restarted members join first
            var sent = new List<Task>(replay.Count);
            foreach (var (_, payload) in replay) sent.Add(SafeSendPayload(payload, nameof(SafeSend)));
            await Task.WhenAll(sent).ConfigureAwait(false);
            File.Delete(source); // replayed and acknowledged again: the new log holds them now
        });
    }

    /// <summary>
    /// Multicasts a durable message: in the same total order as OrderedSend, and no member delivers
    /// it until its acceptors (see <see cref="SetSafeSendThreshold"/>) all hold it. Returns once it
    /// is delivered here, so it is durable when this call returns.
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, the message is too large, or the threshold exceeds the group's size.</exception>
    public void SafeSend(int opcode, params object?[] args) => SafeSendAsync(opcode, args).GetAwaiter().GetResult();

    /// <summary>The asynchronous form of <see cref="SafeSend"/>: completes when the message is delivered here.</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <remarks>To stop waiting, use <c>WaitAsync(cancellationToken)</c> on the task; the message is still delivered.</remarks>
    public Task SafeSendAsync(int opcode, params object?[] args)
    {
        CheckThreshold();
        return SafeSendPayload(ArgumentCodec.Encode(opcode, args ?? [null]), nameof(SafeSend));
    }

    /// <summary>As <see cref="SafeSendAsync(int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the message is still delivered).</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task SafeSendAsync(int opcode, object?[] args, CancellationToken cancellationToken) =>
        SafeSendAsync(opcode, args).WaitAsync(cancellationToken);

    private Task SafeSendPayload(byte[] payload, string operation)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        // Our SafeSends are delivered here in the order we issue them (FIFO, resends included), so
        // a queue pairs each delivery with its caller. Enqueue under the same order as the posts.
        lock (_safeSends)
        {
            _safeSends.Enqueue(done);
            MulticastPayload(MessageKind.Safe, operation, payload, _safeThreshold);
        }
        return done.Task;
    }

    /// <summary>As <see cref="Query(int, object[])"/>, with the request delivered as a SafeSend.</summary>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="requestAndReplyLists">Optionally a <see cref="Isis.QueryTimeout"/>, then the request code, its arguments, an <see cref="EOLMarker"/>, and one <c>List&lt;T&gt;</c> per reply value.</param>
    public int SafeQuery(int nreplies, params object?[] requestAndReplyLists)
    {
        CheckThreshold();
        return QueryIsis2(MessageKind.QuerySafe, nameof(SafeQuery), nreplies, requestAndReplyLists);
    }

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with the request delivered as a SafeSend.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<TReply>> SafeQueryAsync<TReply>(int nreplies, int opcode, params object?[] args)
    {
        CheckThreshold();
        return (await QueryCore(MessageKind.QuerySafe, nameof(SafeQueryAsync), nreplies, QueryTimeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();
    }

    private void CheckThreshold()
    {
        if (_safeThreshold > 0 && _view is { } v && _safeThreshold > v.Members.Length)
        {
            throw ExceptionFactory.ThresholdAboveGroupSize(Name, _safeThreshold, v.Members.Length);
        }
    }

    /// <summary>One of our SafeSends was delivered here (event loop).</summary>
    internal void OnOwnSafeDelivered()
    {
        if (_safeSends.TryDequeue(out TaskCompletionSource? done)) done.TrySetResult();
    }

    // ---------------------------------------------------------------- Flush

    /// <summary>
    /// Waits until every Send and OrderedSend this member issued earlier in this group is held by
    /// all members of the current view (or was settled by a view change), so it survives this
    /// member's crash. Call it before answering an outside client after cheap updates.
    /// </summary>
    /// <exception cref="IsisException">The group is not joined (for example after Leave), or the runtime shut down.</exception>
    public void Flush() => FlushAsync(0, CancellationToken.None).GetAwaiter().GetResult();

    /// <summary>
    /// Waits until every Send and OrderedSend this member issued earlier in this group is held by
    /// at least <paramref name="k"/> members of the current view (this one included), or was
    /// settled by a view change.
    /// </summary>
    /// <param name="k">How many members must hold each message; values above the view size mean all.</param>
    public void Flush(int k) => FlushAsync(k, CancellationToken.None).GetAwaiter().GetResult();

    /// <summary>The asynchronous form of <see cref="Flush()"/>.</summary>
    /// <param name="cancellationToken">Stops waiting (the messages are still sent and delivered).</param>
    public Task FlushAsync(CancellationToken cancellationToken = default) => FlushAsync(0, cancellationToken);

    /// <summary>The asynchronous form of <see cref="Flush(int)"/>.</summary>
    /// <param name="k">How many members must hold each message; values above the view size mean all.</param>
    /// <param name="cancellationToken">Stops waiting (the messages are still sent and delivered).</param>
    public Task FlushAsync(int k, CancellationToken cancellationToken = default)
    {
        if (k < 0) throw new ArgumentOutOfRangeException(nameof(k), k, "Flush(k) needs k >= 1 members (or 0 for all).");
        EventLoop loop = _runtime.RunningLoop();
        if (_state is not (GroupState.Joining or GroupState.Joined)) throw ExceptionFactory.NotJoined(Name, nameof(Flush));
        long token = Interlocked.Increment(ref _nextFlushToken);
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _flushes[token] = done;
        loop.Post(() => loop.Node.Flush(Id, token, k, loop.Now));
        return done.Task.WaitAsync(cancellationToken);
    }

    internal void OnFlushCompleted(long token)
    {
        if (_flushes.TryRemove(token, out TaskCompletionSource? done)) done.TrySetResult();
    }

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
        QueryAsync<TReply>(nreplies, opcode, args).WaitAsync(cancellationToken);

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with a timeout for this call.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="timeout">How long to wait and what a slow member means.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<TReply>> QueryAsync<TReply>(int nreplies, QueryTimeout timeout, int opcode, params object?[] args) =>
        (await QueryCore(MessageKind.QuerySend, nameof(QueryAsync), nreplies, timeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();

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

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with the request delivered in OrderedSend's total order.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<TReply>> OrderedQueryAsync<TReply>(int nreplies, int opcode, params object?[] args) =>
        (await QueryCore(MessageKind.QueryOrdered, nameof(OrderedQueryAsync), nreplies, QueryTimeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();

    /// <summary>Answers the query whose request this handler is handling. Call it once, from the handler.</summary>
    /// <param name="values">The reply values.</param>
    /// <exception cref="InvalidOperationException">Not inside a handler of a query of this group, or it already replied.</exception>
    public void Reply(params object?[] values) => SendReply(ReplyKind.Values, ArgumentCodec.Encode(0, values ?? [null]), nameof(Reply));

    /// <summary>Answers the current query with no value: the requester counts the answer but gets nothing from it.</summary>
    /// <exception cref="InvalidOperationException">Not inside a handler of a query of this group, or it already replied.</exception>
    public void NullReply() => SendReply(ReplyKind.Null, [], nameof(NullReply));

    /// <summary>Answers the current query by aborting it: the requester's call throws a <see cref="QueryAbortedException"/> with <paramref name="reason"/>.</summary>
    /// <param name="reason">Why, for the requester.</param>
    /// <exception cref="InvalidOperationException">Not inside a handler of a query of this group, or it already replied.</exception>
    public void AbortReply(string reason) => SendReply(ReplyKind.Abort, System.Text.Encoding.UTF8.GetBytes(reason ?? ""), nameof(AbortReply));

    private void SendReply(ReplyKind kind, byte[] payload, string operation)
    {
        if (_delivery?.IsCurrentThread != true || _currentQuery is not { } q)
        {
            throw new InvalidOperationException($"{operation} answers a query, so it must be called from a handler of group '{Name}' while it handles a Query request; this call is outside one.");
        }
        if (q.Replied) throw new InvalidOperationException($"This handler already answered the query; a member replies once ({operation} called again).");
        _currentQuery = q with { Replied = true };
        EventLoop loop = _runtime.RunningLoop();
        loop.Post(() => loop.Node.Reply(Id, q.Requester, q.QueryId, kind, payload, loop.Now));
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
    private Task<IReadOnlyList<QueryReply>> QueryCore(MessageKind kind, string operation, int nreplies, QueryTimeout timeout, int opcode, object?[]? args)
    {
        if (nreplies <= 0 && nreplies != ALL && nreplies != MAJORITY)
        {
            throw new ArgumentOutOfRangeException(nameof(nreplies), nreplies,
                $"{operation} needs a positive number of replies, Group.ALL or Group.MAJORITY.");
        }
        ArgumentNullException.ThrowIfNull(timeout);
        EventLoop loop = _runtime.RunningLoop();
        if (_state is not (GroupState.Joining or GroupState.Joined)) throw ExceptionFactory.NotJoined(Name, operation);
        byte[] payload = ArgumentCodec.Encode(opcode, args ?? [null]);
        if (payload.Length > _runtime.Options.MaxMessageSize) throw ExceptionFactory.MessageTooLarge(payload.Length, _runtime.Options.MaxMessageSize);
        long id = Interlocked.Increment(ref _nextQueryId);
        var done = new TaskCompletionSource<IReadOnlyList<QueryReply>>(TaskCreationOptions.RunContinuationsAsynchronously);
        _queries[id] = done;
        var action = (Core.Groups.QueryTimeoutAction)timeout.Action;
        long micros = (long)timeout.After.TotalMicroseconds;
        WaitForWindow();
        Interlocked.Increment(ref _queuedSends);
        loop.Post(() =>
        {
            Interlocked.Decrement(ref _queuedSends);
            loop.Node.Query(Id, id, kind, payload, nreplies, micros, action, loop.Now, kind == MessageKind.QuerySafe ? _safeThreshold : 0);
        });
        return done.Task;
    }

    /// <summary>The reply's values, checked against the types the caller expects.</summary>
    private static object?[] Values(QueryReply reply, Type[] types)
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

    private void Multicast(MessageKind kind, string operation, int opcode, object?[]? args, int phi = 0) =>
        MulticastPayload(kind, operation, ArgumentCodec.Encode(opcode, args ?? [null]), phi);

    private void MulticastPayload(MessageKind kind, string operation, byte[] payload, int phi)
    {
        EventLoop loop = _runtime.RunningLoop();
        if (_state is not (GroupState.Joining or GroupState.Joined)) throw ExceptionFactory.NotJoined(Name, operation);
        if (payload.Length > _runtime.Options.MaxMessageSize) throw ExceptionFactory.MessageTooLarge(payload.Length, _runtime.Options.MaxMessageSize);
        WaitForWindow();
        Interlocked.Increment(ref _queuedSends);
        loop.Post(() =>
        {
            Interlocked.Decrement(ref _queuedSends);
            loop.Node.Send(Id, payload, loop.Now, kind, phi);
        });
    }

    private void WaitForWindow()
    {
        int limit = _runtime.Options.MaxUnstableMessages;
        while (Interlocked.Read(ref _queuedSends) + Interlocked.Read(ref _window) >= limit)
        {
            // A handler of this group blocking here would hold up nothing the window needs
            // (stability advances on the event loop), so waiting is safe on any thread.
            _windowOpen.Reset();
            if (Interlocked.Read(ref _queuedSends) + Interlocked.Read(ref _window) < limit) break;
            _windowOpen.Wait(TimeSpan.FromMilliseconds(50));
            _runtime.RunningLoop();
        }
    }

    // ---------------------------------------------------------------- called on the event loop

    /// <summary>Publishes how many of our messages are not yet stable; wakes blocked senders.</summary>
    internal void PublishWindow(GroupMember? member)
    {
        long window = member == null ? 0 : member.UnstableOwnMessages + member.PendingSends;
        Interlocked.Exchange(ref _window, window);
        if (window + Interlocked.Read(ref _queuedSends) < _runtime.Options.MaxUnstableMessages) _windowOpen.Set();
    }

    internal void OnViewInstalled(GroupView core)
    {
        var view = new View(core, _runtime.Address!, Name);
        bool first = _view == null;
        _view = view;
        lock (_gate)
        {
            if (_state == GroupState.Joining) _state = GroupState.Joined;
        }
        if (first) MaybeReplay(view);
        Log.ViewInstalled(_runtime.Logger, Name, view.ToString());
        _delivery!.Enqueue(() =>
        {
            foreach (ViewHandler handler in _viewHandlers.Snapshot)
            {
                try
                {
                    handler(view);
                }
                catch (Exception e)
                {
                    OnHandlerException(e);
                }
            }
        });
        // Complete the join after the view handlers saw the view, so Join() returning means the
        // application has observed its first view.
        _delivery.Enqueue(() => _joined?.TrySetResult());
    }

    internal void OnDelivered(NodeId sender, MessageKind kind, ReadOnlyMemory<byte> payload)
    {
        if (kind.IsQuery())
        {
            long queryId = MessageKinds.QueryIdOf(payload.Span);
            _delivery!.Enqueue(() => DispatchQuery(sender, queryId, payload[8..]));
        }
        else
        {
            _delivery!.Enqueue(() => Dispatch(sender, payload));
        }
    }

    /// <summary>Runs the handlers of a query request with Reply bound to it; a handler that did not answer sends a null reply, so no requester waits forever.</summary>
    private void DispatchQuery(NodeId requester, long queryId, ReadOnlyMemory<byte> payload)
    {
        _currentQuery = (requester, queryId, false);
        try
        {
            Dispatch(requester, payload);
            if (_currentQuery is { Replied: false } && _runtime.IsRunning) NullReply();
        }
        finally
        {
            _currentQuery = null;
        }
    }

    private void Dispatch(NodeId sender, ReadOnlyMemory<byte> payload)
    {
        DispatchResult result = Handlers.Table.Dispatch(payload.Span);
        switch (result.Outcome)
        {
            case DispatchOutcome.Invoked:
                return;
            case DispatchOutcome.HandlerThrew:
                OnHandlerException(result.Exception!);
                return;
            default:
                _runtime.CountMismatch();
                Log.HandlerMismatch(_runtime.Logger, Name, sender.ToString(), result.Message ?? result.Outcome.ToString());
                Undeliverable?.Invoke(this, new UndeliverableMessageEventArgs(new Address(sender), result.Opcode, result.Message ?? result.Outcome.ToString()));
                return;
        }
    }

    private void OnHandlerException(Exception e)
    {
        _runtime.CountHandlerException();
        bool leave = LeaveOnHandlerException;
        Log.HandlerThrew(_runtime.Logger, e, Name, leave
            ? "this member leaves the group because its replica may now differ (set LeaveOnHandlerException = false to keep going)"
            : "continuing because LeaveOnHandlerException is false");
        if (leave && _runtime.IsRunning)
        {
            try { _ = LeaveAsync(); }
            catch (IsisException) { /* already leaving or shut down */ }
        }
    }

    internal void OnLeft()
    {
        lock (_gate) _state = GroupState.Left;
        SafeSendLog?.Dispose();
        var left = new IsisException($"This member left group '{Name}' before its SafeSend was delivered here; it may or may not have been delivered to the others.");
        while (_safeSends.TryDequeue(out TaskCompletionSource? safe)) safe.TrySetException(left);
        foreach (long token in _flushes.Keys) OnFlushCompleted(token);
        _runtime.Unregister(this);
        _delivery?.Enqueue(() => _left?.TrySetResult());
        _delivery?.Complete();
    }

    /// <summary>The runtime stopped: fail whatever is waiting.</summary>
    internal void OnRuntimeStopped(Exception reason)
    {
        _joined?.TrySetException(reason);
        _left?.TrySetResult(); // the process is out of every group now
        foreach (var (token, done) in _flushes)
        {
            if (_flushes.TryRemove(token, out _)) done.TrySetException(reason);
        }
        foreach (var (id, done) in _queries)
        {
            if (_queries.TryRemove(id, out _)) done.TrySetException(reason);
        }
        while (_safeSends.TryDequeue(out TaskCompletionSource? safe)) safe.TrySetException(reason);
        _windowOpen.Set();
        _delivery?.Complete();
        SafeSendLog?.Dispose();
    }
}

/// <summary>A message that matched no handler.</summary>
public sealed class UndeliverableMessageEventArgs : EventArgs
{
    internal UndeliverableMessageEventArgs(Address sender, int opcode, string reason)
    {
        Sender = sender;
        Opcode = opcode;
        Reason = reason;
    }

    /// <summary>Who sent it.</summary>
    public Address Sender { get; }

    /// <summary>Its request code.</summary>
    public int Opcode { get; }

    /// <summary>Why no handler took it, for example the argument types it carried and the signatures registered.</summary>
    public string Reason { get; }
}
