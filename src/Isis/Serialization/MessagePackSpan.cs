using System.Buffers.Binary;

namespace Isis.Serialization;

/// <summary>
/// Reads the few MessagePack tokens that every payload is made of (array headers, integers,
/// strings, the length of a scalar token) straight from a span. <see cref="MessagePack.MessagePackReader"/>
/// reads through a <c>SequenceReader</c>, whose per-call cost made validating and reading a
/// (string, int) payload twice as slow as the format it replaced; these cover the common codes
/// only and return false for anything else, and callers then fall back to the library's reader,
/// so the library still decides what is valid MessagePack. A test checks them against the library.
/// </summary>
internal static class MessagePackSpan
{
    /// <summary>Reads a fixarray, array16 or array32 header.</summary>
    public static bool TryReadArrayHeader(ReadOnlySpan<byte> s, out int count, out int length) =>
        TryReadContainerHeader(s, MessagePack.MessagePackCode.MinFixArray, MessagePack.MessagePackCode.Array16, out count, out length);

    /// <summary>Reads a fixmap, map16 or map32 header.</summary>
    public static bool TryReadMapHeader(ReadOnlySpan<byte> s, out int count, out int length) =>
        TryReadContainerHeader(s, MessagePack.MessagePackCode.MinFixMap, MessagePack.MessagePackCode.Map16, out count, out length);

    // fix: The first of the 16 codes that hold a count of 0-15; code16: the 16-bit-count code, followed by the 32-bit one.
    private static bool TryReadContainerHeader(ReadOnlySpan<byte> s, byte fix, byte code16, out int count, out int length)
    {
        count = length = 0;
        if (s.IsEmpty) return false;
        byte c = s[0];
        if (c >= fix && c <= fix + 0x0f)
        {
            count = c & 0x0f;
            length = 1;
            return true;
        }
        if (c == code16 && s.Length >= 3)
        {
            count = BinaryPrimitives.ReadUInt16BigEndian(s[1..]);
            length = 3;
            return true;
        }
        if (c == code16 + 1 && s.Length >= 5 && BinaryPrimitives.ReadUInt32BigEndian(s[1..]) <= int.MaxValue)
        {
            count = (int)BinaryPrimitives.ReadUInt32BigEndian(s[1..]);
            length = 5;
            return true;
        }
        return false;
    }

    /// <summary>
    /// Length of the whole value at the start of the span, arrays and maps included (iteratively,
    /// as the library's skip does: a count of what remains, no recursion), or -1 when it is
    /// malformed or cut short (the caller then asks the library's reader, which says why).
    /// </summary>
    public static int ValueLength(ReadOnlySpan<byte> s)
    {
        long remaining = 1;
        int pos = 0;
        while (remaining > 0)
        {
            // Every value takes at least a byte: a count beyond what is left is malformed.
            if (remaining > s.Length - pos) return -1;
            remaining--;
            byte c = s[pos];
            if (c <= 0x7f || c >= 0xe0)
            {
                pos++; // fixints, the commonest element, first and without a call
                continue;
            }
            ReadOnlySpan<byte> rest = s[pos..];
            int n;
            if (c is (>= 0x90 and <= 0x9f) or 0xdc or 0xdd)
            {
                if (!TryReadArrayHeader(rest, out int count, out n)) return -1;
                remaining += count;
            }
            else if (c is (>= 0x80 and <= 0x8f) or 0xde or 0xdf)
            {
                if (!TryReadMapHeader(rest, out int count, out n)) return -1;
                remaining += 2L * count;
            }
            else
            {
                n = ScalarLength(rest);
                if (n < 0) return -1;
            }
            pos += n;
        }
        return pos;
    }

    /// <summary>Reads any MessagePack integer that fits in a long (fixints, int8-64, uint8-64).</summary>
    public static bool TryReadInt64(ReadOnlySpan<byte> s, out long value, out int length)
    {
        value = 0;
        length = 0;
        if (s.IsEmpty) return false;
        byte c = s[0];
        if (c <= 0x7f || c >= 0xe0)
        {
            value = c <= 0x7f ? c : (sbyte)c;
            length = 1;
            return true;
        }
        length = c switch
        {
            0xcc or 0xd0 => 2,
            0xcd or 0xd1 => 3,
            0xce or 0xd2 => 5,
            0xcf or 0xd3 => 9,
            _ => 0,
        };
        if (length == 0 || s.Length < length) return false;
        ReadOnlySpan<byte> v = s[1..];
        switch (c)
        {
            case 0xcc: value = v[0]; return true;
            case 0xcd: value = BinaryPrimitives.ReadUInt16BigEndian(v); return true;
            case 0xce: value = BinaryPrimitives.ReadUInt32BigEndian(v); return true;
            case 0xcf:
                ulong u = BinaryPrimitives.ReadUInt64BigEndian(v);
                value = (long)u;
                return u <= long.MaxValue;
            case 0xd0: value = (sbyte)v[0]; return true;
            case 0xd1: value = BinaryPrimitives.ReadInt16BigEndian(v); return true;
            case 0xd2: value = BinaryPrimitives.ReadInt32BigEndian(v); return true;
            default: value = BinaryPrimitives.ReadInt64BigEndian(v); return true;
        }
    }

