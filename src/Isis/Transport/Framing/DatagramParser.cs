using System.Buffers.Binary;

namespace Isis.Transport.Framing;

/// <summary>
/// Splits a received datagram into packets (see <see cref="FrameFormat"/>), feeding fragments to a
/// <see cref="FragmentReassembler"/>. Never throws on any input: whatever is wrong is counted in
/// <see cref="FramingCounters"/> and dropped.
/// </summary>
/// <remarks>
/// The datagram's structure is checked completely before any packet is delivered, so a damaged
/// datagram is dropped as a whole rather than half delivered. Not thread-safe.
/// </remarks>
internal sealed class DatagramParser(FragmentReassembler reassembler, FramingCounters counters)
{
    public FramingCounters Counters { get; } = counters;

    public FragmentReassembler Reassembler { get; } = reassembler;

    /// <summary>Delivers every complete packet in <paramref name="datagram"/> to <paramref name="visitor"/>; returns how many.</summary>
    public int Parse<TVisitor>(ulong source, ReadOnlySpan<byte> datagram, long nowMicros, TVisitor visitor)
        where TVisitor : IPacketVisitor
    {
        if (!Validate(datagram)) return 0;

        int delivered = 0;
        ReadOnlySpan<byte> rest = datagram[FrameFormat.DatagramHeaderSize..];
        while (!rest.IsEmpty)
        {
            if (rest[0] == FrameFormat.WholeRecord)
            {
                int length = BinaryPrimitives.ReadUInt16LittleEndian(rest[1..]);
                visitor.OnPacket(source, rest.Slice(FrameFormat.WholeRecordHeaderSize, length));
                delivered++;
                rest = rest[(FrameFormat.WholeRecordHeaderSize + length)..];
            }
            else
            {
                ulong id = BinaryPrimitives.ReadUInt64LittleEndian(rest[1..]);
                uint index = BinaryPrimitives.ReadUInt32LittleEndian(rest[9..]);
                uint count = BinaryPrimitives.ReadUInt32LittleEndian(rest[13..]);
                uint total = BinaryPrimitives.ReadUInt32LittleEndian(rest[17..]);
                int length = BinaryPrimitives.ReadUInt16LittleEndian(rest[21..]);
                ReadOnlySpan<byte> bytes = rest.Slice(FrameFormat.FragmentRecordHeaderSize, length);
                byte[]? packet = Reassembler.Accept(source, id, index, count, total, bytes, nowMicros);
                if (packet is not null)
                {
                    visitor.OnReassembledPacket(source, packet);
                    delivered++;
                }
                rest = rest[(FrameFormat.FragmentRecordHeaderSize + length)..];
            }
        }
        Counters.PacketsDelivered += delivered;
        return delivered;
    }

    /// <summary>Checks header, record framing, record count and that nothing trails the last record.</summary>
    private bool Validate(ReadOnlySpan<byte> datagram)
    {
        if (datagram.Length < FrameFormat.DatagramHeaderSize
            || datagram[0] != FrameFormat.Magic || datagram[1] != FrameFormat.Version)
        {
            Counters.MalformedDatagrams++;
            return false;
        }
        int declared = BinaryPrimitives.ReadUInt16LittleEndian(datagram[2..]);
        ReadOnlySpan<byte> rest = datagram[FrameFormat.DatagramHeaderSize..];
        int records = 0;
        while (!rest.IsEmpty)
        {
            int headerSize = rest[0] switch
            {
                FrameFormat.WholeRecord => FrameFormat.WholeRecordHeaderSize,
                FrameFormat.FragmentRecord => FrameFormat.FragmentRecordHeaderSize,
                _ => -1,
            };
            if (headerSize < 0 || rest.Length < headerSize)
            {
                Counters.BadRecords++;
                return false;
            }
            // The length field is the last two bytes of either header.
            int length = BinaryPrimitives.ReadUInt16LittleEndian(rest[(headerSize - 2)..]);
            if (rest.Length - headerSize < length)
            {
                Counters.BadRecords++;
                return false;
            }
            rest = rest[(headerSize + length)..];
            records++;
        }
        if (records != declared)
        {
            Counters.MalformedDatagrams++;
            return false;
        }
        return true;
    }
}
