using Isis.Core.Common;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>
/// One replica of the membership service (the "oracle"): the single authority on who is alive and
/// on every view of every group. Its decisions (expel an incarnation, commit a group's next view,
/// delete a group) go through a <see cref="ReplicatedLog"/> shared by 1, 3 or 5 replicas, and
/// every replica applies the committed decisions in the same order, so all hold the same state.
/// </summary>
/// <remarks>
/// Only the leader acts, and only while its lease holds: it detects failures by heartbeats, has a
/// group's oldest survivor run the flush, proposes the next view, and tells processes what was
/// decided. Followers answer processes with a hint naming the leader. A new leader rebuilds what
/// is not in the log (who is alive, joins and leaves in progress, unacknowledged installs) from
/// the processes themselves, which retry until answered.
/// <para>Per group the leader runs one view change at a time:</para>
/// <list type="number">
/// <item>Changes (joins, leaves, expulsions) accumulate while a change is in progress and are
/// folded into the next one (batching).</item>
/// <item>A change starts an attempt: StartFlush to the coordinator (oldest alive member), listing
/// the survivors (alive members of the current view). Attempt numbers carry the leader's term, so a
/// new leader's attempts supersede an old leader's.</item>
/// <item>If a survivor or the coordinator is expelled before FlushDone, the attempt is abandoned
/// and a new one starts without it. A late FlushDone of an abandoned attempt is ignored; one from
/// an earlier leader's attempt means the group is wedged with nobody driving it, so the leader
/// runs a fresh change.</item>
/// <item>On FlushDone the next view is proposed; once committed it is sent to every member until
/// acknowledged, and the next change starts only when all have acknowledged, so a flush always
/// finds every survivor in the same view.</item>
/// </list>
/// </remarks>
internal sealed partial class MembershipReplica : IProtocolNode, IReplicatedLogHost
{
    // Committed state: the same at every replica that applied the same log prefix.
    private readonly ExpelledIncarnations _expelled = new();
    private readonly List<NodeId> _recentlyExpelled = new();
    private readonly Dictionary<NodeId, ExpelReason> _expelReasons = new(); // of the recently expelled whose cause is not missed heartbeats
    private readonly Dictionary<GroupId, GroupRecord> _groups = new();
    // The last view (and last live view) of recently deleted groups, oldest deletion first (see DeletedGroupLastView).
    private readonly Dictionary<GroupId, DeletedGroup> _deletedGroupViews = new();
    private readonly Queue<GroupId> _deletionOrder = new();
    private int _forgottenDeletedViews;
    private long _epoch;

    // The leader's working state, rebuilt whenever this replica starts leading.
    private readonly Dictionary<NodeId, ProcessRecord> _processes = new();
    private readonly HashSet<NodeId> _expelProposed = new();
    private bool _leading;
    private long _attemptCounter;
    private long _nextCheckAt;

    private readonly ReplicatedLog _log;
    private readonly PacketWriter _writer = new();
    private long _now;

    /// <param name="self">This replica's identity.</param>
    /// <param name="founding">
    /// The replicas before the log's first configuration entry, in the same order at every replica:
    /// the configured list, just this replica for one that founds an embedded service, or empty for
    /// an embedded replica that waits until the service adds it.
    /// </param>
    /// <param name="options">Protocol options (the same at every replica).</param>
    /// <param name="now">The driver's clock.</param>
    /// <param name="durableRecords">What this replica made durable before it last stopped, to restart from; null for a fresh replica.</param>
    /// <param name="host">The process this replica runs in, when the service is embedded in member processes (<see cref="NodeId.None"/> otherwise).</param>
    public MembershipReplica(NodeId self, NodeId[] founding, ProtocolOptions options, long now, IEnumerable<byte[]>? durableRecords = null, NodeId host = default)
    {
        Self = self;
        Host = host;
        Options = options;
        _sealer = new Security.PacketSealer(self, options.SealSalt, options.SystemKey, options.Mutations, options.AcceptedSystemKeys);
        _now = Outbox.StepTime = now;
        _configuration = founding.Select(r => new ServiceReplica(r, r == self ? host : default)).ToArray();
        _log = new ReplicatedLog(self, founding, options, now, this, durableRecords);
        _log.Tick(now); // a lone replica leads at once
    }

    /// <summary>Convenience for the single replica of a fixed configuration.</summary>
    public MembershipReplica(NodeId self, ProtocolOptions options, long now)
        : this(self, [self], options, now)
    {
    }

    public NodeId Self { get; }

