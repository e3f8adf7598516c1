namespace Isis.Core.Node;

/// <summary>A packet the driver must send.</summary>
internal readonly record struct OutboundPacket(ulong Destination, byte[] Bytes);

/// <summary>
/// Everything one step of a node produced. The driver's contract (docs/architecture.md): after
/// each input, send <see cref="Packets"/>, hand <see cref="Events"/> to the application in list
/// order, then call <see cref="Clear"/>.
/// </summary>
internal sealed class Outbox
{
    public List<OutboundPacket> Packets { get; } = new();

    public List<NodeEvent> Events { get; } = new();

    public bool IsEmpty => Packets.Count == 0 && Events.Count == 0;

    public void Clear()
    {
        Packets.Clear();
        Events.Clear();
    }
}
