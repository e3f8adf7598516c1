using System.Diagnostics.Metrics;
using Isis.Serialization;
using Isis.Core.Common;
using System.Net;
using System.Collections.Concurrent;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Diagnostics;
using Isis.Runtime;
using Microsoft.Extensions.Logging;

namespace Isis;

/// <summary>
/// One Isis runtime: a process's membership in the system, its sockets, its event loop and its
/// groups. <see cref="IsisSystem"/> holds a default instance for Isis2-style programs; tests and
/// benchmarks create several in one process.
/// </summary>
public sealed class IsisRuntime : IDisposable, IEventSink
{
    private readonly ConcurrentDictionary<GroupId, Group> _groups = new();
    private readonly Lock _groupSnapshotGate = new();
    private volatile Group[] _groupSnapshot = [];
    private readonly object _lifecycle = new();
    private EventLoop? _loop;
    private volatile string? _shutdownReason;
    private volatile bool _stopped;
    private long _handlerMismatches;
    private long _handlerExceptions;

    /// <summary>Creates a runtime; call <see cref="Start"/> to bring it up.</summary>
    /// <param name="options">Settings; null for the defaults (no configuration needed on one machine).</param>
    public IsisRuntime(IsisOptions? options = null)
    {
        Options = options ?? new IsisOptions();
        Options.Validate();
        Logger = Options.LoggerFactory?.CreateLogger("Isis") ?? new StandardErrorLogger(Options.StandardError);
        Instruments = new IsisInstruments(Options.MeterFactory, this);
        _encoders = new ThreadLocal<ThreadEncoder>(() => new ThreadEncoder(Buffers));
    }

    /// <summary>The settings this runtime was created with.</summary>
    public IsisOptions Options { get; }

    internal ILogger Logger { get; }

    /// <summary>Metrics (meter "Isis") and the activity source ("Isis").</summary>
    internal IsisInstruments Instruments { get; }

    // Counted on the event loop thread (one writer), read by metric listeners.
    private long _messagesDelivered;
    private long _viewsInstalled;

    internal long MessagesSent => _loop?.MessagesSent ?? 0;

    internal long MessagesDelivered => Volatile.Read(ref _messagesDelivered);

    internal long ViewsInstalled => Volatile.Read(ref _viewsInstalled);

    /// <summary>On the event loop: a message of this process was handed to the protocol.</summary>

    internal (long Mismatches, long HandlerExceptions) GetCountsForMetrics() => (Interlocked.Read(ref _handlerMismatches), Interlocked.Read(ref _handlerExceptions));

    /// <summary>Messages this process sent that are not yet stable, over its groups.</summary>
    internal long UnstableMessages => _groupSnapshot.Sum(g => g.UnstableForMetrics);

    /// <summary>Drop counts by reason, for the metric (read from another thread: each count is a whole long, and may be a moment old).</summary>
    internal IEnumerable<Measurement<long>> DropsForMetrics()
    {
        if (_loop is not { } loop) yield break;
        NodeCounters c = loop.Node.Counters;
        yield return Drop(MalformedDropped(loop), "malformed");
        yield return Drop(c.DroppedFirewall, "firewall");
        yield return Drop(c.DroppedWrongView + c.DroppedNotMember, "wrong_view");
        yield return Drop(c.DroppedUnknownGroup, "unknown_group");
        yield return Drop(c.Duplicates, "duplicate");
    }

    /// <summary>Packets the process node refused as malformed, plus datagrams the transport could not even parse.</summary>
    private static long MalformedDropped(EventLoop loop) => loop.Node.Counters.DroppedMalformed + loop.Transport.Counters.ReceiveDrops;

    private static Measurement<long> Drop(long value, string reason) => new(value, new KeyValuePair<string, object?>("isis.drop.reason", reason));

    /// <summary>Buffers for messages on their way (encoded Sends, held messages, payloads waiting for handlers), reused instead of allocated per message.</summary>
    internal IBufferPool Buffers { get; } = new SharedBufferPool();