    /// <summary>The driver's clock at the last input: the time of the step whose outbox is being drained.</summary>
    public long Now => _now;

    public ulong Endpoint => Self.Endpoint;

    /// <summary>The process this replica runs in, if the service is embedded (<see cref="NodeId.None"/> otherwise).</summary>
    public NodeId Host { get; }

    public ProtocolOptions Options { get; }

    /// <summary>The replica's accumulator of outputs: drivers see it only through <see cref="TakeReady"/>.</summary>
    internal Outbox Outbox { get; } = new();

    public bool HasReady => !Outbox.IsEmpty;

    public Ready TakeReady() => new(Outbox);

    public void Advance() => Outbox.Clear();

    public NodeCounters Counters { get; } = new();

    /// <summary>True while this replica leads and may answer processes.</summary>
    public bool IsActiveLeader => _log.IsActiveLeader(_now);

    public long Term => _log.Term;

    public long CommitIndex => _log.CommitIndex;

    /// <summary>Alive processes as the leader sees them (empty at followers), for monitoring and tests.</summary>
    public IReadOnlyCollection<NodeId> AliveProcesses => _processes.Keys;

    public bool IsExpelled(NodeId node) => _expelled.Contains(node);

    /// <summary>The committed view of a group, if any.</summary>
    public (int ViewId, NodeId[] Members)? CommittedView(GroupId group) =>
        _groups.TryGetValue(group, out GroupRecord? g) ? (g.ViewId, g.Members) : null;

    /// <summary>The coordinator of the view change in progress for a group, if any (the simulator aims crashes at it).</summary>
    public NodeId? ActiveFlushCoordinator(GroupId group) =>
        _leading && _groups.TryGetValue(group, out GroupRecord? g) && g.Flush is { } f ? f.Coordinator : null;

    private static long HeartbeatConfigurationVersion(ReadOnlySpan<byte> body)
    {
        var r = new WireReader(body);
        r.I64();
        long version = r.I64();
        return r.Ok ? version : long.MaxValue;
    }

    private sealed class ProcessRecord
    {
        public bool HeardSinceCheck = true;
        public int Suspicions;
    }

    private sealed class GroupRecord(string name, int viewId)
    {
        // Committed.
        public readonly string Name = name;
        public int ViewId = viewId;
        public NodeId[] Members = [];
        public NodeId[] Joiners = [];
        public NodeId[] Leavers = [];
        public ulong Multicast;
        public bool HasView;
        /// <summary>The group's previous incarnation's last live view, if this view is the first of a new one (see <see cref="GroupView.PreviousIncarnation"/>).</summary>
        public LastLiveView? PreviousIncarnation;

        // Leader only.
        public readonly List<NodeId> PendingJoins = new();
        public readonly HashSet<NodeId> PendingLeaves = new();
        public bool Terminating;
        public bool ChangeRequested; // a member asked for a view change with the same members (not replicated: it asks again)
        public long ChangeDueAt;
        public FlushAttempt? Flush;
        /// <summary>The change whose view (or deletion) awaits commitment; its joiners count as joining.</summary>
        public FlushAttempt? Proposed;
        public readonly HashSet<NodeId> AwaitingInstallAck = new();
        public byte[][] InstallPackets = [];
        public long NextRetryAt;

        public void ForgetLeaderState()
        {
            PendingJoins.Clear();
            PendingLeaves.Clear();
            Terminating = false;
            ChangeRequested = false;
            ChangeDueAt = 0;
            Flush = null;
            Proposed = null;
            AwaitingInstallAck.Clear();
            InstallPackets = [];
        }
    }

    private sealed record FlushAttempt(long Attempt, NodeId Coordinator, NodeId[] Survivors, NodeId[] NextMembers, NodeId[] Joiners, NodeId[] Leavers);

    // ---------------------------------------------------------------- inputs

    public void Receive(ulong source, ReadOnlySpan<byte> packet, long now)
    {
        ReceivePacket(source, packet, now);
        // What the next reconfiguration step waits for (a commit, a learner catching up, a host
        // leaving) arrives in packets: take the step now rather than at a tick, which a driver
        // sleeping until NextDeadline may not run for a heartbeat period.
        if (_leading) PlanConfiguration();
    }

