using Isis.Core.Common;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>
/// The membership service ("oracle"), one replica. It is the single authority on who is alive and
/// on every view of every group: it detects failures by heartbeats, expels incarnations, decides
/// the next view of a group, has the group's oldest survivor run the flush, and commits the view.
/// </summary>
/// <remarks>
/// Because one authority decides each view id exactly once, every member that installs view v of a
/// group installs the same member list (view agreement). A later issue replicates this state
/// machine by consensus; its inputs and outputs stay the same.
/// <para>Per group the service runs one view change at a time:</para>
/// <list type="number">
/// <item>Changes (joins, leaves, expulsions) accumulate while a change is in progress and are
/// folded into the next one (batching).</item>
/// <item>A change starts an attempt: StartFlush to the coordinator (oldest alive member), listing
/// the survivors (alive members of the current view).</item>
/// <item>If a survivor or the coordinator is expelled before FlushDone, the attempt is abandoned
/// and a new one starts without it. A late FlushDone of an abandoned attempt is ignored.</item>
/// <item>On FlushDone the next view is committed and sent to every member until acknowledged;
/// the next change starts only when all have acknowledged, so a flush always finds every survivor
/// in the same view.</item>
/// </list>
/// </remarks>
internal sealed class OracleNode : IProtocolNode
{
    private readonly Dictionary<NodeId, ProcessRecord> _processes = new();
    private readonly HashSet<NodeId> _expelled = new();
    private readonly List<NodeId> _recentlyExpelled = new();
    private readonly Dictionary<GroupId, GroupRecord> _groups = new();
    private readonly PacketWriter _writer = new();
    private long _epoch;
    private long _nextCheckAt;
    private long _now;

    public OracleNode(NodeId self, ProtocolOptions options, long now)
    {
        Self = self;
        Options = options;
        _now = now;
        _nextCheckAt = now + options.HeartbeatInterval;
    }

    public NodeId Self { get; }

    public ulong Endpoint => Self.Endpoint;

    public ProtocolOptions Options { get; }

    public Outbox Outbox { get; } = new();

    public NodeCounters Counters { get; } = new();

    /// <summary>Alive processes, for monitoring and tests.</summary>
    public IReadOnlyCollection<NodeId> AliveProcesses => _processes.Keys;

    public bool IsExpelled(NodeId node) => _expelled.Contains(node);

    /// <summary>The committed view of a group, if any.</summary>
    public (int ViewId, NodeId[] Members)? CommittedView(GroupId group) =>
        _groups.TryGetValue(group, out GroupRecord? g) ? (g.ViewId, g.Members) : null;

    /// <summary>The coordinator of the view change in progress for a group, if any (the simulator aims crashes at it).</summary>
    public NodeId? ActiveFlushCoordinator(GroupId group) =>
        _groups.TryGetValue(group, out GroupRecord? g) && g.Flush is { } f ? f.Coordinator : null;

    private sealed class ProcessRecord
    {
        public bool HeardSinceCheck = true;
        public int Suspicions;
    }

    private sealed class GroupRecord(string name)
    {
        public string Name = name;
        public int ViewId;
        public NodeId[] Members = [];
        public readonly List<NodeId> PendingJoins = new();
        public readonly HashSet<NodeId> PendingLeaves = new();
        public long AttemptCounter;
        public FlushAttempt? Flush;
        public readonly HashSet<NodeId> AwaitingInstallAck = new();
        public byte[][] InstallPackets = [];
        public long NextRetryAt;
    }

    private sealed record FlushAttempt(long Attempt, NodeId Coordinator, NodeId[] Survivors, NodeId[] NextMembers, NodeId[] Joiners, NodeId[] Leavers);

    // ---------------------------------------------------------------- inputs

