namespace Isis;

/// <summary>A snapshot of what a runtime received, dropped and repaired, by reason.</summary>
public sealed record IsisStatistics
{
    /// <summary>Packets handed to the protocol.</summary>
    public long PacketsReceived { get; init; }

    /// <summary>Packets dropped as malformed (bad header, checksum, body, or datagram framing).</summary>
    public long DroppedMalformed { get; init; }

    /// <summary>Packets dropped because their sender was expelled by the membership service (the firewall).</summary>
    public long DroppedFirewall { get; init; }

    /// <summary>Packets for a view this member is not in (stale or not yet installed), or from a non-member.</summary>
    public long DroppedWrongView { get; init; }

    /// <summary>Packets for groups this process is not in.</summary>
    public long DroppedUnknownGroup { get; init; }

    /// <summary>
    /// Packets that did not open with the key that protects them (forged, or sealed with another
    /// key), came clear where a key is required, or came sealed where this process holds no key:
    /// dropped unread, here and at the membership replica hosted here.
    /// </summary>
    public long DroppedUnauthenticated { get; init; }

    /// <summary>Authentic packets whose counter was accepted before: replays, dropped unread.</summary>
    public long DroppedReplayed { get; init; }

    /// <summary>Duplicate messages discarded.</summary>
    public long Duplicates { get; init; }

    /// <summary>Retransmission requests sent.</summary>
    public long NaksSent { get; init; }

    /// <summary>CausalSends and CausalQueries that arrived before a causal predecessor and waited for it.</summary>
    public long CausalMessagesHeld { get; init; }

    /// <summary>
    /// Causal messages a view change could not deliver: a predecessor was lost with every member that
    /// held it (its sender among them), so no survivor delivers them.
    /// </summary>
    public long CausalMessagesDroppedAtViewEnd { get; init; }

    /// <summary>Messages whose arguments matched no handler (reported, not delivered to the application).</summary>
    public long HandlerMismatches { get; init; }

    /// <summary>Exceptions thrown by application handlers.</summary>
    public long HandlerExceptions { get; init; }

    /// <summary>UDP datagrams sent and received.</summary>
    public long DatagramsSent { get; init; }

    /// <summary>UDP datagrams received.</summary>
    public long DatagramsReceived { get; init; }

    /// <summary>Of the drops, those the membership service hosted here counted (zero if it is hosted elsewhere).</summary>
    public long MembershipServiceDroppedFirewall { get; init; }

    /// <summary>True if the membership replica hosted here leads the service now (false if it follows, or none is hosted here).</summary>
    public bool MembershipReplicaIsLeader { get; init; }

    /// <summary>The election term of the membership replica hosted here (0 if none): it rises by one or more at each change of leader.</summary>
    public long MembershipReplicaTerm { get; init; }

    /// <summary>How many membership decisions the replica hosted here knows to be committed (0 if none is hosted here).</summary>
    public long MembershipReplicaCommitIndex { get; init; }
}