    private void ReceivePacket(ulong source, ReadOnlySpan<byte> packet, long now)
    {
        _now = Outbox.StepTime = now;
        Counters.PacketsReceived++;
        if (PacketDecoder.TryReadHeader(packet, out PacketHeader h) != HeaderVerdict.Ok || h.Sender.Endpoint != source)
        {
            Counters.DroppedMalformed++;
            return;
        }
        if ((_sealer.Enabled || packet[2] == PacketHeader.SealedVersion) && Security.PacketSealer.IsDropped(_sealer.Open(h, ref packet, Counters))) return;
        ReadOnlySpan<byte> body = PacketDecoder.Body(packet);
        if (h.Kind is >= PacketKind.ReplicaVote and <= PacketKind.ReplicaAppendReply or PacketKind.ReplicaTimeoutNow or PacketKind.ReplicaSnapshot)
        {
            if (!_log.Receive(h, body, now)) Counters.DroppedMalformed++;
            return;
        }
        if (_expelled.Contains(h.Sender))
        {
            // Firewall: an expelled incarnation gets one answer, "you are out", and nothing else.
            Counters.DroppedFirewall++;
            Send(h.Sender.Endpoint, _writer.Begin(Header(PacketKind.Expelled, default, 0, (long)_expelReasons.GetValueOrDefault(h.Sender))).Node(h.Sender).Finish());
            return;
        }
        if (h.Kind == PacketKind.Discover)
        {
            // Any replica that knows the committed configuration tells a newcomer where the service is.
            if (!new WireReader(body).Complete) Counters.DroppedMalformed++;
            else if (_configuration.Length > 0) SendConfiguration(h.Sender.Endpoint);
            return;
        }
        if (h.Kind == PacketKind.ClientLookup)
        {
            AnswerClientLookup(h, body);
            return;
        }
        if (!IsProcessRequest(h.Kind))
        {
            Counters.DroppedMalformed++;
            return;
        }
        if (!_log.IsActiveLeader(now))
        {
            // A leader handing over (or briefly without its lease) still hears the processes: its
            // failure detector keeps running, and must not count them silent meanwhile.
            if (_leading && IsProcessRequest(h.Kind) && !_expelProposed.Contains(h.Sender)) Heard(h.Sender);
            // Not the one to ask: say who is (processes also find the leader by trying each
            // replica), and bring a process that lists old replicas up to date.
            Send(h.Sender.Endpoint, _writer.Begin(Header(PacketKind.LeaderHint, default, 0, _log.Term)).Node(_log.Leader).Finish());
            if (h.Kind == PacketKind.Heartbeat && HeartbeatConfigurationVersion(body) < _configurationVersion) SendConfiguration(h.Sender.Endpoint);
            return;
        }
        if (_expelProposed.Contains(h.Sender))
        {
            // Its expulsion is being decided: no more answers (no lease), or it could outlive the decision.
            Counters.DroppedFirewall++;
            return;
        }
        if (!HandleProcessRequest(h, body)) Counters.DroppedMalformed++;
    }

    /// <summary>
    /// A non-member client asks where a group's members are (see Clients.GroupClientNode): any
    /// replica answers with the group's committed view. A follower's may lag the leader's by a
    /// decision or two; the client takes the latest view it hears of, and asks the members too.
    /// </summary>
    private void AnswerClientLookup(in PacketHeader h, ReadOnlySpan<byte> body)
    {
        var r = new WireReader(body);
        string name = r.String(Options.MaxGroupNameBytes);
        if (!r.Complete || GroupId.FromName(name) != h.Group) { Counters.DroppedMalformed++; return; }
        if (CommittedView(h.Group) is not { Members.Length: > 0 } view) { Counters.DroppedUnknownGroup++; return; }
        Send(h.Sender.Endpoint, _writer.Begin(Header(PacketKind.ClientMembers, h.Group, view.ViewId, 0)).Nodes(view.Members).Finish());
    }

    private static bool IsProcessRequest(PacketKind kind) => kind is PacketKind.Heartbeat or PacketKind.JoinRequest
        or PacketKind.LeaveRequest or PacketKind.FlushDone or PacketKind.Suspect or PacketKind.InstallAck or PacketKind.TerminateRequest
        or PacketKind.HostRetiring or PacketKind.ViewChangeRequest;

