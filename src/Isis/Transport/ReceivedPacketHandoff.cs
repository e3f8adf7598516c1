using Isis.Core.Framing;

namespace Isis.Transport;

/// <summary>
/// Gives each received packet to the transport's callback as memory the callback may keep: small
/// packets are copied into a shared slab that is never written again once handed out (so one
/// allocation serves many packets), large ones get their own array, and reassembled packets are
/// passed on as built. Runs on the receive thread only.
/// </summary>
/// <remarks>A small packet kept alive keeps its whole slab (64 KiB) alive; that is the price of not allocating per packet.</remarks>
internal sealed class ReceivedPacketHandoff(Action<ulong, ReadOnlyMemory<byte>> onPacket) : IPacketVisitor
{
    private const int SlabSize = 64 * 1024;

    /// <summary>Packets at least this big get their own array, so slabs are not wasted on them.</summary>
    private const int OwnArrayThreshold = 4 * 1024;

    private byte[] _slab = GC.AllocateUninitializedArray<byte>(SlabSize);
    private int _used;

    public void OnPacket(ulong source, ReadOnlySpan<byte> packet)
    {
        if (packet.IsEmpty)
        {
            onPacket(source, ReadOnlyMemory<byte>.Empty);
            return;
        }
        if (packet.Length >= OwnArrayThreshold)
        {
            onPacket(source, packet.ToArray());
            return;
        }
        if (_used + packet.Length > SlabSize)
        {
            // Never reuse a slab: memory already handed out must stay unchanged.
            _slab = GC.AllocateUninitializedArray<byte>(SlabSize);
            _used = 0;
        }
        packet.CopyTo(_slab.AsSpan(_used));
        var memory = new ReadOnlyMemory<byte>(_slab, _used, packet.Length);
        _used += packet.Length;
        onPacket(source, memory);
    }

    public void OnReassembledPacket(ulong source, byte[] packet) => onPacket(source, packet);
}
