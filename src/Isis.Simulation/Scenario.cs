using Isis.Core.Common;
using Isis.Core.Node;
using Isis.Simulation.Network;

namespace Isis.Simulation;

/// <summary>
/// Everything that shapes one simulated run besides the seed's coin flips: how many processes,
/// which faults, how long. <see cref="FromSeed"/> derives a varied scenario from a seed so that a
/// few hundred seeds cover loss, duplication, reordering, partitions, pauses and crashes (of
/// members and of view-change coordinators), alone and mixed.
/// </summary>
internal sealed record Scenario
{
    public string Name { get; init; } = "custom";

    public int Processes { get; init; } = 4;

    public NetworkFaults Faults { get; init; } = NetworkFaults.None;

    /// <summary>Crash random members now and then (and restart them as new incarnations).</summary>
    public bool Crashes { get; init; }

    /// <summary>Crash the coordinator of a view change while its flush runs.</summary>
    public bool CoordinatorCrashes { get; init; }

    /// <summary>
    /// Crash members that hold a role in the total order while traffic flows: the sequencer (rank
    /// 0 of the current view) or one of the first three ranks (the acceptors of SafeSends with
    /// phi up to 3), chosen at random, every few hundred milliseconds.
    /// </summary>
    public bool RoleCrashes { get; init; }

    /// <summary>Cut a minority of processes off from everyone else for a while.</summary>
    public bool Partitions { get; init; }

    /// <summary>How many membership replicas run the service (1, 3 or 5). Defaults to 1, the embedded default.</summary>
    public int Replicas { get; init; } = 1;

    /// <summary>
    /// Crash membership replicas, never a majority at once: mostly the leader, preferably while a
    /// view change runs, sometimes a follower. They restart from their durable records.
    /// </summary>
    public bool ReplicaCrashes { get; init; }

    /// <summary>Partitions split the membership replicas too, so one side may hold a majority of them and the other not.</summary>
    public bool ReplicaPartitions { get; init; }

    /// <summary>
    /// The membership service runs embedded in the member processes, as the zero-configuration
    /// runtime does: the first process founds it, it grows to <see cref="ReplicaTarget"/> replicas
    /// on other processes, and moves a replica when its host goes. New processes find it through a
    /// well-known endpoint held by one live process (taken over when that one dies), and through the
    /// replicas the machine last knew of. <see cref="Replicas"/> is then unused.
    /// </summary>
    public bool EmbeddedService { get; init; }

    /// <summary>With <see cref="EmbeddedService"/>: how many replicas the service keeps (3 or 5). Defaults to 3.</summary>
    public int ReplicaTarget { get; init; } = 3;

    /// <summary>With <see cref="EmbeddedService"/>: crash processes that host a replica, the leader's mostly, one after another.</summary>
    public bool HostCrashes { get; init; }

    /// <summary>With <see cref="EmbeddedService"/>: processes that host a replica exit gracefully (hand their replica over, leave, stop), one after another.</summary>
    public bool HostExits { get; init; }

    /// <summary>With <see cref="EmbeddedService"/>: pause processes that host a replica, sometimes beyond the expulsion time.</summary>
    public bool HostPauses { get; init; }

    /// <summary>
    /// With <see cref="EmbeddedService"/>: cut a process that hosts a replica (the leader's mostly)
    /// off from everyone else for a while: it and its replica go on among themselves, the way a
    /// leader that does not know it was replaced does.
    /// </summary>
    public bool HostPartitions { get; init; }

    /// <summary>
    /// With <see cref="EmbeddedService"/>: every process crashes, one after another over up to a
    /// second and a half, and each restarts after its own delay, so that new processes start while
    /// older ones still run (and hold the well-known port) without a service: the restarted processes
    /// must found a new service (the founding rule, <see cref="Isis.Core.Membership.EmbeddedFounding"/>),
    /// never two at once, and the group must re-form. Once or twice a run.
    /// </summary>
    public bool WholeSystemRestarts { get; init; }

    /// <summary>With <see cref="EmbeddedService"/>: once, crash a majority of the replica hosts at once; the group must wedge, never split (and is not expected to recover).</summary>
    public bool QuorumLoss { get; init; }

    /// <summary>
    /// With <see cref="EmbeddedService"/>: as soon as the service's first growth beyond its founding
    /// replica is appended, the host of a replica it adds stops (as SIGSTOP does) until the heal.
    /// The founder and the other new replica must carry on: a growth that went through a
    /// configuration of two would wedge for good.
    /// </summary>
    public bool PauseGrowingReplicaHost { get; init; }

