namespace Isis.Core.Collections;

/// <summary>
/// The history/pending model of one replicated collection at one member, without I/O: updates,
/// merge lists and views go in; history entries (through the callback), the sequencer's lists and
/// repair replies come out. Isis.Collections' <c>OperationLog</c> drives it on a real group; the
/// simulator drives the same class on simulated members, and its checker judges the histories.
/// </summary>
/// <remarks>
/// <list type="number">
/// <item><b>Pending.</b> An update arrives (its Send was delivered) and is pending, in arrival
/// order, until it is merged.</item>
/// <item><b>Merge.</b> The view's oldest member is the sequencer: it lists the updates in the order
/// they reached it (<see cref="TakeAnnouncement"/>, one list in flight at a time), and the driver multicasts the list in one total
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
/// bulk (<see cref="MakePull"/>, <see cref="AnswerPull"/>, <see cref="OnPullReply"/>). The updates and list entries it then receives late are already
/// in its history: an issuer's updates join the history in its send order (Send is FIFO, lists keep
/// arrival order, and the end-of-view merge orders by id), so one number per issuer tells, and they
/// are dropped as duplicates. It still receives every message of the view, so it merges what the
/// view leaves from where the repair carried it, in the same order as everyone else.</item>
/// </list>
/// Not thread-safe: the driver serializes every call.
/// </remarks>
internal sealed class MergeLog<TOp>(Action<UpdateId, TOp> applied)
{
    private readonly Dictionary<UpdateId, TOp> _pendingById = new();
    private readonly List<UpdateId> _arrivals = new(); // pending ids in arrival order; merged ones are dropped lazily
    private readonly Queue<UpdateId> _merged = new(); // listed, waiting for their update to arrive
    private readonly Dictionary<string, long> _appliedThrough = new(StringComparer.Ordinal); // issuers of the view (and a repair's, from later views)
    private readonly Dictionary<string, long> _retired = new(StringComparer.Ordinal); // issuers that left: how far their updates got
    private readonly Queue<string> _retiredOrder = new(); // oldest first: past RetiredIssuersKept, the oldest is forgotten
    private readonly HashSet<string> _members = new(StringComparer.Ordinal);
    private readonly Dictionary<string, long> _known = new(StringComparer.Ordinal); // members' history lengths, as last heard
    private List<UpdateId> _toAnnounce = new();
    private bool _listInFlight; // the sequencer announced a list of this view that has not come back to it yet

    /// <summary>Mutation for the simulator's checker: merge what a view left in arrival order, which differs between members.</summary>
    public bool LeftoverInArrivalOrder { get; init; }

    /// <summary>The history's tail kept for peers, its length and chain hash.</summary>
    public RetainedHistory<TOp> History { get; } = new();

    public int ViewId { get; private set; } = -1;

    public bool IsSequencer { get; private set; }

    /// <summary>This member's name (its address) once it has a view: what gossip names it by.</summary>
    public string? Self { get; private set; }

    /// <summary>The first view this collection had (-1 before): with <see cref="Self"/>, it names the issuer of its updates.</summary>
    public int FirstViewId { get; private set; } = -1;

    /// <summary>
    /// The issuer of this collection's updates: the member's name and the first view the collection
    /// had. A process that leaves and joins again with a new collection, under the same address,
    /// issues under a new name (its first view comes after every view of the old one), so its
    /// sequence numbers never meet the old ones.
    /// </summary>
    public string Issuer => $"{Self}/{FirstViewId}";

    /// <summary>The member has view <paramref name="viewId"/> (the first one it sees names the collection's issuer).</summary>
    public void NoteView(string self, int viewId)
    {
        if (FirstViewId >= 0) return;
        Self = self;
        FirstViewId = viewId;
    }

    private static (string Member, int FirstView) ParseIssuer(string issuer)
    {
        int slash = issuer.LastIndexOf('/');
        return slash < 0 || !int.TryParse(issuer.AsSpan(slash + 1), System.Globalization.NumberStyles.Integer, System.Globalization.CultureInfo.InvariantCulture, out int view)
            ? (issuer, int.MaxValue)
            : (issuer[..slash], view);
    }

