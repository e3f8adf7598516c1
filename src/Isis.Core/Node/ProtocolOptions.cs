namespace Isis.Core.Node;

/// <summary>
/// Timing and sizing knobs of the protocol. Times are in microseconds of the driver's clock
/// (virtual time in the simulator, a monotonic clock in the runtime).
/// </summary>
internal sealed record ProtocolOptions
{
    /// <summary>How often a process heartbeats the membership service. Defaults to 100 ms.</summary>
    public long HeartbeatInterval { get; init; } = 100_000;

    /// <summary>
    /// Heartbeat periods in a row without news from a process before the membership service expels
    /// it. Defaults to 5, so a crash is noticed after 0.5-0.6 s with the default heartbeat.
    /// </summary>
    public int SuspicionCount { get; init; } = 5;

    /// <summary>
    /// How long a process goes without hearing from the membership service before it declares
    /// itself isolated and shuts down. Defaults to twice the expulsion time, so a process that is
    /// merely slow is expelled (and told) before it gives up on its own.
    /// </summary>
    public long IsolationTimeout { get; init; } = 2 * 5 * 100_000;

    /// <summary>
    /// How long a process that has not yet found the membership service (the embedded service's
    /// newcomers) keeps asking before it gives up; never shorter than <see cref="IsolationTimeout"/>.
    /// A newcomer has no membership to guard, so it can wait out a founder that is busy starting
    /// or a machine that is briefly overloaded. Defaults to 10 s.
    /// </summary>
    public long DiscoveryTimeout { get; init; } = 10_000_000;

    /// <summary>How often the leading membership replica sends its log (or an empty append) to the others. Defaults to 50 ms.</summary>
    public long ReplicaHeartbeatInterval { get; init; } = 50_000;

    /// <summary>
    /// How long membership replicas wait without hearing from a leader before electing another
    /// (randomised between this and twice this). A leader's lease is 90% of it. Defaults to 300 ms,
    /// so the service fails over well inside <see cref="IsolationTimeout"/>.
    /// </summary>
    public long ReplicaElectionTimeout { get; init; } = 300_000;

    /// <summary>
    /// How many replicas the membership service keeps on member processes when it runs embedded in
    /// them (the zero-configuration default): it grows to this many as processes start and moves a
    /// replica to another process when its host leaves or fails. 0: the replicas are a fixed,
    /// configured list and never move. Defaults to 0.
    /// </summary>
    public int ServiceReplicaTarget { get; init; }

    /// <summary>
    /// How long the membership service holds a view change caused only by joins and leaves, so that
    /// those arriving at about the same time are folded into one change (failures are not held).
    /// Defaults to 10 ms.
    /// </summary>
    public long MembershipBatchWindow { get; init; } = 10_000;

    /// <summary>How often members exchange acknowledgement digests when something changed. Defaults to 5 ms.</summary>
    public long DigestInterval { get; init; } = 5_000;

    /// <summary>How often a digest goes out even when nothing changed, to repair lost digests. Defaults to 100 ms.</summary>
    public long IdleDigestInterval { get; init; } = 100_000;

    /// <summary>
    /// Groups with at least this many members repair and detect stability the large-group way:
    /// each digest round goes to <see cref="GossipFanout"/> members chosen at random instead of to
    /// every member, and stability comes up and down a tree of fan-out
    /// <see cref="StabilityTreeFanout"/>, so a member's traffic per round no longer grows with the
    /// group. Smaller groups send every digest to every member: cheap there, and stability is one
    /// hop away. Defaults to 10: measured on loopback, 5-member groups deliver faster with the
    /// small-group rules, 10-member groups as fast either way over UDP and twice as fast with the
    /// tree over TCP (docs/performance.md, "Where the large-group rules start"). The same at every
    /// process (it decides which packets members expect).
    /// </summary>
    public int GossipFromMembers { get; init; } = 10;

    /// <summary>
    /// In a large group whose data goes by unicast, send it along the stability tree instead of to
    /// every member: the sender sends to its tree neighbours, each member forwards what it receives
    /// first to its other neighbours, and gossip and NAKs stay between neighbours. A process then
    /// talks to a handful of members per group instead of all, which is what a connection-based
    /// transport needs: the runtime turns this on for the TCP overlay. Defaults to false.
    /// </summary>
    public bool RelayThroughTree { get; init; }