    /// <summary>Links flap: many short partitions in a row, each a fresh random split of replicas and processes.</summary>
    public bool FlappingLinks { get; init; }

    /// <summary>Pause processes (as SIGSTOP does), sometimes for longer than the expulsion time.</summary>
    public bool Pauses { get; init; }

    /// <summary>
    /// Every member keeps the group's SafeSend history on its (simulated) disk, which survives its
    /// crashes: joiners copy the history, and a group whose every member crashed recovers it.
    /// </summary>
    public bool DiskDurability { get; init; }

    /// <summary>With <see cref="DiskDurability"/>: crash every member (once or twice) and restart them in random orders and subsets, with crashes during the recovery.</summary>
    public bool WholeGroupRestarts { get; init; }

    /// <summary>
    /// With <see cref="WholeGroupRestarts"/>: at each whole-group crash one process loses its disk
    /// (it restarts with no log and no checkpoint) or stays away with it until the heal (or, where
    /// the disk drawn to be lost is the first acceptor's, keeps it and comes back soon), and after a
    /// while the operator forces the recovery at a member that waits (see Simulator.cs,
    /// ForceRecoveryWhereWaiting); the given-up process that comes back must not bring its history in.
    /// (A lost disk that is not the last view's first member's needs no force: the service, which
    /// stays up, remembers the view, so the group recovers on its own first; see <see cref="AutoRecovery"/>.)
    /// </summary>
    public bool LostDisks { get; init; }

    /// <summary>
    /// With <see cref="DiskDurability"/> and <see cref="EmbeddedService"/>: one process stays out
    /// until every other one held the history; then every process crashes, so the embedded service
    /// forgets the group, and the new process (an empty disk, never a member) starts first and is
    /// the oldest member of the group's first view under the service founded again. The machine's
    /// registry of durable groups must keep it from founding a second history over the one the
    /// others' logs hold (see Simulator.cs, RestartSystemNewcomerFirst).
    /// </summary>
    public bool NewcomerFirstAfterSystemRestart { get; init; }

    /// <summary>
    /// With <see cref="DiskDurability"/>: about half the crashes strike while a step's durable
    /// writes are under way, by the rules of the runtime's crash-consistency tests
    /// (tests/Isis.Tests/Runtime/SimulatedDisk.cs): of the records appended since the last fsync a
    /// prefix survives (all, none or some), a rewrite renamed into place survives whole or not at
    /// all, and nothing else of that step (packets, deliveries) ever happened.
    /// </summary>
    public bool TornWrites { get; init; }

    /// <summary>
    /// With <see cref="WholeGroupRestarts"/>, and the membership service staying up: at the
    /// whole-group crash a member of the last view other than its first never brings its log
    /// back. Mostly its disk is lost for good (it comes back at the heal with no log), and in some
    /// of those runs the first member stays away until the heal too, after delivering SafeSends of
    /// phi 1 alone. Nobody forces anything: the group must recover on its own, as soon as the first
    /// member is back, because the service remembers the view as the group's last
    /// (DurableHistory.ProvedNothingOnlyTheMissingHeld). In the other runs that member keeps its
    /// disk, outlives the others, carries the group on alone in a view of its own and delivers
    /// there before it crashes, and the others come back only after: the service's last view is
    /// then its view, so the group must wait for it (it comes back at the heal).
    /// </summary>
    public bool AutoRecovery { get; init; }

    /// <summary>Members leave and later rejoin.</summary>
    public bool LeaveAndRejoin { get; init; }

    /// <summary>
    /// With <see cref="DiskDurability"/>: each process's application keeps persistent checkpoints of
    /// the history it applied (the newest two survive its crashes, as files would), now and then
    /// finds its newest one damaged at restart, and restores the one the core picks.
    /// </summary>
    public bool PersistentCheckpoints { get; init; }

    /// <summary>
    /// State transfer: checkpoint bytes a maker sends ahead of a joiner's acknowledgement. Small (two
    /// chunks of the simulated application), so that the window and its go-back-N repair work in
    /// every run; it overrides <see cref="Protocol"/>'s.
    /// </summary>
    public int StateWindowBytes { get; init; } = 1024;