    public int PendingCount => _pendingById.Count;

    /// <summary>Updates and list entries that arrived after a repair had put them into the history.</summary>
    public long LateDuplicates { get; private set; }

    public IEnumerable<(UpdateId Id, TOp Op)> PendingInArrivalOrder()
    {
        foreach (UpdateId id in _arrivals)
        {
            if (_pendingById.TryGetValue(id, out TOp? op)) yield return (id, op);
        }
    }

    public bool IsApplied(UpdateId id) => _appliedThrough.GetValueOrDefault(id.Issuer) >= id.Sequence;

    /// <summary>
    /// How many issuers that left the view this member remembers, with how far their updates got
    /// (about 50 bytes each, and as much in a joiner's checkpoint): a wait on one of their updates
    /// still has an answer, in the history or lost with its issuer.
    /// </summary>
    public const int RetiredIssuersKept = 4_096;

    /// <summary>
    /// What became of update <paramref name="id"/> as this member sees it now: in its history, still
    /// to come (its issuer is a member, or from a view this member has not reached), lost (its issuer
    /// left and the update is not in the history: it never will be), or unknown (its issuer is no
    /// member and this member does not remember it: it left more than <see cref="RetiredIssuersKept"/>
    /// issuers ago, or never issued to this collection).
    /// </summary>
    public UpdateFate Fate(UpdateId id)
    {
        if (IsApplied(id)) return UpdateFate.Applied;
        if (_retired.TryGetValue(id.Issuer, out long through)) return id.Sequence <= through ? UpdateFate.Applied : UpdateFate.Lost;
        (string member, int firstView) = ParseIssuer(id.Issuer);
        if (ViewId < 0 || firstView > ViewId || _members.Contains(member)) return UpdateFate.Pending;
        return UpdateFate.Unknown;
    }

