using System.Buffers.Binary;
using System.Text;
using Isis.Core.Identity;

namespace Isis.Core.Wire;

/// <summary>
/// Builds one packet: header, then body fields, then <see cref="Finish()"/> fills in the length and
/// checksum. One writer is reused for every packet a node builds, so building allocates only the
/// finished array.
/// </summary>
internal sealed class PacketWriter
{
    private byte[] _buffer = new byte[1024];
    private int _position;
    private PacketHeader _header;

    public PacketWriter Begin(in PacketHeader header)
    {
        _header = header;
        _position = PacketHeader.Size;
        return this;
    }

    /// <summary>Starts a headerless record: a membership decision or a replica's durable record, not a packet.</summary>
    public PacketWriter BeginRecord()
    {
        _header = default;
        _position = 0;
        return this;
    }

    /// <summary>The record started by <see cref="BeginRecord"/>, as written (no header, no checksum).</summary>
    public byte[] FinishRecord() => _buffer.AsSpan(0, _position).ToArray();

    private Span<byte> Reserve(int count)
    {
        if (_position + count > _buffer.Length)
        {
            Array.Resize(ref _buffer, Math.Max(_buffer.Length * 2, _position + count));
        }
        Span<byte> span = _buffer.AsSpan(_position, count);
        _position += count;
        return span;
    }

    public PacketWriter U8(byte value) { Reserve(1)[0] = value; return this; }
    public PacketWriter I32(int value) { BinaryPrimitives.WriteInt32LittleEndian(Reserve(4), value); return this; }
    public PacketWriter I64(long value) { BinaryPrimitives.WriteInt64LittleEndian(Reserve(8), value); return this; }

    public PacketWriter Node(NodeId node)
    {
        Span<byte> s = Reserve(12);
        BinaryPrimitives.WriteUInt64LittleEndian(s, node.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(s[8..], node.Incarnation);
        return this;
    }

    public PacketWriter Nodes(ReadOnlySpan<NodeId> nodes)
    {
        I32(nodes.Length);
        foreach (NodeId n in nodes) Node(n);
        return this;
    }

    public PacketWriter Longs(ReadOnlySpan<long> values)
    {
        I32(values.Length);
        foreach (long v in values) I64(v);
        return this;
    }

    /// <summary>
    /// A list of non-negative longs, small ones small: a one-byte count, then each value in 7-bit
    /// groups (LEB128), so a causal timestamp of a ten-member view whose counts are below 128 takes 11 bytes.
    /// </summary>
    public PacketWriter VarLongs(ReadOnlySpan<long> values)
    {
        if (values.Length > byte.MaxValue) throw new ArgumentOutOfRangeException(nameof(values), values.Length, "at most 255 values");
        U8((byte)values.Length);
        foreach (long v in values)
        {
            ulong rest = (ulong)v;
            while (rest >= 0x80)
            {
                U8((byte)(rest | 0x80));
                rest >>= 7;
            }
            U8((byte)rest);
        }
        return this;
    }

    /// <summary>The fields of a stream message its kind has: a causal message's timestamp (<see cref="VarLongs"/>), a subset message's destinations; nothing for the other kinds.</summary>
    public PacketWriter KindFields(in Groups.StreamMessage message) =>
        Groups.MessageKinds.IsCausal(message.Kind) ? VarLongs(message.Causal ?? throw new InvalidOperationException("a causal message is stamped before it is sent"))
        : Groups.MessageKinds.IsSubset(message.Kind) ? Nodes(message.To ?? throw new InvalidOperationException("a subset message names its destinations"))
        : this;

    /// <summary>Length-prefixed bytes.</summary>
    public PacketWriter Bytes(ReadOnlySpan<byte> bytes)
    {
        I32(bytes.Length);
        bytes.CopyTo(Reserve(bytes.Length));
        return this;
    }

    /// <summary>Bytes that run to the end of the packet (no prefix): the Data payload.</summary>
    public PacketWriter Tail(ReadOnlySpan<byte> bytes)
    {
        bytes.CopyTo(Reserve(bytes.Length));
        return this;
    }

    public PacketWriter String(string value) => Bytes(Encoding.UTF8.GetBytes(value));

    public byte[] Finish() => Complete().ToArray();

    /// <summary>
    /// Finishes the packet into <paramref name="outbox"/>'s reused memory (valid until its Clear):
    /// for the packets of every message and digest, which must not allocate.
    /// </summary>
    public ReadOnlyMemory<byte> Finish(Node.Outbox outbox) => outbox.Keep(Complete());

    private ReadOnlySpan<byte> Complete()
    {
        Span<byte> packet = _buffer.AsSpan(0, _position);
        _header.WriteTo(packet, _position);
        BinaryPrimitives.WriteUInt32LittleEndian(packet[PacketHeader.ChecksumOffset..], Crc32C.Compute(packet));
        return packet;
    }
}