    private readonly ThreadLocal<ThreadEncoder> _encoders;

    /// <summary>The calling thread's encoding state: its pooled writer and its described argument types (one thread-local lookup per Send).</summary>
    internal ThreadEncoder Encoder => _encoders.Value!;

    /// <summary>This process incarnation's address, once started.</summary>
    public Address? Address { get; private set; }

    /// <summary>True between <see cref="Start"/> and <see cref="Shutdown"/>, unless the membership protocol shut the runtime down.</summary>
    public bool IsRunning => _loop != null && !_stopped && _shutdownReason == null;

    /// <summary>
    /// True if this process hosts a voting replica of the membership service: with the embedded
    /// service, one of the (up to 3, or 5) member processes the service runs on now; with a fixed
    /// service, the process that bound a replica address.
    /// </summary>
    public bool HostsMembershipService => _loop?.HostsReplica ?? false;

    /// <summary>The address of the membership replica this process hosts, or null if it hosts none.</summary>
    /// <remarks>
    /// A replica of a fixed service keeps serving even if this process itself is shut down by the
    /// protocol (isolated or expelled) and stops with <see cref="Shutdown"/>; an embedded replica
    /// stops with its process, and the service replaces it.
    /// </remarks>
    public IPEndPoint? HostedMembershipReplica => _loop is { HostsReplica: true } loop ? loop.ServiceEndPoint : null;

    /// <summary>True while this process holds its membership lease: the membership service answered it recently (hosting's health check).</summary>
    internal bool MembershipServiceReachable => _loop is { } loop && IsRunning && loop.Node.LeaseHeldAt(loop.Now);

    /// <summary>True while the runtime's data socket is open (hosting's health check).</summary>
    internal bool TransportBound => _loop is { } loop && IsRunning && loop.Transport.IsReceiving;

    /// <summary>Why the membership protocol shut this runtime down (expelled or isolated), or null.</summary>
    public string? ShutdownReason => _shutdownReason;

    /// <summary>
    /// Raised once, on a thread-pool thread, when the membership protocol shuts this runtime down:
    /// the membership service expelled this process, or the process lost contact with it. Every
    /// group is wedged; restart the process to rejoin as a new member.
    /// </summary>
    public event EventHandler<IsisShutdownEventArgs>? ShutDown;

    /// <summary>Internal hook for event logs: every core event, with the loop clock of the step that produced it (not of its hand-over, which a pause of the process may delay).</summary>
    internal event Action<NodeId, NodeEvent, long>? CoreEvent;

    /// <summary>Brings the runtime up: binds sockets, hosts the membership service if it is first, starts the event loop.</summary>
    /// <exception cref="InvalidOperationException">Already started.</exception>
    public void Start()
    {
        lock (_lifecycle)
        {
            if (_loop != null) throw new InvalidOperationException("This IsisRuntime is already started; create a new IsisRuntime to start another.");
            var loop = new EventLoop(Options, this, Buffers);
            Address = new Address(loop.Node.Self);
            _loop = loop;
            loop.Start();
            Log.Started(Logger, Address.ToString(), !loop.EmbeddedService
                ? (loop.Service != null ? "replica hosted here" : "at " + string.Join(", ", (object[])Options.ServiceReplicaEndPoints))
                : loop.Founded
                    ? $"embedded, founded here (it grows to {Options.EmbeddedServiceReplicas} replicas on member processes as they start)"
                    : $"embedded, found through {Options.WellKnownEndPoint}" + (Options.MembershipSeeds.Count > 0 ? " and the seeds" : "") + " and the replicas known on this machine");
        }
    }

