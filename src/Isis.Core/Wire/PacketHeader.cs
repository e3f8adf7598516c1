using System.Buffers.Binary;
using Isis.Core.Identity;

namespace Isis.Core.Wire;

/// <summary>
/// The fixed 44-byte header every packet starts with.
/// </summary>
/// <remarks>
/// Layout (little endian):
/// <code>
///  0 u16 magic 0x5349 ("IS")   2 u8 version   3 u8 kind
///  4 u32 total length (header + body)
///  8 u64 sender endpoint      16 u32 sender incarnation
/// 20 u64 group id (0 = process-level packet)
/// 28 i32 view id             32 i64 number (sequence number, attempt or epoch, by kind)
/// 40 u32 CRC-32C of the whole packet with this field zeroed
/// </code>
/// The checksum guards against corruption, not attackers: authentication of secured groups is a
/// separate layer that runs before parsing.
/// </remarks>
internal readonly record struct PacketHeader(
    PacketKind Kind, NodeId Sender, GroupId Group, int View, long Number)
{
    public const int Size = 44;
    public const ushort Magic = 0x5349;
    public const byte CurrentVersion = 1;

    /// <summary>The version byte of a sealed packet (see <see cref="Security.PacketSealer"/>): its body is encrypted and a trailer follows it.</summary>
    public const byte SealedVersion = 2;
    internal const int LengthOffset = 4;
    internal const int ChecksumOffset = 40;

    internal void WriteTo(Span<byte> destination, int totalLength)
    {
        BinaryPrimitives.WriteUInt16LittleEndian(destination, Magic);
        destination[2] = CurrentVersion;
        destination[3] = (byte)Kind;
        BinaryPrimitives.WriteInt32LittleEndian(destination[4..], totalLength);
        BinaryPrimitives.WriteUInt64LittleEndian(destination[8..], Sender.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(destination[16..], Sender.Incarnation);
        BinaryPrimitives.WriteUInt64LittleEndian(destination[20..], Group.Value);
        BinaryPrimitives.WriteInt32LittleEndian(destination[28..], View);
        BinaryPrimitives.WriteInt64LittleEndian(destination[32..], Number);
        BinaryPrimitives.WriteUInt32LittleEndian(destination[40..], 0);
    }
}
