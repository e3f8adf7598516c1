namespace Isis.Simulation;

/// <summary>What a <see cref="HistoryEvent"/> records. Names are written verbatim to JSON lines.</summary>
internal enum HistoryEventKind
{
    /// <summary>Process sent Message in view ViewId of Group; its own Deliver follows at once.</summary>
    Send,

    /// <summary>Process delivered Message; ViewId is the view the process had installed at the time.</summary>
    Deliver,

    /// <summary>Process installed view ViewId of Group with Members (oldest first).</summary>
    ViewInstall,

    /// <summary>The incarnation stopped (killed, or shut itself down). It records nothing afterwards.</summary>
    Crash,

    /// <summary>The membership service expelled the incarnation. It may still run until it learns of it.</summary>
    Expel,

    /// <summary>Process finished leaving Group.</summary>
    LeaveCompleted,

    /// <summary>From now on no faults are injected: liveness is expected by End. Process is NodeId.None.</summary>
    Heal,

    /// <summary>End of run. Process is NodeId.None.</summary>
    End,

    /// <summary>Process asked to join Group; if it is alive at End it must have installed a view since.</summary>
    JoinRequested,

    /// <summary>Process called Flush in Group (ViewId: its view then). Covers every message it sent before.</summary>
    FlushRequested,

    /// <summary>Process's Flush in Group returned (ViewId: its view then); pairs with its latest FlushRequested.</summary>
    FlushCompleted,

    /// <summary>Process issued a Query with ALL in Group; if it is alive and in the group at End, a QueryCompleted must follow.</summary>
    QueryIssued,

    /// <summary>A Query of Process in Group ended normally: ViewId is the request's delivery view, Members the repliers.</summary>
    QueryCompleted,

    /// <summary>Process, an acceptor of the SafeSend Message, holds it (and every earlier position of the total order).</summary>
    SafeAccepted,

    /// <summary>
    /// Process, a membership replica, applied the committed decision at log position LogIndex
    /// (PayloadHash: the entry's hash; Members: the replicas, if it is a configuration;
    /// ConfigurationIndex: the digest chaining every decision up to it, as a long).
    /// </summary>
    Decide,

    /// <summary>
    /// Process, a membership replica, took a snapshot of its state at log position LogIndex and
    /// dropped its log behind it (Phi 0), or installed or restored one (Phi 1); ConfigurationIndex:
    /// the digest of the decisions the snapshot covers, as a long.
    /// </summary>
    ReplicaSnapshot,

    /// <summary>
    /// Process, the leading membership replica, committed its log up to LogIndex: Members held it,
    /// counted against Voters, the configuration in force (appended at ConfigurationIndex; 0 is the
    /// founding one, given by the first Founded event).
    /// </summary>
    Commit,

    /// <summary>Process, a membership replica, started the service with the replicas in Members (the founding configuration).</summary>
    Founded,

    /// <summary>
    /// Disk durability: Process handed its application entry LogIndex (1, 2, ...) of Group's
    /// SafeSend history, the SafeSend Message (its original id) with PayloadHash, before anything
    /// else of the group. A member replays the whole history once, when it comes to hold it.
    /// </summary>
    Replay,

    /// <summary>
    /// Disk durability with persistent checkpoints: Process's application restored a checkpoint that
    /// holds entry LogIndex of Group's SafeSend history, the SafeSend Message with PayloadHash (one
    /// event per entry it holds, 1, 2, ..., before the replay of the entries after them). The checker
    /// judges these as it judges replayed entries: the application has them either way.
    /// </summary>
    Restore,

    /// <summary>Process's member of Group moved to a new key at the install of view ViewId; PayloadHash holds the key's fingerprint (first 8 bytes). For diagnostics: no property judges it.</summary>
    KeyRotated,

    /// <summary>
    /// State transfer: Process's application made the checkpoint of Group for the joiners of view
    /// ViewId (the cut): its state then was LogIndex messages with the order-free hash PayloadHash
    /// (a <see cref="StateDigest"/>).
    /// </summary>
    StateMade,