    /// <summary>Reads a fixstr, str8, str16 or str32 that lies wholly in the span; <paramref name="utf8"/> is its bytes.</summary>
    public static bool TryReadStringSpan(ReadOnlySpan<byte> s, out ReadOnlySpan<byte> utf8, out int length)
    {
        utf8 = default;
        length = 0;
        if (s.IsEmpty) return false;
        byte c = s[0];
        long header, size;
        if (c is >= 0xa0 and <= 0xbf) (header, size) = (1, c & 0x1f);
        else if (c == 0xd9 && s.Length >= 2) (header, size) = (2, s[1]);
        else if (c == 0xda && s.Length >= 3) (header, size) = (3, BinaryPrimitives.ReadUInt16BigEndian(s[1..]));
        else if (c == 0xdb && s.Length >= 5) (header, size) = (5, BinaryPrimitives.ReadUInt32BigEndian(s[1..]));
        else return false;
        if (header + size > s.Length) return false;
        utf8 = s.Slice((int)header, (int)size);
        length = (int)(header + size);
        return true;
    }

    /// <summary>
    /// Length of the token at the start of the span when it is a scalar (nil, bool, integer, float,
    /// string, binary, extension) that lies wholly in the span; -1 for arrays and maps, the unused
    /// code 0xc1, or a token cut short (the caller then asks the library's reader).
    /// </summary>
    public static int ScalarLength(ReadOnlySpan<byte> s)
    {
        if (s.IsEmpty) return -1;
        byte c = s[0];
        long n;
        if (c <= 0x7f || c >= 0xe0 || c is 0xc0 or 0xc2 or 0xc3) n = 1;
        else if (c is >= 0xa0 and <= 0xbf) n = 1 + (c & 0x1f);
        else
        {
            n = c switch
            {
                0xcc or 0xd0 => 2,
                0xcd or 0xd1 or 0xd4 => 3,
                0xd5 => 4,
                0xca or 0xce or 0xd2 => 5,
                0xd6 => 6,
                0xcb or 0xcf or 0xd3 => 9,
                0xd7 => 10,
                0xd8 => 18,
                0xc4 or 0xd9 => s.Length >= 2 ? 2L + s[1] : -1,
                0xc5 or 0xda => s.Length >= 3 ? 3L + BinaryPrimitives.ReadUInt16BigEndian(s[1..]) : -1,
                0xc6 or 0xdb => s.Length >= 5 ? 5L + BinaryPrimitives.ReadUInt32BigEndian(s[1..]) : -1,
                0xc7 => s.Length >= 2 ? 3L + s[1] : -1,
                0xc8 => s.Length >= 3 ? 4L + BinaryPrimitives.ReadUInt16BigEndian(s[1..]) : -1,
                0xc9 => s.Length >= 5 ? 6L + BinaryPrimitives.ReadUInt32BigEndian(s[1..]) : -1,
                _ => -1,
            };
        }
        return n > 0 && n <= s.Length ? (int)n : -1;
    }

    /// <summary>
    /// Writes <paramref name="value"/> in the fewest bytes, exactly as <c>MessagePackWriter.Write(long)</c>
    /// does (a test compares them); returns the bytes written (1 to 9). The span must hold 9.
    /// </summary>
    public static int WriteInt64(Span<byte> s, long value)
    {
        if (value >= 0)
        {
            if (value <= 0x7f)
            {
                s[0] = (byte)value;
                return 1;
            }
            if (value <= byte.MaxValue)
            {
                s[0] = 0xcc;
                s[1] = (byte)value;
                return 2;
            }
            if (value <= ushort.MaxValue)
            {
                s[0] = 0xcd;
                BinaryPrimitives.WriteUInt16BigEndian(s[1..], (ushort)value);
                return 3;
            }
            if (value <= uint.MaxValue)
            {
                s[0] = 0xce;
                BinaryPrimitives.WriteUInt32BigEndian(s[1..], (uint)value);
                return 5;
            }
            s[0] = 0xcf;
            BinaryPrimitives.WriteUInt64BigEndian(s[1..], (ulong)value);
            return 9;
        }
        if (value >= -32)
        {
            s[0] = unchecked((byte)value);
            return 1;
        }
        if (value >= sbyte.MinValue)
        {
            s[0] = 0xd0;
            s[1] = unchecked((byte)value);
            return 2;
        }
        if (value >= short.MinValue)
        {
            s[0] = 0xd1;
            BinaryPrimitives.WriteInt16BigEndian(s[1..], (short)value);
            return 3;
        }
        if (value >= int.MinValue)
        {
            s[0] = 0xd2;
            BinaryPrimitives.WriteInt32BigEndian(s[1..], (int)value);
            return 5;
        }
        s[0] = 0xd3;
        BinaryPrimitives.WriteInt64BigEndian(s[1..], value);
        return 9;
    }

    /// <summary>Writes a float64, as <c>MessagePackWriter.Write(double)</c> does; returns 9.</summary>
    public static int WriteDouble(Span<byte> s, double value)
    {
        s[0] = 0xcb;
        BinaryPrimitives.WriteDoubleBigEndian(s[1..], value);
        return 9;
    }
}
