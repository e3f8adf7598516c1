using Isis.Core.Collections;

namespace Isis.Collections;

/// <summary>
/// One replicated collection's <see cref="MergeLog{TOp}"/> (the Tempest history/pending model with
/// the papers' fixed sequencer) on a real group: updates go out by Send, the sequencer's lists by
/// OrderedSend or SafeSend every <see cref="ReplicatedCollectionOptions.MergeInterval"/>, views come
/// from the group's view handler, and gossip repairs a member that trails
/// (<c>OperationLog.Repair.cs</c>), which also bounds how stale reads may be (<c>OperationLog.Staleness.cs</c>). Adds what a caller needs around the model: ids, waiting for an
/// update, and the optimistic view.
/// </summary>
/// <remarks>
/// Handlers run on the group's delivery thread, repairs on the gossip task, announcements on a
/// timer; each touches the model under <see cref="_gate"/>. Reads come from any thread.
/// </remarks>
internal sealed partial class OperationLog<TOp>
{
    internal const int MergeCode = 31_000;

    private readonly Group _group;
    private readonly ReplicatedCollectionOptions _options;
    private readonly Action<TOp> _applyToHistory;
    private readonly Lock _gate = new();
    private readonly MergeLog<TOp> _log;
    private readonly UpdateWaiters _waiters;
    private readonly Timer _announceTimer;
    private readonly Lock _announcing = new();
    private readonly Lock _issuing = new();
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
        _log = new MergeLog<TOp>(OnApplied);
        _waiters = new UpdateWaiters(_gate);
        _announceTimer = new Timer(_ => Announce());
        group.Handlers[MergeCode] += (Action<int, string[], long[]>)OnMerge;
        group.Handlers[PullCode] += (Action<string, string, long, long, bool, string[], long[]>)OnPull;
        group.ViewHandlers += (ViewHandler)OnView;
        group.LoadChkpt += (Action<string[], long[], string[], long[]>)OnIssuersLoaded;
    }

    /// <summary>Updates in this member's history: the position the next one takes (the same position names the same update at every member).</summary>
    public long HistoryLength
    {
        get { lock (_gate) return _log.History.Length; }
    }

    /// <summary>Bumped at every change of the history or the pending set (for the optimistic view's cache).</summary>
    public long Version { get; private set; }

    public int PendingCount
    {
        get { lock (_gate) return _log.PendingCount; }
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
            pending = _log.PendingInArrivalOrder().Select(p => p.Op).ToArray();
            version = Version;
        }
        TState fresh = applyPending(state, pending);
        Volatile.Write(ref _optimistic, new OptimisticCache(fresh, version));
        return fresh;
    }

    /// <summary>
    /// Makes the collection's checkpoint at the cut: where the history ends (its length and chain),
    /// how far each issuer's updates got in it (so the joiner answers waits as every member does),
    /// then the state itself, read by <paramref name="read"/> and sent in parts by <paramref name="sendParts"/>.
    /// </summary>
    public void MakeCheckpoint<TState>(Func<TState> read, Action<TState> sendParts)
    {
        TState state;
        long length, chain;
        IssuersApplied issuers;
        lock (_gate)
        {
            state = read();
            length = _log.History.Length;
            chain = _log.History.Chain;
            issuers = _log.SaveIssuers();
        }
        _group.SendChkpt(length, chain);
        _group.SendChkpt(issuers.Live, issuers.LiveThrough, issuers.Retired, issuers.RetiredThrough);
        sendParts(state);
    }

    /// <summary>A checkpoint's header arrived: the history loaded with it ends at <paramref name="length"/>, with chain hash <paramref name="chain"/>.</summary>
    public void OnCheckpointLoaded(long length, long chain)
    {
        lock (_gate)
        {
            _log.Load(length, chain);
            Version++;
        }
    }

    /// <summary>A checkpoint's record of how far each issuer's updates got (a checkpoint made before it was added has none: waits on earlier updates then go on until their issuer's next update).</summary>
    private void OnIssuersLoaded(string[] live, long[] liveThrough, string[] retired, long[] retiredThrough)
    {
        lock (_gate)
        {
            _log.LoadIssuers(new IssuersApplied(live, liveThrough, retired, retiredThrough));
            foreach (string issuer in _waiters.Issuers.ToList()) _waiters.Settle(issuer, _log.Fate, Unanswered);
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
                // The application may see the group's view before the delivery thread hands it to the model.
                _log.NoteView(view.Members[view.GetMyRank()].ToString(), view.ViewId);
                id = new OperationId(_log.Issuer, ++_nextSequence);
            }
            return (id, _group.SendAsync(code, [id.Issuer, id.Sequence, .. args]));
        }
    }

    /// <summary>
    /// Completes once the update named by <paramref name="id"/> is in this member's history; faults
    /// once it never will be (its issuer left without it), or at once if this member cannot tell.
    /// </summary>
    public Task WaitForAsync(OperationId id, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(id.Issuer, nameof(id));
        UpdateId update = id.ToUpdate();
        lock (_gate)
        {
            UpdateFate fate = _log.Fate(update);
            if (fate == UpdateFate.Applied) return Task.CompletedTask;
            if (fate != UpdateFate.Pending) return Task.FromException(Unanswered(update, fate));
            return _waiters.Add(update, cancellationToken);
        }
    }

    /// <summary>Why a wait on update <paramref name="id"/> ends without it (<paramref name="fate"/> is lost or unknown).</summary>
    private Exception Unanswered(UpdateId id, UpdateFate fate) => fate == UpdateFate.Lost
        ? new UpdateLostException(OperationId.From(id), $"Update {id} of the collection on group '{_group.Name}' is lost: its issuer left the group before the group ordered it, and it will never be in the history. Issue it again if it still matters.")
        : new ArgumentException($"Update {id} names an issuer that is not a member of group '{_group.Name}' and that this member does not remember: it left more than {MergeLog<TOp>.RetiredIssuersKept} issuers ago, " +
            "or the id does not come from this collection. Pass an id an update of this collection returned, and wait soon after.", nameof(id));

    // ---------------------------------------------------------------- delivery thread

    /// <summary>An update arrived (its Send was delivered): it is pending until a merge list names it.</summary>
    public void OnUpdate(string issuer, long sequence, TOp op)
    {
        bool announce;
        lock (_gate)
        {
            announce = _log.OnUpdate(new UpdateId(issuer, sequence), op);
            Version++;
        }
        if (announce) ScheduleAnnouncement();
    }

    private void OnMerge(int viewId, string[] issuers, long[] sequences)
    {
        if (issuers.Length != sequences.Length) return; // not a list this code makes
        bool announce;
        lock (_gate) announce = _log.OnMerge(viewId, issuers.Select((issuer, i) => new UpdateId(issuer, sequences[i])).ToList());
        if (announce) ScheduleAnnouncement();
    }

    /// <summary>The sequencer has a list to announce: now, or after the merge interval if one is set.</summary>
    private void ScheduleAnnouncement()
    {
        if (_options.MergeInterval == TimeSpan.Zero) Announce();
        else _announceTimer.Change(_options.MergeInterval, Timeout.InfiniteTimeSpan);
    }

    private void OnView(View view)
    {
        lock (_gate)
        {
            bool first = _log.ViewId < 0;
            _log.OnView(view.ViewId, view.Members.Select(m => m.ToString()).ToList(), view.GetMyRank());
            StalenessOnView(view, first);
            Version++;
            // The view decides the fate of waits on issuers that left: in the history, or lost with them.
            foreach (string issuer in _waiters.Issuers.ToList()) _waiters.Settle(issuer, _log.Fate, Unanswered);
        }
        StartRepairLoop();
    }

    /// <summary>The model appended an entry to the history (under <see cref="_gate"/>).</summary>
    private void OnApplied(UpdateId id, TOp op)
    {
        _applyToHistory(op);
        Version++;
        _waiters.Applied(id.Issuer, id.Sequence);
        CaughtUp();
    }

    // ---------------------------------------------------------------- the sequencer (timer thread)

    private void Announce()
    {
        // One announcer at a time, from taking the batch to handing it to the group: two timer
        // callbacks racing could otherwise multicast a later list before an earlier one, and merge
        // an issuer's updates out of the order it sent them.
        lock (_announcing)
        {
            (int ViewId, List<UpdateId> Ids)? list;
            lock (_gate) list = _log.TakeAnnouncement();
            if (list is not { } l) return;
            object?[] args = [l.ViewId, l.Ids.Select(b => b.Issuer).ToArray(), l.Ids.Select(b => b.Sequence).ToArray()];
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
