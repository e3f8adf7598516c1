namespace Isis.Collections;

/// <summary>
/// The Tempest history/pending model of one replicated collection, on one group (the papers'
/// "broadcast-broadcast" fixed sequencer on Isis primitives), with gossip repair for a member that
/// trails (<c>OperationLog.Repair.cs</c>).
/// </summary>
/// <remarks>
/// <list type="number">
/// <item><b>Pending.</b> An update is multicast with Send to every member, which keeps it as pending
/// (in arrival order) until it is merged. Optimistic reads see the history with the pending updates
/// applied in that order.</item>
/// <item><b>Merge.</b> The view's oldest member is the sequencer: it lists the updates in the order they
/// reached it and multicasts the list (OrderedSend or SafeSend). Every member appends the listed
/// updates to its history in list order, waiting for one it has not received yet (its Send comes
/// from another sender, so it may arrive after the list). Lists are totally ordered, so every
/// member's history is a prefix of one sequence, and a position names one update everywhere.</item>
/// <item><b>View changes.</b> Virtual synchrony gives every member that survives a view the same
/// messages of it. At the next view, before anything of it, each member merges what the view left:
/// the listed updates it holds, in list order (a listed update no survivor received is gone with
/// its issuer), then every pending update in id order. So all start the new view with one history
/// and nothing pending, and a joiner's checkpoint (made right after the view) is the whole state.
/// A list made in an earlier view that arrives in a later one is void (its updates were merged).</item>
/// <item><b>Repair.</b> A member whose handlers trail (an overloaded or stalled application) may take
/// part of the history from a peer in bulk, off its delivery thread (<c>OperationLog.Repair.cs</c>).
/// The updates and list entries it then receives late are already in its history: an issuer's
/// updates join the history in its send order, so one number per issuer tells, and they are
/// dropped as duplicates. It still receives every message of the view, so it merges what the view
/// leaves like everyone else.</item>
/// </list>
/// Handlers run on the group's delivery thread, repairs on the gossip task; both change the state
/// under <see cref="_gate"/>. Reads come from any thread.
/// </remarks>
internal sealed partial class OperationLog<TOp>
{
    internal const int MergeCode = 31_000;

    private readonly Group _group;
    private readonly ReplicatedCollectionOptions _options;
    private readonly Action<TOp> _applyToHistory;
    private readonly Lock _gate = new();
    private readonly Dictionary<OperationId, TOp> _pendingById = new();
    private readonly List<OperationId> _arrivals = new(); // pending ids in arrival order; merged ones are dropped lazily
    private readonly Queue<OperationId> _merged = new(); // listed, waiting for their update to arrive
    private readonly Dictionary<string, long> _appliedThrough = new(StringComparer.Ordinal);
    private readonly List<(OperationId Id, TaskCompletionSource Done)> _waiters = new();
    private readonly RetainedHistory<TOp> _history = new();
    private List<OperationId> _toAnnounce = new();
    private readonly Timer _announceTimer;
    private readonly Lock _announcing = new();
    private readonly Lock _issuing = new();
    private bool _announceScheduled;
    private int _viewId = -1;
    private bool _sequencer;
    private string? _self;
    private long _nextSequence;

    /// <summary>The log of a new collection on <paramref name="group"/>: not joined yet, and holding no other collection.</summary>
    public static OperationLog<TOp> Create(Group group, ReplicatedCollectionOptions? options, Action<TOp> applyToHistory, IOperationCodec<TOp> codec)
    {
        if (group.GetView() != null) throw new InvalidOperationException($"Create the replicated collection of group '{group.Name}' before Join(): a joiner receives the collection's state when it joins.");
        if (group.Handlers[MergeCode].Count > 0)
        {
            throw new InvalidOperationException($"Group '{group.Name}' already holds a replicated collection; each collection needs a group of its own (create another Group with its own name).");
        }
        return new OperationLog<TOp>(group, options, applyToHistory, codec);
    }

    private OperationLog(Group group, ReplicatedCollectionOptions? options, Action<TOp> applyToHistory, IOperationCodec<TOp> codec)
    {
        _group = group;
        _options = options ?? new ReplicatedCollectionOptions();
        if (_options.MergeInterval < TimeSpan.Zero) throw new ArgumentOutOfRangeException(nameof(options), _options.MergeInterval, "The merge interval is a duration: zero or more.");
        if (_options.GossipInterval <= TimeSpan.Zero) throw new ArgumentOutOfRangeException(nameof(options), _options.GossipInterval, "The gossip interval must be positive.");
        _applyToHistory = applyToHistory;
        _codec = codec;
        _announceTimer = new Timer(_ => Announce());
        group.Handlers[MergeCode] += (Action<int, string[], long[]>)OnMerge;
        group.Handlers[PullCode] += (Action<string, string, long, long, bool>)OnPull;
        group.ViewHandlers += (ViewHandler)OnView;
    }

