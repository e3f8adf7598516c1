using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>
/// Runs one attempt of the virtual-synchrony flush for the membership service, at the oldest
/// surviving member of the view (Isis's choice: it is the member most likely to hold everything).
/// </summary>
/// <remarks>
/// The flush, step by step:
/// <list type="number">
/// <item>Wedge: every survivor stops sending and delivering in the old view and reports, per
/// sender, the longest prefix it holds plus every message it holds above stability.</item>
/// <item>Cut: for each sender, the longest prefix any survivor holds. Every survivor's deliveries
/// are a prefix of what it holds, so the cut never undoes a delivery; and the reports together
/// hold every message up to the cut, because no survivor garbage-collects a message before all
/// members hold it.</item>
/// <item>Commit: each survivor receives the cut with exactly the messages it lacks (and the list of
/// survivors still waiting for a state transfer, the same for all), delivers up to
/// the cut, and acknowledges. Only then does the coordinator tell the membership service, which
/// installs the next view; so no member installs the next view before every survivor's old-view
/// deliveries are final.</item>
/// </list>
/// If a survivor or this coordinator fails before completion, the membership service starts a
/// new attempt (with a higher number) without it; survivors simply report again. A new cut is
/// never below an old one, because survivors report everything they hold, including what an
/// earlier commit delivered.
/// </remarks>
internal sealed class FlushCoordinator
{
    private readonly ProcessNode _node;
    private readonly GroupMember _member;
    private readonly Dictionary<NodeId, (long[] Vector, List<HeldMessage> Messages, NodeId? WaitingFor)> _reports = new();
    private readonly HashSet<NodeId> _committed = new();
    private Dictionary<NodeId, byte[]>? _commitPackets;
    private readonly Dictionary<NodeId, NodeId[]> _paths;
    private long _nextRetryAt;

    public FlushCoordinator(ProcessNode node, GroupMember member, long attempt, NodeId[] survivors, long now)
    {
        _node = node;
        _member = member;
        Attempt = attempt;
        Survivors = survivors;
        _paths = PathsToSurvivors();
        foreach (NodeId s in survivors) SendWedge(s);
        _nextRetryAt = now + node.Options.RetryInterval;
    }

    public long Attempt { get; }

    public NodeId[] Survivors { get; }

    public bool Done { get; private set; }

    private int ViewId => _member.View!.Id;

    /// <summary>
    /// Per survivor, the path this coordinator's wedge and commit take to it (its answers come back
    /// the reversed way). Directly, unless the group relays (a large group over TCP, where a direct
    /// packet to every survivor would connect the coordinator to all): then over a tree of the
    /// survivors alone, the coordinator its root and the others in rank order, of the stability
    /// tree's fan-out. Not the view's tree: the members this flush removes may sit inside it, and
    /// would cut their subtrees off.
    /// </summary>
    private Dictionary<NodeId, NodeId[]> PathsToSurvivors()
    {
        var paths = new Dictionary<NodeId, NodeId[]>();
        if (!_member.Relaying)
        {
            foreach (NodeId s in Survivors) paths[s] = [_node.Self, s];
            return paths;
        }
        if ((_node.Options.Mutations & ProtocolMutations.FlushRoutesThroughViewTree) != 0)
        {
            foreach (NodeId s in Survivors) paths[s] = _member.PathInView(s); // the mutation: a deliberate bug
            return paths;
        }
        NodeId[] tree = [_node.Self, .. Survivors.Where(s => s != _node.Self)];
        for (int i = 0; i < tree.Length; i++)
        {
            int[] positions = StabilityTree.Path(0, i, _node.Options.StabilityTreeFanout);
            paths[tree[i]] = [.. positions.Select(p => tree[p])];
        }
        return paths;
    }

    private void SendWedge(NodeId survivor) =>
        _member.SendAlong(_paths[survivor], _node.Writer.Begin(new PacketHeader(PacketKind.Wedge, _node.Self, _member.Id, ViewId, Attempt)).Finish());

    public void OnReport(NodeId from, long attempt, ref WireReader r)
    {
        long[] vector = r.Longs();
        List<HeldMessage> messages = HeldMessage.ReadList(ref r, _member.RankCount);
        NodeId? waitingFor = GroupMember.ReadStateStatus(ref r);
        if (!r.Complete || vector.Length != _member.RankCount) { r.Fail(); return; }
        if (attempt != Attempt || _commitPackets != null || Array.IndexOf(Survivors, from) < 0) return;
        _reports[from] = (vector, messages, waitingFor);
        if (_reports.Count == Survivors.Length) Commit();
    }