    private bool HandleProcessRequest(in PacketHeader h, ReadOnlySpan<byte> body)
    {
        var r = new WireReader(body);
        switch (h.Kind)
        {
            case PacketKind.Heartbeat:
            {
                long seq = r.I64(), configurationVersion = r.I64();
                NodeId offered = r.Node();
                if (!r.Complete) return false;
                Heard(h.Sender);
                // The lease this answer grants may not outlive this leader's own: a successor,
                // elected only after it, may then count this leader's silence as its host's.
                Send(h.Sender.Endpoint, _writer.Begin(Header(PacketKind.HeartbeatAck, default, 0, _epoch)).Node(h.Sender).I64(seq)
                    .I64(_log.LeaseRemaining(_now)).Finish());
                if (h.Number < _epoch) SendMembershipUpdate(h.Sender);
                if (configurationVersion < _configurationVersion) SendConfiguration(h.Sender.Endpoint);
                OfferedReplica(h.Sender, offered);
                return true;
            }
            case PacketKind.HostRetiring:
                if (!r.Complete) return false;
                Heard(h.Sender);
                OnHostRetiring(h.Sender);
                return true;
            case PacketKind.JoinRequest:
            {
                string name = r.String(Options.MaxGroupNameBytes);
                if (!r.Complete || GroupId.FromName(name) != h.Group) return false;
                Heard(h.Sender);
                OnJoinRequest(h.Sender, h.Group, name);
                return true;
            }
            case PacketKind.LeaveRequest:
                if (!r.Complete) return false;
                Heard(h.Sender);
                OnLeaveRequest(h.Sender, h.Group);
                return true;
            case PacketKind.FlushDone:
                if (!r.Complete) return false;
                Heard(h.Sender);
                OnFlushDone(h.Sender, h.Group, h.View, h.Number);
                return true;
            case PacketKind.TerminateRequest:
                if (!r.Complete) return false;
                Heard(h.Sender);
                OnTerminateRequest(h.Sender, h.Group);
                return true;
            case PacketKind.ViewChangeRequest:
                if (!r.Complete) return false;
                Heard(h.Sender);
                OnViewChangeRequest(h.Sender, h.Group, h.View);
                return true;
            case PacketKind.Suspect:
            {
                NodeId suspect = r.Node();
                if (!r.Complete) return false;
                Heard(h.Sender);
                // A member reports another as too slow (a query timed out on it) or without the
                // group's key: as with missed heartbeats, the service decides, and expelled is
                // expelled. The reason goes with the expulsion, to the logs and the process.
                if (suspect != h.Sender && _processes.ContainsKey(suspect)) ProposeExpel(suspect, ExpelReasons.Read(h.Number));
                return true;
            }
            case PacketKind.InstallAck:
                if (!r.Complete) return false;
                Heard(h.Sender);
                if (_groups.TryGetValue(h.Group, out GroupRecord? g) && h.View == g.ViewId && g.AwaitingInstallAck.Remove(h.Sender))
                {
                    MaybeStartChange(h.Group, g);
                }
                return true;
        }
        return false;
    }

    private PacketHeader Header(PacketKind kind, GroupId group, int view, long number) => new(kind, Self, group, view, number);

    private void Send(ulong endpoint, byte[] packet) => Outbox.Packets.Add(new OutboundPacket(endpoint, _sealer.Seal(packet, Outbox)));