    /// <summary>Every process seals its group's member-to-member packets with this key (32 bytes), or null.</summary>
    public byte[]? GroupKey { get; init; }

    /// <summary>
    /// An attacker on the network replays captured packets to the processes and forges Data packets
    /// that name a member as sender, ahead of its sequence numbers (see Simulator.Attacker.cs).
    /// </summary>
    public bool Forgeries { get; init; }

    /// <summary>
    /// With <see cref="GroupKey"/>: the group's key is rotated a few times (see Simulator.KeyRotation.cs),
    /// and with <see cref="Forgeries"/> the attacker also forges with the keys the group left behind.
    /// </summary>
    public bool KeyRotations { get; init; }

    /// <summary>
    /// With <see cref="EmbeddedService"/> and a system key: the operator rotates the system key in
    /// three rolling restarts (accept the next key; seal with it, accepting the old; drop the old),
    /// one process at a time by graceful exit and restart, each step finished everywhere before the next.
    /// </summary>
    public bool SystemKeyRotation { get; init; }

    /// <summary>
    /// The application holds a replicated collection (Isis.Collections' model, see
    /// Simulator.Collections.cs): every workload message is an update sent with Send, the sequencer's
    /// merge lists go by OrderedSend, members gossip by Query and stall their handlers now and then.
    /// </summary>
    public bool Collections { get; init; }

    /// <summary>State transfer: chance that the member asked for a checkpoint crashes within 30 ms, while it streams it.</summary>
    public double CrashMakerChance { get; init; }

    /// <summary>Fraction of the workload's messages sent with OrderedSend. Defaults to 0.35.</summary>
    public double OrderedFraction { get; init; } = 0.35;

    /// <summary>Fraction of the workload's messages sent with SafeSend (phi 1, 2, 3 or all at random). Defaults to 0.3.</summary>
    public double SafeFraction { get; init; } = 0.3;

    /// <summary>
    /// Fraction of the workload's messages sent with CausalSend (CausalQuery when a query), taken
    /// from the top of the same draw as <see cref="SafeFraction"/> and <see cref="OrderedFraction"/>,
    /// out of the plain Sends. Defaults to 0.
    /// </summary>
    public double CausalFraction { get; init; }

    /// <summary>
    /// Chance that a plain Send of the workload is a SubsetSend instead (to one member or more of the
    /// view, drawn at random, the sender among them or not), a Query then a P2PQuery to them. Defaults to 0.
    /// </summary>
    public double SubsetChance { get; init; }

    /// <summary>
    /// The application holds GroupLocks' lock table (Simulator.Locks.cs): the workload requests,
    /// releases and withdraws three locks by SafeSend, holders keep them 1-30 ms, and the checker's
    /// LockSafety wants one holder at a time and growing fencing tokens.
    /// </summary>
    public bool Locks { get; init; }

    /// <summary>
    /// Non-member clients (Simulator.Clients.cs): this many GroupClient nodes send requests of every
    /// kind through the members, which relay them; relays crash, pause and are cut off mid-request,
    /// and the checker's ClientRequests wants each request run at most once per member and every
    /// answered one run. Defaults to 0.
    /// </summary>
    public int Clients { get; init; }

    /// <summary>Chance that a process answers a causal message from another with a CausalSend of its own at once, so causal chains cross members. Defaults to 0.</summary>
    public double CausalReplyChance { get; init; }

    /// <summary>Chance that a member defers its answer to a query (as a handler with DeferReply would), answering 1-200 ms later, across view changes. Defaults to 0.</summary>
    public double DeferredReplyChance { get; init; }

    /// <summary>Chance that a send is followed by a Flush (when none is outstanding). Defaults to 0.05.</summary>
    public double FlushChance { get; init; } = 0.05;

    /// <summary>Every other Flush is a Flush(k) with 1 &lt;= k &lt;= the view's size (the relaying families: a Flush(k) there asks k - 1 members directly, where every other Flush waits for the tree).</summary>
    public bool FlushK { get; init; }

    /// <summary>With <see cref="Crashes"/>: chance that a process crashes right after its Flush returns (the case Flush exists for). Defaults to 0.3.</summary>
    public double CrashAfterFlushChance { get; init; } = 0.3;

    /// <summary>Chance that a send is a Query(ALL) instead (half of them OrderedQuery). Defaults to 0.05.</summary>
    public double QueryChance { get; init; } = 0.05;