    /// <summary>
    /// An update arrived. True if this member is the sequencer, the update starts a new list and no
    /// list of its own is in flight: the driver announces it (at once, or after its merge interval).
    /// </summary>
    public bool OnUpdate(UpdateId id, TOp op)
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
            first = _toAnnounce.Count == 1 && !_listInFlight;
        }
        ApplyMerged();
        return first;
    }

    /// <summary>
    /// A merge list arrived (in the total order); one made in an earlier view is void. True if this
    /// member is the sequencer, the list was its one in flight, and updates wait for the next list:
    /// the driver announces it.
    /// </summary>
    public bool OnMerge(int viewId, IReadOnlyList<UpdateId> ids)
    {
        if (viewId != ViewId) return false;
        foreach (UpdateId id in ids) _merged.Enqueue(id);
        ApplyMerged();
        // Only the sequencer lists in a view, so a list of this view that reaches it is its own.
        if (!IsSequencer || !_listInFlight) return false;
        _listInFlight = false;
        return _toAnnounce.Count > 0;
    }

    /// <summary>
    /// The sequencer's next list (the updates that reached it since the last one, in arrival order),
    /// if it has one and none of its lists is in flight. One list at a time: an update waits at most
    /// for the list in flight to come back and then for its own, and under load each list carries
    /// all that arrived meanwhile (the merge batches itself, as Nagle's rule does).
    /// </summary>
    public (int ViewId, List<UpdateId> Ids)? TakeAnnouncement()
    {
        if (!IsSequencer || _toAnnounce.Count == 0 || _listInFlight) return null;
        List<UpdateId> batch = _toAnnounce;
        _toAnnounce = new List<UpdateId>();
        _listInFlight = true;
        return (ViewId, batch);
    }

    /// <summary>A view is installed: merge what the last one left, then start this one with nothing pending.</summary>
    public void OnView(int viewId, IReadOnlyList<string> members, int rank)
    {
        MergeWhatTheViewLeft();
        _pendingById.Clear();
        _arrivals.Clear();
        _toAnnounce = new List<UpdateId>();
        _listInFlight = false; // a list of the last view is void; it comes back or not, no matter
        ViewId = viewId;
        IsSequencer = rank == 0;
        if (rank >= 0) NoteView(members[rank], viewId);
        // An issuer that was in an earlier view and is not in this one left: its updates can no longer
        // arrive (a message is delivered in its view or nowhere), and if its process joins again,
        // its new collection issues under a new name. (An issuer whose first view is later than this
        // one is a repair's, from a view this member has not reached yet: it stays.)
        // It is remembered a while, with how far its updates got: a wait on one of them is answered.
        _members.Clear();
        _members.UnionWith(members);
        foreach (string issuer in _appliedThrough.Keys.ToList())
        {
            (string member, int firstView) = ParseIssuer(issuer);
            if (!_members.Contains(member) && firstView <= viewId && _appliedThrough.Remove(issuer, out long through)) Retire(issuer, through);
        }
        foreach (string gone in _known.Keys.Where(k => !members.Contains(k)).ToList()) _known.Remove(gone);
        // A joiner holds at least what everyone held now (its state came from one of them).
        long floor = Floor();
        foreach (string member in members)
        {
            if (member != Self && !_known.ContainsKey(member)) _known[member] = floor;
        }
    }

    private void Retire(string issuer, long through)
    {
        if (_retired.TryAdd(issuer, through)) _retiredOrder.Enqueue(issuer);
        else _retired[issuer] = Math.Max(_retired[issuer], through);
        while (_retiredOrder.Count > RetiredIssuersKept) _retired.Remove(_retiredOrder.Dequeue());
    }

    /// <summary>A checkpoint's header: the history loaded with it ends at <paramref name="length"/>, with chain hash <paramref name="chain"/>.</summary>
    public void Load(long length, long chain) => History.Reset(length, chain);

    /// <summary>
    /// How far each issuer's updates got in the history, as a checkpoint carries it: the issuers of
    /// the view, then those that left, oldest first (<see cref="LoadIssuers"/> takes it back).
    /// </summary>
    public IssuersApplied SaveIssuers() => new(
        _appliedThrough.Keys.ToArray(), _appliedThrough.Values.ToArray(),
        _retiredOrder.ToArray(), _retiredOrder.Select(i => _retired[i]).ToArray());

    /// <summary>A checkpoint's record of how far each issuer's updates got: a joiner's history holds them, and it answers waits on them as every member does.</summary>
    public void LoadIssuers(IssuersApplied issuers)
    {
        for (int i = 0; i < issuers.Live.Length && i < issuers.LiveThrough.Length; i++)
        {
            _appliedThrough[issuers.Live[i]] = Math.Max(_appliedThrough.GetValueOrDefault(issuers.Live[i]), issuers.LiveThrough[i]);
        }
        for (int i = 0; i < issuers.Retired.Length && i < issuers.RetiredThrough.Length; i++) Retire(issuers.Retired[i], issuers.RetiredThrough[i]);
    }

    /// <summary>Appends the listed updates to the history in list order, as far as they have arrived.</summary>
    private void ApplyMerged()
    {
        while (_merged.Count > 0)
        {
            UpdateId id = _merged.Peek();
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
        while (_merged.TryDequeue(out UpdateId id))
        {
            if (_pendingById.Remove(id, out TOp? op)) Apply(id, op);
        }
        IEnumerable<(UpdateId Id, TOp Op)> left = PendingInArrivalOrder();
        if (!LeftoverInArrivalOrder) left = left.OrderBy(p => p.Id);
        foreach (var (id, op) in left.ToList()) Apply(id, op);
    }

    private void Apply(UpdateId id, TOp op)
    {
        _pendingById.Remove(id);
        History.Append(id, op);
        _appliedThrough[id.Issuer] = Math.Max(_appliedThrough.GetValueOrDefault(id.Issuer), id.Sequence);
        if (_arrivals.Count > 64 && _arrivals.Count > 2 * _pendingById.Count) _arrivals.RemoveAll(a => !_pendingById.ContainsKey(a));
        applied(id, op);
    }

    // ---------------------------------------------------------------- repair

    private long _behindTarget; // a peer's length, seen in an earlier exchange, that this member had not reached then

    /// <summary>True while this member's history is shorter than a peer's was at an earlier exchange: its handlers trail.</summary>
    public bool Trailing => _behindTarget > History.Length;

    /// <summary>
    /// What this member sends a peer to compare histories: its length and chain, and whether it
    /// wants the entries from its length on. It wants them only if it has not reached, by now, what a
    /// peer held at an earlier exchange: its own deliveries bring those entries too (a peer is ahead
    /// by a few milliseconds of merges all the time), so only a member that trails pulls.
    /// </summary>
    public PullRequest MakePull() => new(History.Length, History.Chain, Trailing, Heard());

    /// <summary>
    /// The history lengths this member knows of, its own included: every gossip message carries
    /// them, so what each member holds spreads epidemically and every member can tell soon what all
    /// hold (what a repair may hand over, and which epochs may go). A view's worth of pairs.
    /// </summary>
    private MemberLength[] Heard() => [new MemberLength(Self ?? "", History.Length), .. _known.Select(k => new MemberLength(k.Key, k.Value))];

    /// <summary>
    /// A peer's pull (its length and chain, and whether it wants entries): what this member answers.
    /// It hands over only entries that every other member of the view is known to hold already
    /// (<see cref="ServableLength"/>): an entry this member merged from a list that no one else
    /// received yet could still be ordered otherwise if this member failed, and a puller that took
    /// it would then hold another history than the survivors.
    /// </summary>
    public PullReply<TOp> AnswerPull(string requester, PullRequest pull, int maxEntries)
    {
        NoteLength(requester, pull.Length);
        foreach (MemberLength heard in pull.Heard) NoteLength(heard.Member, heard.Length);
        bool agrees = Agrees(pull.Length, pull.Chain);
        long servable = ServableLength(requester);
        int max = (int)Math.Clamp(servable - pull.Length, 0, maxEntries);
        ReadOnlySpan<RetainedHistory<TOp>.Entry> entries = pull.WantEntries && agrees ? History.Range(pull.Length, max) : [];
        var ids = new UpdateId[entries.Length];
        var ops = new TOp[entries.Length];
        for (int i = 0; i < entries.Length; i++)
        {
            ids[i] = entries[i].Id;
            ops[i] = entries[i].Op;
        }
        DropHeldEpochs();
        return new PullReply<TOp>(History.Length, agrees, History.Start, pull.Length, ids, ops, Heard());
    }

    /// <summary>
    /// The peer's answer to this member's pull: applies the entries that extend this member's
    /// history (none if its own deliveries moved it on since it asked) and says what happened.
    /// </summary>
    public RepairOutcome OnPullReply(string peer, PullReply<TOp> reply)
    {
        NoteLength(peer, reply.Length);
        foreach (MemberLength heard in reply.Heard) NoteLength(heard.Member, heard.Length);
        long before = History.Length;
        string? divergence = null, tooFarBehind = null;
        if (!reply.Agrees)
        {
            divergence = $"member {peer} holds another history than this member at position {reply.First} (their chain hashes differ)";
        }
        else if (reply.First == before)
        {
            for (int i = 0; i < reply.Ids.Length; i++)
            {
                if (IsApplied(reply.Ids[i]))
                {
                    divergence = $"member {peer} has update {reply.Ids[i]} at history position {History.Length}, which this member holds earlier";
                    break;
                }
                Apply(reply.Ids[i], reply.Ops[i]);
            }
            if (History.Length > before) ApplyMerged(); // lists waiting on an update the repair brought move on
            else if (Trailing && reply.First < reply.RetainedFrom && reply.Length > before)
            {
                // Cannot happen while members report their lengths (nothing a member of the view lacks is dropped); said if it does.
                tooFarBehind = $"member {peer} no longer keeps history position {reply.First}, which this member lacks (it keeps from {reply.RetainedFrom}); " +
                    "gossip cannot repair this member, but its own deliveries still bring the updates";
            }
        }
        long now = History.Length;
        _behindTarget = reply.Length > now ? Math.Max(_behindTarget, reply.Length) : 0;
        DropHeldEpochs();
        return new RepairOutcome(before, now - before, now > before && reply.Length > now, divergence, tooFarBehind);
    }

    /// <summary>Whether this member's chain agrees with <paramref name="chain"/> at <paramref name="length"/> (true if it cannot tell: that prefix is dropped or beyond its history).</summary>
    private bool Agrees(long length, long chain) => !History.TryChainAt(length, out long mine) || mine == chain;

    /// <summary>A member of this view holds <paramref name="length"/> entries (it said so in gossip, or a member that heard it did).</summary>
    private void NoteLength(string member, long length)
    {
        if (member != Self && _known.TryGetValue(member, out long known) && length > known) _known[member] = length;
    }

    /// <summary>Drops the whole epochs every member of the view is known to hold.</summary>
    private void DropHeldEpochs() => History.DropBelow(Floor());

    /// <summary>
    /// How far a repair for <paramref name="requester"/> may go: the least history length of every
    /// other member of the view (this one's own, and the others' as last heard). Those entries are
    /// in the history of every member but the requester, so whichever of them survive hold them at
    /// the same positions, and the requester can take them without ever disagreeing with a survivor.
    /// </summary>
    private long ServableLength(string requester)
    {
        long servable = History.Length;
        foreach (var (member, length) in _known)
        {
            if (member != requester) servable = Math.Min(servable, length);
        }
        return servable;
    }

    /// <summary>The oldest history position a member of the view may still lack: the least length heard from each.</summary>
    private long Floor()
    {
        long floor = History.Length;
        foreach (long length in _known.Values) floor = Math.Min(floor, length);
        return floor;
    }
}

