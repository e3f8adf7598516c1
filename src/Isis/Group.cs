using System.Collections.Concurrent;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Diagnostics;
using Isis.Dispatch;
using Isis.Runtime;
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
public sealed partial class Group
{
    /// <summary>Reply count meaning "every member of the view in which the request is delivered" (members that fail or leave are not waited for).</summary>
    public const int ALL = -1;

    /// <summary>Reply count meaning "a majority of the view in which the request is delivered".</summary>
    public const int MAJORITY = -2;

    private readonly IsisRuntime _runtime;
    private readonly object _gate = new();
    private readonly ManualResetEventSlim _windowOpen = new(true);
    // Asynchronous senders waiting for the window: completed (and cleared) when it opens; they
    // wait in one line (_sendLine), counted in _asyncWaiting so blocking senders queue behind them.
    private volatile TaskCompletionSource? _windowOpened;
    private readonly SemaphoreSlim _sendLine = new(1, 1);
    private long _asyncWaiting;
    private GroupState _state = GroupState.New;
    private bool _terminated;
    private TaskCompletionSource? _joined;
    private TaskCompletionSource? _left;
    private DeliveryThread? _delivery;
    private volatile View? _view;
    private readonly QueuedSendCount _queuedSends = new();
    private long _window;
    private long _nextFlushToken;
    private long _nextQueryId;
    private int _safeThreshold; // 0 = every member of the view
    private SafeSendDurability _durability = SafeSendDurability.Memory;
    private string? _logDirectory;
    private readonly ConcurrentQueue<TaskCompletionSource> _safeSends = new();
    private readonly ConcurrentDictionary<long, TaskCompletionSource<IReadOnlyList<QueryReply>>> _queries = new();

