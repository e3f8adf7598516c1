using System.Collections;
using System.Runtime.InteropServices;
using System.Text.Json;

namespace Isis.Serialization;

/// <summary>Writes values in the layout described by their <see cref="WireType"/>.</summary>
internal static class ValueEncoder
{
    /// <summary>
    /// Writes one value. <paramref name="withPresence"/> is true for elements of kinds that may be
    /// null: they start with a presence byte. Top-level nulls use <see cref="TypeTag.Null"/> instead.
    /// </summary>
    public static void Write(ref PayloadWriter w, WireType wire, object? value, bool withPresence)
    {
        if (withPresence)
        {
            w.WriteByte(value is null ? (byte)0 : (byte)1);
            if (value is null) return;
        }
        else if (value is null)
        {
            throw new ArgumentException($"A null element cannot be stored as {wire.DisplayName}.");
        }

        switch (wire.Tag)
        {
            case TypeTag.Bool: w.WriteByte((bool)value ? (byte)1 : (byte)0); break;
            case TypeTag.Byte: w.WriteByte((byte)value); break;
            case TypeTag.SByte: w.WriteByte(unchecked((byte)(sbyte)value)); break;
            case TypeTag.Int16: w.WriteInt16((short)value); break;
            case TypeTag.UInt16: w.WriteInt16(unchecked((short)(ushort)value)); break;
            case TypeTag.Char: w.WriteInt16(unchecked((short)(char)value)); break;
            case TypeTag.Int32: w.WriteInt32((int)value); break;
            case TypeTag.UInt32: w.WriteInt32(unchecked((int)(uint)value)); break;
            case TypeTag.Single: w.WriteInt32(BitConverter.SingleToInt32Bits((float)value)); break;
            case TypeTag.Int64: w.WriteInt64((long)value); break;
            case TypeTag.UInt64: w.WriteInt64(unchecked((long)(ulong)value)); break;
            case TypeTag.Double: w.WriteInt64(BitConverter.DoubleToInt64Bits((double)value)); break;
            case TypeTag.TimeSpan: w.WriteInt64(((TimeSpan)value).Ticks); break;
            case TypeTag.Decimal:
                Span<int> bits = stackalloc int[4];
                decimal.GetBits((decimal)value, bits);
                foreach (int b in bits) w.WriteInt32(b);
                break;
            case TypeTag.Guid:
                Span<byte> guid = stackalloc byte[16];
                ((Guid)value).TryWriteBytes(guid);
                w.WriteBytes(guid);
                break;
            case TypeTag.DateTime:
                var dt = (DateTime)value;
                w.WriteInt64(dt.Ticks);
                w.WriteByte((byte)dt.Kind);
                break;
            case TypeTag.DateTimeOffset:
                var dto = (DateTimeOffset)value;
                w.WriteInt64(dto.Ticks);
                w.WriteInt16((short)dto.TotalOffsetMinutes);
                break;
            case TypeTag.Enum: w.WriteInt64(EnumToInt64(value)); break;
            case TypeTag.String: w.WriteString((string)value); break;
            case TypeTag.Bytes: w.WriteBlob((byte[])value); break;
            case TypeTag.Nullable: Write(ref w, wire.Element!, value, withPresence: false); break;
            case TypeTag.Array:
            case TypeTag.List: WriteCollection(ref w, wire.Element!, (IList)value); break;
            case TypeTag.Json: WriteJson(ref w, wire, value); break;
            default: throw new InvalidOperationException($"No encoder for tag {wire.Tag}.");
        }
    }

    private static void WriteCollection(ref PayloadWriter w, WireType element, IList items)
    {
        w.WriteInt32(items.Count);
        if (BitConverter.IsLittleEndian && TypeTags.IsBlittable(element.Tag) && TryGetRawBytes(items, TypeTags.FixedSize(element.Tag), out var raw))
        {
            w.WriteBytes(raw);
            return;
        }
        bool presence = element.HasPresenceByte;
        foreach (var item in items)
            Write(ref w, element, item, presence);
    }

    /// <summary>Memory of primitive arrays and lists, which equals the wire layout on little-endian machines.</summary>
    private static bool TryGetRawBytes(IList items, int elementSize, out ReadOnlySpan<byte> raw)
    {
        raw = items switch
        {
            Array a => MemoryMarshal.CreateReadOnlySpan(ref MemoryMarshal.GetArrayDataReference(a), checked(a.Length * elementSize)),
            List<byte> l => CollectionsMarshal.AsSpan(l),
            List<sbyte> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<short> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<ushort> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<char> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<int> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<uint> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<long> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<ulong> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<float> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            List<double> l => MemoryMarshal.AsBytes(CollectionsMarshal.AsSpan(l)),
            _ => default,
        };
        // Only a List<T> of a type not listed above leaves raw empty while holding items.
        return raw.Length == items.Count * elementSize;
    }

    private static void WriteJson(ref PayloadWriter w, WireType wire, object value)
    {
        byte[] json;
        try
        {
            json = JsonSerializer.SerializeToUtf8Bytes(value, wire.ClrType, CodecJson.Options);
        }
        catch (Exception e) when (e is NotSupportedException or JsonException or InvalidOperationException)
        {
            throw new ArgumentException(
                $"An argument of type {wire.DisplayName} cannot be serialized with System.Text.Json: {e.Message} " +
                "Use built-in types, or a record/class with public properties and a usable constructor.", e);
        }
        w.WriteBlob(json);
    }

    /// <summary>Enums travel as their underlying number; ulong enums keep their bits.</summary>
    private static long EnumToInt64(object value) =>
        Type.GetTypeCode(Enum.GetUnderlyingType(value.GetType())) == TypeCode.UInt64
            ? unchecked((long)Convert.ToUInt64(value, System.Globalization.CultureInfo.InvariantCulture))
            : Convert.ToInt64(value, System.Globalization.CultureInfo.InvariantCulture);
}
