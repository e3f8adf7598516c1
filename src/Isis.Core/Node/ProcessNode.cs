using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Wire;

namespace Isis.Core.Node;

/// <summary>
/// One application process, sans-IO: its link to the membership service (heartbeats, isolation,
/// expulsion), its firewall, and its groups. Inputs are packets, ticks and API commands; outputs
/// accumulate in its <see cref="Outbox"/>, which a driver takes with <see cref="TakeReady"/>.
/// </summary>
internal sealed partial class ProcessNode : IProtocolNode
{
    private readonly Dictionary<GroupId, GroupMember> _groups = new();
    private readonly Queue<ReadOnlyMemory<byte>> _loopback = new();
    private readonly Firewall _firewall;
    private long _now;
    private long _nextHeartbeatAt;
    private long _lastHeardFromOracle;
    private long _knownEpoch;
    private long _isolationSuspectedAt;
    private bool _toldStillLooking; // ServiceNotFoundYet went out
    private bool _admitted; // a replica of the service answered this incarnation (it may hold a lease, views, a place in the service)
    private bool _founder; // this process founded the embedded service it uses

    /// <summary>A replica of the service answered: this incarnation is admitted, and its silence timer restarts.</summary>
    private void HeardFromService()
    {
        _lastHeardFromOracle = _now;
        _admitted = true;
    }
    private long _heartbeatSeq;
    private readonly (long Seq, long SentAt)[] _heartbeatsSent = new (long, long)[64];
    private long _leaseUntil;
    private bool _draining;
    private ulong[] _service;
    private long _configurationVersion;
    private int _leader;
    private long _leaderTerm;
    private long _lastAckAt;
    private long _nextLeaderProbeAt;
    private readonly NodeId _offeredReplica;
    private readonly ulong[] _directory;
    private long _nextRediscoverAt;
    private bool _retiring;
    private long _nextRetireAt;

    /// <summary>A process of a system whose membership service is one replica at <paramref name="serviceEndpoint"/>.</summary>
    public ProcessNode(NodeId self, ulong serviceEndpoint, ProtocolOptions options, long now)
        : this(self, [serviceEndpoint], options, now)
    {
    }

    /// <summary>A process of a system whose membership service runs on <paramref name="serviceReplicas"/>.</summary>
    /// <param name="self">This incarnation.</param>
    /// <param name="serviceReplicas">
    /// The service's replicas; with <paramref name="discover"/>, where to ask for them instead (the
    /// well-known port, seeds, replicas remembered from before), and they answer with the replicas.
    /// </param>
    /// <param name="options">Protocol options.</param>
    /// <param name="now">The driver's clock.</param>
    /// <param name="offeredReplica">The dormant membership replica this process runs, offered to an embedded service (<see cref="NodeId.None"/>: none).</param>
    /// <param name="discover">Ask <paramref name="serviceReplicas"/> where the service is before using it.</param>
    /// <param name="directory">
    /// Where to ask again if the replicas this process knows stop answering (the embedded service
    /// may have moved while it missed a configuration); by default, what <paramref name="discover"/> asked.
    /// </param>
    public ProcessNode(NodeId self, ulong[] serviceReplicas, ProtocolOptions options, long now, NodeId offeredReplica = default, bool discover = false, ulong[]? directory = null)
    {
        Self = self;
        _service = serviceReplicas;
        _directory = directory ?? (discover ? serviceReplicas : []);
        _configurationVersion = discover ? -1 : 0;
        _offeredReplica = offeredReplica;
        _founder = !discover && !offeredReplica.IsNone;
        Options = options;
        Outbox = new Outbox(options.BufferPool);
        Sealer = new Security.PacketSealer(self, options.SealSalt, options.SystemKey, options.Mutations, options.AcceptedSystemKeys);
        _firewall = new Firewall(options);
        _now = Outbox.StepTime = now;
        _lastHeardFromOracle = now;
        _lastAckAt = now;
        SendHeartbeat();
        _nextHeartbeatAt = now + options.HeartbeatInterval;
    }

    private readonly List<bool> _sealed = new();
    private readonly List<ReadOnlyMemory<byte>> _bundle = new();

    /// <summary>
    /// Seals the packets sent since the last call: those to one destination under one key go in
    /// bundles of up to <see cref="ProtocolOptions.SealedBundleBytes"/>, in the order they were sent
    /// (a retransmission is a new packet, so it gets a new counter). One AES-GCM operation per bundle
    /// instead of per packet is what keeps a key cheap. Called by <see cref="TakeReady"/>, so a
    /// driver that takes many inputs per batch (the runtime's event loop) seals once per batch.
    /// </summary>
    private void SealPendingPackets()
    {
        int n = Outbox.ToSeal.Count;
        if (n == 0) return;
        _sealed.Clear();
        for (int i = 0; i < n; i++) _sealed.Add(false);
        for (int i = 0; i < n; i++)
        {
            if (_sealed[i]) continue;
            var (endpoint, keyGroup, _) = Outbox.ToSeal[i];
            int length = 0;
            _bundle.Clear();
            for (int j = i; j < n; j++)
            {
                var (e, k, packet) = Outbox.ToSeal[j];
                if (_sealed[j] || e != endpoint || k != keyGroup) continue;
                if (_bundle.Count > 0 && length + packet.Length > Options.SealedBundleBytes)
                {
                    Outbox.Packets.Add(new OutboundPacket(endpoint, Sealer.SealBundle(keyGroup, _bundle, length, Outbox)));
                    _bundle.Clear();
                    length = 0;
                }
                _bundle.Add(packet);
                length += packet.Length;
                _sealed[j] = true;
            }
            Outbox.Packets.Add(new OutboundPacket(endpoint, Sealer.SealBundle(keyGroup, _bundle, length, Outbox)));
        }
        Outbox.ToSeal.Clear();
        _bundle.Clear();
    }