    /// <summary>
    /// State transfer: Process, a joiner of Group, loaded the checkpoint made at the cut ViewId: the
    /// state it read from the chunks is LogIndex messages with hash PayloadHash.
    /// </summary>
    StateLoaded,

    /// <summary>
    /// State transfer: every member that held Group's state left before Process's checkpoint arrived;
    /// Process starts from an empty state at view ViewId (and makes the checkpoint for the others).
    /// </summary>
    StateReset,

    /// <summary>
    /// Simulator only: a tick of Process at Time, before the deadline it had reported (LogIndex),
    /// produced Description. A runtime sleeping until that deadline would have fired the timer late.
    /// </summary>
    EarlyTimer,

    /// <summary>Simulator only: right after a tick at Time, Process reported a deadline (LogIndex) not later than Time: a driver sleeping until it would spin.</summary>
    StaleDeadline,

    /// <summary>
    /// Replicated collection (Isis.Collections' model, on the simulated application): Process's
    /// collection starts a new history, lineage ConfigurationIndex, empty (the group formed, or every
    /// holder of its state left).
    /// </summary>
    CollectionFounded,

    /// <summary>Replicated collection: Process's collection loaded a checkpoint of lineage ConfigurationIndex whose history ends at position LogIndex with chain hash PayloadHash.</summary>
    CollectionLoaded,

    /// <summary>
    /// Replicated collection: Process appended the update Message (its issuer as sender, the issuing
    /// collection's first view as view, its sequence as seq) at history position LogIndex of lineage ConfigurationIndex, in view ViewId
    /// (its collection's); PayloadHash is the chain hash through it. Phi is 1 when a gossip repair brought it.
    /// </summary>
    CollectionApplied,

    /// <summary>Replicated collection: Process issued the update Message (itself as sender, its collection's first view as view, its sequence as seq) in view ViewId.</summary>
    CollectionIssued,

    /// <summary>Replicated collection: gossip found Process's history and a peer's different at one position (Description says how): a bug.</summary>
    CollectionDivergence,

    /// <summary>Replicated collection, at End: Process (alive, in the group) holds lineage ConfigurationIndex up to position LogIndex, chain PayloadHash, with Phi updates pending; ViewId is its collection's first view.</summary>
    CollectionFinal,

    /// <summary>
    /// Disk durability: Process came to hold Group's SafeSend history through a recovery that the
    /// operator forced without members of the group's last view (Members: the incarnations given
    /// up, none when a new history was founded). The history it holds is the old one's first
    /// LogIndex entries; entries after them that only given-up incarnations delivered may be lost.
    /// </summary>
    ForcedRecovery,

    /// <summary>
    /// Disk durability: Process's application holds Group's whole history (LogIndex entries): its
    /// replay, handed over in slices over several steps, ended. A replay that a crash cut short has
    /// none: the application that saw its first entries died with them.
    /// </summary>
    HistoryHeld,
    /// <summary>
    /// Disk durability, simulator only: Process joined Group with the log its disk held, which
    /// earlier incarnations of the same process wrote (Members: the incarnations its Incarnation
    /// records name; none for an empty or wiped disk). A log is one file across restarts, so a
    /// forced recovery that gives up one of them gives up what every incarnation of that log wrote.
    /// </summary>
    LogOpened,
    /// <summary>
    /// Disk durability: Process kept the log its disk held aside, as written by an incarnation a
    /// forced recovery of Group gave up, and copied the group's history instead.
    /// </summary>
    LogGivenUp,

    /// <summary>
    /// Locks: Process's lock table granted it the lock named Description with fencing token
    /// LogIndex, in view ViewId (the holder acts on it from here).
    /// </summary>
    LockAcquired,

    /// <summary>Locks: Process gave back the lock named Description (token LogIndex): its hold ends here.</summary>
    LockReleased,

    /// <summary>Clients: the non-member client Process issued its request LogIndex, a Primitive (a query: IsQuery).</summary>
    ClientRequestIssued,

    /// <summary>Clients: member Process ran the request LogIndex of client Members[0], delivered in view ViewId (the first copy it delivered).</summary>
    ClientRequestRan,

    /// <summary>Clients: the client Process had request LogIndex answered, with the outcome Description.</summary>
    ClientRequestAnswered,
}
