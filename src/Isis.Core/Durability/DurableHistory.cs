using Isis.Core.Common;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Durability;

/// <summary>How a member that does not hold the history comes to hold it (see <see cref="DurableHistory"/>).</summary>
internal enum HistoryPlanMode : byte
{
    /// <summary>A member of the view holds the history: copy it from that member.</summary>
    Transfer = 1,

    /// <summary>Nobody in the view holds it (a total crash): rebuild it from the longest log of the last view, once every member of that view is back (or the missing ones provably held nothing more).</summary>
    Recover = 2,

    /// <summary>Nobody has ever held a history of this group: start an empty one.</summary>
    Fresh = 3,
}

/// <summary>
/// The decision of a view's oldest member: who serves the history, how long it is, its epoch and
/// lineage, and (when the source's log is trimmed) who serves a checkpoint that covers the trimmed
/// part, and up to which entry that checkpoint holds.
/// </summary>
internal sealed record HistoryPlan(HistoryPlanMode Mode, NodeId Source, long Target, long Epoch, Lineage Lineage, long Trimmed = 0, NodeId Provider = default, long ProviderCheckpoint = 0)
{
    /// <summary>Why a recovery went ahead without every member of the last view (None: it did not).</summary>
    public HistoryRecovery Reason { get; init; }

    /// <summary>The members of the last view a recovery went ahead without.</summary>
    public NodeId[] Missing { get; init; } = [];

    /// <summary>The last view a recovery rebuilt the history from (its key), for the report.</summary>
    public HistoryViewKey LastView { get; init; }

    /// <summary>Every incarnation a forced recovery of this history gave up, this one's included: never taken as part of the history.</summary>
    public NodeId[] GaveUp { get; init; } = [];

    /// <summary>The <see cref="HistoryDigest"/> of the source's entries 1..Target (unknown if its log predates digests): a member's own checkpoint at Target is restored only if it agrees.</summary>
    public ulong TargetDigest { get; init; } = HistoryDigest.Unknown;
}

/// <summary>Why a recovery of the history went ahead without every member of its last view.</summary>
internal enum HistoryRecovery : byte
{
    /// <summary>It did not: every member of the last view came back (or nobody needed to).</summary>
    None = 0,

    /// <summary>The operator forced it (some member allowed it): SafeSends only the missing members held are lost.</summary>
    Forced = 1,

    /// <summary>
    /// On its own, because the rules prove that the missing members held nothing the recovered
    /// history lacks (the membership service remembered the last logged view as the group's last,
    /// and its first member came back: DurableHistory.ProvedNothingOnlyTheMissingHeld). Nothing is lost.
    /// </summary>
    ProvedComplete = 2,
}

