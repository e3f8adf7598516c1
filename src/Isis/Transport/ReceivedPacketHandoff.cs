using Isis.Transport.Framing;

namespace Isis.Transport;

/// <summary>Receives one packet: the memory stays valid until the consumer calls <see cref="ReceiveSlab.Release"/> on <paramref name="slab"/> (when given), or forever if it never does.</summary>
internal delegate void ReceivedPacketCallback(ulong source, ReadOnlyMemory<byte> packet, ReceiveSlab? slab);

/// <summary>
/// A block of receive memory that small packets are copied into, one after the other. Each packet
/// handed out holds a reference, and so does the receive thread while it is still filling the
/// slab; when the last reference is released the slab goes back to its pool and is reused, so a
/// steady stream of packets allocates nothing.
/// </summary>
internal sealed class ReceiveSlab
{
    public const int Size = 64 * 1024;

    private readonly ReceiveSlabPool _pool;
    private int _references;

    internal ReceiveSlab(ReceiveSlabPool pool)
    {
        _pool = pool;
        Bytes = GC.AllocateUninitializedArray<byte>(Size);
    }

    internal byte[] Bytes { get; }

    /// <summary>Bytes handed out so far (only the receive thread reads or writes this).</summary>
    internal int Used { get; set; }

    /// <summary>Takes the slab for filling: the filler's own reference.</summary>
    internal void Open()
    {
        Used = 0;
        Volatile.Write(ref _references, 1);
    }

    internal void AddReference() => Interlocked.Increment(ref _references);

    /// <summary>Gives back one reference (a consumed packet, or the filler when it moves on); the last one recycles the slab.</summary>
    public void Release()
    {
        int left = Interlocked.Decrement(ref _references);
        if (left == 0) _pool.Return(this);
        else if (left < 0) throw new InvalidOperationException("a receive slab was released more often than it was referenced");
    }
}

/// <summary>Free slabs (filled by the consumers' threads, taken by the receive thread). Bounded, so a burst cannot pin memory for good.</summary>
internal sealed class ReceiveSlabPool
{
    private const int MaxFree = 64;
    private readonly System.Collections.Concurrent.ConcurrentQueue<ReceiveSlab> _free = new();

    public ReceiveSlab Take()
    {
        ReceiveSlab slab = _free.TryDequeue(out ReceiveSlab? s) ? s : new ReceiveSlab(this);
        slab.Open();
        return slab;
    }

    public void Return(ReceiveSlab slab)
    {
        if (_free.Count < MaxFree) _free.Enqueue(slab);
    }
}

/// <summary>
/// Gives each received packet to the transport's callback: small packets are copied into the
/// current <see cref="ReceiveSlab"/> (one reference each), large ones get their own array, and
/// reassembled packets are passed on as built. Runs on the receive thread only.
/// </summary>
/// <remarks>A packet kept unreleased keeps its whole slab (64 KiB) from being reused; that is the price of not allocating per packet.</remarks>
internal sealed class ReceivedPacketHandoff(ReceivedPacketCallback onPacket) : IPacketVisitor
{
    /// <summary>Packets at least this big get their own array, so slabs are not wasted on them.</summary>
    private const int OwnArrayThreshold = 4 * 1024;

    private readonly ReceiveSlabPool _pool = new();
    private ReceiveSlab? _slab;

    public void OnPacket(ulong source, ReadOnlySpan<byte> packet)
    {
        if (packet.IsEmpty)
        {
            onPacket(source, ReadOnlyMemory<byte>.Empty, null);
            return;
        }
        if (packet.Length >= OwnArrayThreshold)
        {
            onPacket(source, packet.ToArray(), null);
            return;
        }
        if (_slab == null || _slab.Used + packet.Length > ReceiveSlab.Size)
        {
            // Memory already handed out stays unchanged until its holders release it: move on to
            // a free slab, and let this one recycle once its last packet is released.
            _slab?.Release();
            _slab = _pool.Take();
        }
        ReceiveSlab slab = _slab;
        packet.CopyTo(slab.Bytes.AsSpan(slab.Used));
        var memory = new ReadOnlyMemory<byte>(slab.Bytes, slab.Used, packet.Length);
        slab.Used += packet.Length;
        slab.AddReference();
        onPacket(source, memory, slab);
    }

    public void OnReassembledPacket(ulong source, byte[] packet) => onPacket(source, packet, null);
}
