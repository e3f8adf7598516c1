namespace Isis.Collections;

/// <summary>A repair put entries into this member's history (its handlers trailed, and a peer handed them over).</summary>
public sealed class HistoryRepairedEventArgs : EventArgs
{
    internal HistoryRepairedEventArgs(Address from, long firstPosition, long count)
    {
        From = from;
        FirstPosition = firstPosition;
        Count = count;
    }

    /// <summary>The member the entries came from.</summary>
    public Address From { get; }

    /// <summary>The history position of the first repaired entry (positions count updates from the collection's creation).</summary>
    public long FirstPosition { get; }

    /// <summary>How many entries the repair added.</summary>
    public long Count { get; }
}

/// <summary>What a replicated collection did at this member: its history, gossip and repairs.</summary>
public sealed record ReplicatedCollectionStatistics
{
    /// <summary>Updates in this member's history (the position the next one takes).</summary>
    public long HistoryLength { get; init; }

    /// <summary>Updates received and not yet merged.</summary>
    public int Pending { get; init; }

    /// <summary>Repairs that added entries to this member's history.</summary>
    public long Repairs { get; init; }

    /// <summary>Entries those repairs added.</summary>
    public long RepairedEntries { get; init; }

    /// <summary>Updates and merge-list entries that arrived after a repair had already put them into this member's history (dropped).</summary>
    public long LateDuplicates { get; init; }

    /// <summary>Gossip rounds this member started.</summary>
    public long GossipRounds { get; init; }

    /// <summary>History entries kept for peers that may still lack them (whole epochs of 1,024 positions).</summary>
    public int RetainedEntries { get; init; }

    /// <summary>The oldest history position kept for peers.</summary>
    public long RetainedFrom { get; init; }

    /// <summary>Times a peer's history differed from this member's at the same position (a bug; each is reported).</summary>
    public long Divergences { get; init; }

    /// <summary>Calls of <c>WaitForAsync</c> still waiting: each goes when its update merges (it completes), when its issuer leaves without it (it faults), or when it is cancelled.</summary>
    public int Waiting { get; init; }

    /// <summary>True while this member's history is shorter than a peer's was a gossip round ago: its handlers trail, its reads are stale, and the next round repairs it.</summary>
    public bool Trailing { get; init; }
}