/// <summary>
/// The SafeSend history of one group with disk durability, at one member: the sequence of every
/// SafeSend (and SafeQuery) delivered in the group since it was founded, kept in a log on this
/// member's disk, its prefix trimmed once persistent checkpoints hold it.
/// </summary>
/// <remarks>
/// <para>The rules (docs/architecture.md, "Durable history", has the proof sketch):</para>
/// <list type="number">
/// <item><b>Every member keeps the whole history</b>, either in its log or in a persistent
/// checkpoint that holds a prefix of it (the log then starts after the checkpoint's last entry).
/// A member that holds it is <i>current</i>. A current member logs every SafeSend of its view at
/// the moment it holds it and every earlier position of the total order (an acceptor does so
/// before it acknowledges), and the SafeSends the view change delivers at a view's end. So every
/// current member's history is a prefix of one sequence.</item>
/// <item><b>A member that is not current takes no part.</b> It neither acknowledges nor sends,
/// and what the group would hand its application (views, deliveries) waits until it is current;
/// then the history is replayed to the application first, in order (after the checkpoint it
/// restores, if any).</item>
/// <item><b>Who makes a member current</b> is decided in each view by its oldest member, from a
/// status every member sends it. If some member of the view is current, the others copy its history
/// as it stood when the view began (Transfer). If none is (all members are new, as after every
/// member crashed), the history is rebuilt from logs (Recover): among the logs the members bring,
/// take the one with the latest view in which its owner was current; once every member of that
/// view has come back, the longest log of that view is the history. Members of that view may stay
/// missing when the membership service told this incarnation of the group that the view was its
/// last and the view's first member came back (DurableHistory.Plan.cs,
/// ProvedNothingOnlyTheMissingHeld), or when the operator forces it. Only when no member brings a
/// log that was ever current does the group start an empty history (Fresh).</item>
/// <item><b>Nothing is lost by copying.</b> A member's old log is replaced only by a history it
/// received in full, written aside and renamed over it; a log of another lineage is kept aside.</item>
/// <item><b>A prefix goes only when a checkpoint holds it</b> (DurableHistory.Trimming.cs): a
/// current member trims its log to the older of its two newest durable checkpoints, so one
/// damaged checkpoint never leaves its log without a start. A member that copies the history and
/// has no checkpoint at or past the source's trim point first copies a checkpoint (the source's,
/// or the plan's provider's), then the entries after it.</item>
/// <item><b>A checkpoint is used only if it holds a prefix of the history</b>: its digest
/// (<see cref="HistoryDigest"/>) must agree with the history's at its index. Lineage and index are
/// not enough: SafeSends every acceptor delivered and then lost with its crash leave their indices
/// to others, and an acceptor's checkpoint may hold them. One that disagrees is dropped and reported.</item>
/// </list>
/// </remarks>
internal sealed partial class DurableHistory
{
    private readonly ProcessNode _node;
    private readonly GroupMember _member;
    private HistoryLogImage _image; // what this member's log held when it started (its entries dropped once it holds the history)
    private List<HistoryEntry> _entries = []; // entries _trimmed+1 .. Count
    private readonly PayloadSlabs _slabs; // the payloads of the entries logged while current
    private long _trimmed;                     // entries 1.._trimmed are held in a persistent checkpoint only
    private List<ulong> _chain = [];           // while current: the HistoryDigest of entries 1..i, for each entry i of _entries
    private ulong _trimmedDigest = HistoryDigest.Empty; // the HistoryDigest of entries 1.._trimmed
    private long _epoch;
    private Lineage _lineage;
    private long _viewStart; // entries at the start of the current view, while current
    // While current: the checkpoint offered, for this view, to members that copy the history as of its start
    // (fixed when the view begins: plans name it, so trimming and eviction keep it until every member is current).
    private CheckpointMark? _offered;

    // While not current, per view: the plan to follow.
    private GroupView? _view;
    private int _rank = -1;
    private HistoryPlan? _plan;
    private bool _answered; // the oldest member answered our status with its plan in this view
    private long _nextStatusAt;

    // The oldest member of a view collects every member's status and decides the plan.
    private readonly Dictionary<NodeId, HistoryStatus> _statuses = new();

    // Forced recovery: allowed by the operator here (until this member holds the history), and the
    // incarnations forced recoveries of this history gave up (their logs and checkpoints are suspect):
    // those its log names, and those of the plan it came to hold the history by (logged then). A plan
    // it only follows binds nothing yet: a view change voids it before anyone holds the history by it.
    private NodeId[]? _forcedWithout;
    private readonly HashSet<NodeId> _gaveUp = new();
    // Not current: this member's own checkpoints, set aside because the plan it follows gives up an
    // incarnation that wrote its log (dropped once it holds the history, usable again if a view change voids the plan).
    private readonly HashSet<CheckpointMark> _setAside = new();
    private HistoryPlan? _decided;
    private ulong? _imageDigest; // the HistoryDigest of the log it brought, entries 1..Count (statuses carry it)
    private string? _lastWaiting;

