using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Durability;

// The durable history, part 4: trimming the log at persistent checkpoints.
//
// A prefix goes only when this member holds durable checkpoints that cover it: the log is trimmed
// to the older of the two newest checkpoints of its history (so one damaged checkpoint still
// leaves a whole one at or past the trim point), and while some member of the view may still copy
// the history as it stood when the view began, also to no later than the newest checkpoint at or
// before that point (the one this member offers such a member). Every member holds the history
// thus (log plus checkpoint), so a recovery needs no log longer than its owner's, and a member
// that copies the history copies a checkpoint plus the entries after it. The view's oldest member
// says when every member is current (HistoryAllCurrent): no copy is then possible in that view.
internal sealed partial class DurableHistory
{
    // Persistent checkpoints this member keeps, newest first: named by the driver at join, then
    // each one it makes durable (saved by the application, or copied from another member).
    private readonly List<CheckpointMark> _kept = [];

    // The view's oldest member said every member of this view is current: nobody copies from us in it.
    private bool _allCurrent;

    // The driver reports the checkpoints it makes durable (CheckpointDurable), and so also serves
    // them to members that copy the history and copies them itself (CheckpointReadRequested,
    // CheckpointChunkReceived): only then may the log be trimmed, since a member copying a trimmed
    // history needs a checkpoint from a driver that can read it.
    private bool _driverKeepsCheckpoints;

    private const int KeptLimit = 8;

    /// <summary>The newest kept checkpoint of <paramref name="lineage"/> holding at least <paramref name="from"/> and at most <paramref name="to"/> entries.</summary>
    private CheckpointMark? Usable(Lineage lineage, long from, long to)
    {
        CheckpointMark? best = null;
        foreach (CheckpointMark c in _kept)
        {
            if (c.Lineage == lineage && c.Index >= from && c.Index <= to && !_setAside.Contains(c) && (best == null || c.Index > best.Index)) best = c;
        }
        return best;
    }

    /// <summary>
    /// The driver made a checkpoint durable: one the application saved (its history position is
    /// where the delivery thread stood), or one copied from another member to hold the history.
    /// </summary>
    public void OnCheckpointDurable(CheckpointMark mark, long now)
    {
        _driverKeepsCheckpoints = true;
        _kept.RemoveAll(k => k.Name == mark.Name); // a file saved again under the same name holds the new one only
        _setAside.RemoveWhere(k => k.Name == mark.Name);
        _kept.Insert(0, mark);
        if (_kept.Count > KeptLimit)
        {
            // Marks can be reported out of their order (a checkpoint saved during a replay, or a copy
            // finishing after a newer save), so the least useful goes, not the one reported first:
            // another history's, then the shortest, but never the two newest of this history (the
            // trim point rests on them) nor the one offered to members that copy the history as of
            // this view's start (a plan names it).
            var keep = new HashSet<CheckpointMark>(_kept.Where(k => k.Lineage == _lineage).OrderByDescending(k => k.Index).Take(2));
            if (Current && !_allCurrent && _offered != null) keep.Add(_offered);
            CheckpointMark least = _kept.Where(k => !keep.Contains(k)).OrderBy(k => k.Lineage == _lineage && Current ? 1 : 0).ThenBy(k => k.Index).First();
            _kept.Remove(least);
        }
        if (!Current && _pull?.Fetch is { Complete: true } f && f.Index == mark.Index && mark.Lineage == _plan!.Lineage)
        {
            OnFetchedCheckpointDurable(mark, now);
            return;
        }
        if (Current)
        {
            RejectNotPrefix(_lineage, DigestAt, _trimmed, Count);
            TrimToCheckpoints();
        }
    }

    /// <summary>Trims the log (and the entries held in memory) to what the rules allow now.</summary>
    private void TrimToCheckpoints()
    {
        if (!Current) return;
        long point;
        if ((_node.Options.Mutations & ProtocolMutations.TrimPastCheckpoints) != 0)
        {
            point = Count; // deliberately broken: every entry goes, checkpoint or not
        }
        else
        {
            if (!_driverKeepsCheckpoints) return;
            List<CheckpointMark> mine = _kept.Where(k => k.Lineage == _lineage && k.Index <= Count).OrderByDescending(k => k.Index).ToList();
            if (mine.Count < 2) return;
            point = mine[1].Index;
            if (!_allCurrent)
            {
                // A member of this view may still copy the history as of the view's start: keep what it needs
                // (the checkpoint offered when the view began, even if a later one at or before that point arrived since).
                if (_offered == null) return;
                point = Math.Min(point, _offered.Index);
            }
        }
        if (point <= _trimmed) return;
        Invariant.Check(point <= Count, $"the history is trimmed only behind its end: to {point}, with {Count} entries");
        _trimmedDigest = DigestAt(point);
        _entries.RemoveRange(0, (int)(point - _trimmed));
        _chain.RemoveRange(0, (int)(point - _trimmed));
        _trimmed = point;
        _slabs.Trimmed(point);
        _node.Counters.HistoryTrims++;
        // Appended, not rewritten: a driver that keeps its log in segments drops the ones behind it
        // once it is durable (HistorySegments), and a reader leaves the entries before it out.
        Append(HistoryLog.Trim(_node.Writer, _trimmed, _trimmedDigest));
        _node.Emit(new HistoryTrimmed(_member.Id, _trimmed, _entries.Count));
    }

    // ---------------------------------------------------------------- every member current

    /// <summary>At the oldest member: every member of the view says it is current (its own status included).</summary>
    private bool EveryoneCurrent() =>
        _view!.Members.All(m => _statuses.TryGetValue(m, out HistoryStatus? s) && s.Current);

    private void SendAllCurrent(NodeId to) =>
        _member.SendToMember(to, _node.Writer.Begin(new PacketHeader(PacketKind.HistoryAllCurrent, _node.Self, _member.Id, _view!.Id, 0)).Finish());

    private void OnAllCurrent(int fromRank, ref WireReader r)
    {
        if (!r.Complete) { r.Fail(); return; }
        if (fromRank != 0) { _node.Counters.DroppedNotMember++; return; }
        if (!Current) { _node.Counters.DroppedNotForMe++; return; } // stale: our own status said otherwise
        _answered = true;
        if (_allCurrent) return;
        _allCurrent = true;
        TrimToCheckpoints();
    }
}
