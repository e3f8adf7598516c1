namespace Isis.Core.Node;

/// <summary>A packet the driver must send.</summary>
internal readonly record struct OutboundPacket(ulong Destination, byte[] Bytes);

/// <summary>A SafeSend this acceptor must make durable (append and fsync) before the step's packets leave.</summary>
internal readonly record struct DurableRecord(Identity.GroupId Group, int Phi, byte[] Payload);

/// <summary>
/// Everything one step of a node produced. The driver's contract (docs/architecture.md): after
/// each input, make <see cref="DurableWrites"/> and <see cref="ReplicaRecords"/> durable, then send <see cref="Packets"/>, then hand
/// <see cref="Events"/> to the application in list order, then call <see cref="Clear"/>.
/// </summary>
internal sealed class Outbox
{
    public List<OutboundPacket> Packets { get; } = new();

    public List<NodeEvent> Events { get; } = new();

    /// <summary>Acceptor log records (SafeSend disk durability), to be made durable before <see cref="Packets"/> are sent.</summary>
    public List<DurableRecord> DurableWrites { get; } = new();

    /// <summary>
    /// A membership replica's persistent state changes (term, vote, log entries), to be appended
    /// in order to its durable record file before <see cref="Packets"/> are sent; after a restart
    /// the driver hands them back to the replica.
    /// </summary>
    public List<byte[]> ReplicaRecords { get; } = new();

    public bool IsEmpty => Packets.Count == 0 && Events.Count == 0 && DurableWrites.Count == 0 && ReplicaRecords.Count == 0;

    public void Clear()
    {
        Packets.Clear();
        Events.Clear();
        DurableWrites.Clear();
        ReplicaRecords.Clear();
    }
}
