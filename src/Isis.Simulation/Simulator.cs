using System.Buffers.Binary;
using Isis.Core.Common;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Simulation.Driving;
using Isis.Simulation.Network;

namespace Isis.Simulation;

/// <summary>
/// Runs real protocol nodes in one thread on virtual time over a seeded faulty network, and
/// records everything they do in a <see cref="History"/>. One seed decides the whole run: the same
/// seed and scenario replay the same run event for event.
/// </summary>
/// <remarks>
/// The run has two phases. In the fault phase the scenario's faults fire at random: loss,
/// duplication and reordering on every packet, partitions, pauses, crashes of members and of
/// view-change coordinators, leaves and rejoins. Then everything heals (a <c>Heal</c> event is
/// recorded): the network becomes perfect, paused processes resume, dead ones restart as new
/// incarnations and rejoin. The heal phase must end with every live member in one view having
/// delivered everything sent in it; the checker's liveness property verifies that.
/// </remarks>
internal sealed partial class Simulator
{
    public const string GroupName = "sim";
    // Processes listen on endpoints 1..N and the membership replicas above them: on 1000, 1001, ...
    // below 1,000 processes (as every seeded scenario has), else on the next power of ten above N.
    private readonly ulong _firstReplicaEndpoint;
    private const long TickInterval = 1_000;

    private readonly DeterministicRandom _random;
    private readonly SimulatedNetwork _network;

    // The processes recycle their buffers as the runtime does, into a pool that overwrites every
    // returned array: a buffer used after its return shows up as a corrupted delivery in the history.
    private readonly BufferPool _buffers = new() { Poison = true };
    private readonly SimReplica[] _replicas;
    private readonly ulong[] _serviceEndpoints;
    private readonly SimProcess[] _processes;
    private readonly Dictionary<ulong, SimProcess> _processByEndpoint = new();
    private readonly GroupId _group = GroupId.FromName(GroupName);
    // Due actions run in (time, order of scheduling) order, exactly as a sorted list would run them.
    private readonly PriorityQueue<Action, (long Time, long Order)> _actions = new();
    private long _actionOrder;
    private long _now;
    private long _nextTick;
    private bool _healed;
    private readonly ProtocolOptions _protocol;

    // The embedded service: the well-known endpoint (the runtime's port 7345), the live process
    // that holds it, and the replicas this machine last knew of (the runtime's file).
    private readonly ulong _directoryEndpoint;
    private SimProcess? _directoryHolder;
    // The replicas as incarnations: the runtime binds each replica on a fresh port, so a restarted
    // process's socket never holds the port of its earlier incarnation's replica.
    private NodeId[] _knownReplicas = [];
    private long _knownReplicasVersion = -1;
    private readonly Dictionary<ulong, SimProcess> _processByReplicaEndpoint = new();

    /// <param name="seed">Decides every coin flip of the run.</param>
    /// <param name="scenario">The processes, faults and durations.</param>
    /// <param name="recordHistory">Record a <see cref="History"/> (what the checker needs). The scale
    /// experiment turns it off for large groups, so that the memory it measures is the protocol's.</param>
    public Simulator(ulong seed, Scenario scenario, bool recordHistory = true)
    {
        RecordsHistory = recordHistory;
        Seed = seed;
        Scenario = scenario;
        _random = new DeterministicRandom(seed);
        _network = new SimulatedNetwork(new DeterministicRandom(seed * 31 + 7)) { Faults = scenario.Faults };
        _firstReplicaEndpoint = 1000;
        while (_firstReplicaEndpoint <= (ulong)scenario.Processes) _firstReplicaEndpoint *= 10;
        _directoryEndpoint = _firstReplicaEndpoint - 1;
        _protocol = (scenario.EmbeddedService ? scenario.Protocol with { ServiceReplicaTarget = scenario.ReplicaTarget } : scenario.Protocol)
            with { StateWindowBytes = scenario.StateWindowBytes };
        int configured = scenario.EmbeddedService ? 0 : scenario.Replicas;
        _serviceEndpoints = Enumerable.Range(0, configured).Select(i => _firstReplicaEndpoint + (ulong)i).ToArray();
        _replicas = new SimReplica[configured];
        for (int i = 0; i < _replicas.Length; i++)
        {
            _replicas[i] = new SimReplica(i, _serviceEndpoints[i]);
            StartReplica(_replicas[i]);
        }
        _processes = new SimProcess[scenario.Processes];
        for (int i = 0; i < _processes.Length; i++)
        {
            _processes[i] = new SimProcess((ulong)(i + 1), _firstReplicaEndpoint + (ulong)i);
            _processByEndpoint.Add(_processes[i].Endpoint, _processes[i]);
            _processByReplicaEndpoint.Add(_processes[i].ReplicaEndpoint, _processes[i]);
        }
    }

    /// <summary>False when the run records no history (see the constructor).</summary>
    public bool RecordsHistory { get; }

    /// <summary>Sees every event a node reports, after the history records it (the scale experiment measures with it).</summary>
    public Action<NodeId, NodeEvent>? Observer { get; set; }

    public ulong Seed { get; }

    /// <summary>Disks lost for good so far (lost-disk and auto-recover: the wiped disk of a member of the last view).</summary>
    public int DisksWiped { get; private set; }

    /// <summary>Disks the scenario drew to be lost for good: each must be wiped (<see cref="DisksWiped"/>), once its process is down.</summary>
    public int DisksToWipe { get; private set; }

    public Scenario Scenario { get; }

    public History History { get; } = new();

    public long Now => _now;

    public SimulatedNetwork Network => _network;

    /// <summary>The membership replica that leads now, if one does.</summary>
    public MembershipReplica? Leader => Scenario.EmbeddedService
        ? _processes.Where(p => p.Alive && !p.Paused).Select(p => p.Replica).FirstOrDefault(n => n != null && n.IsActiveLeader)
        : _replicas.Select(r => r.Node).FirstOrDefault(n => n != null && n.IsActiveLeader);

    /// <summary>The state of every live member, one line each, for diagnosing a failed seed.</summary>
    public string DescribeMembers() =>
        string.Join(Environment.NewLine, _processes.Where(p => p.Alive).Select(p => p.Node!.FindGroup(_group)?.Describe() ?? $"{p.Node!.Self} not in group"));

    /// <summary>The command that replays this run.</summary>
    public string ReplayCommand =>
        $"dotnet run --project tools/Isis.Sim -- replay --seed {Seed} --scenario {Scenario.Name}"
        + (Scenario.Protocol.Mutations == ProtocolMutations.None ? "" : $" --mutation {Scenario.Protocol.Mutations}");

    private sealed class SimProcess(ulong endpoint, ulong replicaEndpoint)
    {
        public readonly ulong Endpoint = endpoint;
        public uint Incarnation;
        public ProcessNode? Node;

        /// <summary>With an embedded service: the replica this process runs (dormant until the service adds it), on its own endpoint.</summary>
        public MembershipReplica? Replica;
        /// <summary>The endpoint of this incarnation's replica: a fresh one at every start (see <see cref="BindReplicaEndpoint"/>).</summary>
        public ulong ReplicaEndpoint = replicaEndpoint;

        /// <summary>Exiting gracefully: its replica is being handed over, then it leaves and stops.</summary>
        public bool Exiting;

        /// <summary>Cut off from every other process by a host partition (the host-partition family).</summary>
        public bool CutOff;
        public bool Paused;
        public readonly Queue<SimulatedNetwork.Envelope> Backlog = new();
        public int Sent;
        public long NextSendAt;
        public bool WantsGroup;
        public bool FlushOutstanding;
        public long FlushTokens;
        public long QueryIds;
        public NodeId LastCausalFrom; // the sender of the last causal message from another member delivered here

        /// <summary>Disk durability: the group's history log, which survives crashes as a disk would.</summary>
        public readonly MemoryHistoryLog Log = new();

        /// <summary>Persistent checkpoints: the newest first, at most two (they survive crashes, as files would).</summary>
        public readonly List<Checkpoint> Checkpoints = new();

        /// <summary>Every persistent checkpoint this process made durable, by name: what it can still serve to a member copying the history.</summary>
        public readonly Dictionary<string, Checkpoint> CheckpointFiles = new();

        /// <summary>A checkpoint being copied from another member: its bytes so far (lost with the incarnation, as a temporary file would be discarded).</summary>
        public List<byte>? CopyingCheckpoint;

        /// <summary>Some incarnation of this process has held the group's history.</summary>
        public bool EverCurrent;

        /// <summary>Scenario.TornWrites: this incarnation crashes in the middle of its next step that writes to disk.</summary>
        public bool CrashInNextWrite;

        /// <summary>This incarnation stopped itself and its restart is planned.</summary>
        public bool RestartPlanned;

        /// <summary>The step of the system key's rotation this incarnation was started in (see Simulator.SystemKeyRotation.cs).</summary>
        public int KeyStep;

        public bool Alive => Node != null && !Node.IsShutDown;

        /// <summary>The simulated application's state in the group (see Simulator.Application.cs); empty for a new incarnation.</summary>
        public readonly ApplicationState App = new();
    }

    /// <summary>A membership replica: its durable records survive its crashes, as a disk would.</summary>
    private sealed class SimReplica(int index, ulong endpoint)
    {
        public readonly int Index = index;
        public readonly ulong Endpoint = endpoint;
        public uint Incarnation;
        public MembershipReplica? Node;
        public readonly List<byte[]> Durable = new();
        public bool Alive => Node != null;
    }