/// <summary>What became of an update, as one member sees it (<see cref="MergeLog{TOp}.Fate"/>).</summary>
internal enum UpdateFate
{
    /// <summary>In this member's history.</summary>
    Applied,

    /// <summary>Not yet: its issuer is a member, or from a view this member has not reached.</summary>
    Pending,

    /// <summary>Its issuer left and it is not in the history: it never will be.</summary>
    Lost,

    /// <summary>Its issuer is no member, and this member does not remember it.</summary>
    Unknown,
}

/// <summary>How far each issuer's updates got in a history: the view's issuers, then those that left (oldest first).</summary>
internal sealed record IssuersApplied(string[] Live, long[] LiveThrough, string[] Retired, long[] RetiredThrough);

/// <summary>A member's side of a gossip exchange: its history's length and chain, whether it wants the entries from its length on, and the lengths it has heard of.</summary>
internal readonly record struct PullRequest(long Length, long Chain, bool WantEntries, MemberLength[] Heard);

/// <summary>A member's history length, as some member heard it.</summary>
internal readonly record struct MemberLength(string Member, long Length);

/// <summary>
/// A peer's answer to a pull: its history's length, whether its chain agrees with the puller's at
/// the puller's length, the oldest position it keeps, its entries from <see cref="First"/> (the
/// puller's length) on if the puller wanted them, and the lengths it has heard of.
/// </summary>
internal sealed record PullReply<TOp>(long Length, bool Agrees, long RetainedFrom, long First, UpdateId[] Ids, TOp[] Ops, MemberLength[] Heard);

/// <summary>What a pull's reply did: entries gained from position <see cref="Before"/>, whether the peer holds more, and a problem to report.</summary>
internal readonly record struct RepairOutcome(long Before, long Gained, bool More, string? Divergence, string? TooFarBehind);