    private void Commit()
    {
        int ranks = _member.RankCount;
        var cut = new long[ranks];
        var union = new Dictionary<(int Rank, long Seq), StreamMessage>();
        var floor = new long[ranks];
        Array.Fill(floor, long.MaxValue);
        foreach (var (vector, messages, _) in _reports.Values)
        {
            for (int r = 0; r < ranks; r++)
            {
                cut[r] = Math.Max(cut[r], vector[r]);
                floor[r] = Math.Min(floor[r], vector[r]);
            }
            foreach (HeldMessage m in messages) union.TryAdd((m.Rank, m.Seq), m.Message);
        }
        // Honest reports always hold every message between the lowest and the highest claim (no
        // member collects a message before all hold it). Cap the cut at what the reports really
        // carry, so a corrupt report claiming more than it brings cannot stall or crash the flush.
        for (int r = 0; r < ranks; r++)
        {
            for (long seq = floor[r] + 1; seq <= cut[r]; seq++)
            {
                if (!union.ContainsKey((r, seq))) { cut[r] = seq - 1; break; }
            }
        }

        for (int r = 0; r < ranks; r++)
        {
            Invariant.Check(cut[r] >= floor[r], $"the cut holds what every survivor holds: rank {r}, cut {cut[r]}, least report {floor[r]}");
        }

        // Survivors still waiting for a checkpoint, and from whom: every survivor gets the same list,
        // so all agree on who holds the state at the next view's cut (GroupMember.StateTransfer).
        var waiting = _reports.Where(e => e.Value.WaitingFor != null).Select(e => (Survivor: e.Key, Maker: e.Value.WaitingFor!.Value)).ToList();
        bool skipExchange = (_node.Options.Mutations & ProtocolMutations.SkipFlushExchange) != 0;
        _commitPackets = new Dictionary<NodeId, byte[]>();
        foreach (NodeId survivor in Survivors)
        {
            long[] held = _reports[survivor].Vector;
            var missing = new List<HeldMessage>();
            long[] memberCut = skipExchange ? held : cut;
            if (!skipExchange)
            {
                for (int r = 0; r < ranks; r++)
                {
                    for (long seq = held[r] + 1; seq <= cut[r]; seq++) missing.Add(new HeldMessage(r, seq, union[(r, seq)]));
                }
            }
            PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.FlushCommit, _node.Self, _member.Id, ViewId, Attempt)).Longs(memberCut);
            HeldMessage.WriteList(w, missing);
            w.I32(waiting.Count);
            foreach (var (waiter, maker) in waiting) w.Node(waiter).Node(maker);
            _commitPackets[survivor] = w.Finish();
        }
        foreach (var (survivor, packet) in _commitPackets) _member.SendAlong(_paths[survivor], packet);
    }

    public void OnCommitAck(NodeId from, long attempt)
    {
        if (attempt != Attempt || _commitPackets == null || !_commitPackets.ContainsKey(from)) return;
        _committed.Add(from);
        if (_committed.Count == Survivors.Length && !Done)
        {
            Done = true;
            SendDone();
        }
    }

    /// <summary>Tells the membership service this attempt finished; repeated whenever it asks again.</summary>
    public void SendDone() =>
        _node.SendToOracle(_node.Writer.Begin(new PacketHeader(PacketKind.FlushDone, _node.Self, _member.Id, ViewId, Attempt)).Finish());

    /// <summary>When <see cref="Tick"/> retransmits next.</summary>
    public long NextDeadline => _nextRetryAt;

    /// <summary>Retransmits whichever step is waiting on a lost packet.</summary>
    public void Tick(long now)
    {
        if (now < _nextRetryAt) return;
        _nextRetryAt = now + _node.Options.RetryInterval;
        if (Done)
        {
            // Until the view is installed: the service's leader may have changed and never heard of this attempt.
            SendDone();
            return;
        }
        foreach (NodeId s in Survivors)
        {
            if (_commitPackets == null)
            {
                if (_reports.ContainsKey(s)) continue;
                SendWedge(s);
                // A survivor without the group's key can neither open our request nor send a report
                // that opens: the flush would wait forever. Have it expelled (GroupMember.Security).
                if (_member.LacksKey(s)) _member.SuspectForKey(s);
            }
            else if (!_committed.Contains(s))
            {
                _member.SendAlong(_paths[s], _commitPackets[s]);
            }
        }
    }
}