    /// <summary>The processes start at random times within this window (microseconds). Defaults to 300 ms.</summary>
    public long StartWindow { get; init; } = 300_000;

    /// <summary>Messages each process incarnation sends at most.</summary>
    public int MessagesPerProcess { get; init; } = 150;

    /// <summary>Length of the phase with faults, microseconds of virtual time.</summary>
    public long FaultPhase { get; init; } = 3_000_000;

    /// <summary>Length of the calm phase after <see cref="FaultPhase"/> in which everything must converge.</summary>
    public long HealPhase { get; init; } = 4_000_000;

    public ProtocolOptions Protocol { get; init; } = new();

    /// <summary>The named scenario families, in the order <see cref="FromSeed"/> cycles through them.</summary>
    public static readonly string[] Families =
    [
        "steady", "lossy", "duplicating", "reordering", "partition", "crash", "coordinator-crash",
        "pause", "leave-rejoin", "chaos", "large", "sequencer-crash",
        "replica-leader-crash", "replica-partition", "flapping", "replica-chaos",
        "whole-restart", "disk-chaos",
        "host-crash", "host-exit", "host-pause",
    ];

    /// <summary>The families that exercise the replicated membership service.</summary>
    public static readonly string[] MembershipFamilies =
        ["replica-leader-crash", "replica-partition", "flapping", "replica-chaos", "host-crash", "host-exit", "host-pause"];

    /// <summary>The families whose membership service is embedded in the member processes and moves between them.</summary>
    public static readonly string[] EmbeddedServiceFamilies = ["host-crash", "host-exit", "host-pause", "host-partition", "host-chaos", "host-quorum-loss", "host-secured", "host-growth"];

    /// <summary>
    /// The families whose groups' data goes by IP multicast (the membership service allocates the
    /// address; each receiver's copy is lost on its own; repairs come by unicast). Kept out of
    /// <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] MulticastFamilies = ["multicast", "multicast-chaos"];

    /// <summary>
    /// The families whose groups repair and detect stability the large-group way (gossiped digests
    /// to two random members a round, stability up and down a binary tree; in the relay families
    /// data also travels along the tree, as over the TCP overlay), at the sizes a seed can
    /// afford: the large-group rules start at 4 members here instead of 16, so views of 3 or fewer
    /// members (after crashes and leaves) use the small-group rules and views switch between the two.
    /// Kept out of <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] GossipFamilies = ["gossip", "gossip-chaos", "relay", "relay-chaos"];

    /// <summary>
    /// State transfer families: processes crash and restart (so they join again under traffic),
    /// the member making a checkpoint often crashes while it streams (so the transfer restarts at a
    /// later cut, or the state is lost and starts empty), with loss and reordering throughout. Every
    /// family transfers state, since every restart is a join; these aim at the transfer itself.
    /// Kept out of <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] StateTransferFamilies = ["state-transfer", "state-transfer-chaos"];

    /// <summary>
    /// Keyed families: a system key and a group key at every process, with an attacker replaying
    /// captured packets and forging Data packets in the names of members, under loss, duplication
    /// and crashes. Kept out of <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] SecuredFamilies = ["secured", "secured-chaos"];

    /// <summary>
    /// Replicated-collection families: the application is a collection (updates by Send, merge lists
    /// by OrderedSend, gossip repair by Query, handlers that stall), under loss, crashes of members
    /// and of the sequencer, leaves and rejoins, and in the chaos family partitions, pauses and
    /// duplication too. Kept out of <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] CollectionFamilies = ["collections", "collections-chaos"];

    /// <summary>
    /// The Isis2 toolkit's primitives (issue 29): CausalSend and CausalQuery with chains of causal
    /// answers across members, deferred query replies, under reordering and loss, and with crashes,
    /// partitions and leaves. Kept out of <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] ToolkitFamilies = ["causal", "causal-chaos", "subset", "subset-chaos", "locks", "locks-chaos", "clients", "clients-chaos"];

    /// <summary>
    /// Forced recovery of the durable history: whole-group crashes in which a member's disk is lost
    /// or stays away, and the operator forces the recovery. Kept out of <see cref="Families"/> so
    /// every other family keeps its seeds.
    /// </summary>
    public static readonly string[] ForcedRecoveryFamilies = ["lost-disk", "history-refound"];

    /// <summary>
    /// Recovery of the durable history without the operator: whole-group crashes, with the
    /// membership service up, in which a member of the last view other than its first never comes
    /// back with its log, and the first member sometimes only at the heal. Kept out of
    /// <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] AutoRecoveryFamilies = ["auto-recover"];