    /// <summary>In a large group, how many members, chosen at random, each digest round goes to. Defaults to 3.</summary>
    public int GossipFanout { get; init; } = 3;

    /// <summary>In a large group, children per member in the stability tree. Defaults to 8 (a tree five ranks deep holds 4,681 members).</summary>
    public int StabilityTreeFanout { get; init; } = 8;

    /// <summary>How long a gap may stay open before it is NAKed, and between NAKs. Defaults to 10 ms.</summary>
    public long NakInterval { get; init; } = 10_000;

    /// <summary>Retransmission period for control traffic (flush steps, view installs, join and leave). Defaults to 50 ms.</summary>
    public long RetryInterval { get; init; } = 50_000;

    /// <summary>
    /// State transfer: checkpoint bytes a maker sends a joiner ahead of its acknowledgement. The
    /// maker also holds at most about this much of a checkpoint it has not sent yet (the driver
    /// waits on <see cref="Groups.GroupMember.StateBacklogBytes"/>), so a checkpoint of any size
    /// costs the maker a bounded amount of memory. Defaults to 4 MiB.
    /// </summary>
    public int StateWindowBytes { get; init; } = 4 << 20;

    /// <summary>
    /// Disk durability: at most this many payload bytes per chunk of history entries copied from
    /// another member (one chunk in flight per copier). Defaults to 60 KiB.
    /// </summary>
    public int HistoryChunkBytes { get; init; } = 60 * 1024;

    /// <summary>
    /// Disk durability: a member that copies the history writes it to disk as it arrives, in parts of
    /// about this many record bytes (the chunks received since the last part), each one durable in its
    /// own step, instead of the whole history in the step that completes the copy: the step that writes
    /// a part holds the event loop for a bounded time, so heartbeats keep flowing during a long copy.
    /// The parts go aside; the log is replaced by them only once the last one is durable
    /// (<see cref="HistoryStage"/>). Defaults to 4 MiB.
    /// </summary>
    public int HistoryCopyPartBytes { get; init; } = 4 << 20;

    /// <summary>
    /// Disk durability: a current member keeps the payloads of the history entries it holds in
    /// memory in slabs of this many bytes, reused once the history is trimmed past them
    /// (<see cref="Durability.PayloadSlabs"/>), so that they never reach the collector's oldest
    /// generation. Defaults to 1 MiB.
    /// </summary>
    public int HistorySlabBytes { get; init; } = Durability.PayloadSlabs.DefaultSlabBytes;

    /// <summary>
    /// Disk durability: a member that comes to hold the history hands its replay to the application
    /// in slices of at most this many entries (and <see cref="HistoryReplaySliceBytes"/>), one slice
    /// per tick, with whatever else happens meanwhile handed over after the last slice. Defaults to 4,096.
    /// </summary>
    public int HistoryReplaySliceEntries { get; init; } = 4096;

    /// <summary>Disk durability: at most this many payload bytes per replay slice (at least one entry). Defaults to 1 MiB.</summary>
    public int HistoryReplaySliceBytes { get; init; } = 1 << 20;

    /// <summary>Most messages one NAK asks for. Defaults to 512.</summary>
    public int MaxNakRange { get; init; } = 512;

    /// <summary>Longest group name accepted in a join request, in UTF-8 bytes. Defaults to 1024.</summary>
    public int MaxGroupNameBytes { get; init; } = 1024;

    /// <summary>
    /// How many decisions a membership replica applies between two snapshots of its state, after
    /// which it drops the log behind the snapshot (in memory and in its record file). Defaults to
    /// 10,000; the simulator sets it tiny so that snapshots happen all the time.
    /// </summary>
    public int ReplicaSnapshotInterval { get; init; } = 10_000;

    /// <summary>
    /// How many deleted groups the membership service remembers one by one (their last view, from
    /// which a group created again under the same name continues). Older ones are folded into one
    /// number, the highest last view among them, from which such a group continues instead. Defaults to 4,096.
    /// </summary>
    public int RememberedDeletedGroups { get; init; } = 4096;

    /// <summary>How many recent expulsions a membership update carries. Defaults to 256.</summary>
    public int MembershipUpdateSize { get; init; } = 256;

    /// <summary>
    /// IP multicast: the addresses the membership service allocates to groups, and its rule; null
    /// (the default): every group's data goes by unicast. The same at every replica.
    /// </summary>
    public Membership.MulticastPlan? Multicast { get; init; }