    // With a system key, everything the service sends is sealed and everything it takes must open (a forged view, join or vote is dropped unread).
    private readonly Security.PacketSealer _sealer;

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
        // Then why each was expelled, a byte each: a member's firewall tells an expelled process that asks.
        Span<byte> reasons = _recentlyExpelled.Count <= 256 ? stackalloc byte[_recentlyExpelled.Count] : new byte[_recentlyExpelled.Count];
        for (int i = 0; i < reasons.Length; i++) reasons[i] = (byte)_expelReasons.GetValueOrDefault(_recentlyExpelled[i]);
        w.Bytes(reasons);
        Send(to.Endpoint, w.Finish());
    }

    // ---------------------------------------------------------------- failure detection

    /// <summary>The earliest time at which <see cref="Tick"/> may act (see <see cref="ProcessNode.NextDeadline"/>).</summary>
    public long NextDeadline
    {
        get
        {
            long d = _log.NextDeadline(_now);
            if (!_leading) return d;
            d = Math.Min(d, _nextCheckAt);
            if (_offersHeardFrom > _now) d = Math.Min(d, _offersHeardFrom);
            foreach (GroupRecord g in _groups.Values)
            {
                if (g.Flush != null || g.AwaitingInstallAck.Count > 0) d = Math.Min(d, g.NextRetryAt);
                else if (g.ChangeDueAt != 0 && g.Proposed == null) d = Math.Min(d, g.ChangeDueAt); // a running change defers the next
            }
            return d;
        }
    }

    public void Tick(long now)
    {
        _now = Outbox.StepTime = now;
        _log.Tick(now);
        if (!_leading) return;
        PlanConfiguration();
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
                foreach (NodeId node in dead) ProposeExpel(node);
                PlanConfiguration(); // a replica on an expelled host is departing now, not at the next tick
            }
        }

        foreach (var (id, g) in _groups)
        {
            if (g.ChangeDueAt != 0 && now >= g.ChangeDueAt) MaybeStartChange(id, g);
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
    /// Asks the service to expel an incarnation (leader only): once committed, every process
    /// firewalls it and every group it was in changes view without it.
    /// </summary>
    public void Expel(NodeId node)
    {
        if (_leading) ProposeExpel(node);
    }

    private void ProposeExpel(NodeId node, ExpelReason reason = ExpelReason.Unheard)
    {
        // Silent from now on: expelling takes a commit, and the process must not be suspected twice.
        if (_expelled.Contains(node) || !_expelProposed.Add(node)) return;
        _processes.Remove(node);
        Propose(new ExpelDecision(node, reason));
    }

    private void Propose(MembershipDecision decision) => _log.Propose(decision.Encode(_writer), _now);

    // ---------------------------------------------------------------- the replicated log's callbacks

    void IReplicatedLogHost.SendToReplica(ulong endpoint, byte[] packet) => Send(endpoint, packet);

    void IReplicatedLogHost.Persist(byte[] record) => Outbox.ReplicaRecords.Add(record);

    void IReplicatedLogHost.PersistCompacted(List<byte[]> records)
    {
        Outbox.ReplicaRecords.Clear(); // superseded: the compacted log holds what they said
        Outbox.ReplicaRecordsReplaceLog = true;
        Outbox.ReplicaRecords.AddRange(records);
    }

    void IReplicatedLogHost.Committed(long index, NodeId[] holders, NodeId[] voters, long configurationIndex) =>
        Outbox.Add(new DecisionCommitted(index, holders, voters, configurationIndex));

    void IReplicatedLogHost.Apply(long index, byte[] entry, ulong digest)
    {
        MembershipDecision? decision = MembershipDecision.Decode(entry, Options.MaxGroupNameBytes);
        Invariant.Check(decision != null, $"log entry {index} decodes (it was checked when it arrived)");
        Outbox.Add(new DecisionApplied(index, entry, digest));
        switch (decision)
        {
            case ExpelDecision x:
                ApplyExpel(x.Node, x.Reason);
                break;
            case ViewDecision v:
                ApplyView(v);
                break;
            case DeleteGroupDecision d:
                ApplyDelete(d);
                break;
            case ConfigurationDecision c:
                ApplyConfiguration(index, c);
                break;
        }
    }

    void IReplicatedLogHost.LeadershipChanged(bool leading)
    {
        _leading = leading;
        _processes.Clear();
        _expelProposed.Clear();
        ForgetPlacement();
        foreach (var (id, g) in _groups)
        {
            g.ForgetLeaderState();
            if (!g.HasView) _groups.Remove(id); // created for a join that no view decided yet
        }
        if (!leading) return;

        // Everything below is rebuilt from the committed state; what only processes know (joins
        // and leaves in progress, who is alive) they tell the new leader by retrying.
        _nextCheckAt = _now + Options.HeartbeatInterval;
        foreach (var (id, g) in _groups)
        {
            foreach (NodeId m in g.Members) Heard(m);
            SendInstalls(id, g);
        }
        // The processes that host replicas are watched too, group members or not: a host that is
        // silent must be expelled, or its replica would never be replaced.
        foreach (ServiceReplica r in _configuration)
        {
            if (!r.Host.IsNone && !_expelled.Contains(r.Host)) Heard(r.Host);
        }
        CountPredecessorSilence();
        byte[] hint = _writer.Begin(Header(PacketKind.LeaderHint, default, 0, _log.Term)).Node(Self).Finish();
        foreach (NodeId p in _processes.Keys)
        {
            Send(p.Endpoint, hint);
            // A process that missed a configuration would drop the hint of a leader it does not list.
            if (Options.ServiceReplicaTarget > 0) SendConfiguration(p.Endpoint);
        }
    }

    /// <summary>
    /// A replica and its host process share one process: when the replica that led went silent, so
    /// did its host, and the time this replica has not heard it counts towards the host's
    /// suspicions. A crashed leader's host is then expelled about as soon as any crashed process
    /// would be, instead of a whole detection period after the election. At least one heartbeat
    /// period is left in which the host may prove it lives (a heartbeat clears every suspicion).
    /// Safe for the lease rule because a process's lease ends with the lease of the leader that
    /// granted it (<see cref="ProcessNode"/>, RenewLease), and this replica was elected only after the
    /// predecessor's lease ran out: no lease the predecessor granted its host still runs.
    /// </summary>
    private void CountPredecessorSilence()
    {
        var (predecessor, heardAt) = _log.LastLeaderContact;
        if (predecessor.IsNone || predecessor == Self) return;
        NodeId host = Array.Find(_configuration, r => r.Replica == predecessor).Host;
        if (host.IsNone || !_processes.TryGetValue(host, out ProcessRecord? p)) return;
        long silentPeriods = (_now - heardAt) / Options.HeartbeatInterval;
        p.Suspicions = (int)Math.Min(Options.SuspicionCount - 1, Math.Max(0, silentPeriods));
        p.HeardSinceCheck = false;
    }

    private void ApplyExpel(NodeId node, ExpelReason reason)
    {
        if (!_expelled.Add(node)) return;
        // Earlier incarnations on the node's endpoint count as expelled from now on too (see
        // ExpelledIncarnations): the leader forgets them and changes their groups' views below.
        _recentlyExpelled.Add(node);
        if (reason != ExpelReason.Unheard) _expelReasons[node] = reason;
        if (_recentlyExpelled.Count > Options.MembershipUpdateSize)
        {
            _expelReasons.Remove(_recentlyExpelled[0]);
            _recentlyExpelled.RemoveAt(0);
        }
        _epoch++;
        // An exiting process stops heartbeating once it has left its groups: the service expels it
        // like any silent process (so it is firewalled), but says it was no failure.
        Outbox.Add(new IncarnationExpelled(node, AfterExit: _leading && _retiring.Contains(node), reason));
        if (!_leading) return;

        bool Out(NodeId n) => n.Endpoint == node.Endpoint && _expelled.Contains(n);
        _expelProposed.RemoveWhere(Out);
        foreach (NodeId gone in _processes.Keys.Where(Out).ToArray()) _processes.Remove(gone);
        foreach (NodeId p in _processes.Keys) SendMembershipUpdate(p);
        foreach (var (id, g) in _groups)
        {
            g.PendingJoins.RemoveAll(Out);
            g.PendingLeaves.RemoveWhere(Out);
            bool affected = g.AwaitingInstallAck.RemoveWhere(Out) > 0 || Array.Exists(g.Members, Out);
            if (g.Flush is { } f && (Array.Exists(f.Survivors, Out) || Array.Exists(f.NextMembers, Out)))
            {
                g.Flush = null; // abandon this attempt; a new one starts below without the dead process
                affected = true;
            }
            if (affected) MaybeStartChange(id, g);
        }
    }

    private void ApplyView(ViewDecision v)
    {
        // The view before this one with members: the group's current one, or for a group created
        // anew (a leader's record made for a join has no view yet: it is no committed state) the
        // last live view of the deleted group, if still remembered.
        LastLiveView? before;
        if (!_groups.TryGetValue(v.Group, out GroupRecord? g) || !g.HasView)
        {
            if (g == null) _groups[v.Group] = g = new GroupRecord(v.Name, v.ViewId - 1);
            // Its place in _deletionOrder goes when it comes up.
            before = _deletedGroupViews.Remove(v.Group, out DeletedGroup deleted) ? deleted.LastLive : null;
        }
        else
        {
            before = g.Members.Length > 0 ? new LastLiveView(g.ViewId, g.Members) : g.PreviousIncarnation;
        }
        Invariant.Check(v.ViewId == g.ViewId + 1, $"views of a group are committed in order: at {g.ViewId}, committing {v.ViewId}");
        Invariant.Check(v.Members.Distinct().Count() == v.Members.Length, "a view lists each member once");
        // A view none of whose members was in the last live view begins a new incarnation of the
        // group (an empty view ends one): every member of that view was gone, failed or left,
        // without installing a later view, so nobody delivered anything after it.
        g.PreviousIncarnation = before != null && !v.Members.Any(m => Array.IndexOf(before.Members, m) >= 0) ? before : null;
        g.ViewId = v.ViewId;
        g.HasView = true;
        g.Members = v.Members;
        g.Joiners = v.Joiners;
        g.Leavers = v.Leavers;
        g.Multicast = v.Multicast;
        if (!_leading) return;

        g.Proposed = null;
        foreach (NodeId j in v.Joiners) g.PendingJoins.Remove(j);
        foreach (NodeId l in v.Leavers)
        {
            if (g.PendingLeaves.Remove(l)) SendLeaveDone(l, v.Group, v.ViewId);
        }
        if (g.Members.Length == 0)
        {
            // The last member left: the group is gone, and the service forgets it.
            g.Proposed = new FlushAttempt(0, default, [], [], [], []);
            Propose(new DeleteGroupDecision(v.Group, g.ViewId));
            return;
        }
        SendInstalls(v.Group, g);
        MaybeStartChange(v.Group, g);
    }

    private void ApplyDelete(DeleteGroupDecision d)
    {
        if (!_groups.TryGetValue(d.Group, out GroupRecord? g) || g.ViewId != d.LastViewId || g.Members.Length != 0) return;
        _groups.Remove(d.Group);
        // A group created again under the same name continues the view numbering, so no packet of
        // the old group can pass for one of the new.
        RememberDeletedGroup(d.Group, d.LastViewId, g.PreviousIncarnation);
        if (!_leading) return;
        // Joins that arrived while the deletion was being decided start the group afresh.
        foreach (NodeId j in g.PendingJoins) OnJoinRequest(j, d.Group, g.Name);
    }

    private void SendInstalls(GroupId id, GroupRecord g)
    {
        g.InstallPackets = new byte[g.Members.Length][];
        g.AwaitingInstallAck.Clear();
        for (int i = 0; i < g.Members.Length; i++)
        {
            NodeId m = g.Members[i];
            g.InstallPackets[i] = LastLiveView.WriteOptional(_writer.Begin(Header(PacketKind.InstallView, id, g.ViewId, 0))
                .Node(m).Nodes(g.Members).Nodes(g.Joiners).Nodes(g.Leavers).I64((long)g.Multicast), g.PreviousIncarnation).Finish();
            // An incarnation expelled since the view was decided never acknowledges; the next change removes it.
            if (_expelled.Contains(m)) continue;
            g.AwaitingInstallAck.Add(m);
            Send(m.Endpoint, g.InstallPackets[i]);
        }
        g.NextRetryAt = _now + Options.RetryInterval;
    }

    // ---------------------------------------------------------------- joins, leaves, view changes

    private void OnJoinRequest(NodeId node, GroupId id, string name)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g))
        {
            _groups[id] = g = new GroupRecord(name, DeletedGroupLastView(id));
        }
        int rank = Array.IndexOf(g.Members, node);
        if (rank >= 0)
        {
            // Already a member: its install was lost or is on its way; resend it.
            if (g.InstallPackets.Length > rank) Send(node.Endpoint, g.InstallPackets[rank]);
            return;
        }
        if (g.PendingJoins.Contains(node) || IsJoining(g, node)) return;
        g.PendingJoins.Add(node);
        HoldForBatch(g);
        MaybeStartChange(id, g);
    }

    private void OnLeaveRequest(NodeId node, GroupId id)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g) ||
            (Array.IndexOf(g.Members, node) < 0 && !IsJoining(g, node)))
        {
            // Not a member (any more): leaving is done. Also the answer to a retransmitted request.
            g?.PendingJoins.Remove(node);
            SendLeaveDone(node, id, g?.ViewId ?? DeletedGroupLastView(id));
            return;
        }
        g.PendingLeaves.Add(node);
        HoldForBatch(g);
        MaybeStartChange(id, g);
    }

    /// <summary>The first join or leave of a batch opens the window in which others fold into the same change.</summary>
    private void HoldForBatch(GroupRecord g)
    {
        if (g.ChangeDueAt == 0) g.ChangeDueAt = _now + Options.MembershipBatchWindow;
    }

    /// <summary>True if <paramref name="node"/> joins in the change under way (flushing or awaiting commitment).</summary>
    private static bool IsJoining(GroupRecord g, NodeId node) =>
        (g.Flush != null && Array.IndexOf(g.Flush.Joiners, node) >= 0) || (g.Proposed != null && Array.IndexOf(g.Proposed.Joiners, node) >= 0);

    private void SendLeaveDone(NodeId node, GroupId id, int viewWithoutIt) =>
        Send(node.Endpoint, _writer.Begin(Header(PacketKind.LeaveDone, id, viewWithoutIt, 0)).Node(node).Finish());

    /// <summary>
    /// A member deletes the group (when its application shuts down): every member leaves in one
    /// view change, after the usual flush, and the empty group is then forgotten.
    /// </summary>
    private void OnTerminateRequest(NodeId node, GroupId id)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g) || Array.IndexOf(g.Members, node) < 0) return;
        g.Terminating = true;
        foreach (NodeId m in g.Members) g.PendingLeaves.Add(m);
        MaybeStartChange(id, g);
    }

    /// <summary>
    /// A member asks for a view change of its group with the same members (a key rotation takes
    /// effect at the next install): one is started unless a later view than the one it names exists
    /// or a change from it is already on its way (either installs a new view, which is all it needs;
    /// the member asks again until it sees one).
    /// </summary>
    private void OnViewChangeRequest(NodeId node, GroupId id, int viewId)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g) || Array.IndexOf(g.Members, node) < 0 || g.ViewId != viewId) return;
        if (g.Flush != null || g.Proposed != null) return;
        g.ChangeRequested = true;
        MaybeStartChange(id, g);
    }

    /// <summary>Starts the next view change of a group if one is due (or <paramref name="force"/>d) and none is running.</summary>
    private void MaybeStartChange(GroupId id, GroupRecord g, bool force = false)
    {
        if (g.Flush != null || g.Proposed != null || g.AwaitingInstallAck.Count > 0) return;
        force |= g.ChangeRequested && !g.Terminating;
        g.ChangeRequested = false;

        var survivors = g.Members.Where(m => !_expelled.Contains(m) && !_expelProposed.Contains(m)).ToArray();
        // While the group is being deleted, joiners wait: they start the group afresh once it is gone.
        var joiners = g.Terminating ? [] : g.PendingJoins.Where(m => _processes.ContainsKey(m) && Array.IndexOf(g.Members, m) < 0).ToArray();
        var leaving = survivors.Where(g.PendingLeaves.Contains).ToArray();
        bool anyFailed = survivors.Length != g.Members.Length;
        if (joiners.Length == 0 && leaving.Length == 0 && !anyFailed && !force)
        {
            g.ChangeDueAt = 0; // nothing left to batch: the next request opens a new window
            return;
        }
        // Joins and leaves wait out the batch window; a failure (or a forced change) takes them along at once.
        if (!anyFailed && !force && !g.Terminating && _now < g.ChangeDueAt) return;
        g.ChangeDueAt = 0;

        NodeId[] next = survivors.Where(m => !g.PendingLeaves.Contains(m)).Concat(joiners).ToArray();
        NodeId[] leavers = g.Members.Where(m => Array.IndexOf(next, m) < 0).ToArray();
        // The term in the high bits: every attempt of a later leader outranks every earlier one.
        long attempt = (_log.Term << 32) | ++_attemptCounter;
        var flush = new FlushAttempt(attempt, survivors.Length > 0 ? survivors[0] : default, survivors, next, joiners, leavers);

        if (survivors.Length == 0)
        {
            // Nobody holds messages of the current view: nothing to flush.
            ProposeView(id, g, flush);
            return;
        }
        g.Flush = flush;
        g.NextRetryAt = _now + Options.RetryInterval;
        SendStartFlush(id, g, flush);
    }

    private void SendStartFlush(GroupId id, GroupRecord g, FlushAttempt f) =>
        Send(f.Coordinator.Endpoint,
            _writer.Begin(Header(PacketKind.StartFlush, id, g.ViewId, f.Attempt)).Node(f.Coordinator).Nodes(f.Survivors).Finish());

    private void OnFlushDone(NodeId from, GroupId id, int viewId, long attempt)
    {
        if (!_groups.TryGetValue(id, out GroupRecord? g) || viewId != g.ViewId) return; // a duplicate
        if (g.Flush is { } f && f.Attempt == attempt && f.Coordinator == from)
        {
            ProposeView(id, g, f);
            return;
        }
        // An earlier leader's attempt finished: the group is wedged and nobody else will unwedge it.
        if ((attempt >> 32) < _log.Term) MaybeStartChange(id, g, force: true);
    }

    /// <summary>The multicast endpoint of a group's next view (see <see cref="MulticastAllocator"/>); 0 without a plan.</summary>
    private ulong AllocateMulticast(GroupId id, GroupRecord g, NodeId[] nextMembers) =>
        Options.Multicast is not { } plan ? 0
            : MulticastAllocator.Allocate(plan, nextMembers, g.Multicast, _groups.Where(e => e.Key != id && e.Value.HasView).Select(e => (e.Value.Members, e.Value.Multicast)));

    /// <summary>Proposes the next view; it is installed once the replicas commit it.</summary>
    private void ProposeView(GroupId id, GroupRecord g, FlushAttempt f)
    {
        g.Flush = null;
        g.Proposed = f;
        Propose(new ViewDecision(id, g.Name, g.ViewId + 1, f.NextMembers, f.Joiners, f.Leavers, AllocateMulticast(id, g, f.NextMembers)));
    }
}
