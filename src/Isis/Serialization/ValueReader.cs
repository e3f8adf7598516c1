using System.Buffers.Binary;
using System.Runtime.InteropServices;
using System.Text;
using System.Text.Json;

namespace Isis.Serialization;

/// <summary>
/// Materializes values from a payload that <see cref="PayloadValidator"/> accepted, into the .NET
/// types a handler declared. The wire type comes from the handler, never from the payload.
/// </summary>
internal static class ValueReader
{
    private const int MaxOffsetMinutes = 14 * 60;

    public static bool IsValidDecimal(ReadOnlySpan<byte> v)
    {
        int flags = BinaryPrimitives.ReadInt32LittleEndian(v[12..]);
        return (flags & 0x7F00FFFF) == 0 && ((flags >> 16) & 0xFF) <= 28;
    }

    public static bool IsValidDateTime(ReadOnlySpan<byte> v)
    {
        long ticks = BinaryPrimitives.ReadInt64LittleEndian(v);
        return ticks >= 0 && ticks <= DateTime.MaxValue.Ticks && v[8] <= (byte)DateTimeKind.Local;
    }

    public static bool IsValidDateTimeOffset(ReadOnlySpan<byte> v)
    {
        long ticks = BinaryPrimitives.ReadInt64LittleEndian(v);
        short minutes = BinaryPrimitives.ReadInt16LittleEndian(v[8..]);
        if (ticks < 0 || ticks > DateTime.MaxValue.Ticks || minutes < -MaxOffsetMinutes || minutes > MaxOffsetMinutes)
            return false;
        long utc = ticks - minutes * TimeSpan.TicksPerMinute;
        return utc >= 0 && utc <= DateTime.MaxValue.Ticks;
    }

    /// <summary>
    /// Reads one value at <paramref name="pos"/> as <paramref name="wire"/> (whose descriptor matched).
    /// Never throws; user code reached through JSON deserialization may fail, which becomes an error.
    /// </summary>
    public static bool TryRead(ReadOnlySpan<byte> p, ref int pos, WireType wire, bool withPresence, out object? value, out string? error)
    {
        try
        {
            return Read(p, ref pos, wire, withPresence, out value, out error);
        }
        catch (Exception e)
        {
            // The validator makes this unreachable for built-in types; JSON types run user constructors and setters.
            value = null;
            error = $"cannot read {wire.DisplayName}: {e.GetType().Name}: {e.Message}";
            return false;
        }
    }

    private static bool Read(ReadOnlySpan<byte> p, ref int pos, WireType wire, bool withPresence, out object? value, out string? error)
    {
        error = null;
        value = null;
        if (withPresence && p[pos++] == 0)
            return true;

        var tag = wire.Tag;
        int size = TypeTags.FixedSize(tag);
        if (size > 0)
        {
            var v = p.Slice(pos, size);
            pos += size;
            if (tag == TypeTag.Enum)
                return TryEnum(wire.ClrType, BinaryPrimitives.ReadInt64LittleEndian(v), out value, out error);
            value = Scalar(tag, v);
            return true;
        }

        switch (tag)
        {
            case TypeTag.String:
                value = Encoding.UTF8.GetString(Blob(p, ref pos));
                return true;
            case TypeTag.Bytes:
                value = Blob(p, ref pos).ToArray();
                return true;
            case TypeTag.Json:
                value = JsonSerializer.Deserialize(Blob(p, ref pos), wire.ClrType, CodecJson.Options);
                return true;
            case TypeTag.Nullable:
                return Read(p, ref pos, wire.Element!, withPresence: false, out value, out error);
            case TypeTag.Array or TypeTag.List:
                return TryCollection(p, ref pos, wire, out value, out error);
            default:
                error = $"no reader for tag {tag}";
                return false;
        }
    }

    private static ReadOnlySpan<byte> Blob(ReadOnlySpan<byte> p, ref int pos)
    {
        int length = BinaryPrimitives.ReadInt32LittleEndian(p[pos..]);
        var blob = p.Slice(pos + 4, length);
        pos += 4 + length;
        return blob;
    }