    // ---------------------------------------------------------------- scheduling

    private void At(long time, Action action) => _actions.Enqueue(action, (time, _actionOrder++));

    private bool TryTakeAction(long upTo, out Action action)
    {
        if (_actions.TryPeek(out action!, out var key) && key.Time <= upTo)
        {
            _actions.Dequeue();
            return true;
        }
        action = null!;
        return false;
    }

    /// <summary>The process whose endpoint is <paramref name="endpoint"/>, if any.</summary>
    private SimProcess? ProcessAt(ulong endpoint) => _processByEndpoint.GetValueOrDefault(endpoint);

    /// <summary>The process that runs incarnation <paramref name="node"/> now, if any.</summary>
    private SimProcess? ProcessOf(NodeId node) => ProcessAt(node.Endpoint) is { } p && p.Node?.Self == node ? p : null;

    // ---------------------------------------------------------------- the run

    /// <summary>Runs the whole scenario and returns the recorded history.</summary>
    public History Run()
    {
        Scenario s = Scenario;
        long healAt = s.FaultPhase;
        long end = healAt + s.HealPhase;

        for (int i = 0; i < _processes.Length; i++)
        {
            int index = i;
            if (s.NewcomerFirstAfterSystemRestart && index == _processes.Length - 1) continue; // the new process, started at the restart
            At(_random.NextInRange(0, Math.Max(1, s.StartWindow)), () => Start(_processes[index]));
        }
        PlanFaults(healAt);
        StartClients();
        At(healAt, Heal);

        RunUntil(end);
        RecordCollectionsAtEnd();
        History.RecordEnd(_now);
        return History;
    }

    /// <summary>
    /// Steps the run until nothing is due before virtual time <paramref name="end"/>, or until
    /// <paramref name="stop"/> returns true (asked before every step). May be called again to go on.
    /// </summary>
    /// <returns>True if <paramref name="stop"/> ended it.</returns>
    internal bool RunUntil(long end, Func<bool>? stop = null)
    {
        while (true)
        {
            if (stop != null && stop()) return true;
            // Whatever is due now, in a fixed order: scheduled actions, packets, then the tick.
            if (TryTakeAction(_now, out Action action)) { action(); continue; }
            if (_network.TryTakeDue(_now, out var env)) { Deliver(env); continue; }
            if (_now >= _nextTick)
            {
                TickAll();
                _nextTick = _now + TickInterval;
                continue;
            }
            long next = Math.Min(_nextTick, NextActionTime());
            if (_network.TryPeekTime(out long packetTime)) next = Math.Min(next, packetTime);
            if (next > end) return false;
            _now = next;
        }
    }

    private long NextActionTime() => _actions.TryPeek(out _, out var key) ? key.Time : long.MaxValue;

    // ---------------------------------------------------------------- driving a run from outside

    /// <summary>The node process <paramref name="index"/> runs now (null before it starts and after it crashes).</summary>
    internal ProcessNode? NodeOf(int index) => _processes[index].Node;

    /// <summary>What process <paramref name="index"/>'s history log holds on its disk now (disk durability; tests).</summary>
    internal Isis.Core.Durability.HistoryLogImage LogOnDisk(int index) => Isis.Core.Durability.HistoryLog.Read(_processes[index].Log.Records);

    /// <summary>Starts process <paramref name="index"/> at virtual time <paramref name="time"/>; it joins the group at once.</summary>
    internal void StartAt(int index, long time) => At(time, () => { if (!_processes[index].Alive) Start(_processes[index]); });

    /// <summary>Runs <paramref name="action"/> at virtual time <paramref name="time"/>, between steps.</summary>
    internal void Schedule(long time, Action action) => At(time, action);

    /// <summary>Process <paramref name="index"/> multicasts <paramref name="payload"/> in the group now.</summary>
    internal void SendFrom(int index, byte[] payload, MessageKind kind = MessageKind.Send)
    {
        SimProcess p = _processes[index];
        if (!p.Alive) return;
        p.Node!.Send(_group, payload, _now, kind);
        Flush(p);
    }

    /// <summary>Crashes process <paramref name="index"/> for good (the scale experiment never restarts it).</summary>
    internal void CrashForGood(int index) => CrashOnly(_processes[index]);

    private void TickAll()
    {
        foreach (SimReplica r in _replicas)
        {
            if (!r.Alive) continue;
            TickChecked(r.Node!);
            Flush(r);
        }
        if (Scenario.EmbeddedService && _directoryHolder is not { Alive: true })
        {
            // The runtime retries binding the well-known port every heartbeat: a live process takes it over.
            _directoryHolder = _processes.FirstOrDefault(p => p.Alive && !p.Paused);
        }
        if (Scenario.EmbeddedService) FoundIfNoServiceAnswers();
        foreach (SimProcess p in _processes)
        {
            if (!p.Alive || p.Paused) continue;
            if (p.Replica != null) TickChecked(p.Replica);
            TickChecked(p.Node!);
            Flush(p);
            MaybePauseGrowingReplicaHost();
            RunWorkload(p);
            if (Scenario.Collections) TickCollection(p);
        }
        TickClients();
        if (Scenario.EmbeddedService && !_healed) MaybeDisturbHost();
        if (Scenario.SystemKeyRotation) MaybeRollSystemKey();
        if (Scenario.CoordinatorCrashes && !_healed) MaybeCrashCoordinator();
        if (Scenario.RoleCrashes && !_healed) MaybeCrashRoleHolder();
        if (Scenario.ReplicaCrashes && !_healed) MaybeCrashReplica();
    }

    /// <summary>
    /// Ticks a node every millisecond, as always, and records it when a tick before the deadline
    /// the node reported produced anything (the runtime sleeps until that deadline, so such a
    /// timer would fire late there), or when the deadline is still due after the tick (the
    /// runtime would spin): the checker's TimersWithinDeadline.
    /// </summary>
    private void TickChecked<TNode>(TNode node) where TNode : IProtocolNode
    {
        bool quiet = !node.HasReady;
        long deadline = node.NextDeadline;
        node.Tick(_now);
        if (!RecordsHistory) return;
        NodeId self = node is ProcessNode pn ? pn.Self : ((MembershipReplica)(object)node).Self;
        if (quiet && _now < deadline && node.HasReady) History.RecordEarlyTimer(_now, self, deadline, Describe(node.TakeReady()));
        // A deadline still due after the tick would make a sleeping driver tick again at once, forever.
        if (node.NextDeadline <= _now) History.RecordStaleDeadline(_now, self, node.NextDeadline);
    }

    private static string Describe(in Ready ready) =>
        ready.Packets.Length > 0 ? $"{ready.Packets.Length} packet(s), the first of kind {PacketKindOf(ready.Packets[0])}" : $"{ready.Events.Length} event(s), the first {(ready.Events.IsEmpty ? null : ready.Events[0].GetType().Name)}";

    private static string PacketKindOf(OutboundPacket p) =>
        Isis.Core.Wire.PacketDecoder.TryReadHeader(p.Bytes.Span, out var h) == Isis.Core.Wire.HeaderVerdict.Ok ? h.Kind.ToString() : "?";

    private void Deliver(SimulatedNetwork.Envelope env)
    {
        if (ClientAt(env.To) is { } client)
        {
            client.Node?.Receive(env.From, env.Bytes, _now);
            FlushClient(client);
            return;
        }
        if (Scenario.EmbeddedService && (env.To == _directoryEndpoint || _processByReplicaEndpoint.ContainsKey(env.To)))
        {
            SimProcess? host = env.To == _directoryEndpoint ? _directoryHolder : _processByReplicaEndpoint[env.To];
            if (host == null || !host.Alive) return;
            if (host.Paused) { host.Backlog.Enqueue(env); return; }
            DeliverTo(host, env);
            return;
        }
        if (env.To >= _firstReplicaEndpoint)
        {
            SimReplica? r = Array.Find(_replicas, x => x.Endpoint == env.To);
            if (r?.Node == null) return;
            r.Node.Receive(env.From, env.Bytes, _now);
            Flush(r);
            return;
        }
        SimProcess? p = ProcessAt(env.To);
        if (p == null || !p.Alive) return;
        if (p.Paused) { p.Backlog.Enqueue(env); return; }
        DeliverTo(p, env);
    }

    /// <summary>
    /// The runtime's later founding (ServiceHost.FoundIfNoServiceAnswers): the process that holds
    /// the well-known port, looking for a service and finding none for the founding wait, founds
    /// one unless a replica on the machine's file may still run.
    /// </summary>
    private void FoundIfNoServiceAnswers()
    {
        if (_directoryHolder is not { Alive: true, Paused: false, Node: { } node, Replica: { } dormant } p || _now < node.MayFoundServiceAt) return;
        if (dormant.IsVoter) return; // as the runtime: a voter stays its service's; a learner of a dead one is dropped
        if (!EmbeddedFounding.MayFound(node, _now, atStart: false, holdsWellKnownPort: true, seedsAllow: true, ReplicaOnFileMayBeAlive(), node.Options.Mutations)) return;
        p.Replica = new MembershipReplica(dormant.Self, [dormant.Self], dormant.Options, _now, host: node.Self);
        RecordFounding(dormant.Self);
        LaterFoundings++;
        node.FoundService(_now);
        Flush(p);
    }

    /// <summary>A founding, as the runtime records it in the machine's file (a new service's numbering starts again).</summary>
    private void RecordFounding(NodeId replica)
    {
        Foundings++;
        _knownReplicas = [replica];
        _knownReplicasVersion = 0;
        if (RecordsHistory) History.RecordFounded(_now, replica, [replica]);
    }

