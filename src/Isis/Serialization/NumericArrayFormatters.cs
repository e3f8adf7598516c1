using System.Buffers;
using System.Buffers.Binary;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using MessagePack;
using MessagePack.Formatters;

namespace Isis.Serialization;

/// <summary>
/// Formatters for arrays and lists of <see cref="int"/>, <see cref="long"/> and <see cref="double"/>
/// that write and read the same MessagePack as the library's own (an array of compact integers or
/// float64s) but work on spans: through <see cref="MessagePackWriter"/> and
/// <see cref="MessagePackReader"/> one element costs about 2 ns to write and 4.5 ns to read, which
/// made an int[256] argument 4 and 11 times slower than the raw little-endian copy of the format
/// MessagePack replaced. A value in an encoding the span path does not take (any valid integer
/// width is taken; a double must be a float64) is read element by element with the library's reader.
/// </summary>
internal static class NumericArrayFormatters
{
    public static readonly IMessagePackFormatter[] All =
    [
        new ArrayFormatter<int>(), new ArrayFormatter<long>(), new ArrayFormatter<double>(),
        new ListFormatter<int>(), new ListFormatter<long>(), new ListFormatter<double>(),
    ];

    /// <summary>Elements per span request when writing, so a huge array never asks the buffer for its worst case at once.</summary>
    private const int Chunk = 1024;

    /// <summary>Largest encoding of one element: a type byte and eight bytes.</summary>
    private const int MaxElementBytes = 9;

    private sealed class ArrayFormatter<T> : IMessagePackFormatter<T[]?> where T : unmanaged
    {
        public void Serialize(ref MessagePackWriter writer, T[]? value, MessagePackSerializerOptions options)
        {
            if (value is null) writer.WriteNil();
            else Write(ref writer, value);
        }

        public T[]? Deserialize(ref MessagePackReader reader, MessagePackSerializerOptions options)
        {
            if (reader.TryReadNil()) return null;
            int count = PeekCount(ref reader);
            var items = new T[count];
            Read(ref reader, items);
            return items;
        }
    }

    private sealed class ListFormatter<T> : IMessagePackFormatter<List<T>?> where T : unmanaged
    {
        public void Serialize(ref MessagePackWriter writer, List<T>? value, MessagePackSerializerOptions options)
        {
            if (value is null) writer.WriteNil();
            else Write(ref writer, CollectionsMarshal.AsSpan(value));
        }

        public List<T>? Deserialize(ref MessagePackReader reader, MessagePackSerializerOptions options)
        {
            if (reader.TryReadNil()) return null;
            int count = PeekCount(ref reader);
            var items = new List<T>(count);
            CollectionsMarshal.SetCount(items, count);
            Read(ref reader, CollectionsMarshal.AsSpan(items));
            return items;
        }
    }

    private static void Write<T>(ref MessagePackWriter writer, ReadOnlySpan<T> items) where T : unmanaged
    {
        writer.WriteArrayHeader(items.Length);
        while (!items.IsEmpty)
        {
            ReadOnlySpan<T> chunk = items[..Math.Min(items.Length, Chunk)];
            Span<byte> span = writer.GetSpan(chunk.Length * MaxElementBytes);
            int pos = 0;
            foreach (T item in chunk)
            {
                T x = item;
                if (typeof(T) != typeof(double))
                {
                    long v = typeof(T) == typeof(int) ? Unsafe.As<T, int>(ref x) : Unsafe.As<T, long>(ref x);
                    if ((ulong)v <= 0x7f)
                    {
                        span[pos++] = (byte)v; // small non-negative numbers, the common case, without a call
                        continue;
                    }
                }
                pos += typeof(T) == typeof(double)
                    ? MessagePackSpan.WriteDouble(span[pos..], Unsafe.As<T, double>(ref x))
                    : MessagePackSpan.WriteInt64(span[pos..], typeof(T) == typeof(int) ? Unsafe.As<T, int>(ref x) : Unsafe.As<T, long>(ref x));
            }
            writer.Advance(pos);
            items = items[chunk.Length..];
        }
    }

    /// <summary>The element count of the array header ahead, checked against the bytes left (as the library's reader does) so a hostile count allocates nothing.</summary>
    private static int PeekCount(ref MessagePackReader reader)
    {
        MessagePackReader peek = reader.CreatePeekReader();
        return peek.ReadArrayHeader();
    }

    /// <summary>Reads the array header and <paramref name="into"/>.Length elements: from the span when it can, else with the library's reader.</summary>
    private static void Read<T>(ref MessagePackReader reader, Span<T> into) where T : unmanaged
    {
        ReadOnlySequence<byte> rest = reader.Sequence.Slice(reader.Position);
        if (rest.IsSingleSegment && TryRead(rest.FirstSpan, into, out int consumed))
        {
            reader.ReadRaw(consumed);
            return;
        }
        reader.ReadArrayHeader();
        for (int i = 0; i < into.Length; i++)
        {
            T value = default;
            if (typeof(T) == typeof(double)) Unsafe.As<T, double>(ref value) = reader.ReadDouble();
            else if (typeof(T) == typeof(int)) Unsafe.As<T, int>(ref value) = reader.ReadInt32();
            else Unsafe.As<T, long>(ref value) = reader.ReadInt64();
            into[i] = value;
        }
    }

    private static bool TryRead<T>(ReadOnlySpan<byte> s, Span<T> into, out int consumed) where T : unmanaged
    {
        consumed = 0;
        if (!MessagePackSpan.TryReadArrayHeader(s, out int count, out int pos) || count != into.Length)
            return false;
        for (int i = 0; i < into.Length; i++)
        {
            T value = default;
            if (typeof(T) == typeof(double))
            {
                if (s.Length - pos < 9 || s[pos] != MessagePackCode.Float64) return false;
                Unsafe.As<T, double>(ref value) = BinaryPrimitives.ReadDoubleBigEndian(s.Slice(pos + 1));
                pos += 9;
            }
            else if (pos < s.Length && s[pos] <= 0x7f)
            {
                // A positive fixint, the commonest element, without a call.
                if (typeof(T) == typeof(int)) Unsafe.As<T, int>(ref value) = s[pos];
                else Unsafe.As<T, long>(ref value) = s[pos];
                pos++;
            }
            else
            {
                if (!MessagePackSpan.TryReadInt64(s[pos..], out long n, out int length)) return false;
                if (typeof(T) == typeof(int))
                {
                    if (n is < int.MinValue or > int.MaxValue) return false;
                    Unsafe.As<T, int>(ref value) = (int)n;
                }
                else
                {
                    Unsafe.As<T, long>(ref value) = n;
                }
                pos += length;
            }
            into[i] = value;
        }
        consumed = pos;
        return true;
    }
}
