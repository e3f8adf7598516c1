using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Durability;

// The durable history, part 2: every member's status to the view's oldest member, and the plan it
// decides (who serves the history, and a checkpoint where the source's log is trimmed).
internal sealed partial class DurableHistory
{
    private void SendStatus(long now)
    {
        _nextStatusAt = now + _node.Options.RetryInterval;
        HistoryStatus status = Current
            ? CurrentStatus()
            : new HistoryStatus(false, _image.Count, _image.LastView, [.. _image.Incarnations, _node.Self], _image.Trimmed,
                _image.LastView is { } last ? Usable(last.Lineage, _image.Trimmed, _image.Count)?.Index ?? -1 : -1, _forcedWithout, [.. _gaveUp])
            {
                Digest = _imageDigest ??= _image.DigestAt(_image.Count),
            };
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryStatus, _node.Self, _member.Id, _view!.Id, 0));
        status.Write(w);
        _member.SendToMember(_view.Members[0], w.Finish()); // relaying, over the tree: every member reports to the oldest
    }

    /// <summary>A current member's status: where the view began, and the checkpoint it offers members that copy the history in this view.</summary>
    private HistoryStatus CurrentStatus() =>
        new(true, _viewStart, CurrentViewRecord(), [_node.Self], _trimmed, _offered?.Index ?? -1, GaveUp: [.. _gaveUp]) { Digest = DigestAt(_viewStart) };

    /// <summary>The plan of a view whose oldest member is current: everyone copies from it (it holds a checkpoint at or past its trim point).</summary>
    private HistoryPlan TransferFromMe() =>
        new(HistoryPlanMode.Transfer, _node.Self, _viewStart, _epoch, _lineage, _trimmed, _node.Self, _offered?.Index ?? 0)
        {
            GaveUp = [.. _gaveUp],
            TargetDigest = DigestAt(_viewStart),
        };

    private void OnStatus(NodeId from, ref WireReader r, long now)
    {
        HistoryStatus? status = HistoryStatus.Read(ref r);
        if (status == null) return;
        if (_rank != 0) { _node.Counters.DroppedNotForMe++; return; }
        _statuses[from] = status;
        if (status.Current)
        {
            // A current member reports until it hears that every member is current.
            if (_allCurrent) SendAllCurrent(from);
            else CheckEveryoneCurrent();
            if (_decided == null && !Current) Decide(now); // an oldest member that is not current learns of a holder
            return;
        }
        if (_decided == null) Decide(now);
        if (_decided != null) SendPlan(from, _decided);
    }

    /// <summary>At the oldest member, once current: its own status counts like the others'.</summary>
    private void NoteOwnStatusCurrent()
    {
        _statuses[_node.Self] = CurrentStatus();
        CheckEveryoneCurrent();
    }

    /// <summary>At the oldest member: when every member of the view is current, it says so to each (trimming may then pass the view's start).</summary>
    private void CheckEveryoneCurrent()
    {
        if (_allCurrent || !Current || !EveryoneCurrent()) return;
        _allCurrent = true;
        foreach (NodeId m in _view!.Members)
        {
            if (m != _node.Self) SendAllCurrent(m);
        }
        TrimToCheckpoints();
    }

    /// <summary>The oldest member decides how the members that lack the history get it.</summary>
    private void Decide(long now)
    {
        GroupView view = _view!;
        if (!Current && !_statuses.ContainsKey(_node.Self)) return; // our own status is on its way (loopback)
        foreach (NodeId m in view.Members)
        {
            if (_statuses.TryGetValue(m, out HistoryStatus? s) && s.Current)
            {
                _decided = new HistoryPlan(HistoryPlanMode.Transfer, m, s.Count, s.View!.Key.Epoch, s.View.Lineage, s.Trimmed, m, Math.Max(s.Checkpoint, 0))
                {
                    GaveUp = s.GaveUp ?? [],
                };
                break;
            }
        }
        if (_decided == null && RecoverFromOldestOnly)
        {
            // Deliberately broken: the oldest restarted member recovers from its own log alone,
            // without waiting for the other members of the last view.
            HistoryStatus mine = _statuses[_node.Self];
            _decided = mine.View == null
                ? new HistoryPlan(HistoryPlanMode.Fresh, _node.Self, 0, 1, new Lineage(_node.Self, view.Id))
                : new HistoryPlan(HistoryPlanMode.Recover, _node.Self, mine.Count, mine.View.Key.Epoch + 1, mine.View.Lineage, mine.Trimmed, _node.Self, Math.Max(mine.Checkpoint, 0));
        }
        if (_decided == null)
        {
            // Nobody holds the history: a recovery needs every member's log first.
            if (view.Members.Any(m => !_statuses.ContainsKey(m))) return;
            _decided = DecideRecovery(view);
            if (_decided == null) return;
        }
        foreach (NodeId m in view.Members)
        {
            if (_statuses.ContainsKey(m)) SendPlan(m, _decided);
        }
    }

    /// <summary>
    /// Recovery after every holder of the history is gone. The latest view any log was current in
    /// (by epoch, then view id) is the last view that can have delivered anything: a later view
    /// would have a member of it as a current survivor, whose log would name that later view. Every
    /// member of it must be back: any of them may have carried the history on alone. Then the
    /// longest of their logs holds everything any of them delivered (each is a prefix of it). If
    /// that log is trimmed, some member must bring a checkpoint of its lineage that covers the
    /// trimmed part (its owner's, normally: it trims only to the older of its two newest).
    /// Members of that view may be missing when the rules prove they held nothing the others lack
    /// (<see cref="ProvedNothingOnlyTheMissingHeld"/>), or when the operator allows it (forced).
    /// </summary>
    private HistoryPlan? DecideRecovery(GroupView view)
    {
        HistoryPlan? plan = DecideRecoveryPlan(view);
        // From now on a member of this view may hold the history in this incarnation of the group
        // (and then fail), so the proof of ProvedNothingOnlyTheMissingHeld holds again only once
        // each of them is back with its log.
        if (plan != null) _mayHoldByPlan.UnionWith(view.Members);
        return plan;
    }

    // The members of every view in which this member (the oldest of every view since the group's
    // incarnation began, if it knows how the previous one ended) decided a recovery: any of them
    // may have come to hold the history by it. See ProvedNothingOnlyTheMissingHeld.
    private readonly HashSet<NodeId> _mayHoldByPlan = [];

    /// <summary>
    /// True while some member of a view in which this member decided a recovery plan is not back
    /// with its log (no status of <paramref name="view"/> names it among its log's incarnations):
    /// it may have held the history by the plan, delivered and failed.
    /// </summary>
    private bool PlanHolderMayBeMissing(GroupView view)
    {
        if (_mayHoldByPlan.Count == 0) return false;
        if (AutoRecoverAfterPlanHolderLost) return false; // deliberately broken: a holder by the plan may have delivered and be gone
        var present = new HashSet<NodeId>(view.Members.SelectMany(m => _statuses[m].Incarnations));
        return !_mayHoldByPlan.IsSubsetOf(present);
    }

    private bool AutoRecoverAfterPlanHolderLost => (_node.Options.Mutations & ProtocolMutations.AutoRecoverAfterPlanHolderLost) != 0;

    private bool AutoRecoverWithoutFirstAcceptor => (_node.Options.Mutations & ProtocolMutations.AutoRecoverWithoutFirstAcceptor) != 0;

    private bool AutoRecoverPastLastView => (_node.Options.Mutations & ProtocolMutations.AutoRecoverPastLastView) != 0;

    /// <summary>
    /// True if a recovery from the logs that came back loses nothing though members of the last
    /// logged view <paramref name="last"/> (L) are missing, so it goes ahead without the operator.
    /// All of these must hold:
    /// <list type="number">
    /// <item><b>No view after L delivered anything.</b> The membership service told this incarnation
    /// of the group that its previous one ended with L (<see cref="GroupMember.PreviousIncarnation"/>:
    /// the same view id and the same members): every member of L was gone (failed or left) without
    /// installing a later view, and the views between L and this incarnation had no members. So
    /// no member of L carried the history on alone, and the view-change flush of L delivered
    /// nothing: it delivers at the install of the next view, which no member of L installed.</item>
    /// <item><b>Nobody held the history in this incarnation yet.</b> This member was the oldest
    /// of the incarnation's first view, hence of every view since, and every member of a view in
    /// which it decided a recovery is back with its log; only such a decision makes a member
    /// current where none is (joiners never are, and no view after the first founds a history). A
    /// member made current by an earlier plan logged a View record of a view after L before it
    /// delivered anything, so its log, once back, is the latest and names that view (and the
    /// proof is not needed); while one of them is not back, it may have delivered and failed.</item>
    /// <item><b>L's first member came back with its log</b> (the incarnation L named, as the
    /// Incarnation records of a log that came back show, and not one a forced recovery gave up).
    /// It is an acceptor of every SafeSend whatever its phi (TotalOrder.Acceptors is at least
    /// one, counted from rank 0), and an acceptor logs a position, durably, before it acknowledges
    /// it, and only while it holds the history. So every SafeSend delivered in L on the normal path
    /// is in its log, which then names L; if its log names an earlier view it held nothing in L,
    /// acknowledged nothing, and L delivered nothing. Logs of L are prefixes of one sequence, so the
    /// longest one that came back (the source) holds its log, and everything delivered before L
    /// (in every log of L, as of L's start).</item>
    /// </list>
    /// Where its log is the only copy of some of those SafeSends, a log damaged on disk (records cut
    /// off at open) breaks the third point, as it breaks the recovery with every member back.
    /// Trimming changes none of this: the plan still needs a checkpoint that covers the source's
    /// trimmed part (checked after), and the missing members' own checkpoints hold only delivered
    /// SafeSends, a prefix of the recovered history, so they stay usable: nobody is given up.
    /// </summary>
    private bool ProvedNothingOnlyTheMissingHeld(HistoryViewRecord last, GroupView view, Func<HistoryStatus, bool> suspect)
    {
        if (_member.PreviousIncarnation is not { } ended || PlanHolderMayBeMissing(view)) return false;
        if (!ended.Is(last.Key.ViewId, last.Members) && !AutoRecoverPastLastView) return false; // (deliberately broken if so)
        if (AutoRecoverWithoutFirstAcceptor) return true; // deliberately broken: the first acceptor's log may hold SafeSends no other has
        NodeId firstAcceptor = last.Members[0];
        return view.Members.Select(m => _statuses[m]).Any(s => !suspect(s) && Array.IndexOf(s.Incarnations, firstAcceptor) >= 0);
    }

    private HistoryPlan? DecideRecoveryPlan(GroupView view)
    {
        // Incarnations an earlier forced recovery gave up: their logs and checkpoints are not the history's.
        var gaveUp = new HashSet<NodeId>(_gaveUp);
        foreach (HistoryStatus s in _statuses.Values) gaveUp.UnionWith(s.GaveUp ?? []);
        bool Suspect(HistoryStatus s) => !GivenUpHistoryUsed && s.Incarnations.Any(gaveUp.Contains);
        // Some member's operator allowed a recovery without these members (none named: whoever is missing).
        bool Allowed(NodeId[] missing) => view.Members.Select(m => _statuses[m].ForcedWithout)
            .Any(w => w != null && (w.Length == 0 || missing.All(w.Contains)));

        HistoryStatus? latest = null;
        NodeId latestReporter = default;
        foreach (NodeId m in view.Members)
        {
            HistoryStatus s = _statuses[m];
            if (s.View == null || Suspect(s)) continue;
            if (latest == null || s.View.Key > latest.View!.Key || (s.View.Key == latest.View.Key && s.Count > latest.Count))
            {
                latest = s;
                latestReporter = m;
            }
        }
        if (latest == null)
        {
            if (view.Members.Any(m => _statuses[m].ForcedWithout is { Length: 0 }))
            {
                // The operator says no log of the history will come back: found a new one (a log of
                // the old one that comes back later is of another lineage, so it is kept aside).
                return new HistoryPlan(HistoryPlanMode.Fresh, _node.Self, 0, 1, new Lineage(_node.Self, view.Id))
                {
                    Reason = HistoryRecovery.Forced,
                    GaveUp = [.. gaveUp],
                };
            }
            // Past the group's first view a history was founded (by that view's oldest member), or a
            // member's registry of durable groups names one, so some member not here holds it:
            // never found a second one over it.
            Wait($"the group waits to recover its SafeSend history: none of its members brought a log that held it" +
                (_image.FoundedElsewhere ? " (this machine's registry of durable groups says one was founded, so a new process does not found another)" : "") + "; " +
                "members of its last view must restart with their logs before the group delivers, " +
                "or, if no such log will ever come back, start a new empty history by force (docs/operations.md, \"Forced recovery\")");
            return null;
        }
        var present = new HashSet<NodeId>(_statuses.Values.SelectMany(s => s.Incarnations));
        NodeId[] missing = latest.View!.Members.Where(m => !present.Contains(m)).ToArray();
        HistoryRecovery reason = HistoryRecovery.None;
        if (missing.Length > 0 && ProvedNothingOnlyTheMissingHeld(latest.View, view, Suspect))
        {
            reason = HistoryRecovery.ProvedComplete;
        }
        else if (missing.Length > 0)
        {
            if (!Allowed(missing))
            {
                // Where the service vouches for the view, its first member alone is needed: say so, so the operator starts that one first.
                string firstSuffices = !PlanHolderMayBeMissing(view) && _member.PreviousIncarnation is { } ended && ended.Is(latest.View.Key.ViewId, latest.View.Members)
                    ? $" (or only its first member {latest.View.Members[0]}: the membership service remembers that view as the group's last, so the others can hold nothing more)"
                    : "";
                Wait($"the group waits to recover its SafeSend history: {missing.Length} member(s) of its last view {latest.View.Key} " +
                    $"({string.Join(", ", missing)}) have not come back; every member of that view must restart with its log before the group delivers{firstSuffices}, " +
                    "or, if one will never come back (its disk is lost), recover without it by force, which loses the SafeSends only it held " +
                    "(docs/operations.md, \"Forced recovery\")");
                return null;
            }
            reason = HistoryRecovery.Forced;
        }
        NodeId provider = latestReporter;
        long providerCheckpoint = Math.Max(latest.Checkpoint, 0);
        if (latest.Trimmed > 0 && latest.Checkpoint < latest.Trimmed)
        {
            // Its owner's checkpoints are damaged: another member's of the same lineage will do if it covers the trimmed part.
            (NodeId Member, HistoryStatus Status)? other = view.Members
                .Select(m => (Member: m, Status: _statuses[m]))
                .Where(x => !Suspect(x.Status) && x.Status.View?.Lineage == latest.View.Lineage && x.Status.Checkpoint >= latest.Trimmed && x.Status.Checkpoint <= latest.Count)
                .OrderByDescending(x => x.Status.Checkpoint)
                .Cast<(NodeId, HistoryStatus)?>()
                .FirstOrDefault();
            if (other is not { } found)
            {
                Wait($"the group waits to recover its SafeSend history: the longest log of its last view {latest.View.Key} ({latestReporter}) " +
                    $"starts after entry {latest.Trimmed}, which only a persistent checkpoint holds, and no member brought a whole checkpoint " +
                    "of that history at or past that entry; restart a member whose checkpoint is whole (a forced recovery cannot help: " +
                    "the entries before that point are in no log)");
                return null;
            }
            provider = found.Item1;
            providerCheckpoint = found.Item2.Checkpoint;
        }
        return new HistoryPlan(HistoryPlanMode.Recover, latestReporter, latest.Count, latest.View.Key.Epoch + 1, latest.View.Lineage,
            latest.Trimmed, provider, providerCheckpoint)
        {
            Reason = reason,
            Missing = missing,
            LastView = latest.View.Key,
            // Only a forced recovery gives the missing members up: their logs may hold SafeSends the history lacks.
            GaveUp = reason == HistoryRecovery.Forced ? [.. gaveUp, .. missing] : [.. gaveUp],
            TargetDigest = latest.Digest,
        };
    }

    private void Wait(string why)
    {
        if (why == _lastWaiting) return;
        _lastWaiting = why;
        _member.Publish(new HistoryNotice(_member.Id, HistoryNoticeKind.Waiting, why), immediately: true);
    }

    private void SendPlan(NodeId to, HistoryPlan plan)
    {
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryPlan, _node.Self, _member.Id, _view!.Id, 0))
            .U8((byte)plan.Mode).Node(plan.Source).I64(plan.Target).I64(plan.Epoch).Node(plan.Lineage.Founder).I32(plan.Lineage.ViewId)
            .I64(plan.Trimmed).Node(plan.Provider).I64(plan.ProviderCheckpoint)
            .U8((byte)plan.Reason).Nodes(plan.Missing).I64(plan.LastView.Epoch).I32(plan.LastView.ViewId).Nodes(plan.GaveUp).I64((long)plan.TargetDigest);
        _member.SendToMember(to, w.Finish());
    }

    private void OnPlan(int fromRank, ref WireReader r, long now)
    {
        var mode = (HistoryPlanMode)r.U8();
        NodeId source = r.Node();
        long target = r.I64();
        long epoch = r.I64();
        NodeId founder = r.Node();
        int foundedIn = r.I32();
        long trimmed = r.I64();
        NodeId provider = r.Node();
        long providerCheckpoint = r.I64();
        var reason = (HistoryRecovery)r.U8();
        NodeId[] missing = r.Nodes();
        var lastView = new HistoryViewKey(r.I64(), r.I32());
        NodeId[] gaveUp = r.Nodes();
        ulong targetDigest = (ulong)r.I64();
        if (!r.Complete || !Enum.IsDefined(mode) || !Enum.IsDefined(reason) || gaveUp.Any(n => n.IsNone) || missing.Any(n => n.IsNone) || target < 0 || epoch < 1 || _view!.RankOf(source) < 0
            || trimmed < 0 || trimmed > target || providerCheckpoint < 0 || providerCheckpoint > target
            || (trimmed > 0 && (providerCheckpoint < trimmed || _view.RankOf(provider) < 0)))
        {
            r.Fail();
            return;
        }
        if (fromRank != 0) { _node.Counters.DroppedNotMember++; return; }
        if (Current) return; // an answer to the status we sent before we became current: HistoryAllCurrent ends our reports
        _answered = true;
        if (_plan != null) return; // a repeat
        _plan = new HistoryPlan(mode, source, target, epoch, new Lineage(founder, foundedIn), trimmed, provider, providerCheckpoint)
        {
            Reason = reason,
            Missing = missing,
            LastView = lastView,
            GaveUp = gaveUp,
            TargetDigest = targetDigest,
        };
        SetAsideGivenUp(gaveUp);
        switch (mode)
        {
            case HistoryPlanMode.Fresh:
                BecomeCurrent(0, [], restore: null, rewrite: false, baseDigest: HistoryDigest.Empty);
                break;
            case HistoryPlanMode.Recover when source == _node.Self:
                if (_image.Count < target || _image.Trimmed != trimmed) { _plan = null; r.Fail(); return; } // not what we reported: ask again
                RecoverFromOwnLog(now);
                break;
            default:
                StartPull(now);
                break;
        }
    }
}

