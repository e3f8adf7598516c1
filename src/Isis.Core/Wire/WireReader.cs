using System.Buffers.Binary;
using System.Text;
using Isis.Core.Identity;

namespace Isis.Core.Wire;

/// <summary>
/// Reads body fields with a sticky failure flag: after the first short or implausible read every
/// later read returns a default, and the caller checks <see cref="Ok"/> once at the end. Hostile
/// bytes therefore cost one branch per field and can never throw or over-allocate: every count is
/// checked against the bytes that remain before anything is allocated.
/// </summary>
internal ref struct WireReader(ReadOnlySpan<byte> body)
{
    private readonly ReadOnlySpan<byte> _data = body;
    private int _position;
    private bool _failed;

    public readonly bool Ok => !_failed;

    /// <summary>True when every byte was consumed and no read failed.</summary>
    public readonly bool Complete => !_failed && _position == _data.Length;

    public readonly int Remaining => _data.Length - _position;

    /// <summary>How many bytes have been read (where the next field starts in the body).</summary>
    public readonly int Position => _position;

    private ReadOnlySpan<byte> Take(int count)
    {
        if (_failed || count < 0 || count > _data.Length - _position)
        {
            _failed = true;
            return default;
        }
        ReadOnlySpan<byte> s = _data.Slice(_position, count);
        _position += count;
        return s;
    }

    public byte U8() { var s = Take(1); return _failed ? (byte)0 : s[0]; }
    public int I32() { var s = Take(4); return _failed ? 0 : BinaryPrimitives.ReadInt32LittleEndian(s); }
    public long I64() { var s = Take(8); return _failed ? 0 : BinaryPrimitives.ReadInt64LittleEndian(s); }

    public NodeId Node()
    {
        var s = Take(12);
        return _failed ? default : new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(s), BinaryPrimitives.ReadUInt32LittleEndian(s[8..]));
    }

    /// <summary>A count of elements of at least <paramref name="minElementSize"/> bytes each.</summary>
    public int Count(int minElementSize)
    {
        int n = I32();
        if (n < 0 || (long)n * minElementSize > Remaining) { _failed = true; return 0; }
        return n;
    }

    public NodeId[] Nodes()
    {
        int n = Count(12);
        var result = new NodeId[n];
        for (int i = 0; i < n; i++) result[i] = Node();
        return result;
    }

    /// <summary>A count-prefixed list of longs into <paramref name="into"/>, which must be exactly that long (else the read fails): no allocation.</summary>
    public void LongsInto(Span<long> into)
    {
        int n = Count(8);
        if (n != into.Length) { _failed = true; return; }
        for (int i = 0; i < n; i++) into[i] = I64();
    }

    /// <summary>A list written by <see cref="PacketWriter.VarLongs"/>: each value non-negative and at most ten 7-bit groups.</summary>
    public long[] VarLongs()
    {
        int n = U8();
        var result = new long[n];
        for (int i = 0; i < n && !_failed; i++)
        {
            ulong value = 0;
            for (int shift = 0; ; shift += 7)
            {
                byte b = U8();
                if (_failed || shift > 56) { _failed = true; return []; }
                value |= (ulong)(b & 0x7F) << shift;
                if (b < 0x80) break;
            }
            if (value > long.MaxValue) { _failed = true; return []; }
            result[i] = (long)value;
        }
        return _failed ? [] : result;
    }

    public long[] Longs()
    {
        int n = Count(8);
        var result = new long[n];
        for (int i = 0; i < n; i++) result[i] = I64();
        return result;
    }

    /// <summary>
    /// If the next field is a list of longs (as <see cref="Longs"/> reads it) equal to
    /// <paramref name="expected"/>, consumes it and returns true; otherwise consumes nothing and
    /// returns false, so the caller can read it with <see cref="Longs"/>. Allocates nothing.
    /// </summary>
    public bool TrySkipLongsEqualTo(ReadOnlySpan<long> expected)
    {
        if (_failed || !BitConverter.IsLittleEndian || Remaining < 4) return false;
        ReadOnlySpan<byte> rest = _data[_position..];
        int n = BinaryPrimitives.ReadInt32LittleEndian(rest);
        if (n != expected.Length || (long)n * 8 > rest.Length - 4) return false;
        if (!rest.Slice(4, n * 8).SequenceEqual(System.Runtime.InteropServices.MemoryMarshal.AsBytes(expected))) return false;
        _position += 4 + n * 8;
        return true;
    }

    public byte[] Bytes()
    {
        int n = Count(1);
        return Take(n).ToArray();
    }

    /// <summary>A length-prefixed byte string, borrowed (valid as long as the packet).</summary>
    public ReadOnlySpan<byte> BytesSpan() => Take(Count(1));

    /// <summary>Skips a length-prefixed byte string (as <see cref="Bytes"/> reads it) without copying it; returns its length.</summary>
    public int SkipBytes()
    {
        int n = Count(1);
        Take(n);
        return n;
    }

    public byte[] Tail() => Take(Remaining).ToArray();

    /// <summary>The rest of the packet, borrowed (valid as long as the packet).</summary>
    public ReadOnlySpan<byte> TailSpan() => Take(Remaining);

    public string String(int maxBytes)
    {
        int n = Count(1);
        if (n > maxBytes) { _failed = true; return string.Empty; }
        var s = Take(n);
        if (_failed) return string.Empty;
        try
        {
            return new UTF8Encoding(false, true).GetString(s);
        }
        catch (DecoderFallbackException)
        {
            _failed = true;
            return string.Empty;
        }
    }

    public void Fail() => _failed = true;
}