    public void Receive(ulong source, ReadOnlySpan<byte> packet, long now)
    {
        _now = now;
        Counters.PacketsReceived++;
        if (PacketDecoder.TryReadHeader(packet, out PacketHeader h) != HeaderVerdict.Ok || h.Sender.Endpoint != source)
        {
            Counters.DroppedMalformed++;
            return;
        }
        if (_expelled.Contains(h.Sender))
        {
            // Firewall: an expelled incarnation gets one answer, "you are out", and nothing else.
            Counters.DroppedFirewall++;
            Send(h.Sender.Endpoint, _writer.Begin(Header(PacketKind.Expelled, default, 0, 0)).Node(h.Sender).Finish());
            return;
        }
        var r = new WireReader(PacketDecoder.Body(packet));
        switch (h.Kind)
        {
            case PacketKind.Heartbeat:
            {
                long seq = r.I64();
                if (!r.Complete) break;
                Heard(h.Sender);
                Send(h.Sender.Endpoint, _writer.Begin(Header(PacketKind.HeartbeatAck, default, 0, _epoch)).Node(h.Sender).I64(seq).Finish());
                if (h.Number < _epoch) SendMembershipUpdate(h.Sender);
                return;
            }
            case PacketKind.JoinRequest:
            {
                string name = r.String(Options.MaxGroupNameBytes);
                if (!r.Complete || GroupId.FromName(name) != h.Group) break;
                Heard(h.Sender);
                OnJoinRequest(h.Sender, h.Group, name);
                return;
            }
            case PacketKind.LeaveRequest:
                if (!r.Complete) break;
                Heard(h.Sender);
                OnLeaveRequest(h.Sender, h.Group);
                return;
            case PacketKind.FlushDone:
                if (!r.Complete) break;
                Heard(h.Sender);
                OnFlushDone(h.Sender, h.Group, h.View, h.Number);
                return;
            case PacketKind.Suspect:
            {
                NodeId suspect = r.Node();
                if (!r.Complete) break;
                Heard(h.Sender);
                // A member reports another as too slow (a query timed out on it): as with missed
                // heartbeats, the service decides, and expelled is expelled.
                if (suspect != h.Sender && _processes.ContainsKey(suspect)) Expel(suspect);
                return;
            }
            case PacketKind.InstallAck:
                if (!r.Complete) break;
                Heard(h.Sender);
                if (_groups.TryGetValue(h.Group, out GroupRecord? g) && h.View == g.ViewId && g.AwaitingInstallAck.Remove(h.Sender))
                {
                    MaybeStartChange(h.Group, g);
                }
                return;
        }
        Counters.DroppedMalformed++;
    }

    private PacketHeader Header(PacketKind kind, GroupId group, int view, long number) => new(kind, Self, group, view, number);

    private void Send(ulong endpoint, byte[] packet) => Outbox.Packets.Add(new OutboundPacket(endpoint, packet));

    private void Heard(NodeId node)
    {
        if (!_processes.TryGetValue(node, out ProcessRecord? p))
        {
            _processes[node] = p = new ProcessRecord();
        }
        p.HeardSinceCheck = true;
        p.Suspicions = 0;
    }

    private void SendMembershipUpdate(NodeId to)
    {
        PacketWriter w = _writer.Begin(Header(PacketKind.MembershipUpdate, default, 0, _epoch));
        w.Nodes(System.Runtime.InteropServices.CollectionsMarshal.AsSpan(_recentlyExpelled));
        Send(to.Endpoint, w.Finish());
    }

    // ---------------------------------------------------------------- failure detection

    public void Tick(long now)
    {
        _now = now;
        if (now >= _nextCheckAt)
        {
            _nextCheckAt = now + Options.HeartbeatInterval;
            List<NodeId>? dead = null;
            foreach (var (node, p) in _processes)
            {
                // One suspicion per heartbeat period without news; k in a row expel.
                if (p.HeardSinceCheck) { p.HeardSinceCheck = false; p.Suspicions = 0; continue; }
                if (++p.Suspicions >= Options.SuspicionCount) (dead ??= new()).Add(node);
            }
            if (dead != null)
            {
                dead.Sort();
                foreach (NodeId node in dead) Expel(node);
            }
        }

        foreach (var (id, g) in _groups)
        {
            if (now < g.NextRetryAt) continue;
            g.NextRetryAt = now + Options.RetryInterval;
            if (g.Flush is { } f) SendStartFlush(id, g, f);
            for (int i = 0; i < g.Members.Length; i++)
            {
                if (g.AwaitingInstallAck.Contains(g.Members[i])) Send(g.Members[i].Endpoint, g.InstallPackets[i]);
            }
        }
    }

    /// <summary>
    /// Expels an incarnation: from now on every process firewalls it, and every group it was in
    /// changes view without it.
    /// </summary>
    public void Expel(NodeId node)
    {
        if (!_processes.Remove(node)) return;
        _expelled.Add(node);
        _recentlyExpelled.Add(node);
        if (_recentlyExpelled.Count > Options.MembershipUpdateSize) _recentlyExpelled.RemoveAt(0);
        _epoch++;
        Outbox.Events.Add(new IncarnationExpelled(node));
        foreach (NodeId p in _processes.Keys) SendMembershipUpdate(p);

        foreach (var (id, g) in _groups)
        {
            g.PendingJoins.Remove(node);
            g.PendingLeaves.Remove(node);
            bool affected = g.AwaitingInstallAck.Remove(node) || Array.IndexOf(g.Members, node) >= 0;
            if (g.Flush is { } f && (Array.IndexOf(f.Survivors, node) >= 0 || Array.IndexOf(f.NextMembers, node) >= 0))
            {
                g.Flush = null; // abandon this attempt; a new one starts below without the dead process
                affected = true;
            }
            if (affected) MaybeStartChange(id, g);
        }
    }

