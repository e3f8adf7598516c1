using System.Runtime.InteropServices;

namespace Isis.Core.Node;

/// <summary>
/// What a node's steps since the last <see cref="IProtocolNode.Advance"/> produced, in the driver
/// contract's order: <see cref="HistoryWrites"/> and <see cref="ReplicaRecords"/> to make durable,
/// then <see cref="Packets"/> (sealed) to send, then <see cref="Events"/> to hand over with the time
/// of the step that produced each (<see cref="EventTimes"/>). <see cref="NodeStep"/> alone consumes
/// it. A view of the node's own memory: valid until the node's next input or its Advance, so a
/// driver copies what it keeps.
/// </summary>
internal readonly ref struct Ready
{
    internal Ready(Outbox outbox)
    {
        HistoryWrites = CollectionsMarshal.AsSpan(outbox.HistoryWrites);
        ReplicaRecords = CollectionsMarshal.AsSpan(outbox.ReplicaRecords);
        ReplicaRecordsReplaceLog = outbox.ReplicaRecordsReplaceLog;
        Packets = CollectionsMarshal.AsSpan(outbox.Packets);
        Events = CollectionsMarshal.AsSpan(outbox.Events);
        EventTimes = CollectionsMarshal.AsSpan(outbox.EventTimes);
    }

    /// <summary>SafeSend history log changes, in order, to be made durable before any packet leaves.</summary>
    public ReadOnlySpan<HistoryWrite> HistoryWrites { get; }

    /// <summary>A membership replica's persistent state changes, to be appended in order to its record file before any packet leaves.</summary>
    public ReadOnlySpan<byte[]> ReplicaRecords { get; }

    /// <summary>True when <see cref="ReplicaRecords"/> hold the replica's whole compacted state, which replaces the record file atomically.</summary>
    public bool ReplicaRecordsReplaceLog { get; }

    /// <summary>Packets to send once the durable records are on disk; a key's packets are sealed already.</summary>
    public ReadOnlySpan<OutboundPacket> Packets { get; }

    /// <summary>Events for the application, in order, after the packets left.</summary>
    public ReadOnlySpan<NodeEvent> Events { get; }

    /// <summary>The time of the step that produced each of <see cref="Events"/> (same index).</summary>
    public ReadOnlySpan<long> EventTimes { get; }

    /// <summary>True when there is nothing to make durable, send or hand over.</summary>
    public bool IsEmpty => HistoryWrites.IsEmpty && ReplicaRecords.IsEmpty && Packets.IsEmpty && Events.IsEmpty;
}
