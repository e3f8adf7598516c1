using System.Buffers.Binary;
using Isis.Core.Durability;
using Isis.Core.Identity;

namespace Isis.Runtime;

/// <summary>
/// The first part of every checkpoint a member makes for joiners (state transfer): the lineage of
/// the group's state, so that a joiner learns which start of the state it receives before it lets
/// anything overwrite a persistent checkpoint of its own.
/// </summary>
/// <remarks>
/// Layout (little-endian): the magic <c>ISISSTLN</c>, a version (1), a flag (0: the lineage is
/// unknown), then the lineage's founder (endpoint, incarnation) and view. The application's parts
/// are MessagePack arrays, whose first byte is 0x90-0x9f, 0xdc or 0xdd and never <c>I</c>: so a
/// transfer made by a runtime of an earlier version, which sends no such part, is told apart, and
/// its first part goes to the application as before.
/// </remarks>
internal static class StateTransferHeader
{
    private static ReadOnlySpan<byte> Magic => "ISISSTLN"u8;
    private const byte Version = 1;
    private const int LineageBytes = 8 + 4 + 4;

    /// <summary>The header part for a state of <paramref name="lineage"/> (null: unknown).</summary>
    public static byte[] Encode(Lineage? lineage)
    {
        byte[] part = new byte[Magic.Length + 2 + (lineage.HasValue ? LineageBytes : 0)];
        Magic.CopyTo(part);
        part[Magic.Length] = Version;
        if (lineage is not { } l) return part;
        part[Magic.Length + 1] = 1;
        Span<byte> at = part.AsSpan(Magic.Length + 2);
        BinaryPrimitives.WriteUInt64LittleEndian(at, l.Founder.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(at[8..], l.Founder.Incarnation);
        BinaryPrimitives.WriteInt32LittleEndian(at[12..], l.ViewId);
        return part;
    }

    /// <summary>
    /// True if <paramref name="part"/> is a header (it is then not the application's); its lineage,
    /// or null when the header says unknown or is of a version this runtime cannot read.
    /// </summary>
    public static bool TryRead(ReadOnlySpan<byte> part, out Lineage? lineage)
    {
        lineage = null;
        if (!part.StartsWith(Magic)) return false;
        ReadOnlySpan<byte> rest = part[Magic.Length..];
        if (rest.Length == 2 + LineageBytes && rest[0] == Version && rest[1] == 1)
        {
            ReadOnlySpan<byte> at = rest[2..];
            var founder = new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(at), BinaryPrimitives.ReadUInt32LittleEndian(at[8..]));
            lineage = new Lineage(founder, BinaryPrimitives.ReadInt32LittleEndian(at[12..]));
        }
        return true;
    }
}