    public NodeId Self { get; }

    public ulong Endpoint => Self.Endpoint;

    /// <summary>The driver's clock at the last input: the time of the step whose outbox is being drained.</summary>
    public long Now => _now;

    /// <summary>The membership replica this process believes leads the service: heartbeats and requests go there.</summary>
    public ulong ServiceLeaderEndpoint => _service[_leader];

    private bool IsServiceReplica(ulong endpoint) => !Discovering && Array.IndexOf(_service, endpoint) >= 0;

    /// <summary>True until some replica or process told this one which replicas run the service.</summary>
    public bool Discovering => _configurationVersion < 0;

    /// <summary>Log position of the service configuration this process learned last (-1 while discovering).</summary>
    public long ConfigurationVersion => _configurationVersion;

    /// <summary>The membership replicas as this process knows them (the configuration it learned last).</summary>
    public IReadOnlyList<ulong> ServiceReplicas => _service;

    /// <summary>
    /// Asks the membership service to move this process's replica elsewhere before it exits; a
    /// <see cref="HostRetired"/> event says it may go (at once if it hosts none).
    /// </summary>
    public void RetireFromService(long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || _retiring) return;
        _retiring = true;
        _nextRetireAt = now;
        Tick(now);
    }

    public ProtocolOptions Options { get; }

    /// <summary>Seals what leaves and opens what arrives (the system key and the groups' keys).</summary>
    internal Security.PacketSealer Sealer { get; }

    /// <summary>
    /// Protects a group's member-to-member packets with <paramref name="key"/> (32 bytes), before
    /// joining it: they are sealed with it, and packets of the group that do not open with it are
    /// dropped. Every member must hold the same key.
    /// </summary>
    public void SetGroupKey(string name, byte[] key) => Sealer.SetGroupKey(GroupId.FromName(name), key);

    /// <summary>
    /// Key rotation: this process holds <paramref name="key"/> as the group's next key (packets sealed
    /// with it open from now on), and its member says so to the group. The group moves to it at the
    /// view change after every member said so (<see cref="GroupKeyRotated"/>).
    /// </summary>
    public void StageGroupKey(string name, byte[] key, long now)
    {
        _now = Outbox.StepTime = now;
        GroupId id = GroupId.FromName(name);
        byte[] fingerprint = Sealer.StageGroupKey(id, key);
        if (!IsShutDown && _groups.TryGetValue(id, out GroupMember? member)) member.OnKeyStaged(fingerprint);
        Drain();
    }

    /// <summary>The node's accumulator of outputs: the core writes to it, drivers see it only through <see cref="TakeReady"/>.</summary>
    internal Outbox Outbox { get; }

    public bool HasReady => !Outbox.IsEmpty || Outbox.ToSeal.Count > 0;

    public Ready TakeReady()
    {
        SealPendingPackets();
        return new Ready(Outbox);
    }

    public void Advance() => Outbox.Clear();

    public NodeCounters Counters { get; } = new();

    /// <summary>Set once the process is expelled or isolated; the node then ignores all input.</summary>
    public string? ShutdownReason { get; private set; }

    public bool IsShutDown => ShutdownReason != null;

    internal PacketWriter Writer { get; } = new();

    public IEnumerable<GroupMember> Groups => _groups.Values;

    public GroupMember? FindGroup(GroupId id) => _groups.GetValueOrDefault(id);

    /// <summary>
    /// True while this process holds its membership lease: the membership service acknowledged a
    /// heartbeat sent less than <see cref="LeaseDuration"/> ago. The service expels a process only
    /// after <see cref="ProtocolOptions.SuspicionCount"/> silent heartbeat periods, longer than the
    /// lease, so a process cut off from the service stops sending and delivering before it is
    /// expelled: nothing it sends after its expulsion can reach anyone.
    /// </summary>
    public bool LeaseHeld => _now < _leaseUntil;

    /// <summary>
    /// <see cref="LeaseHeld"/> at time <paramref name="now"/> rather than at the last input: what a
    /// driver asks from another thread, so that a process whose loop has not run for a while (starved
    /// of CPU, stopped) does not report a lease that ran out meanwhile.
    /// </summary>
    public bool LeaseHeldAt(long now) => now < Volatile.Read(ref _leaseUntil);

    /// <summary>Lease length: two heartbeat periods short of the expulsion time, as a margin for scheduling delays.</summary>
    public long LeaseDuration => (Options.SuspicionCount - 2) * Options.HeartbeatInterval;

    /// <summary>True once the membership service told us it expelled <paramref name="node"/>.</summary>
    public bool IsExpelled(NodeId node) => !_firewall.Admit(node);

    // ---------------------------------------------------------------- output helpers

    internal void Emit(NodeEvent e) => Outbox.Add(e);

    /// <summary>Sends a packet; packets to ourselves are processed locally, after the current input.</summary>
    internal void SendTo(ulong endpoint, ReadOnlyMemory<byte> packet)
    {
        var kind = (PacketKind)packet.Span[3];
        if (endpoint == Self.Endpoint) _loopback.Enqueue(packet);
        else if (!PacketKinds.IsMemberTraffic(kind)) Outbox.Packets.Add(new OutboundPacket(endpoint, Sealer.Seal(packet, Outbox))); // to or about the service: a few a heartbeat, sealed one by one (a replica opens no bundles)
        else if (Sealer.TryKeyOf(kind, new GroupId(System.Buffers.Binary.BinaryPrimitives.ReadUInt64LittleEndian(packet.Span[20..])), out GroupId keyGroup))
        {
            Outbox.ToSeal.Add((endpoint, keyGroup, packet)); // member traffic: sealed at the end of the step, with the step's other packets to that destination
        }
        else Outbox.Packets.Add(new OutboundPacket(endpoint, packet));
    }

    /// <summary>Sends a request to the leading replica; while the service is still being discovered it is dropped, and retried once it is found.</summary>
    internal void SendToOracle(byte[] packet)
    {
        if (!Discovering) SendTo(ServiceLeaderEndpoint, packet);
    }

    // ---------------------------------------------------------------- commands

    /// <summary>Asks to join <paramref name="name"/>; a <see cref="ViewInstalled"/> event completes it.</summary>
    /// <param name="name">The group.</param>
    /// <param name="now">The current time.</param>
    /// <param name="historyLog">
    /// Disk durability: the records of this member's SafeSend history log as the driver read them
    /// (empty for a new log); the member then appends to it through <see cref="Outbox.HistoryWrites"/>.
    /// Null keeps SafeSends in memory.
    /// </param>
    /// <param name="checkpoints">
    /// Disk durability: the persistent checkpoints this member kept, newest first, each read in full
    /// and checked by the driver. On coming to hold the history, the member restores the first that
    /// belongs to it (<see cref="CheckpointRestored"/>) and replays only the entries after it.
    /// </param>
    /// <param name="historyFoundedElsewhere">
    /// Disk durability: the driver knows a history of this group was founded (a registry of durable
    /// groups names it) though <paramref name="historyLog"/> holds none: this member then never
    /// founds a new one; the group waits for a log of it, or for a forced recovery.
    /// </param>
    public GroupMember Join(string name, long now, IReadOnlyList<byte[]>? historyLog = null, IReadOnlyList<Durability.CheckpointMark>? checkpoints = null,
        bool historyFoundedElsewhere = false)
    {
        _now = Outbox.StepTime = now;
        GroupId id = GroupId.FromName(name);
        if (_groups.TryGetValue(id, out GroupMember? existing) && existing.State != MemberState.Left) return existing;
        Durability.HistoryLogImage? image = historyLog == null ? null
            : Durability.HistoryLog.Read(historyLog) with { FoundedElsewhere = historyFoundedElsewhere };
        var member = new GroupMember(this, id, name, image, checkpoints);
        _groups[id] = member;
        if (!IsShutDown) member.RequestJoin(now);
        Drain();
        return member;
    }

    /// <summary>
    /// Asks for a <see cref="FlushCompleted"/> event (with <paramref name="token"/>) once every
    /// message this member issued so far in the group is held by <paramref name="minHolders"/>
    /// members of the view (0 = all), or was settled by a view change.
    /// </summary>
    public void Flush(GroupId id, long token, int minHolders, long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member)) return;
        member.RequestFlush(token, minHolders, now);
        Drain();
    }

    /// <summary>Issues a query in a group (see <see cref="GroupMember.Query"/>); a <see cref="QueryCompleted"/> event ends it.</summary>
    public void Query(GroupId id, long queryId, MessageKind kind, byte[] payload, int needed, long timeout, QueryTimeoutAction action, long now, int phi = 0, NodeId[]? to = null)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member)) return;
        member.Query(queryId, kind, payload, needed, now + timeout, action, phi, to);
        Drain();
    }

    /// <summary>Answers a query delivered here.</summary>
    public void Reply(GroupId id, NodeId requester, long queryId, ReplyKind kind, byte[] payload, long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member)) return;
        member.Reply(requester, queryId, kind, payload);
        Drain();
    }

    /// <summary>
    /// State transfer: the application's next chunk of the checkpoint it makes for the joiners of
    /// view <paramref name="cutViewId"/> (asked by <see cref="StateRequested"/>); <paramref name="last"/>
    /// ends it. Ignored once that transfer is over. The node keeps <paramref name="chunk"/> until every
    /// joiner acknowledged it (the caller hands it over and must not change it). The driver waits while
    /// <see cref="GroupMember.StateBacklogBytes"/> exceeds <see cref="ProtocolOptions.StateWindowBytes"/>.
    /// </summary>
    public void SendStateChunk(GroupId id, int cutViewId, byte[] chunk, bool last, long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member)) return;
        member.AddStateChunk(cutViewId, chunk, last, now);
        Drain();
    }

    /// <summary>
    /// Disk durability: the operator allows the group to recover its SafeSend history without the
    /// members of its last view that have not come back (docs/operations.md, "Forced recovery"),
    /// or only without <paramref name="without"/> if any are named. False if this member has no
    /// durable history of the group or already holds it.
    /// </summary>
    public bool AllowForcedRecovery(GroupId id, long now, NodeId[]? without = null)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member) || member.History == null) return false;
        bool allowed = member.History.AllowForcedRecovery(without ?? [], now);
        Drain();
        return allowed;
    }

    /// <summary>
    /// Disk durability: the driver made persistent checkpoint <paramref name="mark"/> of the group
    /// durable (the application saved it, or it was copied from another member after
    /// <see cref="CheckpointChunkReceived"/> events): the group's log may be trimmed behind it, and
    /// a copy of the history waiting for it goes on.
    /// </summary>
    public void CheckpointDurable(GroupId id, Durability.CheckpointMark mark, long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member) || member.History == null) return;
        member.History.OnCheckpointDurable(mark, now);
        Drain();
    }

    /// <summary>
    /// Disk durability: the driver's answer to <see cref="CheckpointReadRequested"/>: up to the
    /// asked number of bytes of the checkpoint from <paramref name="offset"/>, and the file's whole
    /// length; or null bytes and the <paramref name="problem"/> when the file cannot be read.
    /// </summary>
    public void AnswerCheckpointRead(GroupId id, NodeId requester, Durability.CheckpointMark mark, long offset, byte[]? bytes, long total, string? problem, long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member) || member.History == null) return;
        member.History.AnswerCheckpointRead(requester, mark, offset, bytes, total, problem);
        Drain();
    }

    /// <summary>Asks the membership service to expel <paramref name="node"/> (a query found it too slow).</summary>
    internal void Suspect(NodeId node, ExpelReason reason) =>
        SendToOracle(Writer.Begin(new PacketHeader(PacketKind.Suspect, Self, default, 0, (long)reason)).Node(node).Finish());

    /// <summary>Deletes the group: the service removes every member in one view change and forgets it; each member gets <see cref="GroupLeft"/> with Terminated set.</summary>
    public void Terminate(GroupId id, long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member)) return;
        member.RequestTerminate(now);
        Drain();
    }

    public void Leave(GroupId id, long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member)) return;
        member.RequestLeave(now);
        Drain();
    }

    /// <summary>Multicasts <paramref name="payload"/> to the group (queued if the group is joining or wedged).</summary>
    /// <remarks>For SafeSend, <c>phi</c> is how many acceptors (the first phi members) must hold it before anyone delivers it; 0 = all.</remarks>
    // pooled: the buffer-pool array behind payload, if it is one; the node owns it from here and returns it once the message is stable.
    public void Send(GroupId id, ReadOnlyMemory<byte> payload, long now, MessageKind kind = MessageKind.Send, int phi = 0, byte[]? pooled = null, NodeId[]? to = null)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown || !_groups.TryGetValue(id, out GroupMember? member))
        {
            if (pooled != null) Outbox.Pool?.Return(pooled);
            return;
        }
        member.Send(kind, payload, phi, pooled, to);
        Drain();
    }

    // ---------------------------------------------------------------- inputs

    /// <summary>
    /// The earliest time at which <see cref="Tick"/> may have something to do (a heartbeat, a
    /// retransmission, a digest, a NAK, a timeout): a driver may sleep until then unless an input
    /// arrives, and must recompute it after every step. Never later than a due timer; the
    /// simulator checks that a tick before it produces nothing.
    /// </summary>
    public long NextDeadline
    {
        get
        {
            if (IsShutDown) return long.MaxValue;
            long hb = Options.HeartbeatInterval;
            long d = _nextHeartbeatAt;
            d = Math.Min(d, _isolationSuspectedAt == 0 ? _lastHeardFromOracle + SilenceAllowed + 1 : _isolationSuspectedAt + 2 * hb + 1);
            if (Discovering && !_toldStillLooking) d = Math.Min(d, _lastHeardFromOracle + Options.IsolationTimeout + 1);
            if (LearnedUnansweredConfiguration) d = Math.Min(d, _lastHeardFromOracle + FoundingWait + 1);
            if (_service.Length > 1) d = Math.Min(d, Math.Max(_lastAckAt + 2 * hb + 1, _nextLeaderProbeAt));
            if (!Discovering) d = Math.Min(d, Math.Max(_lastAckAt + 2 * hb + 1, _nextRediscoverAt));
            if (_retiring && !Discovering) d = Math.Min(d, _nextRetireAt);
            foreach (GroupMember g in _groups.Values) d = Math.Min(d, g.NextDeadline);
            return d;
        }
    }

    /// <summary>
    /// True while this process is a newcomer: it looks for the service, or (embedded service) it
    /// knows where the service is, or founded it, but no replica has answered it yet. It holds no
    /// lease, no view and no place in the service, so it has nothing to guard by stopping early:
    /// a founder whose first steps are slow on a loaded machine is not "isolated".
    /// </summary>
    private bool Newcomer => Discovering || (!_admitted && !_offeredReplica.IsNone);

    /// <summary>How long this process may hear nothing from the service before it gives up: a newcomer waits longer.</summary>
    private long SilenceAllowed => Newcomer ? Math.Max(Options.IsolationTimeout, Options.DiscoveryTimeout) : Options.IsolationTimeout;

    /// <summary>
    /// Embedded service: how long a process asks everything it knows (the well-known port, the
    /// seeds, the replicas on the machine's file, its own replica) without an answer before it may
    /// found a service, if it holds the well-known port. Longer than the isolation timeout plus the
    /// two periods a member waits before it stops: any member of an earlier service that still runs
    /// then heard that service during the wait, whose replicas answer, or are on the machine's file.
    /// </summary>
    public long FoundingWait => Options.IsolationTimeout + 3 * Options.HeartbeatInterval;

    /// <summary>
    /// Embedded service: from when this process, as far as it can tell, may found the service
    /// (<see cref="Membership.EmbeddedFounding"/> adds what the machine knows): it looks for a
    /// service (it was never admitted by one) and has asked everything it knows for
    /// <see cref="FoundingWait"/> without an answer. <see cref="long.MaxValue"/> if it may not.
    /// </summary>
    public long MayFoundServiceAt =>
        IsShutDown || !Discovering || _offeredReplica.IsNone ? long.MaxValue
        : (Options.Mutations & ProtocolMutations.FoundBesideLiveService) != 0 ? _lastHeardFromOracle
        : _lastHeardFromOracle + FoundingWait;

    /// <summary>
    /// Embedded service: this process founds the service with its own replica as the only one
    /// (the driver created that replica founding, see <see cref="Membership.EmbeddedFounding"/>),
    /// after looking for one and finding none. It talks to that replica from now on, and sends
    /// what waited for a service.
    /// </summary>
    public void FoundService(long now)
    {
        _now = Outbox.StepTime = now;
        Common.Invariant.Check(!IsShutDown && Discovering && !_offeredReplica.IsNone, "only a process still looking for the service, with a replica to offer, founds one");
        _founder = true;
        _configurationVersion = 0;
        _service = [_offeredReplica.Endpoint];
        _leader = 0;
        _lastHeardFromOracle = now;
        _lastAckAt = now;
        _isolationSuspectedAt = 0;
        _nextHeartbeatAt = now;
        Emit(new ServiceConfigurationChanged(0, [_offeredReplica]));
        foreach (GroupMember g in _groups.Values) g.RetryRequestsAt(now);
        Tick(now);
    }

    /// <summary>
    /// True for a newcomer of the embedded service that learned a configuration (from a process,
    /// perhaps one of a service that has just died) whose replicas never answered it.
    /// </summary>
    private bool LearnedUnansweredConfiguration => !Discovering && !_admitted && !_founder && _directory.Length > 0;

    public void Tick(long now)
    {
        _now = Outbox.StepTime = now;
        if (IsShutDown) return;
        if (LearnedUnansweredConfiguration && now - _lastHeardFromOracle > FoundingWait)
        {
            // The replicas it was told of never answered (a process passed on the configuration of
            // a service that died since): it looks again, for a live service or, if it comes to
            // hold the well-known port, to found one.
            _configurationVersion = -1;
            _service = _directory;
            _leader = 0;
            _nextHeartbeatAt = now;
        }
        if (Discovering && !_toldStillLooking && now - _lastHeardFromOracle > Options.IsolationTimeout)
        {
            // A member would stop here; a newcomer goes on asking, and says so once.
            _toldStillLooking = true;
            if (SilenceAllowed > Options.IsolationTimeout) Emit(new ServiceNotFoundYet(now - _lastHeardFromOracle, _service.Length));
        }
        if (now - _lastHeardFromOracle > SilenceAllowed)
        {
            // Before giving up, ask once more and wait two heartbeat periods: a process that was only
            // paused learns that it was expelled (a clearer reason), and its last packets let the
            // firewalls of the others count it.
            if (_isolationSuspectedAt == 0)
            {
                _isolationSuspectedAt = now;
                _nextHeartbeatAt = now;
            }
            else if (now - _isolationSuspectedAt > 2 * Options.HeartbeatInterval)
            {
                ShutDown(Discovering
                    ? $"no membership service answered within {(now - _lastHeardFromOracle) / 1000} ms at any of the {_service.Length} addresses asked " +
                      "(the well-known port, the seeds and the replicas known from before); start the first process again, or list a live process in the seeds " +
                      "(if the service runs, check that this process has its IsisOptions.SystemKey: the service drops what does not open with its key)."
                    : !_admitted
                    ? $"no membership replica answered within {(now - _lastHeardFromOracle) / 1000} ms at any of the {_service.Length} replicas listed; " +
                      "check that they run, that this process is told where (IsisOptions.MembershipReplicas, the same list at every process, or MembershipServiceAddress and MembershipServicePort for one), " +
                      "and that it has their IsisOptions.SystemKey (a replica drops what does not open with its key)."
                    : $"isolated: no answer from the membership service for {(now - _lastHeardFromOracle) / 1000} ms; " +
                      "this incarnation wedges all its groups and stops. Restart the process to rejoin as a new member.");
                return;
            }
        }
        else
        {
            _isolationSuspectedAt = 0;
        }
        if (_service.Length > 1 && now - _lastAckAt > 2 * Options.HeartbeatInterval && now >= _nextLeaderProbeAt)
        {
            // The replica we talk to stopped answering: try the next one (a follower answers with a hint).
            _leader = (_leader + 1) % _service.Length;
            _nextLeaderProbeAt = now + Options.HeartbeatInterval;
            _nextHeartbeatAt = now;
        }
        if (!Discovering && now - _lastAckAt > 2 * Options.HeartbeatInterval && now >= _nextRediscoverAt)
        {
            // An embedded service moves: if this process missed a configuration, the replicas it
            // lists may all be gone. Ask where the service is now (only a newer configuration is taken).
            _nextRediscoverAt = now + Options.HeartbeatInterval;
            Rediscover();
        }
        if (now >= _nextHeartbeatAt)
        {
            _nextHeartbeatAt = now + Options.HeartbeatInterval;
            SendHeartbeat();
        }
        if (_retiring && !Discovering && now >= _nextRetireAt)
        {
            // Asked often (a small packet, only while exiting): the handover moves leadership, and
            // each retry that reaches the old leader instead costs the exit this much time.
            _nextRetireAt = now + Math.Min(Options.RetryInterval, Options.HeartbeatInterval / 10);
            SendToOracle(Writer.Begin(new PacketHeader(PacketKind.HostRetiring, Self, default, 0, 0)).Finish());
        }
        foreach (GroupMember g in _groups.Values) g.Tick(now);
        Drain();
    }

    public void Receive(ulong source, ReadOnlySpan<byte> packet, long now)
    {
        _now = Outbox.StepTime = now;
        Handle(source, packet);
        Drain();
    }

    private void Drain()
    {
        if (_draining) return;
        _draining = true;
        try
        {
            do
            {
                while (_loopback.Count > 0) Handle(Self.Endpoint, _loopback.Dequeue().Span, fromSelf: true);
                if (!IsShutDown) foreach (GroupMember g in _groups.Values) g.EndOfStep();
            }
            while (_loopback.Count > 0);
            foreach (var (id, g) in _groups)
            {
                if (g.State == MemberState.Left) _groups.Remove(id);
            }
        }
        finally
        {
            _draining = false;
        }
    }

    private void Handle(ulong source, ReadOnlySpan<byte> packet, bool fromSelf = false)
    {
        Counters.PacketsReceived++;
        if (IsShutDown) { Counters.DroppedAfterShutdown++; return; }
        // A header that names another endpoint than the one the datagram came from is forged or corrupt.
        if (PacketDecoder.TryReadHeader(packet, out PacketHeader h) != HeaderVerdict.Ok || h.Sender.Endpoint != source)
        {
            Counters.DroppedMalformed++;
            return;
        }
        // Authentication before anything reads the body (our own loopback packets never left the process).
        if (!fromSelf && (Sealer.Enabled || packet[2] == PacketHeader.SealedVersion))
        {
            Security.OpenVerdict verdict = Sealer.Open(h, ref packet, Counters);
            if (verdict == Security.OpenVerdict.Replayed) return;
            // What a group's member learns from it: a view member whose packets never open lacks the key (GroupMember.Security).
            GroupMember? member = PacketKinds.IsGroupTraffic(h.Kind) ? _groups.GetValueOrDefault(h.Group) : null;
            if (Security.PacketSealer.IsDropped(verdict))
            {
                member?.OnUnauthenticated(h.Sender, _now);
                return;
            }
            if (verdict == Security.OpenVerdict.Opened && member != null && Sealer.HasGroupKey(h.Group))
            {
                member.OnAuthenticated(h.Sender);
                if (Sealer.LastOpenedWithStagedKey is { } next) member.OnOpenedWithNextKey(h.Sender, next);
            }
            if (h.Kind == PacketKind.Bundle)
            {
                HandleBundle(source, h, PacketDecoder.Body(packet));
                return;
            }
        }
        if (h.Kind == PacketKind.Bundle)
        {
            Counters.DroppedMalformed++; // a bundle exists only sealed
            return;
        }
        HandleAuthenticated(source, h, packet);
    }

    /// <summary>
    /// The packets of an opened bundle, one by one. Each must name the bundle's sender and be one the
    /// bundle's key covers (a group's key carries only that group's member packets): nothing can be
    /// smuggled under another key or another sender's name.
    /// </summary>
    private void HandleBundle(ulong source, in PacketHeader bundle, ReadOnlySpan<byte> body)
    {
        while (body.Length > 0)
        {
            int length = body.Length >= PacketHeader.Size ? System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(body[PacketHeader.LengthOffset..]) : -1;
            if (length < PacketHeader.Size || length > body.Length) { Counters.DroppedMalformed++; return; }
            ReadOnlySpan<byte> inner = body[..length];
            body = body[length..];
            Counters.PacketsReceived++;
            if (PacketDecoder.TryReadHeader(inner, out PacketHeader h) != HeaderVerdict.Ok || h.Sender != bundle.Sender || !PacketKinds.IsMemberTraffic(h.Kind)
                || !Sealer.TryKeyOf(h.Kind, h.Group, out GroupId keyGroup) || keyGroup != bundle.Group)
            {
                Counters.DroppedMalformed++;
                continue;
            }
            HandleAuthenticated(source, h, inner);
        }
    }

    private void HandleAuthenticated(ulong source, in PacketHeader h, ReadOnlySpan<byte> packet)
    {
        if (!_firewall.Admit(h.Sender))
        {
            Counters.DroppedFirewall++;
            // Tell the zombie it is out, at most once per heartbeat period, so it shuts itself down.
            if (_firewall.ShouldNotify(h.Sender, _now))
            {
                SendTo(h.Sender.Endpoint, ExpelledNotice(h.Sender));
                Emit(new TrafficFirewalled(h.Sender, Counters.DroppedFirewall));
            }
            return;
        }
        ReadOnlySpan<byte> body = PacketDecoder.Body(packet);
        if (h.Kind is PacketKind.ServiceConfiguration or PacketKind.Discover) HandleServiceDirectory(h, body);
        else if (IsServiceReplica(h.Sender.Endpoint)) HandleFromOracle(h, body);
        else HandleFromPeer(h, body);
    }

    /// <summary>
    /// Where the membership service is: a newcomer asks (<see cref="PacketKind.Discover"/>) and any
    /// process or replica that knows answers with the replicas; the leader also pushes each new
    /// configuration. A configuration is taken only if it is newer than the one held, so a stale
    /// or replayed answer cannot move a process back to replicas that were replaced.
    /// </summary>
    private void HandleServiceDirectory(in PacketHeader h, ReadOnlySpan<byte> body)
    {
        var r = new WireReader(body);
        if (h.Kind == PacketKind.Discover)
        {
            if (!r.Complete) { Counters.DroppedMalformed++; return; }
            // Only what a replica confirmed (or this process founded) is passed on: a configuration
            // heard from another process and never answered may be of a service that died.
            if (!Discovering && (_admitted || _founder)) SendTo(h.Sender.Endpoint, ConfigurationPacket());
            return;
        }
        NodeId[] replicas = r.Nodes();
        if (!r.Complete || replicas.Length == 0 || h.Number < 0) { Counters.DroppedMalformed++; return; }
        if (h.Number <= _configurationVersion) return;
        if (!Discovering && _admitted && _now - _lastHeardFromOracle > SilenceAllowed)
        {
            // A member that heard nothing from its service for longer than it may (paused, cut off)
            // takes no configuration any more: it stops within two heartbeat periods. The service it
            // would find now may be another one, founded after its own died (the founding wait is
            // only just longer than this silence): configuration versions of two services do not
            // compare, and that service would answer its heartbeats, renewing the lease of a member
            // that holds views of the dead one, so two services would run at once.
            return;
        }
        ulong leader = Discovering ? 0 : ServiceLeaderEndpoint;
        bool wasDiscovering = Discovering;
        _configurationVersion = h.Number;
        _service = replicas.Select(x => x.Endpoint).ToArray();
        _leader = Math.Max(0, Array.IndexOf(_service, leader));
        Emit(new ServiceConfigurationChanged(h.Number, replicas));
        if (wasDiscovering)
        {
            // Found: talk to the service now, and send what waited for it. Learning where the
            // service is (perhaps from a process) is not being admitted by it: only its replicas' answers are.
            _lastHeardFromOracle = _now;
            _lastAckAt = _now;
            _nextHeartbeatAt = _now;
            foreach (GroupMember g in _groups.Values) g.RetryRequestsAt(_now);
        }
    }

    private void Rediscover()
    {
        if (_directory.Length == 0 && _offeredReplica.IsNone) return;
        byte[] discover = Writer.Begin(new PacketHeader(PacketKind.Discover, Self, default, 0, 0)).Finish();
        foreach (ulong e in _directory) SendTo(e, discover);
        // This process's own replica, if the service added it, knows the configuration too.
        if (!_offeredReplica.IsNone) SendTo(_offeredReplica.Endpoint, discover);
    }

    private byte[] ConfigurationPacket() =>
        Writer.Begin(new PacketHeader(PacketKind.ServiceConfiguration, Self, default, 0, _configurationVersion))
            .Nodes(_service.Select(e => new NodeId(e, 0)).ToArray()).Finish();

    private byte[] ExpelledNotice(NodeId target) =>
        Writer.Begin(new PacketHeader(PacketKind.Expelled, Self, default, 0, (long)_firewall.ReasonFor(target))).Node(target).Finish();

    /// <summary>What an expelled process says as it shuts down: who expelled it and why.</summary>
    private static string ExpelledBecause(ExpelReason reason, string by) =>
        $"expelled by {by}: {ExpelReasons.Describe(reason)}. Restart the process to rejoin as a new member.";

    private void HandleFromPeer(in PacketHeader h, ReadOnlySpan<byte> body)
    {
        if (h.Kind == PacketKind.Expelled)
        {
            var r = new WireReader(body);
            NodeId target = r.Node();
            if (!r.Complete) { Counters.DroppedMalformed++; return; }
            // A peer saw our packets dropped by its firewall. Trust it only if our own membership
            // service has gone quiet too; otherwise ask the service (the next heartbeat answers).
            if (target == Self && _now - _lastHeardFromOracle > Options.HeartbeatInterval * 2)
            {
                ShutDown(ExpelledBecause(ExpelReasons.Read(h.Number), "the membership service (members of the group firewall this incarnation; reported by " + h.Sender + ")"));
            }
            else
            {
                Counters.DroppedNotForMe++;
            }
            return;
        }
        if (h.Kind is PacketKind.ClientLookup or PacketKind.ClientRequest)
        {
            HandleFromClient(h, body);
            return;
        }
        if (!PacketKinds.IsMemberTraffic(h.Kind))
        {
            // Well formed, but from a replica outside the service configuration this process knows:
            // a deposed one (a paused leader that came back after the service moved on), or one
            // added since. Not hostile input, so not reported as such: counted as from a non-member.
            Counters.DroppedNotMember++;
            return;
        }
        if (!_groups.TryGetValue(h.Group, out GroupMember? member))
        {
            Counters.DroppedUnknownGroup++;
            return;
        }
        member.OnGroupPacket(h, body, _now);
    }

    private void HandleFromOracle(in PacketHeader h, ReadOnlySpan<byte> body)
    {
        var r = new WireReader(body);
        switch (h.Kind)
        {
            case PacketKind.HeartbeatAck:
            {
                NodeId target = r.Node();
                long seq = r.I64();
                long leaderLease = r.I64();
                if (!r.Complete || leaderLease < 0) break;
                if (target != Self) { Counters.DroppedNotForMe++; return; }
                // Only the active leader acknowledges heartbeats.
                _leader = Array.IndexOf(_service, h.Sender.Endpoint);
                HeardFromService();
                _lastAckAt = _now;
                RenewLease(seq, leaderLease);
                return;
            }
            case PacketKind.LeaderHint:
            {
                NodeId leaderId = r.Node();
                if (!r.Complete) break;
                // A leader this process does not list yet is learned with the next configuration.
                int leader = leaderId.IsNone ? -1 : Array.IndexOf(_service, leaderId.Endpoint);
                if (leader >= 0 && h.Number >= _leaderTerm && leader != _leader)
                {
                    _leaderTerm = h.Number;
                    _leader = leader;
                    // Ask the leader at once rather than wait a period: the heartbeat, and any join
                    // or leave the previous replica turned away.
                    _nextHeartbeatAt = _now;
                    _nextRetireAt = _now;
                    foreach (GroupMember g in _groups.Values) g.RetryRequestsAt(_now);
                }
                return;
            }
            case PacketKind.MembershipUpdate:
            {
                NodeId[] expelled = r.Nodes();
                byte[] reasons = r.Remaining > 0 ? r.Bytes() : []; // one per expelled incarnation
                if (!r.Complete) break;
                HeardFromService();
                _knownEpoch = Math.Max(_knownEpoch, h.Number);
                for (int i = 0; i < expelled.Length; i++)
                {
                    ExpelReason reason = i < reasons.Length ? ExpelReasons.Read(reasons[i]) : ExpelReason.Unheard;
                    if (expelled[i] == Self) { ShutDown(ExpelledBecause(reason, "the membership service")); return; }
                    _firewall.Expel(expelled[i], reason);
                }
                return;
            }
            case PacketKind.Expelled:
            {
                NodeId target = r.Node();
                if (!r.Complete) break;
                if (target != Self) { Counters.DroppedNotForMe++; return; }
                ShutDown(ExpelledBecause(ExpelReasons.Read(h.Number), "the membership service"));
                return;
            }
            case PacketKind.InstallView:
            {
                NodeId target = r.Node();
                NodeId[] members = r.Nodes();
                NodeId[] joiners = r.Nodes();
                NodeId[] leavers = r.Nodes();
                ulong multicast = (ulong)r.I64();
                LastLiveView? previousIncarnation = LastLiveView.ReadOptional(ref r, h.View, members);
                if (!r.Complete) break;
                if (target != Self) { Counters.DroppedNotForMe++; return; }
                HeardFromService();
                if (_groups.TryGetValue(h.Group, out GroupMember? member))
                {
                    member.OnInstallView(new GroupView(h.View, members, joiners, leavers, multicast, previousIncarnation), _now);
                }
                else
                {
                    Counters.DroppedUnknownGroup++;
                }
                return;
            }
            case PacketKind.StartFlush:
            {
                NodeId target = r.Node();
                NodeId[] survivors = r.Nodes();
                if (!r.Complete) break;
                if (target != Self) { Counters.DroppedNotForMe++; return; }
                if (!_groups.TryGetValue(h.Group, out GroupMember? member) || member.View == null || member.View.Id != h.View)
                {
                    return; // not there yet: the service retries
                }
                if (member.Coordinator is { } c && c.Attempt == h.Number)
                {
                    if (c.Done) c.SendDone();
                    return;
                }
                if (member.Coordinator == null || member.Coordinator.Attempt < h.Number)
                {
                    foreach (NodeId s in survivors)
                    {
                        if (!member.View.Contains(s)) { r.Fail(); break; }
                    }
                    if (!r.Ok) break;
                    member.Coordinator = new FlushCoordinator(this, member, h.Number, survivors, _now);
                }
                return;
            }
            case PacketKind.HostRetired:
            {
                NodeId target = r.Node();
                if (!r.Complete) break;
                if (target != Self) { Counters.DroppedNotForMe++; return; }
                if (_retiring)
                {
                    _retiring = false;
                    Emit(new HostRetired());
                }
                return;
            }
            case PacketKind.LeaveDone:
            {
                NodeId target = r.Node();
                if (!r.Complete) break;
                if (target != Self) { Counters.DroppedNotForMe++; return; }
                _groups.GetValueOrDefault(h.Group)?.OnLeaveDone(h.View);
                return;
            }
            default:
                break;
        }
        Counters.DroppedMalformed++;
    }

    private void SendHeartbeat()
    {
        if (Discovering)
        {
            byte[] discover = Writer.Begin(new PacketHeader(PacketKind.Discover, Self, default, 0, 0)).Finish();
            foreach (ulong e in _service) SendTo(e, discover);
            return;
        }
        long seq = ++_heartbeatSeq;
        _heartbeatsSent[seq % _heartbeatsSent.Length] = (seq, _now);
        SendToOracle(Writer.Begin(new PacketHeader(PacketKind.Heartbeat, Self, default, 0, _knownEpoch))
            .I64(seq).I64(_configurationVersion).Node(_offeredReplica).Finish());
    }

    /// <summary>
    /// The service heard heartbeat <paramref name="seq"/>, so it cannot expel us before that
    /// heartbeat's send time plus the expulsion time: the lease runs from the send time, not from
    /// the (possibly late) acknowledgement. It also ends no later than the answering leader's own
    /// lease (<paramref name="leaderLease"/> remained when it answered, so it ran out no earlier
    /// than the heartbeat's send time plus that): a later leader is elected only after that, and may
    /// then count the old leader's silence towards its host's expulsion without waiting for a lease
    /// the old leader granted to run out.
    /// </summary>
    private void RenewLease(long seq, long leaderLease)
    {
        var (storedSeq, sentAt) = _heartbeatsSent[seq % _heartbeatsSent.Length];
        if (storedSeq != seq) return; // too old to remember: it cannot extend the lease anyway
        bool wasHeld = LeaseHeld;
        long duration = (Options.Mutations & ProtocolMutations.LeaseOutlivesLeader) != 0 ? LeaseDuration : Math.Min(LeaseDuration, leaderLease);
        _leaseUntil = Math.Max(_leaseUntil, sentAt + duration);
        if (!wasHeld && LeaseHeld)
        {
            foreach (GroupMember g in _groups.Values) g.OnLeaseRenewed(_now);
        }
    }

    /// <summary>Stops this incarnation: wedges every group and tells the driver why.</summary>
    public void ShutDown(string reason)
    {
        if (IsShutDown) return;
        ShutdownReason = reason;
        foreach (GroupMember g in _groups.Values) g.Wedge();
        Emit(new NodeShutDown(reason));
    }
}
