namespace Isis.Collections;

/// <summary>
/// The history/pending model of one replicated collection at one member, without I/O: updates,
/// merge lists and views go in; history entries (through the callback), the sequencer's lists and
/// repair replies come out. <see cref="OperationLog{TOp}"/> drives it on a real group; the
/// simulator drives the same class on simulated members, and its checker judges the histories.
/// </summary>
/// <remarks>
/// <list type="number">
/// <item><b>Pending.</b> An update arrives (its Send was delivered) and is pending, in arrival
/// order, until it is merged.</item>
/// <item><b>Merge.</b> The view's oldest member is the sequencer: it lists the updates in the order
/// they reached it (<see cref="TakeAnnouncement"/>), and the driver multicasts the list in one total
/// order. Every member appends the listed updates to its history in list order, waiting for one it
/// has not received yet (its Send comes from another sender, so it may arrive after the list). So
/// every member's history is a prefix of one sequence, and a position names one update everywhere.</item>
/// <item><b>View changes.</b> Virtual synchrony gives every member that survives a view the same
/// messages of it. At the next view, before anything of it, each member merges what the view left:
/// the listed updates it holds, in list order (a listed update no survivor received is gone with
/// its issuer), then every pending update in id order. So all start the new view with one history
/// and nothing pending, and a joiner's checkpoint (made right after the view) is the whole state.
/// A list made in an earlier view that arrives in a later one is void (its updates were merged).</item>
/// <item><b>Repair.</b> A member whose handlers trail may take part of the history from a peer in
/// bulk (<see cref="ApplyRepair"/>). The updates and list entries it then receives late are already
/// in its history: an issuer's updates join the history in its send order (Send is FIFO, lists keep
/// arrival order, and the end-of-view merge orders by id), so one number per issuer tells, and they
/// are dropped as duplicates. It still receives every message of the view, so it merges what the
/// view leaves from where the repair carried it, in the same order as everyone else.</item>
/// </list>
/// Not thread-safe: the driver serializes every call.
/// </remarks>
internal sealed class MergeLog<TOp>(Action<OperationId, TOp> applied)
{
    private readonly Dictionary<OperationId, TOp> _pendingById = new();
    private readonly List<OperationId> _arrivals = new(); // pending ids in arrival order; merged ones are dropped lazily
    private readonly Queue<OperationId> _merged = new(); // listed, waiting for their update to arrive
    private readonly Dictionary<string, long> _appliedThrough = new(StringComparer.Ordinal);
    private readonly Dictionary<string, long> _known = new(StringComparer.Ordinal); // members' history lengths, as last heard
    private List<OperationId> _toAnnounce = new();

    /// <summary>Mutation for the simulator's checker: merge what a view left in arrival order, which differs between members.</summary>
    public bool LeftoverInArrivalOrder { get; init; }

    /// <summary>The history's tail kept for peers, its length and chain hash.</summary>
    public RetainedHistory<TOp> History { get; } = new();

    public int ViewId { get; private set; } = -1;

    public bool IsSequencer { get; private set; }

    /// <summary>This member's name (its address) once it has a view: the issuer of its updates.</summary>
    public string? Self { get; set; }

    public int PendingCount => _pendingById.Count;

    /// <summary>Updates and list entries that arrived after a repair had put them into the history.</summary>
    public long LateDuplicates { get; private set; }

    public IEnumerable<(OperationId Id, TOp Op)> PendingInArrivalOrder()
    {
        foreach (OperationId id in _arrivals)
        {
            if (_pendingById.TryGetValue(id, out TOp? op)) yield return (id, op);
        }
    }

    public bool IsApplied(OperationId id) => _appliedThrough.GetValueOrDefault(id.Issuer) >= id.Sequence;

    /// <summary>An update arrived. True if this member is the sequencer and the update starts a new list (the driver schedules its announcement).</summary>
    public bool OnUpdate(OperationId id, TOp op)
    {
        if (IsApplied(id))
        {
            LateDuplicates++; // a repair put it in the history before its Send got here
            return false;
        }
        _pendingById[id] = op;
        _arrivals.Add(id);
        bool first = false;
        if (IsSequencer)
        {
            _toAnnounce.Add(id);
            first = _toAnnounce.Count == 1;
        }
        ApplyMerged();
        return first;
    }

    /// <summary>A merge list arrived (in the total order); one made in an earlier view is void.</summary>
    public void OnMerge(int viewId, IReadOnlyList<OperationId> ids)
    {
        if (viewId != ViewId) return;
        foreach (OperationId id in ids) _merged.Enqueue(id);
        ApplyMerged();
    }

    /// <summary>The sequencer's next list (the updates that reached it since the last one, in arrival order), if any.</summary>
    public (int ViewId, List<OperationId> Ids)? TakeAnnouncement()
    {
        if (!IsSequencer || _toAnnounce.Count == 0) return null;
        List<OperationId> batch = _toAnnounce;
        _toAnnounce = new List<OperationId>();
        return (ViewId, batch);
    }