    // ---------------------------------------------------------------- joins, leaves, view changes

    private void OnJoinRequest(NodeId node, GroupId id, string name)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g)) _groups[id] = g = new GroupRecord(name);
        int rank = Array.IndexOf(g.Members, node);
        if (rank >= 0)
        {
            // Already a member: its install was lost or is on its way; resend it.
            if (g.InstallPackets.Length > rank) Send(node.Endpoint, g.InstallPackets[rank]);
            return;
        }
        if (g.PendingJoins.Contains(node) || (g.Flush != null && Array.IndexOf(g.Flush.Joiners, node) >= 0)) return;
        g.PendingJoins.Add(node);
        MaybeStartChange(id, g);
    }

    private void OnLeaveRequest(NodeId node, GroupId id)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g) ||
            (Array.IndexOf(g.Members, node) < 0 && (g.Flush == null || Array.IndexOf(g.Flush.Joiners, node) < 0)))
        {
            // Not a member (any more): leaving is done. Also the answer to a retransmitted request.
            g?.PendingJoins.Remove(node);
            SendLeaveDone(node, id);
            return;
        }
        g.PendingLeaves.Add(node);
        MaybeStartChange(id, g);
    }

    private void SendLeaveDone(NodeId node, GroupId id) =>
        Send(node.Endpoint, _writer.Begin(Header(PacketKind.LeaveDone, id, 0, 0)).Node(node).Finish());

    /// <summary>Starts the next view change of a group if one is due and none is running.</summary>
    private void MaybeStartChange(GroupId id, GroupRecord g)
    {
        if (g.Flush != null || g.AwaitingInstallAck.Count > 0) return;

        var survivors = g.Members.Where(m => _processes.ContainsKey(m)).ToArray();
        var joiners = g.PendingJoins.Where(m => _processes.ContainsKey(m) && Array.IndexOf(g.Members, m) < 0).ToArray();
        var leaving = survivors.Where(g.PendingLeaves.Contains).ToArray();
        bool anyFailed = survivors.Length != g.Members.Length;
        if (joiners.Length == 0 && leaving.Length == 0 && !anyFailed) return;

        NodeId[] next = survivors.Where(m => !g.PendingLeaves.Contains(m)).Concat(joiners).ToArray();
        NodeId[] leavers = g.Members.Where(m => Array.IndexOf(next, m) < 0).ToArray();
        var attempt = new FlushAttempt(++g.AttemptCounter, survivors.Length > 0 ? survivors[0] : default, survivors, next, joiners, leavers);

        if (survivors.Length == 0)
        {
            // Nobody holds messages of the current view: nothing to flush.
            Commit(id, g, attempt);
            return;
        }
        g.Flush = attempt;
        g.NextRetryAt = _now + Options.RetryInterval;
        SendStartFlush(id, g, attempt);
    }

    private void SendStartFlush(GroupId id, GroupRecord g, FlushAttempt f) =>
        Send(f.Coordinator.Endpoint,
            _writer.Begin(Header(PacketKind.StartFlush, id, g.ViewId, f.Attempt)).Node(f.Coordinator).Nodes(f.Survivors).Finish());

    private void OnFlushDone(NodeId from, GroupId id, int viewId, long attempt)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g) || g.Flush is not { } f ||
            f.Attempt != attempt || f.Coordinator != from || viewId != g.ViewId)
        {
            return; // an abandoned attempt, or a duplicate
        }
        Commit(id, g, f);
    }

    /// <summary>Commits the next view: from here on it is decided and every member will install it.</summary>
    private void Commit(GroupId id, GroupRecord g, FlushAttempt f)
    {
        g.Flush = null;
        g.ViewId++;
        g.Members = f.NextMembers;
        foreach (NodeId j in f.Joiners) g.PendingJoins.Remove(j);
        foreach (NodeId l in f.Leavers)
        {
            if (g.PendingLeaves.Remove(l)) SendLeaveDone(l, id);
        }
        g.InstallPackets = new byte[g.Members.Length][];
        g.AwaitingInstallAck.Clear();
        for (int i = 0; i < g.Members.Length; i++)
        {
            NodeId m = g.Members[i];
            g.InstallPackets[i] = _writer.Begin(Header(PacketKind.InstallView, id, g.ViewId, 0))
                .Node(m).Nodes(g.Members).Nodes(f.Joiners).Nodes(f.Leavers).Finish();
            g.AwaitingInstallAck.Add(m);
            Send(m.Endpoint, g.InstallPackets[i]);
        }
        g.NextRetryAt = _now + Options.RetryInterval;
        Invariant.Check(g.Members.Distinct().Count() == g.Members.Length, "a view lists each member once");
        MaybeStartChange(id, g);
    }
}