    private static bool TryCollection(ReadOnlySpan<byte> p, ref int pos, WireType wire, out object? value, out string? error)
    {
        int count = BinaryPrimitives.ReadInt32LittleEndian(p[pos..]);
        pos += 4;
        var element = wire.Element!;
        var items = Array.CreateInstance(element.ClrType, count);
        error = null;

        if (BitConverter.IsLittleEndian && TypeTags.IsBlittable(element.Tag))
        {
            // Wire layout equals memory layout for these, so one copy fills the array.
            int bytes = count * TypeTags.FixedSize(element.Tag);
            p.Slice(pos, bytes).CopyTo(MemoryMarshal.CreateSpan(ref MemoryMarshal.GetArrayDataReference(items), bytes));
            pos += bytes;
        }
        else
        {
            bool presence = element.HasPresenceByte;
            bool nullable = !element.ClrType.IsValueType || Nullable.GetUnderlyingType(element.ClrType) is not null;
            for (int i = 0; i < count; i++)
            {
                if (!Read(p, ref pos, element, presence, out var item, out error))
                {
                    value = null;
                    error = $"element {i}: {error}";
                    return false;
                }
                if (item is null && !nullable)
                {
                    value = null;
                    error = $"element {i} is null but {element.DisplayName} cannot be null";
                    return false;
                }
                items.SetValue(item, i);
            }
        }

        value = wire.Tag == TypeTag.Array ? items : Activator.CreateInstance(wire.ClrType, items);
        return true;
    }

    private static bool TryEnum(Type enumType, long raw, out object? value, out string? error)
    {
        var code = Type.GetTypeCode(Enum.GetUnderlyingType(enumType));
        bool fits = code switch
        {
            TypeCode.SByte => raw is >= sbyte.MinValue and <= sbyte.MaxValue,
            TypeCode.Byte => raw is >= byte.MinValue and <= byte.MaxValue,
            TypeCode.Int16 => raw is >= short.MinValue and <= short.MaxValue,
            TypeCode.UInt16 => raw is >= ushort.MinValue and <= ushort.MaxValue,
            TypeCode.Int32 => raw is >= int.MinValue and <= int.MaxValue,
            TypeCode.UInt32 => raw is >= uint.MinValue and <= uint.MaxValue,
            _ => true,
        };
        if (!fits)
        {
            value = null;
            error = $"value {raw} is out of range for enum {enumType.FullName}";
            return false;
        }
        value = code == TypeCode.UInt64 ? Enum.ToObject(enumType, unchecked((ulong)raw)) : Enum.ToObject(enumType, raw);
        error = null;
        return true;
    }

    private static object Scalar(TypeTag tag, ReadOnlySpan<byte> v) => tag switch
    {
        TypeTag.Bool => v[0] != 0,
        TypeTag.Byte => v[0],
        TypeTag.SByte => unchecked((sbyte)v[0]),
        TypeTag.Int16 => BinaryPrimitives.ReadInt16LittleEndian(v),
        TypeTag.UInt16 => BinaryPrimitives.ReadUInt16LittleEndian(v),
        TypeTag.Char => (char)BinaryPrimitives.ReadUInt16LittleEndian(v),
        TypeTag.Int32 => BinaryPrimitives.ReadInt32LittleEndian(v),
        TypeTag.UInt32 => BinaryPrimitives.ReadUInt32LittleEndian(v),
        TypeTag.Int64 => BinaryPrimitives.ReadInt64LittleEndian(v),
        TypeTag.UInt64 => BinaryPrimitives.ReadUInt64LittleEndian(v),
        TypeTag.Single => BinaryPrimitives.ReadSingleLittleEndian(v),
        TypeTag.Double => BinaryPrimitives.ReadDoubleLittleEndian(v),
        TypeTag.TimeSpan => new TimeSpan(BinaryPrimitives.ReadInt64LittleEndian(v)),
        TypeTag.Decimal => ReadDecimal(v),
        TypeTag.Guid => new Guid(v),
        TypeTag.DateTime => new DateTime(BinaryPrimitives.ReadInt64LittleEndian(v), (DateTimeKind)v[8]),
        TypeTag.DateTimeOffset => new DateTimeOffset(
            BinaryPrimitives.ReadInt64LittleEndian(v),
            TimeSpan.FromMinutes(BinaryPrimitives.ReadInt16LittleEndian(v[8..]))),
        _ => throw new InvalidOperationException($"tag {tag} is not a scalar"),
    };

    private static decimal ReadDecimal(ReadOnlySpan<byte> v)
    {
        int flags = BinaryPrimitives.ReadInt32LittleEndian(v[12..]);
        return new decimal(
            BinaryPrimitives.ReadInt32LittleEndian(v),
            BinaryPrimitives.ReadInt32LittleEndian(v[4..]),
            BinaryPrimitives.ReadInt32LittleEndian(v[8..]),
            isNegative: flags < 0,
            scale: (byte)((flags >> 16) & 0xFF));
    }
}