    /// <summary>
    /// Leaves every group (waiting a bounded time for the views without this process) and stops.
    /// If this process hosts a replica of the embedded membership service, the service first moves
    /// it to another live process, so the others see an ordinary leave, never a failure.
    /// </summary>
    public void Shutdown()
    {
        EventLoop? loop;
        lock (_lifecycle)
        {
            loop = _loop;
            if (loop == null || _stopped) return;
        }
        if (IsRunning && loop.EmbeddedService) HandOverReplica(loop);
        if (IsRunning)
        {
            // Persistent checkpoints are saved first, while the groups still deliver (bounded: a
            // save cut short leaves the earlier checkpoints in place).
            Task[] saves = _groups.Values.Select(g => g.SaveBeforeLeavingAsync()).ToArray();
            try { Task.WaitAll(saves, TimeSpan.FromSeconds(30)); }
            catch (AggregateException) { /* reported where it failed */ }
            var leaves = _groups.Values.Select(g =>
            {
                try { return g.LeaveWithoutSaving(); }
                catch (IsisException) { return Task.CompletedTask; }
            }).ToArray();
            try { Task.WaitAll(leaves, TimeSpan.FromSeconds(3)); }
            catch (AggregateException) { /* best effort */ }
        }
        _stopped = true;
        loop.Dispose();
        var stopped = ExceptionFactory.ShutDown("IsisRuntime.Shutdown() was called.");
        foreach (Group g in _groups.Values) g.OnRuntimeStopped(stopped);
        _groups.Clear();
        RefreshGroupSnapshot();
        Log.Stopped(Logger, Address?.ToString() ?? "?");
        Instruments.Dispose();
    }

    private TaskCompletionSource? _retired;

    /// <summary>
    /// Asks the embedded service to move this process's replica (if it hosts one) and waits until
    /// the service's committed configuration no longer needs this process. Bounded: a service
    /// that lost its majority cannot reconfigure, and then the process goes anyway, as a crash.
    /// </summary>
    private void HandOverReplica(EventLoop loop)
    {
        var retired = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _retired = retired;
        loop.Post(() => loop.Node.RetireFromService(loop.Now));
        TimeSpan bound = 2 * (Options.IsolationTimeout ?? 2 * Options.SuspicionCount * Options.HeartbeatInterval);
        if (!retired.Task.Wait(bound))
        {
            ReportProblem($"the membership service did not move this process's replica within {bound.TotalMilliseconds:0} ms " +
                "(it may have lost the majority of its replicas); stopping anyway");
        }
    }

    /// <summary>Stops at once without leaving any group, as a crash would: the others detect the failure (tests).</summary>
    internal void Crash()
    {
        lock (_lifecycle)
        {
            if (_loop == null || _stopped) return;
            _stopped = true;
        }
        _loop.Dispose();
        Instruments.Dispose();
        var stopped = ExceptionFactory.ShutDown("the runtime was stopped abruptly.");
        foreach (Group g in _groups.Values) g.OnRuntimeStopped(stopped);
        _groups.Clear();
        RefreshGroupSnapshot();
    }

    /// <summary>Same as <see cref="Shutdown"/>.</summary>
    public void Dispose() => Shutdown();