    public DurableHistory(ProcessNode node, GroupMember member, HistoryLogImage image, IReadOnlyList<CheckpointMark> checkpoints)
    {
        _node = node;
        _slabs = new PayloadSlabs(node.Options.HistorySlabBytes, (node.Options.Mutations & ProtocolMutations.SlabReusedBeforeTrim) != 0);
        _member = member;
        _image = image;
        _kept.AddRange(checkpoints);
        _forcedWithout = image.ForcedWithout;
        _gaveUp.UnionWith(image.GaveUp);
        // Before the join request leaves (the driver makes it durable before the step's packets):
        // any view that will ever name this incarnation can then be matched to this log.
        Append(HistoryLog.Incarnation(node.Writer, node.Self));
        if (image.Unreadable > 0)
        {
            node.Emit(new HistoryNotice(member.Id, HistoryNoticeKind.DamagedLog,
                $"{image.Unreadable} record(s) of this member's SafeSend log are damaged or out of place and were ignored; " +
                $"{image.Entries.Count} history entries before them are intact"));
        }
    }

    /// <summary>This member holds the whole history and takes part in the group.</summary>
    public bool Current { get; private set; }

    /// <summary>SafeSends in the history held here (while current), trimmed ones included.</summary>
    public long Count => _trimmed + _entries.Count;

    /// <summary>Entries of the history held here that its log no longer holds (a checkpoint does).</summary>
    public long Trimmed => _trimmed;

    /// <summary>The plan this member follows in its view, if it is not current and one was decided.</summary>
    internal HistoryPlan? Plan => _plan;

    private bool RecoverFromOldestOnly => (_node.Options.Mutations & ProtocolMutations.RecoverFromOldestOnly) != 0;

    private bool FoundOverKnownHistory => (_node.Options.Mutations & ProtocolMutations.FoundOverKnownHistory) != 0;

    private bool CopyOverLogInPlace => (_node.Options.Mutations & ProtocolMutations.CopyOverLogInPlace) != 0;

    private void Append(byte[] record) => _node.Outbox.HistoryWrites.Add(new HistoryWrite(_member.Id, [record], Rewrite: false, KeepOldAside: false));

    // ---------------------------------------------------------------- views

    /// <summary>A view is installed here (after the old view's last SafeSends were logged).</summary>
    public void OnViewInstalled(GroupView view, int rank, long now)
    {
        _view = view;
        _rank = rank;
        _statuses.Clear();
        _decided = null;
        _lastWaiting = null;
        // A new view restarts the plan: the history may now come from another member. A plan
        // nobody here came to hold the history by gave nobody up (see SetAsideGivenUp).
        _plan = null;
        if (!Current) _setAside.Clear();
        _pull = null;
        _answered = false;
        _allCurrent = false;
        if (!Current && rank == 0 && view.Id == 1 && _image.LastView == null && (!_image.FoundedElsewhere || FoundOverKnownHistory) && !RecoverFromOldestOnly)
        {
            // The group's first view ever (the membership service numbers a group's views from 1
            // and never reuses a number): no history exists, so its oldest member founds one at
            // once, in this step, before anything can crash in between and leave nobody holding it.
            // A membership service that itself restarted forgets the group and numbers from 1
            // again: the driver's registry of durable groups (FoundedElsewhere) then says a history
            // exists, and this member waits for the logs that hold it instead. Without a registry
            // that knows (another machine's process first), a new history is founded, and logs of
            // the old one that arrive later are kept aside - docs/semantics.md.
            _plan = new HistoryPlan(HistoryPlanMode.Fresh, _node.Self, 0, 1, new Lineage(_node.Self, view.Id));
            BecomeCurrent(0, [], restore: null, rewrite: false, baseDigest: HistoryDigest.Empty);
        }
        if (Current)
        {
            _viewStart = Count;
            _offered = Usable(_lineage, _trimmed, _viewStart);
            if (_plan == null) Append(HistoryLog.View(_node.Writer, CurrentViewRecord()));
            // The oldest member, current, decides at once: the others copy from it. (Current
            // members still report to it, so it learns when every member is current, and an oldest
            // member that is not current learns of them.)
            if (rank == 0)
            {
                _decided = TransferFromMe();
                _answered = true;
                NoteOwnStatusCurrent();
                return;
            }
        }
        SendStatus(now);
    }

