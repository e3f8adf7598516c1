using System.Buffers.Binary;
using Isis.Core.Identity;

namespace Isis.Core.Wire;

/// <summary>Why a received packet was rejected before any protocol state saw it.</summary>
internal enum HeaderVerdict
{
    Ok,
    TooShort,
    BadMagic,
    UnsupportedVersion,
    LengthMismatch,
    BadChecksum,
    UnknownKind,
}

/// <summary>Validates and parses packet headers. Pure; never throws.</summary>
internal static class PacketDecoder
{
    public static HeaderVerdict TryReadHeader(ReadOnlySpan<byte> packet, out PacketHeader header)
    {
        header = default;
        if (packet.Length < PacketHeader.Size) return HeaderVerdict.TooShort;
        if (BinaryPrimitives.ReadUInt16LittleEndian(packet) != PacketHeader.Magic) return HeaderVerdict.BadMagic;
        if (packet[2] is not (PacketHeader.CurrentVersion or PacketHeader.SealedVersion)) return HeaderVerdict.UnsupportedVersion;
        if (BinaryPrimitives.ReadInt32LittleEndian(packet[PacketHeader.LengthOffset..]) != packet.Length) return HeaderVerdict.LengthMismatch;

        uint expected = BinaryPrimitives.ReadUInt32LittleEndian(packet[PacketHeader.ChecksumOffset..]);
        // Checksum the packet as it was when the sender computed it: with the checksum field zero.
        Span<byte> headerCopy = stackalloc byte[PacketHeader.Size];
        packet[..PacketHeader.Size].CopyTo(headerCopy);
        BinaryPrimitives.WriteUInt32LittleEndian(headerCopy[PacketHeader.ChecksumOffset..], 0);
        if (Crc32COf(headerCopy, packet[PacketHeader.Size..]) != expected) return HeaderVerdict.BadChecksum;

        var kind = (PacketKind)packet[3];
        if (!Enum.IsDefined(kind)) return HeaderVerdict.UnknownKind;

        header = new PacketHeader(
            kind,
            new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(packet[8..]), BinaryPrimitives.ReadUInt32LittleEndian(packet[16..])),
            new GroupId(BinaryPrimitives.ReadUInt64LittleEndian(packet[20..])),
            BinaryPrimitives.ReadInt32LittleEndian(packet[28..]),
            BinaryPrimitives.ReadInt64LittleEndian(packet[32..]));
        return HeaderVerdict.Ok;
    }

    public static ReadOnlySpan<byte> Body(ReadOnlySpan<byte> packet) => packet[PacketHeader.Size..];

    private static uint Crc32COf(ReadOnlySpan<byte> header, ReadOnlySpan<byte> body)
    {
        // CRC is a streaming function: fold the (patched) header, then the body.
        return Crc32C.Append(Crc32C.Append(0xFFFFFFFFu, header), body) ^ 0xFFFFFFFFu;
    }
}