    /// <summary>How many times every process crashed and restarted (<see cref="Scenario.WholeSystemRestarts"/>; the other times, the machine stalled).</summary>
    public int WholeSystemRestarts { get; private set; }

    /// <summary>How many of <see cref="Foundings"/> a process made after its start (it took the well-known port over, and found no service).</summary>
    public int LaterFoundings { get; private set; }

    /// <summary>How many times the embedded service was founded in this run.</summary>
    public int Foundings { get; private set; }

    /// <summary>
    /// The runtime's ServiceDirectoryFile.MayBeAlive over the file: a replica's port is in use while
    /// its process runs (paused too; a process that stopped itself closed it). A replica learned
    /// without its incarnation (from another process's answer) counts while its endpoint's process runs.
    /// </summary>
    private bool ReplicaOnFileMayBeAlive() => _knownReplicas.Any(r =>
        _processByReplicaEndpoint.TryGetValue(r.Endpoint, out SimProcess? host) && host.Alive && host.Replica is { } live
        && (r.Incarnation == 0 || live.Self == r));

    /// <summary>A packet for a process: to its replica if addressed there, else to the process (the well-known endpoint's packets too).</summary>
    private void DeliverTo(SimProcess p, SimulatedNetwork.Envelope env)
    {
        if (env.To == p.ReplicaEndpoint && Scenario.EmbeddedService)
        {
            p.Replica?.Receive(env.From, env.Bytes, _now);
        }
        else
        {
            p.Node!.Receive(env.From, env.Bytes, _now);
        }
        Flush(p);
        MaybePauseGrowingReplicaHost();
    }

    // ---------------------------------------------------------------- processes and workload

    private void Start(SimProcess p)
    {
        p.Incarnation++;
        p.Log.Staged.Clear(); // the runtime deletes an unfinished copy aside when it opens the log
        p.App.Reset();
        p.CopyingCheckpoint = null;
        p.Paused = false;
        p.Backlog.Clear();
        p.Sent = 0;
        p.FlushOutstanding = false;
        p.Exiting = false;
        p.RestartPlanned = false;
        p.CrashInNextWrite = false;
        var self = new NodeId(p.Endpoint, p.Incarnation);
        p.KeyStep = _systemKeyStep;
        ProtocolOptions keyed = KeysOfStep(p.KeyStep); // the system keys of the operator's current rotation step
        ProtocolOptions options = keyed with { BufferPool = _buffers };
        if (Scenario.EmbeddedService)
        {
            // As the runtime: the first process binds the well-known port and founds the service with
            // its own replica; every other one runs a dormant replica and discovers the service.
            BindReplicaEndpoint(p);
            var replica = new NodeId(p.ReplicaEndpoint, p.Incarnation);
            bool boundPort = _directoryHolder is not { Alive: true };
            if (boundPort) _directoryHolder = p;
            // The runtime's founding rule at start (EmbeddedFounding): it just bound the well-known port itself.
            if (EmbeddedFounding.MayFound(null, _now, atStart: true, boundPort, seedsAllow: true, ReplicaOnFileMayBeAlive(), keyed.Mutations))
            {
                p.Replica = new MembershipReplica(replica, [replica], keyed, _now, host: self);
                RecordFounding(replica);
                p.Node = new ProcessNode(self, [p.ReplicaEndpoint], options, _now, replica, directory: [_directoryEndpoint, .. _knownReplicas.Select(r => r.Endpoint)]);
            }
            else
            {
                p.Replica = new MembershipReplica(replica, [], keyed, _now, host: self);
                p.Node = new ProcessNode(self, [_directoryEndpoint, .. _knownReplicas.Select(r => r.Endpoint)], options, _now, replica, discover: true);
            }
        }
        else
        {
            p.Node = new ProcessNode(self, _serviceEndpoints, options, _now);
        }
        p.WantsGroup = true;
        if (KeyForStart() is { } key)
        {
            p.Node.SetGroupKey(GroupName, key);
            NoteStartingKey(p);
        }
        if (RecordsHistory) History.RecordJoinRequested(_now, p.Node.Self, _group);
        p.Node.Join(GroupName, _now, HistoryLogOfJoiner(p), CheckpointsOf(p), historyFoundedElsewhere: _registryNamesHistory);
        NewCollection(p);
        NewLockClient(p);
        NewClientRelay(p);
        if (Scenario.KeyRotations) StageNewestKey(p);
        Flush(p);
    }

    /// <summary>
    /// As the runtime (ServiceHost binds each embedded replica on port 0): every incarnation's
    /// replica gets an endpoint of its own, never one an earlier incarnation's replica had. With the
    /// endpoint reused, a member of a dead service that still ran went on heartbeating its dead
    /// replica's endpoint, and the replica of a service founded since on that same endpoint answered
    /// it, which no runtime process can meet.
    /// </summary>
    private void BindReplicaEndpoint(SimProcess p)
    {
        _processByReplicaEndpoint.Remove(p.ReplicaEndpoint);
        // Process endpoints are 1..N: the first incarnation keeps the endpoint it was built with, each later one the next block of N.
        p.ReplicaEndpoint = _firstReplicaEndpoint + (p.Endpoint - 1) + (ulong)(p.Incarnation - 1) * (ulong)_processes.Length;
        _processByReplicaEndpoint.Add(p.ReplicaEndpoint, p);
    }

    /// <summary>
    /// Disk durability: the machine's registry of durable groups (all simulated processes share one
    /// machine) names the group's history once some process held it; it survives every crash, as
    /// the runtime's file does, and a process joins knowing it.
    /// </summary>
    private bool _registryNamesHistory;

    /// <summary>Disk durability: what the process's log holds now (a copy), for a join; null in memory.</summary>
    private List<byte[]>? HistoryLogOf(SimProcess p) => Scenario.DiskDurability ? p.Log.Records.Select(r => r.ToArray()).ToList() : null;

    /// <summary>
    /// <see cref="HistoryLogOf"/> for a join, recording which earlier incarnations wrote that log
    /// (the checker's RecoveredHistory: a forced recovery gives up whole logs).
    /// </summary>
    private List<byte[]>? HistoryLogOfJoiner(SimProcess p)
    {
        List<byte[]>? log = HistoryLogOf(p);
        if (log != null && RecordsHistory) History.RecordLogOpened(_now, p.Node!.Self, _group, Isis.Core.Durability.HistoryLog.Read(log).Incarnations);
        return log;
    }