    /// <summary>
    /// Compaction families: the membership replicas snapshot their state every few decisions (2 to
    /// 5) and drop their log behind it, while replicas crash and restart (from a snapshot and the
    /// records after it), or, with the embedded service, while the hosts of replicas crash and the
    /// service adds new replicas (which catch up from a snapshot). Kept out of
    /// <see cref="Families"/> so every other family keeps its seeds.
    /// </summary>
    public static readonly string[] CompactionFamilies = ["compaction", "compaction-hosts"];

    /// <summary>Every family <see cref="ForFamily"/> knows, the default mix first.</summary>
    public static readonly string[] AllFamilies =
    [
        .. new[]
        {
            Families, EmbeddedServiceFamilies, ["host-restart"], MulticastFamilies, GossipFamilies, StateTransferFamilies,
            SecuredFamilies, CollectionFamilies, ForcedRecoveryFamilies, AutoRecoveryFamilies, CompactionFamilies, ToolkitFamilies,
        }.SelectMany(f => f).Distinct(),
    ];

    /// <summary>The keys of the secured families (fixed: the simulator has no secrets to keep).</summary>
    internal static readonly byte[] SimulatedSystemKey = [.. Enumerable.Range(0, 32).Select(i => (byte)(0x51 + i))];

    /// <summary>The system key the family host-secured rotates to.</summary>
    internal static readonly byte[] SimulatedNextSystemKey = [.. Enumerable.Range(0, 32).Select(i => (byte)(0x3C ^ (5 * i)))];

    internal static readonly byte[] SimulatedGroupKey = [.. Enumerable.Range(0, 32).Select(i => (byte)(0xA7 ^ i))];

    /// <summary>The protocol options of the gossip families: the large-group rules from 4 members, 2 gossip targets, a binary tree.</summary>
    internal static readonly ProtocolOptions GossipProtocol = new() { GossipFromMembers = 4, GossipFanout = 2, StabilityTreeFanout = 2 };

    /// <summary>The multicast range the multicast families use: four addresses from 239.192.77.0, port 7346.</summary>
    internal static readonly Core.Membership.MulticastPlan SimulatedMulticast = new(0xEFC0_4D00, 4, 7346);

    /// <summary>The scenario a seed stands for: the family is seed modulo the family count, the rest comes from the seed.</summary>
    /// <summary>
    /// The durable families' sizes of a history's copy and replay, small and drawn per seed (from a
    /// random of their own, so the seeds' other draws stay as they were): the simulator's histories
    /// are a few hundred short entries, which the runtime's sizes would copy in one chunk, write in
    /// one part and replay in one slice. So every copy here arrives in many chunks, is written aside
    /// in several parts (HistoryStage) that crashes and torn writes cut short, and every replay takes
    /// many ticks, while the view's traffic, view changes and leaves go on; and the payloads a member
    /// holds fill many slabs, each reused as soon as the trim point passes it.
    /// </summary>
    internal static ProtocolOptions DurableParts(ulong seed)
    {
        var dr = new DeterministicRandom(seed ^ 0xD15C_9A27);
        return new ProtocolOptions
        {
            HistoryChunkBytes = 200 + dr.Next(1000),
            HistoryCopyPartBytes = 60 + dr.Next(1000),
            HistoryReplaySliceEntries = 1 + dr.Next(6),
            HistoryReplaySliceBytes = 30 + dr.Next(300),
            HistorySlabBytes = 40 + dr.Next(400),
        };
    }

    public static Scenario FromSeed(ulong seed) => ForFamily(Families[(int)(seed % (ulong)Families.Length)], seed);