    private HistoryViewRecord CurrentViewRecord() => new(new HistoryViewKey(_epoch, _view!.Id), _lineage, _node.Self, _view.Members);

    /// <summary>When <see cref="Tick"/> next sends a status or a pull (see <see cref="GroupMember.NextDeadline"/>).</summary>
    public long NextDeadline
    {
        get
        {
            if (_view == null) return long.MaxValue;
            long d = _answered ? long.MaxValue : _nextStatusAt;
            if (!Current && _pull != null) d = Math.Min(d, _pull.NextAt);
            return d;
        }
    }

    public void Tick(long now)
    {
        if (_view == null) return;
        if (!_answered && now >= _nextStatusAt) SendStatus(now);
        if (!Current && _pull != null && now >= _pull.NextAt) RetryPull(now);
    }

    // ---------------------------------------------------------------- becoming current

    /// <summary>
    /// This member now holds the history: entries 1..<paramref name="trimmed"/> in the checkpoint
    /// <paramref name="restore"/> (it must hold at least them), the rest in <paramref name="entries"/>.
    /// Make it durable (a complete new log written aside and renamed over the old one, or a View
    /// record after the entries its log already holds), replay it to the application, and take
    /// part from now on.
    /// </summary>
    /// <remarks>
    /// A copy written aside in parts as it arrived (<paramref name="staged"/>, see
    /// <see cref="StagePart"/>) is completed by its last part and renamed over the log in this
    /// step, instead of being written whole here.
    /// </remarks>
    private void BecomeCurrent(long trimmed, List<HistoryEntry> entries, CheckpointMark? restore, bool rewrite, ulong baseDigest, PullState? staged = null)
    {
        HistoryPlan plan = _plan!;
        // The plan's give-ups bind from here on (logged below): this member's history is the one it continues.
        _gaveUp.UnionWith(plan.GaveUp);
        if (_setAside.Count > 0)
        {
            _kept.RemoveAll(_setAside.Contains);
            _setAside.Clear();
        }
        _slabs.Clear(); // no entry of the history held before is held from here on
        _entries = entries;
        _trimmed = trimmed;
        _trimmedDigest = baseDigest;
        _chain = new List<ulong>(entries.Count);
        foreach (HistoryEntry e in entries) _chain.Add(HistoryDigest.Next(_chain.Count == 0 ? baseDigest : _chain[^1], e));
        _epoch = plan.Epoch;
        _lineage = plan.Lineage;
        _viewStart = Count;
        Current = true;
        _offered = Usable(_lineage, _trimmed, _viewStart);
        _pull = null;
        // Checkpoints of this history that are not a prefix of it are never restored nor trimmed behind (callers checked the one they pass).
        RejectNotPrefix(_lineage, DigestAt, _trimmed, Count);
        restore ??= trimmed == 0 ? ChooseCheckpoint(Count) : null;
        Invariant.Check(trimmed == 0 || (restore != null && restore.Index >= trimmed && restore.Lineage == _lineage),
            "a member holds a trimmed history only with a checkpoint of its lineage at or past the trim point");
        Invariant.Check(restore == null || PrefixUnchecked || HistoryDigest.Agree(restore.Digest, DigestAt(restore.Index)),
            "a member restores only a checkpoint that holds a prefix of the history it holds");
        _forcedWithout = null;
        if (rewrite)
        {
            // A log of another lineage holds a history this group does not descend from, and a log
            // a forced recovery gave up may hold SafeSends the group lost: keep either.
            bool foreign = _image.LastView != null && _image.LastView.Lineage != _lineage && _image.Entries.Count > 0;
            bool givenUp = !foreign && IsGivenUp && _image.Entries.Count > 0;
            if (foreign)
            {
                _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.ForeignLog,
                    $"this member's SafeSend log belongs to another history (lineage {_image.LastView!.Lineage}, {_image.Count} entries, last view {_image.LastView.Key}) " +
                    $"than the running group's ({_lineage}): it is kept aside, not merged. It was founded while the members holding it were away"));
            }
            if (givenUp)
            {
                _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.GivenUpLog,
                    $"this member's SafeSend log ({_image.Count} entries, last view {_image.LastView?.Key.ToString() ?? "none"}) was written by an incarnation " +
                    "that a forced recovery of the group gave up: it may hold SafeSends the group lost, so it is kept aside, not merged, " +
                    "and this member copied the group's history"));
            }
            RewriteLog(keepOldAside: foreign || givenUp, staged);
        }
        else
        {
            Append(HistoryLog.View(_node.Writer, CurrentViewRecord()));
            if (_gaveUp.Count > _image.GaveUp.Count) Append(HistoryLog.GaveUp(_node.Writer, _gaveUp));
        }
        if (plan.Reason != HistoryRecovery.None)
        {
            _node.Emit(new HistoryRecoveredWithout(_member.Id, plan.Reason, plan.Missing, Count, plan.LastView, DescribeRecovery(plan)));
        }
        _member.OnHistoryCurrent(entries, Count, plan, _lineage, restore, DigestAt(Count));
        if (_rank == 0)
        {
            NoteOwnStatusCurrent();
        }
        else
        {
            // Tell the oldest member at once, and until it says every member is current.
            _answered = false;
            _nextStatusAt = 0;
        }
        TrimToCheckpoints(); // checkpoints named at join may already cover a prefix
        // The log's entries read at start are the history's now, or were never part of it: held
        // here as well, they would stay in memory after the history is trimmed past them.
        _image = _image with { Entries = [] };
    }

    /// <summary>
    /// Replaces this member's log by what it holds now: its incarnations (a view not yet known to
    /// have dropped an earlier incarnation of this member may still name it, and a recovery must
    /// recognise it), this view, the trim point, and the entries after it.
    /// </summary>
    private void RewriteLog(bool keepOldAside, PullState? staged = null)
    {
        if (staged is { StagedParts: > 0 } && staged.StagedHeader == HeaderKey(staged.Base))
        {
            // The copy is aside already but for the entries received since its last part: they end
            // it, and only then (durable, whole) does it replace the log.
            var rest = new List<byte[]>(_entries.Count - staged.Staged);
            for (int k = staged.Staged; k < _entries.Count; k++) rest.Add(HistoryLog.Entry(_node.Writer, _entries[k]));
            _node.Outbox.HistoryWrites.Add(CopyOverLogInPlace
                ? new HistoryWrite(_member.Id, rest, Rewrite: false, KeepOldAside: false)
                : new HistoryWrite(_member.Id, rest, Rewrite: false, KeepOldAside: keepOldAside, HistoryStage.Commit));
            return;
        }
        List<byte[]> records = LogHeader(_epoch, _lineage, _trimmed, _trimmedDigest, _entries.Count);
        foreach (HistoryEntry e in _entries) records.Add(HistoryLog.Entry(_node.Writer, e));
        _node.Outbox.HistoryWrites.Add(new HistoryWrite(_member.Id, records, Rewrite: true, KeepOldAside: keepOldAside));
    }

    /// <summary>
    /// The records a rewritten log starts with: its incarnations but the ones a forced recovery
    /// gave up (a view not yet known to have dropped an earlier incarnation of this member may
    /// still name it, and a recovery must recognise it; a given-up one it must not count), this
    /// view as one in which this member holds the history of
    /// <paramref name="lineage"/> in <paramref name="epoch"/>, the trim point, and the incarnations
    /// forced recoveries gave up; room for <paramref name="entries"/> more.
    /// </summary>
    private List<byte[]> LogHeader(long epoch, Lineage lineage, long trimmed, ulong trimmedDigest, int entries)
    {
        var records = new List<byte[]>(entries + _image.Incarnations.Count + 4);
        foreach (NodeId earlier in _image.Incarnations)
        {
            // A given-up incarnation's log was replaced by the history this member holds now: naming
            // it would make this log suspect (never counted) in every later recovery.
            if (!_gaveUp.Contains(earlier) || GivenUpHistoryUsed) records.Add(HistoryLog.Incarnation(_node.Writer, earlier));
        }
        records.Add(HistoryLog.Incarnation(_node.Writer, _node.Self));
        records.Add(HistoryLog.View(_node.Writer, new HistoryViewRecord(new HistoryViewKey(epoch, _view!.Id), lineage, _node.Self, _view.Members)));
        if (trimmed > 0) records.Add(HistoryLog.Trim(_node.Writer, trimmed, trimmedDigest));
        if (_gaveUp.Count > 0) records.Add(HistoryLog.GaveUp(_node.Writer, _gaveUp));
        return records;
    }

    /// <summary>What a log header written now says, but for the epoch and lineage (the plan's): a copy's parts and its end must agree on it.</summary>
    private (int ViewId, long Trimmed, int GaveUp) HeaderKey(long trimmed) => (_view!.Id, trimmed, _gaveUp.Count);

    /// <summary>
    /// The newest persistent checkpoint that holds a prefix of this history: made in the same
    /// lineage (indices of another history mean other SafeSends), no further than the history
    /// reaches (a checkpoint past it would hold SafeSends the group no longer has), and with the
    /// history's digest at its index (<see cref="BecomeCurrent"/> dropped the others first). Checkpoints are
    /// this member's own: the application's state after a restart is the checkpoint plus the
    /// entries after it, the same state every member reaches from the history (the SafeSends are
    /// what survives a total crash; docs/semantics.md).
    /// </summary>
    private CheckpointMark? ChooseCheckpoint(long entries)
    {
        if (_kept.Count == 0) return null;
        if (Usable(_lineage, 0, entries) is { } c) return c;
        _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.CheckpointNotUsed,
            $"none of this member's {_kept.Count} persistent checkpoint(s) holds a part of the group's SafeSend history " +
            $"({_lineage}, {entries} entries): they were made in another history ({string.Join(", ", _kept.Select(c => $"{c.Name}: {c.Lineage}, {c.Index} entries"))}); " +
            "the whole history is replayed instead"));
        return null;
    }

    /// <summary>While current: the <see cref="HistoryDigest"/> of entries 1..<paramref name="index"/> (unknown below the trim point or past the end).</summary>
    private ulong DigestAt(long index)
    {
        if (index == _trimmed) return _trimmedDigest;
        if (index < _trimmed || index > Count) return HistoryDigest.Unknown;
        return _chain[(int)(index - _trimmed - 1)];
    }

    private bool OwnEntryUnchecked => (_node.Options.Mutations & ProtocolMutations.OwnLogEntryUnchecked) != 0;

    private bool PrefixUnchecked => (_node.Options.Mutations & ProtocolMutations.CheckpointPrefixUnchecked) != 0;

    /// <summary>
    /// Drops every kept checkpoint of <paramref name="lineage"/> between <paramref name="from"/> and
    /// <paramref name="to"/> entries whose digest differs from the history's at its index
    /// (<paramref name="digestAt"/>): it holds SafeSends the group lost (every acceptor of them
    /// delivered them and crashed, and the indices went to others), so it is never restored, copied
    /// or trimmed behind. The file stays until a save replaces it; the driver is told, and logs it.
    /// </summary>
    private void RejectNotPrefix(Lineage lineage, Func<long, ulong> digestAt, long from, long to)
    {
        if (PrefixUnchecked) return; // deliberately broken: lineage and index taken as proof of a prefix
        for (int k = _kept.Count - 1; k >= 0; k--)
        {
            CheckpointMark c = _kept[k];
            if (c.Lineage != lineage || c.Index < from || c.Index > to) continue;
            ulong d = digestAt(c.Index);
            if (HistoryDigest.Agree(c.Digest, d)) continue;
            RejectCheckpoint(c, $"the history holds other SafeSends at {c.Index} (digest {d:x16}, the checkpoint's {c.Digest:x16})");
        }
    }

    /// <summary>A kept checkpoint turned out not to hold a prefix of the group's history: it is dropped and reported.</summary>
    private void RejectCheckpoint(CheckpointMark c, string why)
    {
        _kept.Remove(c);
        _setAside.Remove(c);
        _node.Counters.CheckpointsNotPrefix++;
        _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.CheckpointNotUsed,
            $"this member's persistent checkpoint {c.Name} ({c.Lineage}, {c.Index} entries) does not hold a prefix of the group's SafeSend history: {why}. " +
            "It holds SafeSends the group lost (all their acceptors failed after delivering them), so it is never restored; the history is used instead"));
    }

    // ---------------------------------------------------------------- forced recovery

    /// <summary>
    /// The operator allows the group to recover without <paramref name="without"/> (members of its
    /// last view; none named: whichever have not come back; docs/operations.md, "Forced recovery"):
    /// recorded in the log, and reported to the view's oldest member at once. False if this member
    /// holds the history already (nothing to recover).
    /// </summary>
    public bool AllowForcedRecovery(NodeId[] without, long now)
    {
        if (Current) return false;
        _forcedWithout = without;
        Append(HistoryLog.ForcedRecovery(_node.Writer, without));
        if (_view != null && _plan == null) SendStatus(now);
        return true;
    }

    /// <summary>True if an incarnation that wrote this member's log was given up by a forced recovery.</summary>
    private bool IsGivenUp => !GivenUpHistoryUsed && _image.Incarnations.Any(_gaveUp.Contains);

    private bool GivenUpHistoryUsed => (_node.Options.Mutations & ProtocolMutations.GivenUpHistoryUsed) != 0;

    /// <summary>
    /// A plan names the incarnations forced recoveries gave up, its own included. They bind this
    /// member only once it holds the history by the plan (<see cref="BecomeCurrent"/> logs them):
    /// until then a view change voids the plan, and the next view's oldest member decides again
    /// from the logs and give-ups that are on disk, so a given-up member's log that came back
    /// meanwhile counts again (nobody holds a history without it; whoever came to hold one by the
    /// plan logged its give-ups and a later view, and is current or brings that log, or its member
    /// of the last view is missing). If this member's log was written by one of them, its
    /// checkpoints may hold SafeSends the plan's history lacks: none is used while it follows the plan.
    /// </summary>
    private void SetAsideGivenUp(NodeId[] gaveUp)
    {
        if (VoidedPlanGivesUp) _gaveUp.UnionWith(gaveUp); // deliberately broken: bound before anyone holds the history by the plan
        if (GivenUpHistoryUsed || !_image.Incarnations.Any(i => _gaveUp.Contains(i) || gaveUp.Contains(i))) return;
        foreach (CheckpointMark c in _kept) _setAside.Add(c);
        if (_setAside.Count == 0) return;
        _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.CheckpointNotUsed,
            $"this member's {_setAside.Count} persistent checkpoint(s) were made by an incarnation a forced recovery of the group gave up, " +
            "so they may hold SafeSends the group lost: none is used, and the group's history is copied"));
    }

    private bool VoidedPlanGivesUp => (_node.Options.Mutations & ProtocolMutations.VoidedPlanGivesUp) != 0;

    private static string DescribeRecovery(HistoryPlan plan) => plan.Reason == HistoryRecovery.ProvedComplete
        ? $"the SafeSend history was recovered without {plan.Missing.Length} member(s) of its last view {plan.LastView} ({string.Join(", ", plan.Missing)}), " +
          "on its own and with nothing lost: the membership service remembered that view as the group's last before all its members were gone, " +
          "so no later view delivered anything, and that view's first member, which logged every SafeSend of the view before any member could deliver it, " +
          $"came back with its log. The history holds {plan.Target} entries, from {plan.Source}'s log; a missing member that comes back copies it"
        : plan.Mode == HistoryPlanMode.Fresh
        ? "the SafeSend history was founded anew by force: no member brought a log of the group's earlier history, so that history is lost " +
          "(a log of it that comes back later is kept aside, not merged)"
        : $"the SafeSend history was recovered by force without {plan.Missing.Length} member(s) of its last view {plan.LastView} " +
          $"({string.Join(", ", plan.Missing)}): it holds {plan.Target} entries, from {plan.Source}'s log. SafeSends that only those members held " +
          $"(delivered in view {plan.LastView.ViewId} after entry {plan.Target}, or in a later view of theirs alone) are lost if there were any; " +
          "if one of them comes back, its log is kept aside, not merged";

    /// <summary>A SafeSend or SafeQuery this current member now holds in order (or the view change delivered): it joins the history.</summary>
    public void Log(NodeId sender, int viewId, long seq, int phi, MessageKind kind, ReadOnlyMemory<byte> payload)
    {
        if (!Current) return;
        var e = new HistoryEntry(Count + 1, sender, viewId, seq, phi, _slabs.Hold(Count + 1, payload.Span), kind == MessageKind.QuerySafe);
        _entries.Add(e);
        _chain.Add(HistoryDigest.Next(_chain.Count == 0 ? _trimmedDigest : _chain[^1], e));
        Invariant.Check(e.Index == Count && _chain.Count == _entries.Count, $"history entry {e.Index} is the last of {Count}, with its digest ({_chain.Count} digests for {_entries.Count} entries)");
        Append(HistoryLog.Entry(_node.Writer, e));
        if (_kept.Count > 0) RejectNotPrefix(_lineage, DigestAt, Count, Count); // a checkpoint made past the history's end when it came back is checked when the history reaches it
    }

    // ---------------------------------------------------------------- packets

    public void OnPacket(in PacketHeader h, int fromRank, ref WireReader r, long now)
    {
        switch (h.Kind)
        {
            case PacketKind.HistoryStatus: OnStatus(h.Sender, ref r, now); break;
            case PacketKind.HistoryPlan: OnPlan(fromRank, ref r, now); break;
            case PacketKind.HistoryPull: OnPull(h.Sender, h.Number, ref r); break;
            case PacketKind.HistoryChunk: OnChunk(h.Sender, h.Number, ref r, now); break;
            case PacketKind.HistoryCheckpointPull: OnCheckpointPull(h.Sender, h.Number, ref r); break;
            case PacketKind.HistoryCheckpointChunk: OnCheckpointChunk(h.Sender, h.Number, ref r, now); break;
            case PacketKind.HistoryAllCurrent: OnAllCurrent(fromRank, ref r); break;
            default: r.Fail(); break;
        }
    }

    public string Describe() =>
        Current ? $"history current {Count} (trimmed {_trimmed}) e{_epoch} {_lineage} checkpoints [{string.Join(",", _kept.Select(k => $"{k.Lineage}#{k.Index}"))}]{(_allCurrent ? " all current" : "")}"
        : $"history pending plan={_plan?.Mode.ToString() ?? "none"} {_pull?.Describe() ?? "no pull"}/{_plan?.Target ?? -1}{_pull?.DescribeAside()} " +
          $"log={_image.Trimmed}+{_image.Entries.Count}@{_image.LastView?.Key.ToString() ?? "-"} statuses={_statuses.Count}";
}