    /// <summary>Updates in this member's history: the position the next one takes (the same position names the same update at every member).</summary>
    public long HistoryLength
    {
        get { lock (_gate) return _history.Length; }
    }

    /// <summary>Bumped at every change of the history or the pending set (for the optimistic view's cache).</summary>
    public long Version { get; private set; }

    public int PendingCount
    {
        get { lock (_gate) return _pendingById.Count; }
    }

    // The optimistic view last built, and the version it reflects.
    private sealed record OptimisticCache(object State, long Version);

    private OptimisticCache? _optimistic;

    /// <summary>
    /// The optimistic view: <paramref name="applyPending"/> applied to the history (<paramref name="history"/>,
    /// read with the pending updates, in arrival order, at one version). Rebuilt only when something changed.
    /// </summary>
    public TState Optimistic<TState>(Func<TState> history, Func<TState, TOp[], TState> applyPending) where TState : class
    {
        OptimisticCache? cached = Volatile.Read(ref _optimistic);
        TState state;
        TOp[] pending;
        long version;
        lock (_gate)
        {
            if (cached?.Version == Version) return (TState)cached.State;
            state = history();
            pending = PendingInArrivalOrder().Select(p => p.Op).ToArray();
            version = Version;
        }
        TState fresh = applyPending(state, pending);
        Volatile.Write(ref _optimistic, new OptimisticCache(fresh, version));
        return fresh;
    }

    /// <summary>The history as it stands (read by <paramref name="read"/>), with where it ends: what a checkpoint carries.</summary>
    public (TState State, long Length, long Chain) Snapshot<TState>(Func<TState> read)
    {
        lock (_gate) return (read(), _history.Length, _history.Chain);
    }

    /// <summary>A checkpoint's header arrived: the history loaded with it ends at <paramref name="length"/>, with chain hash <paramref name="chain"/>.</summary>
    public void OnCheckpointLoaded(long length, long chain)
    {
        lock (_gate)
        {
            _history.Reset(length, chain);
            Version++;
        }
    }

    private IEnumerable<(OperationId Id, TOp Op)> PendingInArrivalOrder()
    {
        foreach (OperationId id in _arrivals)
        {
            if (_pendingById.TryGetValue(id, out TOp? op)) yield return (id, op);
        }
    }

    // ---------------------------------------------------------------- issuing (any thread)

    /// <summary>
    /// Multicasts an update (request code <paramref name="code"/>, its id first) and returns its id
    /// with the task that completes when it is handed to the group. Ids are drawn and handed over
    /// under one lock, so an issuer's sequence numbers are its send order: merges keep it, and
    /// <see cref="WaitForAsync"/> relies on it.
    /// </summary>
    public (OperationId Id, Task Sent) Issue(string operation, int code, params object?[] args)
    {
        View view = _group.GetView() ?? throw new InvalidOperationException($"{operation} multicasts to the collection's group '{_group.Name}', which this member has not joined yet: call Join() first.");
        lock (_issuing)
        {
            OperationId id;
            lock (_gate)
            {
                _self ??= view.Members[view.GetMyRank()].ToString();
                id = new OperationId(_self, ++_nextSequence);
            }
            return (id, _group.SendAsync(code, [id.Issuer, id.Sequence, .. args]));
        }
    }

    /// <summary>Completes once the update named by <paramref name="id"/> is in this member's history.</summary>
    public Task WaitForAsync(OperationId id, CancellationToken cancellationToken)
    {
        TaskCompletionSource done;
        lock (_gate)
        {
            if (IsApplied(id)) return Task.CompletedTask;
            done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            _waiters.Add((id, done));
        }
        return done.Task.WaitAsync(cancellationToken);
    }

    // An issuer's updates join the history in its send order (Send is FIFO, lists keep arrival
    // order, and the end-of-view merge orders by id), so one number per issuer says which are in.
    private bool IsApplied(OperationId id) => _appliedThrough.GetValueOrDefault(id.Issuer) >= id.Sequence;

    // ---------------------------------------------------------------- delivery thread

