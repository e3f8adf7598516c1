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

    /// <summary>Nobody in the view holds it (a total crash): rebuild it from the longest log of the last view, once every member of that view is back.</summary>
    Recover = 2,

    /// <summary>Nobody has ever held a history of this group: start an empty one.</summary>
    Fresh = 3,
}

/// <summary>The decision of a view's oldest member: who serves the history, how long it is, its epoch and lineage.</summary>
internal sealed record HistoryPlan(HistoryPlanMode Mode, NodeId Source, long Target, long Epoch, Lineage Lineage);

/// <summary>
/// The SafeSend history of one group with disk durability, at one member: the sequence of every
/// SafeSend delivered in the group since it was founded, kept in a log on this member's disk.
/// </summary>
/// <remarks>
/// <para>The rules (docs/architecture.md, "Durable history", has the proof sketch):</para>
/// <list type="number">
/// <item><b>Every member keeps the whole history.</b> A member that holds it is <i>current</i>.
/// A current member logs every SafeSend of its view at the moment it holds it and every earlier
/// position of the total order (an acceptor does so before it acknowledges), and the SafeSends the
/// view change delivers at a view's end. So every current member's log is a prefix of one sequence.</item>
/// <item><b>A member that is not current takes no part.</b> It neither acknowledges nor sends,
/// and what the group would hand its application (views, deliveries) waits until it is current;
/// then the whole history is replayed to the application first, in order.</item>
/// <item><b>Who makes a member current</b> is decided in each view by its oldest member, from a
/// status every member sends it. If some member of the view is current, the others copy its history
/// as it stood when the view began (Transfer). If none is (all members are new, as after every
/// member crashed), the history is rebuilt from logs (Recover): among the logs the members bring,
/// take the one with the latest view in which its owner was current; once every member of that
/// view has come back, the longest log of that view is the history. Only when no member brings a
/// log that was ever current does the group start an empty history (Fresh).</item>
/// <item><b>Nothing is lost by copying.</b> A member's old log is replaced only by a history it
/// received in full, written aside and renamed over it; a log of another lineage is kept aside.</item>
/// </list>
/// </remarks>
internal sealed class DurableHistory
{
    /// <summary>At most this many payload bytes per chunk of a transfer (one chunk in flight per receiver).</summary>
    private const int ChunkBytes = 60 * 1024;

    private readonly ProcessNode _node;
    private readonly GroupMember _member;
    private readonly HistoryLogImage _image;
    private List<HistoryEntry> _entries = [];
    private long _epoch;
    private Lineage _lineage;
    private long _base; // entries at the start of the current view, while current

    // While not current, per view: the plan to follow and what a transfer has brought so far.
    private GroupView? _view;
    private int _rank = -1;
    private HistoryPlan? _plan;
    private List<HistoryEntry>? _pulled;
    private bool _answered; // the oldest member answered our status with its plan in this view
    private long _nextStatusAt;
    private long _nextPullAt;

    // The oldest member of a view collects every member's status and decides the plan.
    private readonly Dictionary<NodeId, HistoryStatus> _statuses = new();
    private HistoryPlan? _decided;
    private string? _lastWaiting;

    // Persistent checkpoints this member kept, newest first (the driver read and checked them).
    private readonly IReadOnlyList<CheckpointMark> _checkpoints;

    public DurableHistory(ProcessNode node, GroupMember member, HistoryLogImage image, IReadOnlyList<CheckpointMark> checkpoints)
    {
        _node = node;
        _member = member;
        _image = image;
        _checkpoints = checkpoints;
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

    /// <summary>SafeSends in the history held here (while current).</summary>
    public long Count => _entries.Count;

    /// <summary>The plan this member follows in its view, if it is not current and one was decided.</summary>
    internal HistoryPlan? Plan => _plan;

    private bool RecoverFromOldestOnly => (_node.Options.Mutations & ProtocolMutations.RecoverFromOldestOnly) != 0;

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
        // A new view restarts the plan: the history may now come from another member.
        _plan = null;
        _pulled = null;
        _answered = false;
        if (!Current && rank == 0 && view.Id == 1 && _image.LastView == null && !RecoverFromOldestOnly)
        {
            // The group's first view ever (the membership service numbers a group's views from 1
            // and never reuses a number): no history exists, so its oldest member founds one at
            // once, in this step, before anything can crash in between and leave nobody holding it.
            // (A membership service that itself restarted forgets the group and numbers from 1
            // again: then a new process that comes first founds a new history, and logs of the
            // old one that arrive later are kept aside - docs/semantics.md.)
            _plan = new HistoryPlan(HistoryPlanMode.Fresh, _node.Self, 0, 1, new Lineage(_node.Self, view.Id));
            BecomeCurrent([], rewrite: false);
        }
        if (Current)
        {
            _base = _entries.Count;
            if (_plan == null) Append(HistoryLog.View(_node.Writer, new HistoryViewRecord(new HistoryViewKey(_epoch, view.Id), _lineage, _node.Self, view.Members)));
            // The oldest member, current, decides at once: the others copy from it. (Current
            // members still report to it, so an oldest member that is not current learns of them.)
            if (rank == 0)
            {
                _decided = new HistoryPlan(HistoryPlanMode.Transfer, _node.Self, _base, _epoch, _lineage);
                _answered = true;
                return;
            }
        }
        SendStatus(now);
    }