    /// <summary>A snapshot of the counters: what was received, dropped (by reason) and repaired.</summary>
    public IsisStatistics GetStatistics()
    {
        EventLoop loop = _loop ?? throw ExceptionFactory.NotStarted();
        if (_stopped || loop.IsLoopThread) return Snapshot(loop);
        var result = new TaskCompletionSource<IsisStatistics>(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Post(() => result.TrySetResult(Snapshot(loop)));
        return result.Task.Wait(TimeSpan.FromSeconds(5)) ? result.Task.Result : Snapshot(loop);
    }

    private IsisStatistics Snapshot(EventLoop loop)
    {
        NodeCounters c = loop.Node.Counters;
        var t = loop.Transport.Counters;
        return new IsisStatistics
        {
            PacketsReceived = c.PacketsReceived,
            DroppedMalformed = MalformedDropped(loop),
            DroppedFirewall = c.DroppedFirewall,
            DroppedWrongView = c.DroppedWrongView + c.DroppedNotMember,
            DroppedUnknownGroup = c.DroppedUnknownGroup,
            DroppedUnauthenticated = c.DroppedUnauthenticated + (loop.Service?.Counters.DroppedUnauthenticated ?? 0),
            DroppedReplayed = c.DroppedReplayed + (loop.Service?.Counters.DroppedReplayed ?? 0),
            Duplicates = c.Duplicates,
            NaksSent = c.NaksSent,
            CausalMessagesHeld = c.CausalHeld,
            CausalMessagesDroppedAtViewEnd = c.CausalDroppedAtViewEnd,
            HandlerMismatches = Interlocked.Read(ref _handlerMismatches),
            HandlerExceptions = Interlocked.Read(ref _handlerExceptions),
            DatagramsSent = Interlocked.Read(ref t.DatagramsSent),
            DatagramsReceived = Interlocked.Read(ref t.DatagramsReceived),
            MembershipServiceDroppedFirewall = loop.Service?.Counters.DroppedFirewall ?? 0,
            MembershipReplicaIsLeader = loop.Service?.IsActiveLeader ?? false,
            MembershipReplicaTerm = loop.Service?.Term ?? 0,
            MembershipReplicaCommitIndex = loop.Service?.CommitIndex ?? 0,
        };
    }

    // ---------------------------------------------------------------- used by Group

    internal EventLoop RunningLoop()
    {
        if (_shutdownReason is { } reason) throw ExceptionFactory.ShutDown(reason);
        EventLoop? loop = _loop;
        if (loop == null || _stopped) throw ExceptionFactory.NotStarted();
        return loop;
    }

    internal EventLoop? Loop => _loop;

    internal void Register(Group group)
    {
        if (!_groups.TryAdd(group.Id, group)) throw ExceptionFactory.DuplicateGroup(group.Name);
        RefreshGroupSnapshot();
    }

    internal void Unregister(Group group)
    {
        _groups.TryRemove(new KeyValuePair<GroupId, Group>(group.Id, group));
        RefreshGroupSnapshot();
    }

    // The event loop walks every group after each batch: an array to walk, rebuilt on (rare)
    // joins and leaves, instead of the dictionary's allocating Values snapshot per batch.
    private void RefreshGroupSnapshot()
    {
        lock (_groupSnapshotGate) _groupSnapshot = _groups.Values.ToArray();
    }

    internal void CountMismatch() => Interlocked.Increment(ref _handlerMismatches);

    internal void CountHandlerException() => Interlocked.Increment(ref _handlerExceptions);

    // ---------------------------------------------------------------- IEventSink (event loop thread)

    void IEventSink.OnNodeEvent(NodeEvent e, long at)
    {
        EventLoop loop = _loop!;
        CoreEvent?.Invoke(loop.Node.Self, e, at);
        if (e is GroupEvent about)
        {
            // What the runtime counts or logs itself; everything else is the group's (one lookup).
            switch (about)
            {
                case MessageDelivered: _messagesDelivered++; break;
                case ViewInstalled: _viewsInstalled++; break;
                case SlowRepliersReported slow:
                    Log.SlowRepliersReported(Logger, _groups.TryGetValue(slow.Group, out Group? named) ? named.Name : slow.Group.ToString(), slow.QueryId, string.Join(", ", slow.Members));
                    break;
            }
            if (_groups.TryGetValue(about.Group, out Group? g)) g.OnCoreEvent(about, loop);
            return;
        }
        switch (e)
        {
            case TrafficFirewalled f:
                Log.Firewalled(Logger, f.From.ToString(), f.DroppedSoFar);
                break;
            case ServiceConfigurationChanged { Version: 0 } when _loop is { FoundedLaterAfter: > 0 } founder:
                // A founding after the start (the start's is in the Started message).
                Log.FoundedLater(Logger, founder.ServiceEndPoint?.ToString() ?? "?", founder.FoundedLaterAfter / 1000);
                break;
            case ServiceNotFoundYet n:
                Log.ServiceNotFoundYet(Logger, n.Waited / 1000, n.AddressesAsked, (long)Options.DiscoveryTimeout.TotalMilliseconds,
                    _loop?.FoundingDeferredBecause is { } deferred ? " " + deferred : "");
                break;
            case NodeShutDown s:
                // A newcomer that never found the service: the operator may be able to do something about it.
                OnShutDownByProtocol(_loop is { Node.Discovering: true, FoundingDeferredBecause: { } why } ? $"{s.Reason} {why}" : s.Reason);
                break;
            case HostRetired:
                _retired?.TrySetResult();
                break;
        }
    }

    void IEventSink.MakeDurable(ReadOnlySpan<HistoryWrite> writes)
    {
        var touched = new HashSet<HistoryLogFile>();
        foreach (HistoryWrite w in writes)
        {
            if (!_groups.TryGetValue(w.Group, out Group? g) || g.HistoryLog is not { } log) continue;
            if (w.Stage is HistoryStage.Begin or HistoryStage.Continue)
            {
                log.Stage(w.Records, begin: w.Stage == HistoryStage.Begin); // synced there: the log itself is untouched
                continue;
            }
            if (w.Rewrite || w.Stage == HistoryStage.Commit)
            {
                string? kept = w.Rewrite ? log.Rewrite(w.Records, w.KeepOldAside) : log.CommitStaged(w.Records, w.KeepOldAside);
                if (kept != null) ReportHistoryProblem(g.Name, $"the old SafeSend log of another history was kept as {kept}", error: true);
            }
            else
            {
                long before = log.Length;
                log.Append(w.Records);
                g.OnHistoryAppended(log.Length - before);
            }
            touched.Add(log);
        }
        foreach (HistoryLogFile log in touched) log.Sync();
    }

    /// <summary>
    /// Reports what the operator must know about a group's SafeSend history: to the logger, and to
    /// standard error when the application configured none, so it is never silent.
    /// </summary>
    internal void ReportHistoryProblem(string group, string text, bool error)
    {
        if (error) Log.HistoryError(Logger, group, text);
        else Log.HistoryWarning(Logger, group, text);
    }

    void IEventSink.ReportProblem(string text) => ReportProblem(text);

    private long _nextDropCheckAt;
    private long _dropsReported;
    private readonly ReportRateLimiter _dropReports = new(burst: 3, TimeSpan.FromSeconds(10));

    /// <summary>
    /// Once a second: hostile or broken input that the core and the transport dropped (and counted)
    /// since the last check is reported, a few times and then at most every 10 s, so a flood is
    /// visible without drowning the log.
    /// </summary>
    long IEventSink.OnTick(long now)
    {
        // Hostile input is reported at most once a second, and only when some arrived: an idle
        // process is not woken to find nothing (a dropped packet woke the loop, and the core's
        // own timers tick it again within a heartbeat period).
        EventLoop loop = _loop!;
        NodeCounters c = loop.Node.Counters;
        long total = MalformedDropped(loop) + c.DroppedUnauthenticated + c.DroppedReplayed
                     + (loop.Service is { } service ? service.Counters.DroppedMalformed + service.Counters.DroppedUnauthenticated + service.Counters.DroppedReplayed : 0);
        if (total <= _dropsReported) return long.MaxValue;
        if (now < _nextDropCheckAt) return _nextDropCheckAt;
        _nextDropCheckAt = now + 1_000_000;
        if (!_dropReports.TryPass(out _)) return _nextDropCheckAt;
        Log.HostileInputDropped(Logger, total - _dropsReported, total, Address?.ToString() ?? "?");
        _dropsReported = total;
        return long.MaxValue;
    }

    /// <summary>What the operator must know about the runtime (to standard error when the application configured no logger).</summary>
    private void ReportProblem(string text)
    {
        Log.RuntimeProblem(Logger, text);
    }

    /// <summary>For groups: what the operator must know (see <see cref="ReportProblem"/>).</summary>
    internal void ReportRuntimeProblem(string text) => ReportProblem(text);

    /// <summary>
    /// For groups: what the operator must act on, because data is at stake (logged as an error;
    /// to standard error when the application configured no logger, like every problem).
    /// </summary>
    internal void ReportRuntimeError(string text) => Log.RuntimeError(Logger, text);

    /// <summary>
    /// A durable history at least this long, recovered at a join, has the runtime ask for one
    /// aggressive full collection afterwards (<see cref="CompactAfterRecovery"/>).
    /// </summary>
    internal const long CompactAfterRecoveryBytes = 1L << 20;

    private long _lastRecoveryCompaction = long.MinValue / 2; // Environment.TickCount64 of the last one
    private long _recoveryCompactions;

    /// <summary>How many times a recovered history had the runtime compact the heap.</summary>
    internal long RecoveryCompactions => Interlocked.Read(ref _recoveryCompactions);

    /// <summary>
    /// A member of a durable group holds its history and replayed it (<paramref name="historyBytes"/>
    /// in its log now): it read its log, copied the rest from another member and replayed it, a burst
    /// of several times the history in allocations, most of it garbage now. The collector keeps what
    /// it committed for that burst for tens of seconds to minutes, so a restarted member sat 20-40 MiB
    /// above its peers (docs/performance.md). One aggressive full collection, on a pool thread, gives
    /// it back: a pause of some milliseconds, once per recovery, at most once per 10 seconds.
    /// </summary>
    internal void CompactAfterRecovery(long historyBytes)
    {
        if (historyBytes < CompactAfterRecoveryBytes) return;
        long now = Environment.TickCount64, last = Interlocked.Read(ref _lastRecoveryCompaction);
        if (now - last < 10_000 || Interlocked.CompareExchange(ref _lastRecoveryCompaction, now, last) != last) return;
        Interlocked.Increment(ref _recoveryCompactions);
        ThreadPool.UnsafeQueueUserWorkItem(static _ => GC.Collect(GC.MaxGeneration, GCCollectionMode.Aggressive, blocking: true, compacting: true), null);
    }

    /// <summary>Checkpoint bytes a maker may have in flight before SendChkpt waits (the protocol's state-transfer window).</summary>
    internal long StateWindowBytes => _loop?.Node.Options.StateWindowBytes ?? new Core.Node.ProtocolOptions().StateWindowBytes;

    void IEventSink.OnServiceEvent(NodeEvent e, long at)
    {
        EventLoop loop = _loop!;
        if (loop.Service is { } service) CoreEvent?.Invoke(service.Self, e, at);
        // Every replica applies the expulsion; the one leading reports it, so it is logged once.
        if (e is IncarnationExpelled x && (!loop.EmbeddedService || loop.Service?.IsActiveLeader == true))
        {
            if (x.AfterExit) Log.Exited(Logger, x.Node.ToString());
            else Log.Expelled(Logger, x.Node.ToString(), x.Reason switch
            {
                Core.Membership.ExpelReason.SlowToReply => "a member's query timed out waiting for its reply",
                Core.Membership.ExpelReason.LacksGroupKey => "it does not hold a group's key",
                _ => "missed heartbeats",
            });
        }
    }

    void IEventSink.AfterBatch()
    {
        EventLoop loop = _loop!;
        foreach (Group g in _groupSnapshot)
        {
            GroupMember? member = loop.Node.FindGroup(g.Id);
            g.PublishWindow(member);
            g.PublishStateBacklog(member?.StateBacklogBytes ?? 0);
        }
    }

    private void OnShutDownByProtocol(string reason)
    {
        if (_shutdownReason != null) return;
        _shutdownReason = reason;
        Log.ShutDown(Logger, reason);
        var error = ExceptionFactory.ShutDown(reason);
        foreach (Group g in _groups.Values) g.OnRuntimeStopped(error);
        EventHandler<IsisShutdownEventArgs>? handler = ShutDown;
        if (handler != null) ThreadPool.QueueUserWorkItem(_ => handler(this, new IsisShutdownEventArgs(reason)));
    }
}

/// <summary>Why the membership protocol shut a runtime down.</summary>
public sealed class IsisShutdownEventArgs : EventArgs
{
    internal IsisShutdownEventArgs(string reason) => Reason = reason;

    /// <summary>What happened and what to do, for example "expelled by the membership service: ...".</summary>
    public string Reason { get; }
}