/// <summary>What a member tells its view's oldest member about the history it holds or brings.</summary>
/// <param name="Current">It holds the whole history now.</param>
/// <param name="Count">Current: entries at the start of this view. Otherwise: entries in its log (trimmed ones included).</param>
/// <param name="View">Current: this view. Otherwise: the last view its log was current in, if any.</param>
/// <param name="Incarnations">The incarnations its log was written by (so members of old views can be recognised).</param>
/// <param name="Trimmed">Entries its log no longer holds (a checkpoint does).</param>
/// <param name="Checkpoint">The newest whole persistent checkpoint it holds of that history, at or past <paramref name="Trimmed"/> (-1: none).</param>
/// <param name="ForcedWithout">Not current: the operator allowed a recovery without these members of the last view (empty: whichever have not come back); null if not.</param>
/// <param name="GaveUp">Incarnations earlier forced recoveries of the history it holds (or its log holds) gave up.</param>
internal sealed record HistoryStatus(bool Current, long Count, HistoryViewRecord? View, NodeId[] Incarnations, long Trimmed = 0, long Checkpoint = -1,
    NodeId[]? ForcedWithout = null, NodeId[]? GaveUp = null)
{
    /// <summary>The <see cref="HistoryDigest"/> of its entries 1..Count (unknown if its log predates digests, or a current member trimmed past its view's start).</summary>
    public ulong Digest { get; init; } = HistoryDigest.Unknown;

    public void Write(PacketWriter w)
    {
        w.U8(Current ? (byte)1 : (byte)0).I64(Count).U8(View != null ? (byte)1 : (byte)0);
        if (View != null) HistoryLog.WriteViewBody(w, View);
        w.Nodes(Incarnations);
        w.I64(Trimmed).I64(Checkpoint);
        w.U8(ForcedWithout != null ? (byte)1 : (byte)0).Nodes(ForcedWithout ?? []).Nodes(GaveUp ?? []).I64((long)Digest);
    }

    public static HistoryStatus? Read(ref WireReader r)
    {
        bool current = r.U8() == 1;
        long count = r.I64();
        HistoryViewRecord? view = r.U8() == 1 ? HistoryLog.ReadViewBody(ref r) : null;
        NodeId[] incarnations = r.Nodes();
        long trimmed = r.I64();
        long checkpoint = r.I64();
        byte forced = r.U8();
        NodeId[] without = r.Nodes();
        NodeId[] gaveUp = r.Nodes();
        ulong digest = (ulong)r.I64();
        if (!r.Complete || forced > 1 || (forced == 1 && current) || (forced == 0 && without.Length > 0) || gaveUp.Any(n => n.IsNone) || without.Any(n => n.IsNone) || count < 0 || (current && view == null) || trimmed < 0 || trimmed > count || checkpoint < -1 || checkpoint > count
            || (trimmed > 0 && view == null) || (current && trimmed > 0 && checkpoint < trimmed))
        {
            r.Fail();
            return null;
        }
        return new HistoryStatus(current, count, view, incarnations, trimmed, checkpoint, forced == 1 ? without : null, gaveUp) { Digest = digest };
    }
}