    /// <summary>
    /// The system key (32 bytes): every packet that no group key protects (heartbeats, joins, views,
    /// the membership service's own traffic) is sealed with it, and clear ones are refused. Null (the
    /// default): such packets travel in the clear. The same at every process and replica.
    /// </summary>
    public byte[]? SystemKey { get; init; }

    /// <summary>
    /// Further system keys that open packets but never seal them: the other key of a rolling
    /// rotation, while some processes seal with the old key and some with the new (at most
    /// <see cref="Security.PacketSealer.MaxAcceptedSystemKeys"/>; only with a <see cref="SystemKey"/>).
    /// </summary>
    public IReadOnlyList<byte[]> AcceptedSystemKeys { get; init; } = [];

    /// <summary>
    /// With a key: the packets of one step to one destination under one key are sealed together,
    /// in bundles of up to this many bytes (one AES-GCM operation each, which costs about as much as
    /// sealing 10 KB: bundling is what keeps the price of a key small). Defaults to 15,000, so a
    /// bundle fits a default datagram of 16 KiB.
    /// </summary>
    public int SealedBundleBytes { get; init; } = 15_000;

    /// <summary>Four random bytes the driver draws when a process starts: part of every nonce it seals with (see <see cref="Security.PacketSealer"/>).</summary>
    public uint SealSalt { get; init; }

    /// <summary>Deliberate protocol bugs, for showing that the simulator's checker catches them.</summary>
    public ProtocolMutations Mutations { get; init; } = ProtocolMutations.None;

    /// <summary>
    /// Where a node takes the arrays of the messages it holds, and returns them once the messages
    /// are stable. With a pool the node's outbox recycles (see <see cref="Outbox(Common.IBufferPool?)"/>):
    /// the steady-state Send path then allocates nothing. Null (tests that keep events) allocates.
    /// </summary>
    public Common.IBufferPool? BufferPool { get; init; }
}

/// <summary>
/// Deliberately broken variants of the protocol. Only tests turn these on: each one breaks a
/// guarantee, and the simulator's checker must notice.
/// </summary>
[Flags]
internal enum ProtocolMutations : long
{
    None = 0,

    /// <summary>The flush coordinator skips the unstable-message exchange: survivors install the next view with whatever they hold.</summary>
    SkipFlushExchange = 1,

    /// <summary>Receivers deliver a message as soon as it arrives, gaps or not.</summary>
    DeliverOutOfOrder = 2,

    /// <summary>Members deliver an OrderedSend as soon as it reaches the head of its sender's stream, without waiting for the sequencer.</summary>
    DeliverOrderedOnArrival = 4,

    /// <summary>Flush completes at once instead of waiting until earlier messages are stable.</summary>
    FlushReturnsAtOnce = 8,

    /// <summary>A Query(ALL) completes with the first reply instead of waiting for every member.</summary>
    QueryCompletesOnFirstReply = 16,

    /// <summary>A SafeSend is delivered when all but one of its acceptors hold it.</summary>
    SafeDeliversOneAcceptorShort = 32,

    /// <summary>A membership replica counts its own acceptance as a majority: a side cut off from the other replicas elects its own leader and changes membership.</summary>
    MinorityCommits = 64,

    /// <summary>After a total crash, the oldest restarted member rebuilds the SafeSend history from its own log alone, without waiting for the other members of the last view.</summary>
    RecoverFromOldestOnly = 128,

    /// <summary>
    /// The membership service changes several replicas in one configuration entry without joint
    /// consensus: it swaps a failed replica for a new one in one step, and grows by all the
    /// replicas it wants at once, without letting them catch up first.
    /// </summary>
    ReconfigureSeveralAtOnce = 256,

    /// <summary>
    /// A process's lease ignores how long the leader that granted it may still lead: a new leader
    /// that counts its predecessor's silence then expels that predecessor's host while a lease the
    /// predecessor granted may still run.
    /// </summary>
    LeaseOutlivesLeader = 512,

    /// <summary>
    /// A group member's reported next deadline leaves out its NAK timers: a driver that sleeps until
    /// the deadline repairs a lost message late (or, in a quiet group, not until the next digest).
    /// </summary>
    DeadlineOmitsNaks = 1024,

    /// <summary>
    /// In a large group's stability tree, a member reports its own holdings only, leaving out its
    /// subtree's: the root then declares stable what members below may lack, and they garbage-collect it.
    /// </summary>
    StabilityIgnoresSubtree = 2048,