    /// <summary>When <see cref="Tick"/> next sends a status or a pull (see <see cref="GroupMember.NextDeadline"/>).</summary>
    public long NextDeadline
    {
        get
        {
            if (_view == null) return long.MaxValue;
            long d = _answered ? long.MaxValue : _nextStatusAt;
            if (!Current && _pulled != null) d = Math.Min(d, _nextPullAt);
            return d;
        }
    }

    public void Tick(long now)
    {
        if (_view == null) return;
        if (!_answered && now >= _nextStatusAt) SendStatus(now);
        if (!Current && _pulled != null && now >= _nextPullAt) SendPull(now);
    }

    // ---------------------------------------------------------------- status: every member -> the view's oldest member

    private void SendStatus(long now)
    {
        _nextStatusAt = now + _node.Options.RetryInterval;
        HistoryStatus status = Current
            ? new HistoryStatus(true, _base, new HistoryViewRecord(new HistoryViewKey(_epoch, _view!.Id), _lineage, _node.Self, _view.Members), [_node.Self])
            : new HistoryStatus(false, _image.Entries.Count, _image.LastView, [.. _image.Incarnations, _node.Self]);
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryStatus, _node.Self, _member.Id, _view!.Id, 0));
        status.Write(w);
        _node.SendTo(_view.Members[0].Endpoint, w.Finish());
    }

    private void OnStatus(NodeId from, ref WireReader r, long now)
    {
        HistoryStatus? status = HistoryStatus.Read(ref r);
        if (status == null) return;
        if (_rank != 0) { _node.Counters.DroppedNotForMe++; return; }
        _statuses[from] = status;
        if (_decided == null) Decide(now);
        if (_decided != null) SendPlan(from, _decided);
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
                _decided = new HistoryPlan(HistoryPlanMode.Transfer, m, s.Count, s.View!.Key.Epoch, s.View.Lineage);
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
                : new HistoryPlan(HistoryPlanMode.Recover, _node.Self, mine.Count, mine.View.Key.Epoch + 1, mine.View.Lineage);
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
    /// longest of their logs holds everything any of them delivered (each is a prefix of it).
    /// </summary>
    private HistoryPlan? DecideRecovery(GroupView view)
    {
        HistoryStatus? latest = null;
        NodeId latestReporter = default;
        foreach (NodeId m in view.Members)
        {
            HistoryStatus s = _statuses[m];
            if (s.View == null) continue;
            if (latest == null || s.View.Key > latest.View!.Key || (s.View.Key == latest.View.Key && s.Count > latest.Count))
            {
                latest = s;
                latestReporter = m;
            }
        }
        if (latest == null)
        {
            // Past the group's first view a history was founded (by that view's oldest member), so
            // some member not here holds it: never found a second one over it.
            Wait($"the group waits to recover its SafeSend history: none of its members brought a log that held it; " +
                "members of its last view must restart with their logs before the group delivers");
            return null;
        }
        var present = new HashSet<NodeId>(_statuses.Values.SelectMany(s => s.Incarnations));
        NodeId[] missing = latest.View!.Members.Where(m => !present.Contains(m)).ToArray();
        if (missing.Length > 0)
        {
            Wait($"the group waits to recover its SafeSend history: {missing.Length} member(s) of its last view {latest.View.Key} " +
                $"({string.Join(", ", missing)}) have not come back; every member of that view must restart with its log before the group delivers");
            return null;
        }
        return new HistoryPlan(HistoryPlanMode.Recover, latestReporter, latest.Count, latest.View.Key.Epoch + 1, latest.View.Lineage);
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
            .U8((byte)plan.Mode).Node(plan.Source).I64(plan.Target).I64(plan.Epoch).Node(plan.Lineage.Founder).I32(plan.Lineage.ViewId);
        _node.SendTo(to.Endpoint, w.Finish());
    }

    private void OnPlan(int fromRank, ref WireReader r, long now)
    {
        var mode = (HistoryPlanMode)r.U8();
        NodeId source = r.Node();
        long target = r.I64();
        long epoch = r.I64();
        NodeId founder = r.Node();
        int foundedIn = r.I32();
        if (!r.Complete || !Enum.IsDefined(mode) || target < 0 || epoch < 1 || _view!.RankOf(source) < 0) { r.Fail(); return; }
        if (fromRank != 0) { _node.Counters.DroppedNotMember++; return; }
        _answered = true;
        if (Current || _plan != null) return; // a repeat, or an answer to a current member's status
        _plan = new HistoryPlan(mode, source, target, epoch, new Lineage(founder, foundedIn));
        switch (mode)
        {
            case HistoryPlanMode.Fresh:
                BecomeCurrent([], rewrite: false);
                break;
            case HistoryPlanMode.Recover when source == _node.Self:
                if (_image.Entries.Count < target) { _plan = null; r.Fail(); return; } // not what we reported: ask again
                BecomeCurrent(_image.Entries.GetRange(0, (int)target), rewrite: _image.Entries.Count != target);
                break;
            default:
                _pulled = new List<HistoryEntry>();
                if (target == 0) BecomeCurrent(_pulled, rewrite: true);
                else SendPull(now);
                break;
        }
    }

    // ---------------------------------------------------------------- transfer: a member that lacks the history pulls it in chunks

    private void SendPull(long now)
    {
        _nextPullAt = now + 2 * _node.Options.NakInterval;
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryPull, _node.Self, _member.Id, _view!.Id, _pulled!.Count + 1)).I64(_plan!.Target);
        _node.SendTo(_plan.Source.Endpoint, w.Finish());
    }

    private void OnPull(NodeId from, long first, ref WireReader r)
    {
        long target = r.I64();
        if (!r.Complete || first < 1 || target < first) { r.Fail(); return; }
        if (!Current || target > _entries.Count) { _node.Counters.DroppedNotForMe++; return; }
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryChunk, _node.Self, _member.Id, _view!.Id, first));
        int count = 0;
        long bytes = 0;
        for (long i = first; i <= target && (count == 0 || bytes + _entries[(int)i - 1].Payload.Length <= ChunkBytes); i++)
        {
            bytes += _entries[(int)i - 1].Payload.Length;
            count++;
        }
        w.I32(count);
        for (int k = 0; k < count; k++) HistoryLog.WriteTransferred(w, _entries[(int)first - 1 + k]);
        _node.SendTo(from.Endpoint, w.Finish());
    }

    private void OnChunk(NodeId from, long first, ref WireReader r, long now)
    {
        int count = r.Count(32);
        var entries = new List<HistoryEntry>(count);
        for (int k = 0; k < count && r.Ok; k++)
        {
            if (HistoryLog.ReadTransferred(ref r, first + k) is { } e) entries.Add(e);
        }
        if (!r.Complete || first < 1) { r.Fail(); return; }
        if (Current || _pulled == null || from != _plan!.Source || first != _pulled.Count + 1) { _node.Counters.Duplicates++; return; }
        foreach (HistoryEntry e in entries)
        {
            if (_pulled.Count < _plan.Target) _pulled.Add(e);
        }
        if (_pulled.Count == _plan.Target) BecomeCurrent(_pulled, rewrite: true);
        else SendPull(now);
    }

    // ---------------------------------------------------------------- becoming current

    /// <summary>
    /// This member now holds the history: make it durable (a complete new log written aside and
    /// renamed over the old one, or a View record after the entries its log already holds),
    /// replay it to the application, and take part from now on.
    /// </summary>
    private void BecomeCurrent(List<HistoryEntry> entries, bool rewrite)
    {
        HistoryPlan plan = _plan!;
        _entries = entries;
        _epoch = plan.Epoch;
        _lineage = plan.Lineage;
        _base = entries.Count;
        Current = true;
        _pulled = null;
        var view = new HistoryViewRecord(new HistoryViewKey(_epoch, _view!.Id), _lineage, _node.Self, _view.Members);
        if (rewrite)
        {
            // The incarnations the old log names stay: a view not yet known to have dropped an
            // earlier incarnation of this member may still name it, and a recovery must recognise it.
            var records = new List<byte[]>(entries.Count + _image.Incarnations.Count + 2);
            foreach (NodeId earlier in _image.Incarnations) records.Add(HistoryLog.Incarnation(_node.Writer, earlier));
            records.Add(HistoryLog.Incarnation(_node.Writer, _node.Self));
            records.Add(HistoryLog.View(_node.Writer, view));
            foreach (HistoryEntry e in entries) records.Add(HistoryLog.Entry(_node.Writer, e));
            // A log of another lineage holds a history this group does not descend from: keep it.
            bool foreign = _image.LastView != null && _image.LastView.Lineage != _lineage && _image.Entries.Count > 0;
            if (foreign)
            {
                _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.ForeignLog,
                    $"this member's SafeSend log belongs to another history (lineage {_image.LastView!.Lineage}, {_image.Entries.Count} entries, last view {_image.LastView.Key}) " +
                    $"than the running group's ({_lineage}): it is kept aside, not merged. It was founded while the members holding it were away"));
            }
            _node.Outbox.HistoryWrites.Add(new HistoryWrite(_member.Id, records, Rewrite: true, KeepOldAside: foreign));
        }
        else
        {
            Append(HistoryLog.View(_node.Writer, view));
        }
        _member.OnHistoryCurrent(entries, plan, _lineage, ChooseCheckpoint(entries.Count));
    }

    /// <summary>
    /// The newest persistent checkpoint that holds a prefix of this history: made in the same
    /// lineage (indices of another history mean other SafeSends) and no further than the history
    /// reaches (a checkpoint past it would hold SafeSends the group no longer has). Checkpoints are
    /// this member's own: the application's state after a restart is the checkpoint plus the
    /// entries after it, the same state every member reaches from the history (the SafeSends are
    /// what survives a total crash; docs/semantics.md).
    /// </summary>
    private CheckpointMark? ChooseCheckpoint(long entries)
    {
        if (_checkpoints.Count == 0) return null;
        foreach (CheckpointMark c in _checkpoints)
        {
            if (c.Lineage == _lineage && c.Index <= entries) return c;
        }
        _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.CheckpointNotUsed,
            $"none of this member's {_checkpoints.Count} persistent checkpoint(s) holds a part of the group's SafeSend history " +
            $"({_lineage}, {entries} entries): they were made in another history ({string.Join(", ", _checkpoints.Select(c => $"{c.Name}: {c.Lineage}, {c.Index} entries"))}); " +
            "the whole history is replayed instead"));
        return null;
    }

    /// <summary>A SafeSend or SafeQuery this current member now holds in order (or the view change delivered): it joins the history.</summary>
    public void Log(NodeId sender, int viewId, long seq, int phi, MessageKind kind, ReadOnlyMemory<byte> payload)
    {
        if (!Current) return;
        var e = new HistoryEntry(_entries.Count + 1, sender, viewId, seq, phi, payload.ToArray(), kind == MessageKind.QuerySafe);
        _entries.Add(e);
        Append(HistoryLog.Entry(_node.Writer, e));
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
            default: r.Fail(); break;
        }
    }

    public string Describe() =>
        Current ? $"history current {_entries.Count} e{_epoch} {_lineage}"
        : $"history pending plan={_plan?.Mode.ToString() ?? "none"} pulled={_pulled?.Count ?? -1}/{_plan?.Target ?? -1} log={_image.Entries.Count}@{_image.LastView?.Key.ToString() ?? "-"} statuses={_statuses.Count}";
}

