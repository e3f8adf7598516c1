namespace Isis.Transport.Framing;

/// <summary>Receives the packets <see cref="DatagramParser"/> finds in a datagram.</summary>
internal interface IPacketVisitor
{
    /// <summary>
    /// A packet that was whole in the datagram. The span points into the caller's receive buffer
    /// and is valid only during the call: copy what must outlive it.
    /// </summary>
    void OnPacket(ulong source, ReadOnlySpan<byte> packet);

    /// <summary>A packet rebuilt from fragments: a fresh array that now belongs to the visitor.</summary>
    void OnReassembledPacket(ulong source, byte[] packet);
}