    /// <summary>
    /// A member relaying a message along the tree labels it with its own rank instead of the
    /// original sender's: its neighbours file it in the wrong sender's stream.
    /// </summary>
    RelayForwardsAsOwn = 4096,

    /// <summary>
    /// A joiner takes part at once, with whatever state it has, instead of waiting for the
    /// checkpoint of the view it joined: it delivers that view's messages on an empty state.
    /// </summary>
    JoinerSkipsState = 8192,

    /// <summary>A packet whose authentication tag does not verify, or that arrives clear where a key is required, is taken anyway.</summary>
    AcceptUnauthenticated = 16384,

    /// <summary>
    /// A member that restores its persistent checkpoint replays the history from one entry past
    /// the entry after the checkpoint's: it skips an acknowledged SafeSend.
    /// </summary>
    RestoreSkipsAnEntry = 32768,

    /// <summary>After a key rotation the previous key never retires: it still opens packets views later.</summary>
    RetiredKeyStillOpens = 65536,

    /// <summary>
    /// Not the core's: the simulator's replicated collection (Isis.Collections' model) merges what a
    /// view left in the order the updates arrived at each member instead of in id order, which
    /// differs between members.
    /// </summary>
    CollectionLeftoverInArrivalOrder = 131072,

    /// <summary>
    /// A process opens packets with its own system key only, never with its accepted ones: during a
    /// rolling rotation of the system key, processes that seal with the other key are not heard.
    /// </summary>
    AcceptedSystemKeysIgnored = 262144,

    /// <summary>
    /// With disk durability, SafeQuery requests are not logged in the durable history (only
    /// SafeSends are): a recovery or a joiner's replay leaves them out of the order members delivered.
    /// </summary>
    SafeQueryNotLogged = 524288,

    /// <summary>
    /// With disk durability, a member trims its whole log whenever a checkpoint becomes durable,
    /// whether or not a checkpoint covers what it drops.
    /// </summary>
    TrimPastCheckpoints = 1048576,

    /// <summary>
    /// With disk durability, a member whose log a forced recovery gave up is treated like any other:
    /// its checkpoints are restored and its log may be recovered from, though they may hold
    /// SafeSends the group's history lost (and entries the history has since replaced).
    /// </summary>
    GivenUpHistoryUsed = 2097152,

    /// <summary>
    /// A membership replica's snapshot claims its whole log, committed or not: the snapshot index is
    /// the last entry it holds, though its state has only the decisions it applied.
    /// </summary>
    SnapshotPastCommit = 4194304,

    /// <summary>
    /// Embedded service: a process that holds the well-known port founds a service as soon as it
    /// has found none, without asking for a while first and without checking that no replica on
    /// the machine's file may still run (the founding rule, docs/architecture.md); a second service
    /// can then run beside a live one.
    /// </summary>
    FoundBesideLiveService = 8388608,

    /// <summary>
    /// With disk durability, the oldest member of a group's first view founds an empty history even
    /// though its driver knows one was founded (a machine's registry of durable groups names it):
    /// after a membership service that forgot the group, a process without a log then founds a
    /// second history over the one the returning members' logs hold.
    /// </summary>
    FoundOverKnownHistory = 33554432,

    /// <summary>
    /// With disk durability, a group restarted after a total crash recovers its history without
    /// the missing members of the last view whenever the membership service remembered that view
    /// as the group's last, even when the view's first member (its first acceptor, which may alone
    /// hold SafeSends delivered with phi 1) has not come back.
    /// </summary>
    AutoRecoverWithoutFirstAcceptor = 67108864,

    /// <summary>
    /// With disk durability, that recovery without the missing members also goes ahead when the
    /// membership service remembered a later view as the group's last than any returning log names:
    /// a member of that later view may have carried the history on alone and delivered there.
    /// </summary>
    AutoRecoverPastLastView = 134217728,

    /// <summary>
    /// With disk durability, a member takes the incarnations a forced recovery's plan gives up as
    /// given up for good as soon as the plan reaches it, though nobody has yet come to hold the
    /// history by it: when a view change voids the plan and the given-up member's log comes back,
    /// the next view's recovery still leaves that log out (the longest of the last view), and with
    /// it the SafeSends its member delivered alone, though nobody is missing and nothing was forced.
    /// </summary>
    VoidedPlanGivesUp = 268435456,