    /// <summary>A view is installed: merge what the last one left, then start this one with nothing pending.</summary>
    public void OnView(int viewId, IReadOnlyList<string> members, int rank, IReadOnlyList<string> leavers)
    {
        MergeWhatTheViewLeft();
        _pendingById.Clear();
        _arrivals.Clear();
        _toAnnounce = new List<OperationId>();
        ViewId = viewId;
        IsSequencer = rank == 0;
        if (rank >= 0) Self ??= members[rank];
        // A leaver's updates can no longer arrive (a message is delivered in its view or nowhere).
        foreach (string leaver in leavers) _appliedThrough.Remove(leaver);
        foreach (string gone in _known.Keys.Where(k => !members.Contains(k)).ToList()) _known.Remove(gone);
        // A joiner holds at least what everyone held now (its state came from one of them).
        long floor = Floor();
        foreach (string member in members)
        {
            if (member != Self && !_known.ContainsKey(member)) _known[member] = floor;
        }
    }

    /// <summary>A checkpoint's header: the history loaded with it ends at <paramref name="length"/>, with chain hash <paramref name="chain"/>.</summary>
    public void Load(long length, long chain) => History.Reset(length, chain);

    /// <summary>Appends the listed updates to the history in list order, as far as they have arrived.</summary>
    private void ApplyMerged()
    {
        while (_merged.Count > 0)
        {
            OperationId id = _merged.Peek();
            if (IsApplied(id))
            {
                _merged.Dequeue(); // a repair got here first
                LateDuplicates++;
                continue;
            }
            if (!_pendingById.Remove(id, out TOp? op)) return; // its update has not arrived yet
            _merged.Dequeue();
            Apply(id, op);
        }
    }

    /// <summary>
    /// What the last view left, the same at every member that came through it: the listed updates
    /// it holds in list order, then the pending ones in id order. A member that a repair already
    /// carried past part of it finds that part applied and goes on from there, in the same order.
    /// </summary>
    private void MergeWhatTheViewLeft()
    {
        while (_merged.TryDequeue(out OperationId id))
        {
            if (_pendingById.Remove(id, out TOp? op)) Apply(id, op);
        }
        IEnumerable<(OperationId Id, TOp Op)> left = PendingInArrivalOrder();
        if (!LeftoverInArrivalOrder) left = left.OrderBy(p => p.Id);
        foreach (var (id, op) in left.ToList()) Apply(id, op);
    }

    private void Apply(OperationId id, TOp op)
    {
        _pendingById.Remove(id);
        History.Append(id, op);
        _appliedThrough[id.Issuer] = Math.Max(_appliedThrough.GetValueOrDefault(id.Issuer), id.Sequence);
        if (_arrivals.Count > 64 && _arrivals.Count > 2 * _pendingById.Count) _arrivals.RemoveAll(a => !_pendingById.ContainsKey(a));
        applied(id, op);
    }

    // ---------------------------------------------------------------- repair

    /// <summary>
    /// A peer's reply to a pull of this member: <paramref name="ids"/> and <paramref name="ops"/> are
    /// its history from position <paramref name="first"/>. Applies those that extend this member's
    /// history (none if its history moved on since it asked) and returns how many; a problem (a
    /// divergence, which the protocol rules out) is described in <paramref name="problem"/>.
    /// </summary>
    public long ApplyRepair(string peer, long first, IReadOnlyList<OperationId> ids, IReadOnlyList<TOp> ops, out string? problem)
    {
        problem = null;
        long before = History.Length;
        if (first != before) return 0;
        for (int i = 0; i < ids.Count; i++)
        {
            if (IsApplied(ids[i]))
            {
                problem = $"member {peer} has update {ids[i]} at history position {History.Length}, which this member holds earlier";
                break;
            }
            Apply(ids[i], ops[i]);
        }
        if (History.Length > before) ApplyMerged(); // lists waiting on an update the repair brought move on
        return History.Length - before;
    }

    /// <summary>Whether this member's chain agrees with <paramref name="chain"/> at <paramref name="length"/> (true if it cannot tell: that prefix is dropped or beyond its history).</summary>
    public bool Agrees(long length, long chain) => !History.TryChainAt(length, out long mine) || mine == chain;

    /// <summary>A member's history reached <paramref name="length"/> (it said so in gossip).</summary>
    public void NoteLength(string member, long length)
    {
        if (member.Length > 0 && member != Self) _known[member] = Math.Max(_known.GetValueOrDefault(member), length);
    }

    /// <summary>Drops the whole epochs every member of the view is known to hold.</summary>
    public void DropHeldEpochs() => History.DropBelow(Floor());

    /// <summary>The oldest history position a member of the view may still lack: the least length heard from each.</summary>
    private long Floor()
    {
        long floor = History.Length;
        foreach (long length in _known.Values) floor = Math.Min(floor, length);
        return floor;
    }
}