/// <summary>What a member tells its view's oldest member about the history it holds or brings.</summary>
/// <param name="Current">It holds the whole history now.</param>
/// <param name="Count">Current: entries at the start of this view. Otherwise: entries in its log.</param>
/// <param name="View">Current: this view. Otherwise: the last view its log was current in, if any.</param>
/// <param name="Incarnations">The incarnations its log was written by (so members of old views can be recognised).</param>
internal sealed record HistoryStatus(bool Current, long Count, HistoryViewRecord? View, NodeId[] Incarnations)
{
    public void Write(PacketWriter w)
    {
        w.U8(Current ? (byte)1 : (byte)0).I64(Count).U8(View != null ? (byte)1 : (byte)0);
        if (View != null)
        {
            w.I64(View.Key.Epoch).I32(View.Key.ViewId).Node(View.Lineage.Founder).I32(View.Lineage.ViewId).Node(View.Me).Nodes(View.Members);
        }
        w.Nodes(Incarnations);
    }

    public static HistoryStatus? Read(ref WireReader r)
    {
        bool current = r.U8() == 1;
        long count = r.I64();
        HistoryViewRecord? view = null;
        if (r.U8() == 1)
        {
            long epoch = r.I64();
            int viewId = r.I32();
            NodeId founder = r.Node();
            int foundedIn = r.I32();
            NodeId me = r.Node();
            NodeId[] members = r.Nodes();
            if (r.Ok && (epoch < 1 || viewId < 1)) r.Fail();
            view = new HistoryViewRecord(new HistoryViewKey(epoch, viewId), new Lineage(founder, foundedIn), me, members);
        }
        NodeId[] incarnations = r.Nodes();
        if (!r.Complete || count < 0 || (current && view == null)) { r.Fail(); return null; }
        return new HistoryStatus(current, count, view, incarnations);
    }
}