    /// <summary>The payload of the process's next message: unique (its endpoint, incarnation and count).</summary>
    private byte[] NextPayload(SimProcess p)
    {
        // A collection's update also names the collection instance that issues it (Simulator.Collections.cs).
        var payload = new byte[Scenario.Collections ? 24 : 16];
        BinaryPrimitives.WriteUInt64LittleEndian(payload, p.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(payload.AsSpan(8), p.Incarnation);
        BinaryPrimitives.WriteInt32LittleEndian(payload.AsSpan(12), ++p.Sent);
        if (Scenario.Collections) BinaryPrimitives.WriteInt64LittleEndian(payload.AsSpan(16), CollectionInstanceOf(p));
        return payload;
    }

    private void RunWorkload(SimProcess p)
    {
        if (!p.Alive) return; // it may have shut itself down in this very tick
        ProcessNode node = p.Node!;
        GroupMember? g = node.FindGroup(_group);
        if (g == null || g.State != MemberState.Active || _now < p.NextSendAt) return;
        // Keep sending through the first half of the heal phase so the final view carries traffic.
        if (p.Sent >= Scenario.MessagesPerProcess || _now > Scenario.FaultPhase + Scenario.HealPhase / 2) return;
        if (g.UnstableOwnMessages > 2_000) return; // flow control, as the runtime applies it
        if (!MayIssueUpdate(p)) return;
        p.NextSendAt = _now + _random.NextInRange(1_000, 30_000);
        if (Scenario.Locks)
        {
            IssueLockOperation(p, node);
            return;
        }
        byte[] payload = NextPayload(p);
        // A mix of the primitives, so total order and queries are exercised alongside FIFO.
        double pick = _random.NextDouble();
        bool safe = pick < Scenario.SafeFraction;
        bool ordered = !safe && pick < Scenario.SafeFraction + Scenario.OrderedFraction;
        bool causal = !safe && !ordered && pick >= 1 - Scenario.CausalFraction;
        int phi = safe ? _random.Next(4) : 0; // 0 = every member
        // Drawn only in the families that use it, so every other family keeps its seeds.
        NodeId[]? to = !safe && !ordered && !causal && Scenario.SubsetChance > 0 && _random.Chance(Scenario.SubsetChance) ? Destinations(g) : null;
        if (_random.Chance(Scenario.QueryChance))
        {
            History.RecordQueryIssued(_now, node.Self, _group);
            MessageKind kind = safe ? MessageKind.QuerySafe : ordered ? MessageKind.QueryOrdered : causal ? MessageKind.QueryCausal : to != null ? MessageKind.QuerySubset : MessageKind.QuerySend;
            node.Query(_group, ++p.QueryIds, kind, payload, QueryTracker.All, timeout: 60_000_000, QueryTimeoutAction.Abort, _now, phi, to);
        }
        else
        {
            node.Send(_group, payload, _now, safe ? MessageKind.Safe : ordered ? MessageKind.Ordered : causal ? MessageKind.CausalSend : to != null ? MessageKind.Subset : MessageKind.Send, phi, to: to);
            if (to != null) SubsetSends++;
            if (!safe && !ordered && !causal && to == null) NoteCollectionUpdateIssued(p, g.View?.Id ?? 0);
        }
        Flush(p);
        if (!p.FlushOutstanding && p.Alive && _random.Chance(Scenario.FlushChance))
        {
            p.FlushOutstanding = true;
            // In the relaying families every other flush is a Flush(k), 1 <= k <= the view's size
            // (drawn from the token, not the run's random stream): the rest wait for every member.
            int size = Math.Max(1, g.View?.Members.Length ?? 1);
            int k = !Scenario.FlushK || p.FlushTokens % 2 == 0 ? 0 : 1 + (int)(p.FlushTokens / 2 % size);
            History.RecordFlushRequested(_now, node.Self, _group, g.View?.Id ?? 0, k);
            node.Flush(_group, ++p.FlushTokens, minHolders: k, _now);
            Flush(p);
        }
    }

    private void Flush(SimReplica r)
    {
        if (r.Node == null) return;
        NodeStep.Run(null, r.Node, new Ports(this, null, r));
    }

    /// <summary>
    /// The simulator's I/O for <see cref="NodeStep"/>: a process's history log and a dedicated
    /// replica's records in memory (where <see cref="Scenario.TornWrites"/> crashes a process in the
    /// middle of writing), the simulated network, and the history's event log. An embedded
    /// replica keeps its log in memory: it goes with the process.
    /// </summary>
    private readonly struct Ports(Simulator sim, SimProcess? process, SimReplica? dedicated) : INodePorts
    {
        private ProcessNode? Node => process?.Node;

        private MembershipReplica? Replica => dedicated != null ? dedicated.Node : process?.Replica;

        public bool MakeDurable(StepSource source, in Ready ready)
        {
            if (source == StepSource.Replica)
            {
                if (dedicated == null) return true;
                if (ready.ReplicaRecordsReplaceLog) dedicated.Durable.Clear(); // a compacted log replaces the file (atomically, by a rename)
                dedicated.Durable.AddRange(ready.ReplicaRecords);
                return true;
            }
            SimProcess p = process!;
            if (p.CrashInNextWrite)
            {
                sim.CrashInTheMiddleOfWriting(p, ready);
                return false;
            }
            foreach (HistoryWrite w in ready.HistoryWrites)
            {
                sim.WriteObserver?.Invoke(p.Node!.Self, w);
                p.Log.Apply(w);
            }
            p.Log.DropBehindTrim();
            return true;
        }

        public void Send(StepSource source, in OutboundPacket packet)
        {
            ulong from = source == StepSource.Process ? Node!.Endpoint : Replica!.Endpoint;
            byte[] bytes = packet.Bytes.ToArray();
            if (sim.Scenario.Forgeries) sim.Capture(from, bytes);
            sim._network.Send(from, packet.Destination, bytes, sim._now);
        }

        public void FlushSends()
        {
        }

        public void Deliver(StepSource source, NodeEvent e, long time)
        {
            if (source == StepSource.Replica)
            {
                sim.Record(Replica!.Self, e);
                return;
            }
            ProcessNode node = Node!;
            // The driver joins a view's multicast address as it installs the view (see the runtime's MulticastMemberships).
            if (e is MulticastAddressChanged m) sim._network.SetMulticast(node.Endpoint, m.Group.Value, m.Address);
            else if (e is GroupLeft l) sim._network.SetMulticast(node.Endpoint, l.Group.Value, 0);
            else if (e is HistoryReady)
            {
                process!.EverCurrent = true;
                sim._registryNamesHistory = true; // the machine's registry of durable groups (the runtime's DurableGroupRegistry)
            }
            sim.Record(node.Self, e);
        }
    }

    private void Flush(SimProcess p)
    {
        if (p.Node == null) return;
        NodeStep.Run(p.Node, p.Replica, new Ports(this, p, null));
        if (p.Node == null) return; // crashed in the middle of writing, or exited while the events were handled
        // However it stopped (in a tick, or on a packet), a supervisor restarts it once.
        if (p.Node.IsShutDown && !p.RestartPlanned)
        {
            p.RestartPlanned = true;
            OnShutDown(p);
        }
    }

    /// <summary>Sees every history write a process makes durable (tests: the sizes of a copy's parts), before it is applied.</summary>
    public Action<NodeId, HistoryWrite>? WriteObserver { get; set; }

    private void Record(NodeId process, NodeEvent e)
    {
        // A collection's pull asks one peer (the others answer null), not every member: QueryReplies judges Query(ALL) only.
        bool pull = e is QueryCompleted q && ProcessOf(process)?.App.Collection?.Pulls.ContainsKey(q.QueryId) == true;
        if (RecordsHistory && !pull) History.RecordCoreEvent(_now, process, e);
        Observer?.Invoke(process, e);
        // What the simulated application does with some events.
        OnApplicationEvent(process, e);
        if (Scenario.KeyRotations && ProcessOf(process) is { } keyed) OnKeyEvent(keyed, e);
        switch (e)
        {
            case MessageDelivered d when d.Kind.IsQuery() && !Scenario.Collections: // a collection's pulls have their own handler
                AnswerQuery(process, d);
                break;
            case MessageDelivered d when d.Kind.IsCausal() && d.Sender != process:
                if (ProcessOf(process) is { } receiver) receiver.LastCausalFrom = d.Sender;
                if (d.Kind == MessageKind.CausalSend && Scenario.CausalReplyChance > 0 && _random.Chance(Scenario.CausalReplyChance)) AnswerCausally(process);
                break;
            case FlushCompleted f:
                OnFlushCompleted(process, f);
                break;
            case ServiceConfigurationChanged c when c.Version > _knownReplicasVersion:
                // What the runtime writes to its machine-wide file: the replicas a new process asks first.
                _knownReplicasVersion = c.Version;
                // A configuration passed on by a process names replicas without their incarnation:
                // the file holds ports, and a port names the replica bound to it now.
                _knownReplicas = c.Replicas.Select(r => r.Incarnation != 0 ? r
                    : _processByReplicaEndpoint.TryGetValue(r.Endpoint, out SimProcess? host) && host.Replica is { } now ? now.Self : r).ToArray();
                break;
            case HostRetired:
                if (ProcessOf(process) is { Exiting: true } exiting) At(_now, () => ExitAfterHandover(exiting));
                break;
            case GroupLeft:
                if (ProcessOf(process) is { Exiting: true } left) At(_now, () => Exit(left));
                break;
        }
    }

    /// <summary>The application's query handler: every member answers at once with a small reply.</summary>
    private void AnswerQuery(NodeId process, MessageDelivered d)
    {
        SimProcess? p = ProcessOf(process);
        if (p?.Node == null || p.Node.IsShutDown) return;
        long queryId = MessageKinds.QueryIdOf(d.Payload.Span);
        NodeId requester = d.Sender; // the event object is reused once the outbox clears
        // Replies are queued behind the current step, as an application's handler would run after it;
        // a deferred one (DeferReply) comes 1-200 ms later, perhaps in a later view.
        ProcessNode node = p.Node;
        long answerAt = Scenario.DeferredReplyChance > 0 && _random.Chance(Scenario.DeferredReplyChance) ? _now + _random.NextInRange(1_000, 200_000) : _now;
        if (answerAt > _now) DeferredReplies++;
        At(answerAt, () =>
        {
            if (p.Node != node || node.IsShutDown) return;
            node.Reply(_group, requester, queryId, ReplyKind.Values, BitConverter.GetBytes(process.Endpoint), _now);
            Flush(p);
        });
    }

    /// <summary>Destinations of a subset message: one member of the view (a P2PSend) half the time, else any non-empty subset.</summary>
    private NodeId[] Destinations(GroupMember g)
    {
        NodeId[] members = g.View?.Members ?? [];
        if (members.Length == 0) return [];
        if (_random.Chance(0.5)) return [members[_random.Next(members.Length)]];
        var to = members.Where(_ => _random.Chance(0.5)).ToList();
        return to.Count > 0 ? [.. to] : [members[_random.Next(members.Length)]];
    }

    /// <summary>SubsetSends and P2PSends the workload issued (<see cref="Scenario.SubsetChance"/>).</summary>
    public int SubsetSends { get; private set; }

    /// <summary>Queries whose answer a member deferred (<see cref="Scenario.DeferredReplyChance"/>).</summary>
    public int DeferredReplies { get; private set; }

    /// <summary>CausalSends issued in answer to another member's (<see cref="Scenario.CausalReplyChance"/>).</summary>
    public int CausalAnswers { get; private set; }

    /// <summary>A causal message from another member makes this one send a causal message of its own, after the current step, within its workload's budget.</summary>
    private void AnswerCausally(NodeId process)
    {
        SimProcess? p = ProcessOf(process);
        if (p?.Node == null || p.Node.IsShutDown) return;
        ProcessNode node = p.Node;
        At(_now, () =>
        {
            if (p.Node != node || node.IsShutDown || node.FindGroup(_group) is not { State: MemberState.Active }) return;
            if (p.Sent >= Scenario.MessagesPerProcess || _now > Scenario.FaultPhase + Scenario.HealPhase / 2) return;
            node.Send(_group, NextPayload(p), _now, MessageKind.CausalSend);
            CausalAnswers++;
            Flush(p);
        });
    }

    private void OnFlushCompleted(NodeId process, FlushCompleted f)
    {
        SimProcess? p = ProcessOf(process);
        if (p == null) return;
        p.FlushOutstanding = false;
        History.RecordFlushCompleted(_now, process, f.Group, p.Node!.FindGroup(f.Group)?.View?.Id ?? 0);
        // What Flush is for: the application answers its client and then may crash at once; the
        // flushed messages must survive.
        if (Scenario.Crashes && !_healed && _random.Chance(Scenario.CrashAfterFlushChance))
        {
            At(_now, () => Crash(p));
            // The worst case for a causal Flush: the sender of a causal message this process
            // delivered before its flushed ones fails with it, so only the other members' copies
            // of that message can keep the flushed messages deliverable.
            if (Scenario.CausalFraction > 0 && ProcessOf(p.LastCausalFrom) is { Alive: true } predecessor && predecessor != p) At(_now, () => Crash(predecessor));
        }
    }

    internal static ulong PayloadHash(ReadOnlySpan<byte> payload)
    {
        ulong h = 14695981039346656037UL;
        foreach (byte b in payload) { h ^= b; h *= 1099511628211UL; }
        return h;
    }

    private void OnShutDown(SimProcess p)
    {
        p.Replica = null; // the runtime stops its replica with it
        // The process stopped itself (isolated or expelled). Like a supervisor would, restart it
        // later as a new incarnation.
        long restartAt = _healed ? _now + 50_000 : _now + _random.NextInRange(100_000, 800_000);
        At(restartAt, () => { if (!p.Alive) Start(p); });
    }

    private void Crash(SimProcess p)
    {
        if (!p.Alive || HostingPutsServiceAtRisk(p)) return;
        if (Scenario.TornWrites && _random.Chance(0.5))
        {
            // In the middle of its next step that writes to disk (or a while from now if it writes nothing).
            p.CrashInNextWrite = true;
            uint incarnation = p.Incarnation;
            At(_now + 300_000, () =>
            {
                if (p.Incarnation != incarnation || !p.CrashInNextWrite) return;
                p.CrashInNextWrite = false;
                CrashAndRestart(p);
            });
            return;
        }
        CrashAndRestart(p);
    }

    /// <summary>
    /// Scenario.TornWrites: the process crashes while its step's durable writes are under way. Of
    /// the records appended since the last fsync a prefix survives; a rewrite (written aside, then
    /// renamed into place) survives whole or not at all. The step's packets never leave and its
    /// events never happen (an embedded replica keeps its log in memory: it goes with the process).
    /// </summary>
    private void CrashInTheMiddleOfWriting(SimProcess p, in Ready step)
    {
        p.CrashInNextWrite = false;
        HistoryWrite[] all = step.HistoryWrites.ToArray();
        // The units that reach the disk one after another: each appended record, each rewrite as a
        // whole, and the end of a copy written aside (its rename). Parts of a copy aside are no units:
        // whatever of them a crash keeps is deleted at the next start, as the runtime does.
        var writes = all.Where(w => w.Stage is HistoryStage.None or HistoryStage.Commit).ToList();
        static bool Whole(HistoryWrite w) => w.Rewrite || w.Stage == HistoryStage.Commit;
        int units = writes.Sum(w => Whole(w) ? 1 : w.Records.Count);
        int survive = _random.Next(units + 1);
        // The prefix ends before the step's first View record: a View record on disk says the member
        // installed that view (recovery reads it so, and so the members of the view before came
        // through it), which the history could only show with the step's events, and those (the
        // install, the deliveries that end the view before) never reach the application here. A
        // crash that keeps the View record is the same as one right after the step's writes.
        // (A copy's end renames a log that starts with a View record.)
        int firstView = 0;
        foreach (HistoryWrite w in writes)
        {
            if (w.Stage == HistoryStage.Commit || (w.Rewrite && w.Records.Any(r => Isis.Core.Durability.HistoryLog.IsViewRecord(r)))) break;
            int at = w.Rewrite ? -1 : w.Records.ToList().FindIndex(r => Isis.Core.Durability.HistoryLog.IsViewRecord(r));
            if (at >= 0) { firstView += at; break; }
            firstView += w.Rewrite ? 1 : w.Records.Count;
        }
        survive = Math.Min(survive, firstView);
        if (survive > 0 && survive < units) TornWritesCutShort++;
        foreach (HistoryWrite w in all)
        {
            if (w.Stage is HistoryStage.Begin or HistoryStage.Continue)
            {
                p.Log.Apply(w); // aside: gone with the crash anyway
                continue;
            }
            if (survive == 0) break;
            if (Whole(w))
            {
                p.Log.Apply(w);
                survive--;
                continue;
            }
            foreach (byte[] r in w.Records)
            {
                if (survive == 0) break;
                p.Log.Append(r);
                survive--;
            }
        }
        // The application did call SafeSend (the checker's Send event is that call), and the log may
        // hold it: the call is recorded, the rest of the step never happened. (Other kinds leave no
        // trace on disk, so for them the call and its crash are as if never made.)
        foreach (NodeEvent e in step.Events)
        {
            if (e is MessageSent { Kind: MessageKind.Safe or MessageKind.QuerySafe } && RecordsHistory) History.RecordCoreEvent(_now, p.Node!.Self, e);
        }
        TornWriteCrashes++;
        CrashOnly(p);
        long restartAt = _now + _random.NextInRange(200_000, 1_000_000);
        At(restartAt, () => { if (!p.Alive) Start(p); });
    }

    /// <summary>Crashes in the middle of a step's durable writes (<see cref="Scenario.TornWrites"/>).</summary>
    public int TornWriteCrashes { get; private set; }

    /// <summary>Of <see cref="TornWriteCrashes"/>, those that kept some of the step's records but not all.</summary>
    public int TornWritesCutShort { get; private set; }

    private void CrashAndRestart(SimProcess p)
    {
        if (!p.Alive) return;
        CrashOnly(p);
        long restartAt = _now + _random.NextInRange(200_000, 1_000_000);
        At(restartAt, () => { if (!p.Alive) Start(p); });
    }

    // ---------------------------------------------------------------- faults

    private void PlanFaults(long healAt)
    {
        Scenario s = Scenario;
        if (s.Forgeries) PlanForgeries(healAt);
        if (s.KeyRotations) PlanKeyRotations(healAt);
        if (s.Crashes)
        {
            for (int i = 0, n = 1 + _random.Next(3); i < n; i++)
            {
                At(_random.NextInRange(400_000, healAt - 300_000), () => Crash(_processes[_random.Next(_processes.Length)]));
            }
        }
        if (s.Partitions)
        {
            for (int i = 0, n = 1 + _random.Next(2); i < n; i++)
            {
                long start = _random.NextInRange(400_000, healAt - 500_000);
                long length = _random.NextInRange(100_000, 1_500_000);
                At(start, StartPartition);
                At(Math.Min(start + length, healAt), () => _network.HealPartitions());
            }
        }
        if (s.FlappingLinks) PlanFlapping(healAt);
        if (s.WholeGroupRestarts)
        {
            // With lost disks (or a disk lost for good), one: its lost or absent member and the recovery take the rest of the fault phase.
            for (int i = 0, n = s.LostDisks || s.AutoRecovery ? 1 : 1 + _random.Next(2); i < n; i++)
            {
                At(_random.NextInRange(600_000 + i * 1_200_000, 1_400_000 + i * 1_200_000), () => CrashWholeGroup(healAt));
            }
        }
        if (s.NewcomerFirstAfterSystemRestart) At(_random.NextInRange(1_200_000, 2_000_000), () => RestartSystemNewcomerFirst(healAt));
        if (s.WholeSystemRestarts)
        {
            for (int i = 0, n = 1 + _random.Next(2); i < n; i++)
            {
                At(_random.NextInRange(1_000_000 + i * 3_000_000, 2_500_000 + i * 3_000_000), RestartWholeSystem);
            }
        }
        if (s.Pauses)
        {
            for (int i = 0, n = 1 + _random.Next(3); i < n; i++)
            {
                long start = _random.NextInRange(400_000, healAt - 500_000);
                long length = _random.NextInRange(50_000, 2_000_000);
                SimProcess p = _processes[_random.Next(_processes.Length)];
                At(start, () => { if (p.Alive) p.Paused = true; });
                At(Math.Min(start + length, healAt), () => Resume(p));
            }
        }
        if (s.LeaveAndRejoin)
        {
            for (int i = 0, n = 1 + _random.Next(3); i < n; i++)
            {
                SimProcess p = _processes[_random.Next(_processes.Length)];
                long start = _random.NextInRange(400_000, healAt - 500_000);
                At(start, () =>
                {
                    if (!p.Alive || !p.WantsGroup) return;
                    p.WantsGroup = false;
                    StopHoldingLocks(p);
                    p.Node!.Leave(_group, _now);
                    Flush(p);
                });
                At(start + _random.NextInRange(100_000, 800_000), () => Rejoin(p));
            }
        }
    }

    /// <summary>
    /// Every process crashes (at once, or within a few milliseconds, so a view change may be under
    /// way), then they restart one by one in a random order, some only much later, and some crash
    /// again while the group recovers its history. Waits until every process has held the history
    /// once, so that each comes back with a log (a process that never joined would found a new
    /// history, which is the documented limit, not what this scenario tests).
    /// </summary>
    private void CrashWholeGroup(long healAt)
    {
        if (_healed) return;
        if (_processes.Any(p => !p.EverCurrent))
        {
            if (_now + 100_000 < healAt - 500_000) At(_now + 100_000, () => CrashWholeGroup(healAt));
            return;
        }
        long spread = _random.Chance(0.5) ? 0 : _random.NextInRange(1_000, 20_000);
        // One disk is lost for good (that process comes back without a log), or stays away with its
        // process until the operator forced the recovery (or comes back soon with it, below). The absent one is the oldest member's, the
        // first acceptor, which may alone hold the newest SafeSends, and its application checkpoints
        // as it goes down, so what it brings back runs past the history the group goes on with.
        SimProcess? lost = null, lastDown = null;
        bool wiped = false, wipe = false;
        if (Scenario.LostDisks)
        {
            wiped = _random.Chance(0.4);
            lost = wiped ? _processes[_random.Next(_processes.Length)] : OldestMember() ?? _processes[_random.Next(_processes.Length)];
            lastDown = lost;
            // The disk drawn as lost for good is wiped once its process is down (it goes down last),
            // unless it is the first acceptor's: that one keeps its disk and comes back around the
            // operator's force (PlanRestarts), so the force may go ahead without it just as it returns,
            // while it brings the SafeSends it delivered alone (lost-disk seeds 66 and 679: a plan decided
            // without it, then voided by the view change that brings it back, must give nobody up).
            wipe = wiped && lost != OldestMember();
        }
        else if (Scenario.AutoRecovery)
        {
            // A member of the last view other than its first loses its disk for good: the group must
            // recover without it and without the operator. In some runs the first member (the first
            // acceptor) also stays away until the heal, after delivering SafeSends of phi 1 alone:
            // the group must then wait for it. In others that member does not lose its disk but
            // outlives the rest, carries the group on alone in a view of its own and delivers there,
            // then crashes; it comes back at the heal, and the group must wait for it.
            SimProcess? oldest = OldestMember();
            NodeId[] members = oldest?.Node!.FindGroup(_group)?.View?.Members ?? [];
            SimProcess[] others = _processes.Where(p => p != oldest && p.Alive && Array.IndexOf(members, p.Node!.Self) > 0).ToArray();
            if (others.Length == 0)
            {
                // A view change is under way (or the view is not known here yet): try again shortly.
                if (_now + 100_000 < healAt - 500_000) At(_now + 100_000, () => CrashWholeGroup(healAt));
                return;
            }
            lost = others[_random.Next(others.Length)];
            if (_random.Chance(0.4)) lastDown = _firstAcceptorAway = oldest;
            else if (_random.Chance(0.4)) _loneSurvivor = lost;
            wiped = wipe = _loneSurvivor == null;
        }
        foreach (SimProcess p in _processes.OrderBy(_ => _random.NextUInt64()))
        {
            if (p == _loneSurvivor) continue; // it goes down once it carried the group on alone (CarryOnAlone)
            if (p == lastDown)
            {
                // It goes down last: as the oldest member (the first acceptor) it delivers a few
                // SafeSends of phi 1 alone after the others went (a burst: the group's history must be well past the forced recovery before it holds them), then checkpoints on its way out.
                long last = _now + spread + 5_000;
                for (int k = 0; k < 30; k++)
                {
                    At(_now + spread + 150 * (k + 1), () =>
                    {
                        if (!p.Alive || p.Node!.FindGroup(_group) is not { State: MemberState.Active, View: { } v } || v.Members[0] != p.Node.Self) return;
                        p.Node.Send(_group, NextPayload(p), _now, MessageKind.Safe, 1);
                        Flush(p);
                    });
                }
                At(last, () =>
                {
                    if (Scenario.PersistentCheckpoints && p.Alive && p.App.HistoryLineage is { } lineage)
                    {
                        KeepCheckpoint(p, new Checkpoint($"{p.Node!.Self}#{p.App.SafeApplied.Count}", lineage, [.. p.App.SafeApplied]));
                    }
                    CrashOnly(p);
                });
                continue;
            }
            At(_now + (spread == 0 ? 0 : _random.NextInRange(0, spread)), () => CrashOnly(p));
        }
        if (_loneSurvivor != null)
        {
            // The others come back only once it is gone, or they would join its view and copy its history.
            At(_now + spread + 10_000, () => CarryOnAlone(_loneSurvivor, _now + 3_000_000, () => PlanRestarts(healAt, _now + _random.NextInRange(50_000, 400_000), lost, wiped)));
            return;
        }
        long restartFrom = _now + spread + _random.NextInRange(50_000, 400_000);
        long forceAt = 0;
        if (lost != null)
        {
            if (Scenario.LostDisks)
            {
                forceAt = restartFrom + _random.NextInRange(800_000, 1_000_000);
                At(forceAt, () => ForceRecoveryWhereWaiting(lost));
            }
            if (wipe)
            {
                DisksToWipe++;
                // Once it is down: with the others, or last (5 ms after them).
                At(_now + spread + (lost == lastDown ? 5_000 : 0) + 1, () =>
                {
                    if (lost.Alive) return;
                    lost.Log.Replace([]);
                    lost.Log.Staged.Clear();
                    lost.Checkpoints.Clear();
                    lost.CheckpointFiles.Clear();
                    lost.EverCurrent = false;
                    DisksWiped++;
                });
            }
        }
        // The first acceptor that keeps its disk comes back around the operator's force, before or
        // after it: a plan decided without it may then be voided by the view change that brings it
        // in before anyone holds the history by the plan, and must give nobody up (VoidedPlanGivesUp).
        PlanRestarts(healAt, restartFrom, lost, wiped, Scenario.LostDisks && wiped && !wipe ? forceAt : 0);
    }

    /// <summary>
    /// After a whole-group crash: when each process comes back (from <paramref name="restartFrom"/>
    /// on, some at the heal; <paramref name="lost"/> around <paramref name="lostReturnsNear"/> if that is set).
    /// </summary>
    private void PlanRestarts(long healAt, long restartFrom, SimProcess? lost, bool wiped, long lostReturnsNear = 0)
    {
        foreach (SimProcess p in _processes.OrderBy(_ => _random.NextUInt64()))
        {
            // Most come back within a second; some only at the heal.
            // (With a lost disk the others all come back soon, and the absent one at the heal, after the operator forced the recovery.
            // With a disk lost for good, that process and an absent first member come back at the heal, the others soon.)
            long at = (p == lost && (!wiped || Scenario.AutoRecovery)) || p == _firstAcceptorAway ? healAt
                : p == lost && lostReturnsNear > 0 ? lostReturnsNear - 150_000 + _random.NextInRange(0, 400_000)
                : lost == null && _random.Chance(0.2) ? healAt : restartFrom + _random.NextInRange(0, 800_000);
            At(at, () =>
            {
                if (p.Alive) return;
                Start(p);
                // Some crash again while the group recovers, and come back later. A recovery without
                // a member lost for good needs the oldest member of the group's first view after the
                // crash, which alone knows how the group ended (GroupMember.PreviousIncarnation):
                // there, only members of a view at a later rank crash again.
                if (_random.Chance(0.25))
                {
                    At(_now + _random.NextInRange(1_000, 150_000), () =>
                    {
                        if (_healed) return;
                        if (Scenario.AutoRecovery && (p.Node?.FindGroup(_group)?.View is not { } v || v.Members[0] == p.Node.Self)) return;
                        Crash(p);
                    });
                }
            });
        }
    }

    // AutoRecovery: the first member of the last view, staying away until the heal in this run (null: it comes back with the others).
    private SimProcess? _firstAcceptorAway;

    // AutoRecovery: the member of the last view that outlives the others and carries the group on alone in this run (null: none does).
    private SimProcess? _loneSurvivor;

    /// <summary>AutoRecovery: a member of the last view carried the group on alone, delivered, crashed, and came back only at the heal.</summary>
    internal bool LoneSurvivorCarriedOn { get; private set; }

    /// <summary>
    /// AutoRecovery: once the service has expelled every other member and <paramref name="p"/> is
    /// alone in a view of its own, it delivers a burst of SafeSends there (phi 1: it alone accepts
    /// them), then crashes, and <paramref name="then"/> plans the others' restarts. If that view does
    /// not come by <paramref name="deadline"/>, it crashes anyway.
    /// </summary>
    private void CarryOnAlone(SimProcess p, long deadline, Action then)
    {
        bool alone = p.Alive && p.Node!.FindGroup(_group) is { State: MemberState.Active, View.Members: [var only], History.Current: true } && only == p.Node.Self;
        if (!alone && p.Alive && _now < deadline)
        {
            At(_now + 10_000, () => CarryOnAlone(p, deadline, then));
            return;
        }
        if (alone)
        {
            LoneSurvivorCarriedOn = true;
            for (int k = 0; k < 30; k++)
            {
                At(_now + 150 * (k + 1), () =>
                {
                    if (!p.Alive) return;
                    p.Node!.Send(_group, NextPayload(p), _now, MessageKind.Safe, 1);
                    Flush(p);
                });
            }
        }
        At(_now + 10_000, () =>
        {
            CrashOnly(p);
            then();
        });
    }

    /// <summary>AutoRecovery: the first member of the last view stayed away until the heal (the group had to wait for it).</summary>
    internal bool FirstAcceptorStayedAway => _firstAcceptorAway != null;

    /// <summary>The live process that is the oldest member of the group's view, if any.</summary>
    private SimProcess? OldestMember() =>
        _processes.Where(p => p.Alive && p.Node!.FindGroup(_group)?.View is { } v && v.Members[0] == p.Node.Self).FirstOrDefault();

    /// <summary>
    /// The operator's forced recovery (Scenario.LostDisks): once every process but the lost one is
    /// back, at one live member that does not hold the history (the group waits), allow the
    /// recovery without the members that are not back.
    /// </summary>
    private void ForceRecoveryWhereWaiting(SimProcess lost)
    {
        // As an operator would: only once every process that can come back is back.
        if (_processes.Any(p => p != lost && !p.Alive))
        {
            At(_now + 250_000, () => ForceRecoveryWhereWaiting(lost));
            return;
        }
        SimProcess[] waiting = _processes.Where(p => p.Alive && p.Node!.FindGroup(_group)?.History is { Current: false }).ToArray();
        if (waiting.Length == 0)
        {
            // Nobody back yet waits: look again, until every process holds the history.
            if (_processes.Any(p => !p.Alive || p.Node!.FindGroup(_group)?.History is not { Current: true })) At(_now + 250_000, () => ForceRecoveryWhereWaiting(lost));
            return;
        }
        SimProcess chosen = waiting[_random.Next(waiting.Length)];
        // The absent member comes back soon after, while what it holds still overlaps the history the group goes on with.
        if (!lost.Alive) At(_now + _random.NextInRange(5_000, 60_000), () => { if (!lost.Alive) Start(lost); });
        chosen.Node!.AllowForcedRecovery(_group, _now);
        Flush(chosen);
    }

    /// <summary>
    /// Every process of the embedded service crashes, one after another within up to 1.5 s, and
    /// each restarts after its own delay: new processes start while older ones still run without a
    /// service (their replicas gone), and hold the well-known port, as a supervisor restarting a
    /// whole machine's processes does. The service must be founded again, once.
    /// </summary>
    private void RestartWholeSystem()
    {
        if (_healed) return;
        if (_random.Chance(0.35))
        {
            StallWholeSystem();
            return;
        }
        WholeSystemRestarts++;
        long spread = _random.NextInRange(0, 1_500_000);
        foreach (SimProcess p in _processes.OrderBy(_ => _random.NextUInt64()))
        {
            long crashAt = _now + _random.NextInRange(0, spread + 1);
            long restartAt = crashAt + _random.NextInRange(50_000, 1_500_000);
            At(crashAt, () => CrashOnly(p));
            At(restartAt, () => { if (!p.Alive) Start(p); });
        }
    }

    /// <summary>
    /// Scenario.NewcomerFirstAfterSystemRestart: once every process but the new one has held the
    /// history, every process crashes (the embedded service with them, so it forgets the group),
    /// and the new process, with an empty disk, starts first: it founds the service again and is
    /// the oldest member of the group's first view. The others come back after it, in a random
    /// order. With the machine's registry of durable groups it must wait for their logs instead of
    /// founding a second history (the mutation FoundOverKnownHistory founds one, and their logs,
    /// of the old history, are kept aside: what the group acknowledged is lost).
    /// </summary>
    private void RestartSystemNewcomerFirst(long healAt)
    {
        if (_healed) return;
        SimProcess newcomer = _processes[^1];
        SimProcess[] old = _processes[..^1];
        if (old.Any(p => !p.EverCurrent || !p.Alive))
        {
            if (_now + 100_000 < healAt - 2_500_000) At(_now + 100_000, () => RestartSystemNewcomerFirst(healAt));
            return;
        }
        WholeSystemRestarts++;
        long spread = _random.Chance(0.5) ? 0 : _random.NextInRange(1_000, 20_000);
        foreach (SimProcess p in old) At(_now + (spread == 0 ? 0 : _random.NextInRange(0, spread)), () => CrashOnly(p));
        long newcomerAt = _now + spread + _random.NextInRange(50_000, 300_000);
        At(newcomerAt, () => { if (!newcomer.Alive) Start(newcomer); });
        foreach (SimProcess p in old.OrderBy(_ => _random.NextUInt64()))
        {
            At(newcomerAt + _random.NextInRange(300_000, 1_200_000), () => { if (!p.Alive) Start(p); });
        }
    }

    /// <summary>
    /// The machine stalls (every process stopped, a paused VM): the service is alive but answers
    /// nobody. The process holding the well-known port is killed meanwhile and restarts at once, so
    /// a new process holds the port while the service on the machine's file lives, paused: it must
    /// not found a second one (the founding rule's check of the replicas on file), and must find
    /// the service once the machine runs again.
    /// </summary>
    private void StallWholeSystem()
    {
        SimProcess[] live = _processes.Where(p => p.Alive).ToArray();
        if (_directoryHolder is not { Alive: true } holder) return;
        long length = _random.NextInRange(500_000, 2_500_000);
        foreach (SimProcess p in live) p.Paused = true;
        CrashOnly(holder);
        At(_now + _random.NextInRange(20_000, 300_000), () => { if (!holder.Alive) Start(holder); });
        foreach (SimProcess p in live) At(_now + length, () => Resume(p));
    }

    /// <summary>Crashes a process without planning its restart.</summary>
    private void CrashOnly(SimProcess p)
    {
        if (!p.Alive) return;
        if (RecordsHistory) History.RecordCrash(_now, p.Node!.Self);
        _network.ForgetMulticast(p.Node!.Self.Endpoint);
        p.Node = null;
        p.Replica = null;
        p.Paused = false;
        p.Backlog.Clear();
    }

    private void Rejoin(SimProcess p)
    {
        if (!p.Alive || p.WantsGroup) return;
        GroupMember? g = p.Node!.FindGroup(_group);
        if (g != null && g.State != MemberState.Left)
        {
            At(_now + 50_000, () => Rejoin(p)); // the leave has not completed yet
            return;
        }
        p.WantsGroup = true;
        History.RecordJoinRequested(_now, p.Node.Self, _group);
        if (Scenario.KeyRotations)
        {
            p.Node.SetGroupKey(GroupName, KeyForStart()!); // the key the group uses now
            NoteStartingKey(p);
        }
        p.Node.Join(GroupName, _now, HistoryLogOfJoiner(p), CheckpointsOf(p), historyFoundedElsewhere: _registryNamesHistory);
        NewCollection(p);
        NewLockClient(p);
        NewClientRelay(p);
        if (Scenario.KeyRotations) StageNewestKey(p);
        Flush(p);
    }

    private void StartPartition()
    {
        // A random minority (at least one process) loses contact with everyone else, the membership service included.
        int size = 1 + _random.Next(Math.Max(1, (_processes.Length - 1) / 2));
        var shuffled = _processes.OrderBy(_ => _random.NextUInt64()).ToArray();
        var minority = shuffled.Take(size).SelectMany(EndpointsOf).ToList();
        var majority = shuffled.Skip(size).SelectMany(EndpointsOf).ToList();
        foreach (SimReplica r in _replicas)
        {
            // Unless the scenario splits the service too, it stays with the larger side.
            (Scenario.ReplicaPartitions && _random.Chance(0.5) ? minority : majority).Add(r.Endpoint);
        }
        _network.Partition(minority.ToArray(), majority.ToArray());
    }

    /// <summary>Many short partitions in a row, each a fresh random split of processes and replicas.</summary>
    private void PlanFlapping(long healAt)
    {
        long t = _random.NextInRange(300_000, 800_000);
        for (int i = 0, n = 10 + _random.Next(20); i < n && t < healAt - 100_000; i++)
        {
            long length = _random.NextInRange(20_000, 250_000);
            At(t, () =>
            {
                _network.HealPartitions();
                var sideA = new List<ulong>();
                var sideB = new List<ulong>();
                foreach (SimProcess p in _processes) (_random.Chance(0.5) ? sideA : sideB).AddRange(EndpointsOf(p));
                foreach (SimReplica r in _replicas) (_random.Chance(0.5) ? sideA : sideB).Add(r.Endpoint);
                _network.Partition(sideA.ToArray(), sideB.ToArray());
            });
            At(Math.Min(t + length, healAt), () => _network.HealPartitions());
            t += length + _random.NextInRange(20_000, 200_000);
        }
    }

    // ---------------------------------------------------------------- membership replicas

    private void StartReplica(SimReplica r)
    {
        r.Incarnation++;
        // A restarted replica resumes from what it made durable; a fresh one has nothing yet.
        // A configured replica keeps its identity across restarts (its durable records are its memory).
        r.Node = new MembershipReplica(new NodeId(r.Endpoint, 1), _serviceEndpoints.Select(e => new NodeId(e, 1)).ToArray(), Scenario.Protocol, _now,
            r.Durable.Count > 0 ? r.Durable.ToArray() : null);
        Flush(r);
    }

    private void CrashReplica(SimReplica r)
    {
        if (!r.Alive) return;
        r.Node = null;
        At(_now + _random.NextInRange(200_000, 1_500_000), () => { if (!r.Alive) StartReplica(r); });
    }

    private long _lastReplicaCrash;

    /// <summary>Crashes a replica (never a majority at once): mostly the leader, most likely while a view change runs.</summary>
    private void MaybeCrashReplica()
    {
        int down = _replicas.Count(r => !r.Alive);
        if (down >= (_replicas.Length - 1) / 2 || _now - _lastReplicaCrash < 300_000) return;
        MembershipReplica? leader = Leader;
        bool viewChanging = leader?.ActiveFlushCoordinator(_group) != null;
        if (!_random.Chance(viewChanging ? 0.03 : 0.0015)) return;
        SimReplica? target = leader != null && _random.Chance(0.8)
            ? Array.Find(_replicas, r => r.Node == leader)
            : _replicas[_random.Next(_replicas.Length)];
        if (target == null || !target.Alive) return;
        _lastReplicaCrash = _now;
        CrashReplica(target);
    }

    // ---------------------------------------------------------------- replica hosts (embedded service)

    private long _lastHostFault;

    /// <summary>When the quorum-loss family crashed a majority of the replica hosts (0: not yet).</summary>
    internal long QuorumLostAt { get; private set; }

    // Hosts go one after another, not two within one failover: a second leader lost before the
    // first failover finished leaves the processes without a service past their isolation timeout.
    private const long HostFaultSpacing = 800_000;
    private bool _quorumLost;

    /// <summary>
    /// Disturbs a process that hosts a replica, one at a time: only when the service is whole (its
    /// committed configuration has no replica on a departed or stopped host) and a while after the
    /// last disturbance, so that hosts go one after another, the leader's most often.
    /// </summary>
    private void MaybeDisturbHost()
    {
        if (_quorumLost || _now < 400_000 || _now - _lastHostFault < HostFaultSpacing || !_random.Chance(0.02)) return;
        // Only a service of three replicas or more survives losing one.
        if (Leader is not { Configuration.Count: >= 3 } leader) return;
        SimProcess?[] hosts = leader.Configuration.Select(r => ProcessOf(r.Host)).ToArray();
        if (hosts.Any(h => h is not { Alive: true, Paused: false, Exiting: false, CutOff: false })) return;
        if (Scenario.QuorumLoss)
        {
            // A majority of the replicas' hosts at once: nobody can decide any more.
            if (hosts.Length < 3) return;
            _quorumLost = true;
            QuorumLostAt = _now;
            foreach (SimProcess? h in hosts.OrderBy(_ => _random.NextUInt64()).Take(hosts.Length / 2 + 1)) CrashOnly(h!);
            return;
        }
        var faults = new List<Action<SimProcess>>();
        if (Scenario.HostCrashes) faults.Add(CrashAndRestart);
        if (Scenario.HostExits) faults.Add(StartExit);
        if (Scenario.HostPauses) faults.Add(PauseHost);
        if (Scenario.HostPartitions) faults.Add(PartitionHost);
        if (faults.Count == 0) return;
        SimProcess target = _random.Chance(0.6) ? ProcessOf(leader.Host) ?? hosts[0]! : hosts[_random.Next(hosts.Length)]!;
        _lastHostFault = _now;
        faults[_random.Next(faults.Count)](target);
    }

    private bool _growthPaused;

    /// <summary>
    /// <see cref="Scenario.PauseGrowingReplicaHost"/>: the first time the leader counts a voter other
    /// than itself (a growth appended, perhaps not yet committed), the host of the last such voter
    /// stops until the heal. Checked after every step of a process, so the host stops before the
    /// append that made it a voter reaches it.
    /// </summary>
    private void MaybePauseGrowingReplicaHost()
    {
        if (!Scenario.PauseGrowingReplicaHost || _growthPaused || _healed || Leader is not { } leader) return;
        SimProcess? added = _processes.LastOrDefault(p => p.Alive && !p.Paused && p.Replica is { } r && r != leader && leader.CountsAsVoter(r.Self));
        if (added == null) return;
        _growthPaused = true;
        added.Paused = true; // Heal resumes it
    }

    /// <summary>
    /// Embedded service: whether, when the faults stopped, a majority of the service's latest
    /// committed configuration (the newest any live replica applied) ran on hosts still up, paused
    /// and cut-off ones included (the heal resumes and reconnects them). The service must then go
    /// on deciding, so the run must be live. Null before the heal, and without an embedded service.
    /// </summary>
    internal bool? ServiceMajorityUpAtHeal { get; private set; }

    private bool ServiceMajorityUp()
    {
        MembershipReplica? latest = _processes.Where(p => p.Alive && p.Replica != null).Select(p => p.Replica!).MaxBy(r => r.ConfigurationVersion);
        if (latest == null) return false;
        int up = latest.Configuration.Count(r => ProcessOf(r.Host) is { Alive: true } host && host.Replica?.Self == r.Replica);
        return up >= latest.Configuration.Count / 2 + 1;
    }

    /// <summary>
    /// True if crashing <paramref name="p"/> now could take a second replica from the embedded
    /// service before it replaced the first (only the quorum-loss family does that, on purpose).
    /// Records the crash of a host as a host fault, so the next one waits.
    /// </summary>
    private bool HostingPutsServiceAtRisk(SimProcess p)
    {
        if (!Scenario.EmbeddedService || _healed || p.Replica is null) return false;
        MembershipReplica? leader = Leader;
        // A replica the leader has just added votes already, even if the replica has not heard so yet.
        if (!p.Replica.IsVoter && leader?.CountsAsVoter(p.Replica.Self) != true) return false;
        bool whole = leader is { Configuration.Count: >= 3, ReconfigurationPending: false }
            && leader.Configuration.All(r => ProcessOf(r.Host) is { Alive: true, Paused: false, Exiting: false, CutOff: false });
        if (!whole || _now - _lastHostFault < HostFaultSpacing) return true;
        _lastHostFault = _now;
        return false;
    }

    /// <summary>A graceful exit, as Shutdown does it: hand the replica over, leave the group, stop.</summary>
    private void StartExit(SimProcess p)
    {
        if (!p.Alive || p.Exiting) return;
        p.Exiting = true;
        p.Node!.RetireFromService(_now);
        Flush(p);
        ProcessNode node = p.Node!;
        // A handover that cannot finish (the service lost its majority) ends like a kill.
        At(_now + 3_000_000, () => { if (p.Node == node && p.Exiting) Crash(p); });
    }

    private void ExitAfterHandover(SimProcess p)
    {
        if (!p.Alive || !p.Exiting) return;
        if (p.WantsGroup && p.Node!.FindGroup(_group) is { State: not MemberState.Left })
        {
            p.WantsGroup = false;
            StopHoldingLocks(p);
            p.Node.Leave(_group, _now);
            Flush(p);
            return; // it stops once the leave completes (GroupLeft)
        }
        Exit(p);
    }

    private void Exit(SimProcess p)
    {
        if (!p.Alive || !p.Exiting) return;
        CrashOnly(p);
        At(_now + RestartDelay(p), () => { if (!p.Alive) Start(p); });
    }

    /// <summary>Cuts <paramref name="p"/> (its process and its replica) off from every other endpoint, then heals.</summary>
    private void PartitionHost(SimProcess p)
    {
        if (!p.Alive) return;
        p.CutOff = true;
        var inside = EndpointsOf(p).ToList();
        var outside = _processes.Where(x => x != p).SelectMany(EndpointsOf).ToList();
        (_directoryHolder == p ? inside : outside).Add(_directoryEndpoint);
        _network.Partition(inside, outside);
        // Sometimes shorter than the expulsion time, sometimes well beyond it.
        At(_now + _random.NextInRange(200_000, 1_500_000), () =>
        {
            _network.HealPartitions();
            p.CutOff = false;
        });
    }

    private void PauseHost(SimProcess p)
    {
        if (!p.Alive) return;
        p.Paused = true;
        // Sometimes shorter than the expulsion time, sometimes well beyond it (the stale-replica case).
        At(_now + _random.NextInRange(50_000, 1_500_000), () => Resume(p));
    }

    private void Resume(SimProcess p)
    {
        if (!p.Paused) return;
        p.Paused = false;
        if (!p.Alive) return;
        while (p.Backlog.Count > 0 && p.Alive)
        {
            DeliverTo(p, p.Backlog.Dequeue());
        }
    }

    private long _lastCoordinatorCrash;

    private void MaybeCrashCoordinator()
    {
        if (Leader?.ActiveFlushCoordinator(_group) is not { } coordinator) return;
        if (_now - _lastCoordinatorCrash < 500_000 || !_random.Chance(0.02)) return;
        if (ProcessOf(coordinator) is not { Alive: true } p) return;
        _lastCoordinatorCrash = _now;
        Crash(p);
    }

    private long _lastRoleCrash;

    /// <summary>Crashes the sequencer or an acceptor of the current view while messages are in flight.</summary>
    private void MaybeCrashRoleHolder()
    {
        if (_now - _lastRoleCrash < 300_000 || !_random.Chance(0.01)) return;
        var view = _processes.Where(x => x.Alive).Select(x => x.Node!.FindGroup(_group)?.View).Where(v => v != null).MaxBy(v => v!.Id);
        if (view == null || view.Members.Length < 3) return;
        NodeId target = view.Members[_random.Chance(0.5) ? 0 : _random.Next(Math.Min(3, view.Members.Length))];
        if (ProcessOf(target) is not { Alive: true } p) return;
        _lastRoleCrash = _now;
        Crash(p);
    }

    /// <summary>A process's endpoints: its own, and its replica's when the service is embedded (they share the process's fate and links).</summary>
    private IEnumerable<ulong> EndpointsOf(SimProcess p) => Scenario.EmbeddedService ? [p.Endpoint, p.ReplicaEndpoint] : [p.Endpoint];

    private void Heal()
    {
        if (Scenario.EmbeddedService) ServiceMajorityUpAtHeal = ServiceMajorityUp();
        _healed = true;
        History.RecordHeal(_now);
        _network.Faults = NetworkFaults.None;
        _network.HealPartitions();
        foreach (SimReplica r in _replicas)
        {
            if (!r.Alive) StartReplica(r);
        }
        foreach (SimProcess p in _processes)
        {
            Resume(p);
            if (!p.Alive) At(_now + 1_000, () => { if (!p.Alive) Start(p); });
            else if (!p.WantsGroup) At(_now + 1_000, () => Rejoin(p));
        }
    }
}