    // The query whose request the delivery thread is handling now (null otherwise): what Reply answers
    // (or DeferReply hands out). A replayed SafeQuery of the durable history takes replies and sends none.
    private (NodeId Requester, long QueryId, int ViewId, bool Replied, bool Replayed)? _currentQuery;
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
        Handlers[ClientRelayCode] += (Action<ulong, uint, long, long, byte[]>)OnRelayedDelivered;
    }

    /// <summary>The group's name.</summary>
    public string Name { get; }

    internal GroupId Id { get; }

    /// <summary>The runtime this group handle belongs to.</summary>
    internal IsisRuntime Runtime => _runtime;

    /// <summary>Told once this member is out of the group (it left, was terminated, or the runtime stopped): libraries on the group (GroupLocks) fail what waits.</summary>
    internal event Action<Exception>? Departed;

    /// <summary>Leave was called (or the group was left or terminated): what depends on staying a member should stop.</summary>
    internal bool IsLeaving => _state is GroupState.Leaving or GroupState.Left;

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

    /// <summary>True from Join until this member leaves the group or its runtime stops.</summary>
    internal bool IsActive => _state is GroupState.Joining or GroupState.Joined && _runtime.IsRunning;

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
        List<byte[]>? historyLog;
        List<Core.Durability.CheckpointMark>? checkpoints;
        bool historyFoundedElsewhere;
        lock (_gate)
        {
            if (_state == GroupState.Left) throw ExceptionFactory.RejoinAfterLeave(Name);
            if (_state != GroupState.New) throw ExceptionFactory.AlreadyJoined(Name);
            // Before anything changes: a machine without a folder for the registry throws here, saying what to set.
            if (_durability == SafeSendDurability.Disk || _checkpointDirectory != null) _registryFolder = _runtime.Options.DurableGroupRegistryFolder;
            _runtime.Register(this);
            historyLog = _durability == SafeSendDurability.Disk ? OpenHistoryLog() : null;
            // A history this machine's processes held: never found another over it (the core waits for its logs).
            historyFoundedElsewhere = _registryFolder != null && (_registryEntry = DurableGroupRegistry.Read(_registryFolder, Name)) != null
                && _durability == SafeSendDurability.Disk;
            checkpoints = OpenCheckpoints();
            _state = GroupState.Joining;
            _joined = joined = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            _delivery = new DeliveryThread(Name, DispatchPending, _runtime.Buffers);
        }
        byte[]? key = _key;
        loop.Post(() =>
        {
            if (key != null) loop.Node.SetGroupKey(Name, key);
            loop.Node.Join(Name, loop.Now, historyLog, historyLog != null ? checkpoints : null, historyFoundedElsewhere);
        });
        return StopWaitingWhenCancelled(joined.Task, cancellationToken);
    }

    /// <summary>Leaves the group; returns once the membership service has installed a view without this process.</summary>
    public void Leave()
    {
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, nameof(Leave));
        LeaveAsync().GetAwaiter().GetResult();
    }

    /// <summary>
    /// Leaves the group; completes once the membership service has installed a view without this process.
    /// With <see cref="PersistCheckpoints"/>, this member first saves its checkpoint.
    /// </summary>
    /// <param name="cancellationToken">Stops waiting (the leave itself goes on).</param>
    public Task LeaveAsync(CancellationToken cancellationToken = default)
    {
        if (_state <= GroupState.New) throw NotJoinedError(nameof(Leave));
        Task saved = SaveBeforeLeavingAsync();
        if (saved.IsCompleted) return LeaveWithoutSaving(cancellationToken);
        return StopWaitingWhenCancelled(saved.ContinueWith(_ => LeaveWithoutSaving(CancellationToken.None), TaskScheduler.Default).Unwrap(), cancellationToken);
    }

    /// <summary>Leaves without saving a checkpoint: after a handler threw (the replica may differ), or when the shutdown saved already.</summary>
    internal Task LeaveWithoutSaving(CancellationToken cancellationToken = default) =>
        GoOut(nameof(Leave), GroupState.New, loop => loop.Node.Leave(Id, loop.Now), cancellationToken);

    /// <summary>
    /// Leaving and deleting the group end alike: this member is out once the service installs a
    /// view without it. <paramref name="notBefore"/> is the state in which it is too early to ask.
    /// </summary>
    private Task GoOut(string operation, GroupState notBefore, Action<EventLoop> request, CancellationToken cancellationToken)
    {
        EventLoop loop = _runtime.RunningLoop();
        TaskCompletionSource left;
        lock (_gate)
        {
            if (_state is GroupState.Leaving or GroupState.Left) return StopWaitingWhenCancelled(_left!.Task, cancellationToken);
            if (_state <= notBefore) throw NotJoinedError(operation);
            _state = GroupState.Leaving;
            _left = left = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        loop.Post(() => request(loop));
        return StopWaitingWhenCancelled(left.Task, cancellationToken);
    }

    /// <summary>
    /// Joins several groups at once: their join requests leave together, and the membership
    /// service folds joins that arrive together into one view change per group. Returns once this
    /// process is a member of every one of them.
    /// </summary>
    /// <param name="groups">Groups of one runtime, not yet joined.</param>
    public static void MultiJoin(params Group[] groups) => MultiJoinAsync(groups).GetAwaiter().GetResult();

    /// <summary>The asynchronous form of <see cref="MultiJoin"/>.</summary>
    /// <param name="groups">Groups of one runtime, not yet joined.</param>
    /// <param name="cancellationToken">Stops waiting (the joins themselves go on).</param>
    public static Task MultiJoinAsync(IEnumerable<Group> groups, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(groups);
        Group[] all = groups.ToArray();
        if (all.Length == 0) throw new ArgumentException("MultiJoin needs at least one group.", nameof(groups));
        if (all.Any(g => g is null)) throw new ArgumentException("MultiJoin was given a null group.", nameof(groups));
        if (all.Select(g => g._runtime).Distinct().Count() > 1)
            throw new ArgumentException("MultiJoin joins groups of one runtime; these belong to different runtimes. Call it once per runtime.", nameof(groups));
        if (all.Distinct().Count() != all.Length) throw new ArgumentException("MultiJoin was given the same group twice.", nameof(groups));
        // All or nothing: refuse before any join request leaves.
        foreach (Group g in all)
        {
            if (g._state == GroupState.Left) throw ExceptionFactory.RejoinAfterLeave(g.Name);
            if (g._state != GroupState.New) throw ExceptionFactory.AlreadyJoined(g.Name);
        }
        // Each JoinAsync posts one command; the event loop runs them in one batch, so the requests
        // share datagrams to the service.
        return StopWaitingWhenCancelled(Task.WhenAll(all.Select(g => g.JoinAsync())), cancellationToken);
    }

    /// <summary>
    /// Deletes the group when the application using it shuts down: every member leaves in one view
    /// change (after the usual flush, so the last view's messages are settled everywhere), each
    /// member's view handlers see a final view with no members, and the membership service forgets
    /// the group. Returns once this member is out.
    /// </summary>
    /// <exception cref="IsisException">The group is not joined.</exception>
    public void Terminate()
    {
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, nameof(Terminate));
        TerminateAsync().GetAwaiter().GetResult();
    }

    /// <summary>The asynchronous form of <see cref="Terminate"/>.</summary>
    /// <param name="cancellationToken">Stops waiting (the deletion itself goes on).</param>
    public Task TerminateAsync(CancellationToken cancellationToken = default) =>
        GoOut(nameof(Terminate), GroupState.Joining, loop => loop.Node.Terminate(Id, loop.Now), cancellationToken);

    private IsisException NotJoinedError(string operation) =>
        _terminated ? ExceptionFactory.GroupTerminated(Name, operation) : ExceptionFactory.NotJoined(Name, operation);

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
    public Task FlushAsync() => FlushAsync(0, CancellationToken.None);

    /// <summary>The asynchronous form of <see cref="Flush()"/>.</summary>
    /// <param name="cancellationToken">Stops waiting (the messages are still sent and delivered).</param>
    public Task FlushAsync(CancellationToken cancellationToken) => FlushAsync(0, cancellationToken);

    /// <summary>The asynchronous form of <see cref="Flush(int)"/>.</summary>
    /// <param name="k">How many members must hold each message; values above the view size mean all.</param>
    public Task FlushAsync(int k) => FlushAsync(k, CancellationToken.None);

    /// <summary>The asynchronous form of <see cref="Flush(int)"/>.</summary>
    /// <param name="k">How many members must hold each message; values above the view size mean all.</param>
    /// <param name="cancellationToken">Stops waiting (the messages are still sent and delivered).</param>
    public Task FlushAsync(int k, CancellationToken cancellationToken)
    {
        if (k < 0) throw new ArgumentOutOfRangeException(nameof(k), k, "Flush(k) needs k >= 1 members (or 0 for all).");
        EventLoop loop = _runtime.RunningLoop();
        if (_state is not (GroupState.Joining or GroupState.Joined)) throw NotJoinedError(nameof(Flush));
        long token = Interlocked.Increment(ref _nextFlushToken);
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _flushes[token] = done;
        loop.Post(() => loop.Node.Flush(Id, token, k, loop.Now));
        IsisInstruments.Time(_runtime.Instruments.FlushDuration, done.Task, Name);
        return StopWaitingWhenCancelled(done.Task, cancellationToken);
    }

    // A token cancelled before the call always yields a cancelled task, even when the operation
    // finished first (a one-member Flush can), so callers see one outcome rather than a race.
    private static Task StopWaitingWhenCancelled(Task task, CancellationToken cancellationToken) =>
        cancellationToken.IsCancellationRequested ? Task.FromCanceled(cancellationToken) : task.WaitAsync(cancellationToken);

    private static Task<T> StopWaitingWhenCancelled<T>(Task<T> task, CancellationToken cancellationToken) =>
        cancellationToken.IsCancellationRequested ? Task.FromCanceled<T>(cancellationToken) : task.WaitAsync(cancellationToken);

    internal void OnFlushCompleted(long token)
    {
        if (_flushes.TryRemove(token, out TaskCompletionSource? done)) done.TrySetResult();
    }

    // ---------------------------------------------------------------- called on the event loop

    /// <summary>How many of this member's messages are not yet stable (metrics).</summary>
    internal long UnstableForMetrics => Interlocked.Read(ref _window);

    /// <summary>Publishes how many of our messages are not yet stable; wakes blocked senders.</summary>
    internal void PublishWindow(GroupMember? member)
    {
        long window = member == null ? 0 : member.UnstableOwnMessages + member.PendingSends;
        Interlocked.Exchange(ref _window, window);
        if (window + Interlocked.Read(ref _queuedSends.Value) < _runtime.Options.MaxUnstableMessages)
        {
            _windowOpen.Set();
            if (_windowOpened != null) Interlocked.Exchange(ref _windowOpened, null)?.TrySetResult();
        }
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
        Log.ViewInstalled(_runtime.Logger, Name, view.ToString());
        _delivery!.Enqueue(() => RunViewHandlers(view));
        // Complete the join after the view handlers saw the view, so Join() returning means the
        // application has observed its first view (with disk durability, also the history's
        // replay: OnHistoryReady completes it).
        if (HistoryLog == null && first) _delivery.Enqueue(JoinCompleted);
    }

    /// <summary>Delivery thread: the application has its first view and its state; Join returns.</summary>
    private void JoinCompleted()
    {
        ReleaseRestorable();
        if (_joined?.TrySetResult() == true) StartCheckpointSchedule();
    }

    /// <summary>
    /// Queues a delivered message for the handlers. The payload is copied into a pooled buffer
    /// (the core recycles its copy once the message is stable), which the delivery thread returns.
    /// </summary>
    internal void OnDelivered(NodeId sender, MessageKind kind, ReadOnlySpan<byte> payload, int viewId, long seq, bool replayed = false)
    {
        bool query = kind.IsQuery();
        long queryId = query ? MessageKinds.QueryIdOf(payload) : 0;
        ReadOnlySpan<byte> body = query ? payload[Math.Min(8, payload.Length)..] : payload;
        byte[] buffer = _runtime.Buffers.Rent(body.Length);
        body.CopyTo(buffer);
        if (kind.IsSafe()) CountSafeHanded(sender, viewId, seq); // SafeSends and SafeQueries are the durable history's entries
        _delivery!.Enqueue(new PendingDelivery(sender, buffer, body.Length, query, queryId, viewId, replayed));
    }

    private void DispatchPending(PendingDelivery message)
    {
        ReadOnlyMemory<byte> payload = message.Buffer.AsMemory(0, message.Length);
        if (message.IsQuery) DispatchQuery(message.Sender, message.QueryId, message.ViewId, payload, message.Replayed);
        else Dispatch(message.Sender, payload);
    }

    /// <summary>
    /// Runs the handlers of a query request with Reply bound to it; a handler that neither answered
    /// nor deferred its answer sends a null reply, so no requester waits forever.
    /// </summary>
    private void DispatchQuery(NodeId requester, long queryId, int viewId, ReadOnlyMemory<byte> payload, bool replayed)
    {
        _currentQuery = (requester, queryId, viewId, false, replayed);
        try
        {
            Dispatch(requester, payload);
            if (_currentQuery is { Replied: false, Replayed: false } && _runtime.IsRunning) NullReply();
        }
        finally
        {
            _currentQuery = null;
        }
    }

    private void Dispatch(NodeId sender, ReadOnlyMemory<byte> payload)
    {
        DispatchResult result = Handlers.Table.Dispatch(payload);
        switch (result.Outcome)
        {
            case DispatchOutcome.Invoked:
                return;
            case DispatchOutcome.HandlerThrew:
                OnHandlerException(result.Exception!);
                return;
            default:
                _runtime.CountMismatch();
                if (_mismatchReports.TryPass(out long heldBack))
                {
                    if (heldBack > 0) Log.HeldBack(_runtime.Logger, heldBack, $"undeliverable messages in group {Name}");
                    Log.HandlerMismatch(_runtime.Logger, Name, sender.ToString(), result.Message ?? result.Outcome.ToString());
                }
                Undeliverable?.Invoke(this, new UndeliverableMessageEventArgs(new Address(sender), result.Opcode, result.Message ?? result.Outcome.ToString()));
                return;
        }
    }

    // A sender with the wrong signature may send thousands: the first few are logged in full, then a line every 10 s.
    private readonly ReportRateLimiter _mismatchReports = new(burst: 10, TimeSpan.FromSeconds(10));

    private void OnHandlerException(Exception e)
    {
        _runtime.CountHandlerException();
        bool leave = LeaveOnHandlerException;
        Log.HandlerThrew(_runtime.Logger, e, Name, leave
            ? "this member leaves the group because its replica may now differ (set LeaveOnHandlerException = false to keep going)"
            : "continuing because LeaveOnHandlerException is false");
        if (leave && _runtime.IsRunning)
        {
            try { _ = LeaveWithoutSaving(); }
            catch (IsisException) { /* already leaving or shut down */ }
        }
    }

    private void RunViewHandlers(View view)
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
    }

    internal void OnLeft(bool terminated, int finalViewId)
    {
        CloseServed();
        lock (_gate)
        {
            _state = GroupState.Left;
            _terminated = terminated;
        }
        if (terminated && _view is { } last)
        {
            // Every member sees the group end: a last view with nobody in it.
            var final = new View(new GroupView(finalViewId, [], [], last.Members.Select(a => a.Node).ToArray()), _runtime.Address!, Name);
            _view = final;
            _delivery?.Enqueue(() => RunViewHandlers(final));
        }
        HistoryLog?.Dispose();
        StopCheckpointSchedule();
        FailRotations(new IsisException($"This member left group '{Name}' before the group moved to the new key."));
        var left = new IsisException($"This member left group '{Name}' before its SafeSend was delivered here; it may or may not have been delivered to the others.");
        while (_safeSends.TryDequeue(out TaskCompletionSource? safe)) safe.TrySetException(left);
        FailForcedRecovery(new IsisException($"This member left group '{Name}' before it held the group's SafeSend history."));
        foreach (long token in _flushes.Keys) OnFlushCompleted(token);
        Departed?.Invoke(new IsisException($"This member left group '{Name}'."));
        _runtime.Unregister(this);
        _delivery?.Enqueue(() => _left?.TrySetResult());
        _delivery?.Complete();
    }

    /// <summary>The runtime stopped: fail whatever is waiting.</summary>
    internal void OnRuntimeStopped(Exception reason)
    {
        _joined?.TrySetException(reason);
        FailForcedRecovery(reason);
        Departed?.Invoke(reason);
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
        Interlocked.Exchange(ref _windowOpened, null)?.TrySetResult();
        _delivery?.Complete();
        HistoryLog?.Dispose();
        StopCheckpointSchedule();
        FailRotations(reason);
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