    /// <summary>
    /// With disk durability, a member whose history's replay runs in slices hands over what happens
    /// meanwhile (this view's deliveries, views, query completions) at once, between the slices,
    /// instead of after the last one: the application sees live messages before the history ends.
    /// </summary>
    LiveBeforeReplayEnds = 536870912,

    /// <summary>
    /// With disk durability, a member copying the history writes its first part over its log at once
    /// (a whole rewrite) and appends the later parts to the log, instead of writing them aside until
    /// the last one is durable: a crash in the middle of the copy leaves a log that says this member
    /// held the history in that view with only a prefix of it.
    /// </summary>
    CopyOverLogInPlace = 1073741824,

    /// <summary>
    /// A member restores (or copies onto) its own persistent checkpoint on lineage and index alone,
    /// without checking its history digest against the history's at that index: a checkpoint that
    /// holds SafeSends the group lost (all their acceptors delivered them and crashed, and the
    /// indices went to other SafeSends) is restored, and its state diverges from the others'.
    /// </summary>
    CheckpointPrefixUnchecked = 1L << 31,

    /// <summary>
    /// Deliberately broken: the oldest member proves a recovery without missing members complete
    /// though a member of a view in which it decided an earlier recovery plan is not back (it may
    /// have held the history by that plan, delivered and failed).
    /// </summary>
    AutoRecoverAfterPlanHolderLost = 1L << 32,

    /// <summary>
    /// Deliberately broken: at each trim a member reuses every filled slab of history payloads,
    /// whether or not the trim point has passed it, so entries still in its history (a member
    /// copying it pulls them) read another SafeSend's bytes.
    /// </summary>
    SlabReusedBeforeTrim = 1L << 33,

    /// <summary>
    /// Deliberately broken: a member copying the history keeps its own log's entry at each index it
    /// pulls instead of the pulled one without checking that they are the same SafeSend: a log
    /// holding SafeSends the group lost (all their acceptors delivered them and failed, and the
    /// indices went to others) puts them in this member's history.
    /// </summary>
    OwnLogEntryUnchecked = 1L << 34,

    /// <summary>
    /// Deliberately broken (liveness): an embedded service growing from its founding replica adds
    /// one replica at a time, so for a few round trips it runs on two replicas, which need both to
    /// decide: losing the new one then wedges the service for good.
    /// </summary>
    GrowOneReplicaAtATime = 1L << 35,

    /// <summary>
    /// Deliberately broken (liveness): relaying, the flush coordinator routes its wedges and commits
    /// over the view's tree instead of a tree of the survivors, so a failed member inside the tree
    /// cuts its subtree off and the flush never completes.
    /// </summary>
    FlushRoutesThroughViewTree = 1L << 36,

    /// <summary>
    /// Deliberately broken: a CausalSend is delivered as soon as it reaches the head of its sender's
    /// stream, without waiting for the causal messages its sender had delivered before sending it.
    /// </summary>
    CausalDeliversOnArrival = 1L << 37,

    /// <summary>
    /// Deliberately broken: a Flush waits only for this member's own messages, not for the causal
    /// messages it delivered before them, so a CausalSend it flushed can be dropped at the view's
    /// end when its predecessor is lost with the members that held it.
    /// </summary>
    FlushIgnoresCausalPredecessors = 1L << 38,

    /// <summary>
    /// Deliberately broken (liveness): a requester ignores a reply sent in a view later than the one
    /// its request was delivered in, so a member that answers late (a deferred reply) after a view
    /// change that kept it and the requester is never counted, and the query never completes.
    /// </summary>
    LateRepliesDropped = 1L << 39,

    /// <summary>Deliberately broken: every member delivers a SubsetSend or P2PSend, not only the members it names.</summary>
    SubsetDeliveredEverywhere = 1L << 40,

    /// <summary>Deliberately broken: a lock table releases every lock at a view change, not only those of the members that left, so a live holder loses its lock to the next in line.</summary>
    LockViewReleasesEveryone = 1L << 41,

    /// <summary>Deliberately broken: a free lock's fencing token starts again at a view change, so a later holder can get a token an earlier one had.</summary>
    LockTokenPerView = 1L << 42,

    /// <summary>Deliberately broken: members keep no client sessions, so a client's request retried through a second relay runs again wherever the first relay's copy ran.</summary>
    ClientRetriesRunTwice = 1L << 43,
}