    /// <summary>An update arrived (its Send was delivered): it is pending until a merge list names it.</summary>
    public void OnUpdate(OperationId id, TOp op)
    {
        bool schedule = false;
        lock (_gate)
        {
            if (IsApplied(id))
            {
                _lateDuplicates++; // a repair put it in the history before its Send got here
                return;
            }
            _pendingById[id] = op;
            _arrivals.Add(id);
            Version++;
            if (_sequencer)
            {
                _toAnnounce.Add(id);
                schedule = !_announceScheduled;
                _announceScheduled = true;
            }
            ApplyMerged();
        }
        if (!schedule) return;
        if (_options.MergeInterval == TimeSpan.Zero) Announce();
        else _announceTimer.Change(_options.MergeInterval, Timeout.InfiniteTimeSpan);
    }

    private void OnMerge(int viewId, string[] issuers, long[] sequences)
    {
        lock (_gate)
        {
            if (viewId != _viewId || issuers.Length != sequences.Length) return; // made in an earlier view: merged at its end
            for (int i = 0; i < issuers.Length; i++) _merged.Enqueue(new OperationId(issuers[i], sequences[i]));
            ApplyMerged();
        }
    }

    /// <summary>Appends the listed updates to the history in list order, as far as they have arrived.</summary>
    private void ApplyMerged()
    {
        while (_merged.Count > 0)
        {
            OperationId id = _merged.Peek();
            if (IsApplied(id))
            {
                _merged.Dequeue(); // a repair got here first
                _lateDuplicates++;
                continue;
            }
            if (!_pendingById.Remove(id, out TOp? op)) return; // its update has not arrived yet
            _merged.Dequeue();
            Apply(id, op);
        }
    }

    private void OnView(View view)
    {
        lock (_gate)
        {
            MergeWhatTheViewLeft();
            _pendingById.Clear();
            _arrivals.Clear();
            _toAnnounce = new List<OperationId>();
            _viewId = view.ViewId;
            int rank = view.GetMyRank();
            _sequencer = rank == 0;
            if (rank >= 0) _self ??= view.Members[rank].ToString();
            OnMembersChanged(view);
            Version++;
        }
        StartRepairLoop();
    }

    /// <summary>
    /// What the last view left, the same at every member that came through it: the listed updates
    /// it holds in list order (one no survivor received is gone with its issuer), then the pending
    /// ones in id order. A member that a repair already carried past part of it (a peer merged it
    /// first) finds that part applied and goes on from there, in the same order.
    /// </summary>
    private void MergeWhatTheViewLeft()
    {
        while (_merged.TryDequeue(out OperationId id))
        {
            if (_pendingById.Remove(id, out TOp? op)) Apply(id, op);
        }
        foreach (var (id, op) in PendingInArrivalOrder().OrderBy(p => p.Id).ToList()) Apply(id, op);
    }

    private void Apply(OperationId id, TOp op)
    {
        _pendingById.Remove(id);
        _applyToHistory(op);
        _history.Append(id, op);
        Version++;
        _appliedThrough[id.Issuer] = Math.Max(_appliedThrough.GetValueOrDefault(id.Issuer), id.Sequence);
        if (_arrivals.Count > 64 && _arrivals.Count > 2 * _pendingById.Count) _arrivals.RemoveAll(a => !_pendingById.ContainsKey(a));
        for (int i = _waiters.Count - 1; i >= 0; i--)
        {
            if (_waiters[i].Id.Issuer != id.Issuer || _waiters[i].Id.Sequence > id.Sequence) continue;
            _waiters[i].Done.TrySetResult();
            _waiters.RemoveAt(i);
        }
    }

    // ---------------------------------------------------------------- the sequencer (timer thread)

    private void Announce()
    {
        // One announcer at a time, from taking the batch to handing it to the group: two timer
        // callbacks racing could otherwise multicast a later list before an earlier one, and merge
        // an issuer's updates out of the order it sent them.
        lock (_announcing)
        {
            List<OperationId> batch;
            int viewId;
            lock (_gate)
            {
                _announceScheduled = false;
                if (!_sequencer || _toAnnounce.Count == 0) return;
                batch = _toAnnounce;
                _toAnnounce = new List<OperationId>();
                viewId = _viewId;
            }
            object?[] args = [viewId, batch.Select(b => b.Issuer).ToArray(), batch.Select(b => b.Sequence).ToArray()];
            try
            {
                // The async forms hand messages over in call order (a caller waiting for flow control keeps its place).
                Task sent = _options.Ordering == MergeOrdering.Safe ? _group.SafeSendAsync(MergeCode, args) : _group.OrderedSendAsync(MergeCode, args);
                _ = sent.ContinueWith(t => _ = t.Exception, TaskScheduler.Default); // a list lost to a view change is merged at its end
            }
            catch (IsisException)
            {
                // The group is leaving or the runtime stopped: the next view (if any) merges what is pending.
            }
        }
    }
}
