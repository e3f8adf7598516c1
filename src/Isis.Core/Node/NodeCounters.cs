namespace Isis.Core.Node;

/// <summary>
/// What a node dropped or repaired, by reason. Single-threaded like the rest of the core; the
/// runtime copies the values out when asked.
/// </summary>
internal sealed class NodeCounters
{
    public long PacketsReceived;
    public long DroppedMalformed;        // bad magic, version, length, checksum, kind or body
    public long DroppedFirewall;         // from an incarnation the membership service expelled
    public long DroppedNotForMe;         // control packet addressed to another incarnation of this endpoint
    public long DroppedUnknownGroup;     // group this process is not in
    public long DroppedWrongView;        // for a view this member is not in (stale or not yet installed)
    public long DroppedNotMember;        // sender is not a member of the view it claims, not its flush coordinator, or not a replica of the known service configuration
    public long DroppedAfterShutdown;
    public long DroppedUnauthenticated;  // sealed with another key or forged, clear where a key is required, or sealed where this process has no key
    public long DroppedReplayed;         // authentic, but its counter was accepted before (or is too old to tell)
    public long Duplicates;
    public long NaksSent;
    public long Retransmissions;
    public long ViewsInstalled;
    public long HistoryTrims;            // disk durability: times a group's log was trimmed behind its checkpoints
    public long CheckpointsNotPrefix;    // disk durability: kept checkpoints dropped because they do not hold a prefix of the history (HistoryDigest)
    public long HistoryCopyParts;        // disk durability: parts of copied histories written aside as they arrived (HistoryStage)
    public long HistoryEntriesFromOwnLog; // disk durability: pulled entries a member copying the history kept its own log's identical entry for (holding it once)
    public long HistoryReplaySlices;     // disk durability: slices in which histories were handed to the application
    public long CausalHeld;              // causal messages that arrived before a causal predecessor and waited for it
    public long CausalDroppedAtViewEnd;  // causal messages a flush could not deliver: a predecessor was lost with every member that held it

    public NodeCounters Snapshot() => (NodeCounters)MemberwiseClone();
}