    public static Scenario ForFamily(string family, ulong seed)
    {
        var r = new DeterministicRandom(seed ^ 0x5EED_F00D);
        int processes = 3 + r.Next(4);
        double loss = 0.02 + r.NextDouble() * 0.18;
        int replicas = r.Chance(0.5) ? 3 : 5;
        // Drawn apart, so that adding these families left every other family's seeds as they were.
        var hr = new DeterministicRandom(seed ^ 0x4057_5EED);
        int hosts = 4 + hr.Next(4);
        int target = hosts >= 6 && hr.Chance(0.3) ? 5 : 3;
        return family switch
        {
            "steady" => new Scenario { Name = family, Processes = processes },
            "lossy" => new Scenario { Name = family, Processes = processes, Faults = new NetworkFaults { LossRate = loss } },
            "duplicating" => new Scenario { Name = family, Processes = processes, Faults = new NetworkFaults { DuplicateRate = 0.05 + r.NextDouble() * 0.2, LossRate = 0.02 } },
            "reordering" => new Scenario { Name = family, Processes = processes, Faults = new NetworkFaults { MinDelay = 10, MaxDelay = 5_000 } },
            "partition" => new Scenario { Name = family, Processes = processes, Partitions = true, Faults = new NetworkFaults { LossRate = 0.02 } },
            "crash" => new Scenario { Name = family, Processes = processes, Crashes = true, Faults = new NetworkFaults { LossRate = 0.05 } },
            "coordinator-crash" => new Scenario { Name = family, Processes = processes, CoordinatorCrashes = true, LeaveAndRejoin = true, Faults = new NetworkFaults { LossRate = 0.05 } },
            "sequencer-crash" => new Scenario { Name = family, Processes = Math.Max(4, processes), RoleCrashes = true, Faults = new NetworkFaults { LossRate = 0.05, MaxDelay = 1_000 } },
            "pause" => new Scenario { Name = family, Processes = processes, Pauses = true },
            "leave-rejoin" => new Scenario { Name = family, Processes = processes, LeaveAndRejoin = true, Faults = new NetworkFaults { LossRate = 0.05, MaxDelay = 1_000 } },
            "chaos" => new Scenario
            {
                Name = family, Processes = processes, Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 2_000 },
            },
            "large" => new Scenario
            {
                Name = family, Processes = 8 + r.Next(5), Crashes = true, CoordinatorCrashes = true, Partitions = true, LeaveAndRejoin = true,
                MessagesPerProcess = 60, Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.02, MaxDelay = 1_000 },
            },
            "replica-leader-crash" => new Scenario
            {
                Name = family, Processes = processes, Replicas = replicas, ReplicaCrashes = true, LeaveAndRejoin = true, Crashes = r.Chance(0.5),
                Faults = new NetworkFaults { LossRate = 0.03, MaxDelay = 1_000 },
            },
            "replica-partition" => new Scenario
            {
                Name = family, Processes = processes, Replicas = replicas, Partitions = true, ReplicaPartitions = true, LeaveAndRejoin = r.Chance(0.5),
                Faults = new NetworkFaults { LossRate = 0.02 },
            },
            "flapping" => new Scenario
            {
                Name = family, Processes = processes, Replicas = replicas, FlappingLinks = true,
                Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "replica-chaos" => new Scenario
            {
                Name = family, Processes = processes, Replicas = replicas, ReplicaCrashes = true, Partitions = true, ReplicaPartitions = true,
                Crashes = true, CoordinatorCrashes = true, Pauses = true, LeaveAndRejoin = true,
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 20, MaxDelay = 2_000 },
            },
            "whole-restart" => new Scenario
            {
                Name = family, Processes = processes, DiskDurability = true, WholeGroupRestarts = true, SafeFraction = 0.6, OrderedFraction = 0.2,
                Faults = new NetworkFaults { LossRate = loss / 4, MaxDelay = 1_000 }, PersistentCheckpoints = r.Chance(0.5), Protocol = DurableParts(seed),
            },
            "lost-disk" => new Scenario
            {
                Name = family, Processes = processes, DiskDurability = true, WholeGroupRestarts = true, LostDisks = true, SafeFraction = 0.6, OrderedFraction = 0.2,
                Faults = new NetworkFaults { LossRate = loss / 4, MaxDelay = 1_000 }, PersistentCheckpoints = r.Chance(0.75), Protocol = DurableParts(seed),
            },
            "auto-recover" => new Scenario
            {
                Name = family, Processes = processes, DiskDurability = true, WholeGroupRestarts = true, AutoRecovery = true, SafeFraction = 0.6, OrderedFraction = 0.2,
                Faults = new NetworkFaults { LossRate = loss / 4, MaxDelay = 1_000 }, PersistentCheckpoints = r.Chance(0.5), Protocol = DurableParts(seed),
            },
            "disk-chaos" => new Scenario
            {
                Name = family, Processes = processes, DiskDurability = true, Crashes = true, RoleCrashes = processes >= 4, LeaveAndRejoin = true,
                WholeGroupRestarts = r.Chance(0.5), SafeFraction = 0.5, TornWrites = true,
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 20, MaxDelay = 2_000 }, PersistentCheckpoints = r.Chance(0.5), Protocol = DurableParts(seed),
            },
            "host-crash" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target, HostCrashes = true,
                Crashes = hr.Chance(0.3), LeaveAndRejoin = hr.Chance(0.3), Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "host-exit" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target, HostExits = true,
                LeaveAndRejoin = hr.Chance(0.3), Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "host-pause" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target, HostPauses = true,
                Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "host-partition" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target, HostPartitions = true,
                Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "host-chaos" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target,
                HostCrashes = true, HostExits = true, HostPauses = true, Partitions = true, FlappingLinks = hr.Chance(0.3), Crashes = true, LeaveAndRejoin = true,
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 20, MaxDelay = 2_000 },
            },
            "multicast" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(6), Crashes = true, LeaveAndRejoin = true, Protocol = new ProtocolOptions { Multicast = SimulatedMulticast },
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.03, MinDelay = 20, MaxDelay = 1_000 },
            },
            "multicast-chaos" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(6), Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true,
                OrderedFraction = 0.3, Protocol = new ProtocolOptions { Multicast = SimulatedMulticast },
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 2_000 },
            },
            "gossip" => new Scenario
            {
                Name = family, Processes = 5 + r.Next(8), Crashes = true, LeaveAndRejoin = true, Protocol = GossipProtocol,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.03, MinDelay = 20, MaxDelay = 1_000 },
            },
            "gossip-chaos" => new Scenario
            {
                Name = family, Processes = 5 + r.Next(8), Crashes = true, CoordinatorCrashes = true, RoleCrashes = true, Partitions = true, Pauses = true,
                LeaveAndRejoin = true, MessagesPerProcess = 80, Protocol = GossipProtocol,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 2_000 },
            },
            "secured" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), Crashes = true, LeaveAndRejoin = true, Forgeries = true, GroupKey = SimulatedGroupKey,
                Protocol = new ProtocolOptions { SystemKey = SimulatedSystemKey }, KeyRotations = r.Chance(0.5),
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 1_000 },
            },
            "secured-chaos" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true,
                Forgeries = true, GroupKey = SimulatedGroupKey, Protocol = new ProtocolOptions { SystemKey = SimulatedSystemKey }, KeyRotations = r.Chance(0.5),
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 2_000 },
            },
            "state-transfer" => new Scenario
            {
                Name = family, Processes = 4 + r.Next(4), Crashes = true, CrashMakerChance = 0.3, StateWindowBytes = 512,
                Faults = new NetworkFaults { LossRate = loss / 2, MinDelay = 20, MaxDelay = 1_000 },
            },
            "state-transfer-chaos" => new Scenario
            {
                Name = family, Processes = 4 + r.Next(4), Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true,
                CrashMakerChance = 0.5, StateWindowBytes = 512,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 2_000 },
            },
            "relay" => new Scenario
            {
                Name = family, Processes = 5 + r.Next(8), Crashes = true, LeaveAndRejoin = true, Protocol = GossipProtocol with { RelayThroughTree = true }, FlushK = true,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.03, MinDelay = 20, MaxDelay = 1_000 },
            },
            "relay-chaos" => new Scenario
            {
                Name = family, Processes = 5 + r.Next(8), Crashes = true, CoordinatorCrashes = true, RoleCrashes = true, Partitions = true, Pauses = true,
                LeaveAndRejoin = true, MessagesPerProcess = 80, Protocol = GossipProtocol with { RelayThroughTree = true }, FlushK = true,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 2_000 },
            },
            "collections" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), Collections = true, Crashes = true, RoleCrashes = true, LeaveAndRejoin = true,
                OrderedFraction = 0, SafeFraction = 0, QueryChance = 0,
                Faults = new NetworkFaults { LossRate = loss / 2, MinDelay = 20, MaxDelay = 1_000 },
            },
            "collections-chaos" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), Collections = true, Crashes = true, RoleCrashes = true, CoordinatorCrashes = true, Partitions = true,
                Pauses = true, LeaveAndRejoin = true, OrderedFraction = 0, SafeFraction = 0, QueryChance = 0,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 2_000 },
            },
            "causal" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), CausalFraction = 0.5, CausalReplyChance = 0.3, DeferredReplyChance = 0.5, QueryChance = 0.1,
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 10, MaxDelay = 5_000 },
            },
            "causal-chaos" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true,
                CausalFraction = 0.5, CausalReplyChance = 0.3, DeferredReplyChance = 0.5, QueryChance = 0.1, FlushChance = 0.15,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 3_000 },
            },
            "subset" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), SubsetChance = 0.5, DeferredReplyChance = 0.3, QueryChance = 0.1,
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 10, MaxDelay = 5_000 },
            },
            "subset-chaos" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(5), Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true,
                SubsetChance = 0.5, DeferredReplyChance = 0.3, QueryChance = 0.1, FlushChance = 0.15,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 3_000 },
            },
            "locks" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(4), Locks = true, Crashes = true, LeaveAndRejoin = true,
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 10, MaxDelay = 2_000 },
            },
            "locks-chaos" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(4), Locks = true, Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 3_000 },
            },
            "clients" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(4), Clients = 1 + r.Next(3), Crashes = true, LeaveAndRejoin = true, QueryChance = 0.05,
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 10, MaxDelay = 2_000 },
            },
            "clients-chaos" => new Scenario
            {
                Name = family, Processes = 3 + r.Next(4), Clients = 1 + r.Next(3), Crashes = true, CoordinatorCrashes = true, Partitions = true, Pauses = true, LeaveAndRejoin = true, QueryChance = 0.05,
                Faults = new NetworkFaults { LossRate = loss, DuplicateRate = 0.05, MinDelay = 20, MaxDelay = 3_000 },
            },
            "host-growth" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = 3, PauseGrowingReplicaHost = true,
                Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "host-secured" => new Scenario
            {
                // Every process and replica seals with a system key; exits (the rotation's restarts
                // among them) must hand over, and the key rotates in most runs. A longer fault phase
                // leaves room for three rolling restarts of every process.
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target, HostExits = true, HostCrashes = hr.Chance(0.5),
                Protocol = new ProtocolOptions { SystemKey = SimulatedSystemKey }, SystemKeyRotation = hr.Chance(0.75), FaultPhase = 8_000_000,
                Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "compaction" => new Scenario
            {
                Name = family, Processes = processes, Replicas = replicas, ReplicaCrashes = true, Crashes = true, LeaveAndRejoin = true,
                ReplicaPartitions = r.Chance(0.5), Protocol = new ProtocolOptions { ReplicaSnapshotInterval = 2 + r.Next(4), RememberedDeletedGroups = 1 },
                Faults = new NetworkFaults { LossRate = loss / 2, DuplicateRate = 0.03, MinDelay = 20, MaxDelay = 2_000 },
            },
            "compaction-hosts" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target, HostCrashes = true, Crashes = hr.Chance(0.5),
                LeaveAndRejoin = true, Protocol = new ProtocolOptions { ReplicaSnapshotInterval = 2 + hr.Next(4), RememberedDeletedGroups = 1 },
                Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "host-restart" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = target, WholeSystemRestarts = true,
                Crashes = hr.Chance(0.3), FaultPhase = 9_000_000, Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "history-refound" => new Scenario
            {
                // Hosts of the embedded service with a durable group: the whole system restarts with a
                // new process first (docs/semantics.md, "A history founded twice").
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = 3, DiskDurability = true,
                NewcomerFirstAfterSystemRestart = true, SafeFraction = 0.6, OrderedFraction = 0.2, PersistentCheckpoints = hr.Chance(0.5), Protocol = DurableParts(seed),
                Crashes = hr.Chance(0.3), FaultPhase = 7_000_000, Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            "host-quorum-loss" => new Scenario
            {
                Name = family, Processes = hosts, EmbeddedService = true, ReplicaTarget = 3, QuorumLoss = true,
                Faults = new NetworkFaults { LossRate = 0.02, MaxDelay = 1_000 },
            },
            _ => throw new ArgumentException($"unknown scenario family '{family}'; known: {string.Join(", ", Families)}, host-partition, host-chaos, host-quorum-loss, host-secured, host-growth, host-restart, {string.Join(", ", MulticastFamilies)}, {string.Join(", ", GossipFamilies)}, {string.Join(", ", StateTransferFamilies)}, {string.Join(", ", SecuredFamilies)}, {string.Join(", ", CollectionFamilies)}, {string.Join(", ", CompactionFamilies)}, {string.Join(", ", ForcedRecoveryFamilies)}, {string.Join(", ", AutoRecoveryFamilies)}", nameof(family)),
        };
    }
}
