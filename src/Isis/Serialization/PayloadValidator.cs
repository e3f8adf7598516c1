using System.Buffers.Binary;
using System.Text.Unicode;

namespace Isis.Serialization;

/// <summary>
/// Checks the whole structure of a received payload (tags, lengths, bounds, UTF-8, nesting)
/// without resolving any type name, so later reads can trust offsets. Never throws: every
/// failure is a message naming the argument and what is wrong.
/// </summary>
internal static class PayloadValidator
{
    private enum Context { TopLevel, Element, NullableInner }

    // scratch: Where to put the argument infos (at least ArgumentCodec.MaxArguments long), instead of a new array; arguments is then that array, of which the first payload[4] entries are valid.
    public static bool TryParse(ReadOnlySpan<byte> payload, out int opcode, out ArgumentInfo[] arguments, out string? error, ArgumentInfo[]? scratch = null)
    {
        opcode = 0;
        arguments = [];
        if (payload.Length < ArgumentCodec.HeaderSize)
        {
            error = $"payload is {payload.Length} bytes; the header alone needs {ArgumentCodec.HeaderSize}";
            return false;
        }
        opcode = BinaryPrimitives.ReadInt32LittleEndian(payload);
        int count = payload[4];
        if (count > ArgumentCodec.MaxArguments)
        {
            error = $"argument count {count} exceeds the maximum of {ArgumentCodec.MaxArguments}";
            return false;
        }

        var infos = scratch ?? (count == 0 ? [] : new ArgumentInfo[count]);
        int pos = ArgumentCodec.HeaderSize;
        for (int i = 0; i < count; i++)
        {
            int descriptorStart = pos;
            if (!TryDescriptor(payload, ref pos, 1, Context.TopLevel, out error)
                || !TryValue(payload, descriptorStart, ref pos, withPresence: false, out error))
            {
                error = $"argument {i}: {error}";
                return false;
            }
            int valueStart = descriptorStart + DescriptorLength(payload, descriptorStart);
            infos[i] = new ArgumentInfo((TypeTag)payload[descriptorStart], descriptorStart, valueStart - descriptorStart, valueStart, pos - valueStart);
        }
        if (pos != payload.Length)
        {
            error = $"{payload.Length - pos} unexpected bytes follow the last argument";
            return false;
        }
        arguments = infos;
        error = null;
        return true;
    }

    /// <summary>Length of an already validated descriptor.</summary>
    public static int DescriptorLength(ReadOnlySpan<byte> payload, int start)
    {
        int pos = start;
        while (true)
        {
            var tag = (TypeTag)payload[pos++];
            if (TypeTags.HasTypeKey(tag))
                return pos + 4 + BinaryPrimitives.ReadInt32LittleEndian(payload[pos..]) - start;
            if (tag is not (TypeTag.Array or TypeTag.List or TypeTag.Nullable))
                return pos - start;
        }
    }

    private static bool TryDescriptor(ReadOnlySpan<byte> p, ref int pos, int depth, Context context, out string? error)
    {
        if (pos >= p.Length)
        {
            error = "payload ends inside a type descriptor";
            return false;
        }
        byte raw = p[pos++];
        var tag = (TypeTag)raw;
        if (raw > (byte)TypeTags.Last)
        {
            error = $"unknown type tag {raw}";
            return false;
        }
        if (context == Context.NullableInner && TypeTags.FixedSize(tag) == 0)
        {
            error = $"a nullable element must wrap a fixed-size type, not tag {tag}";
            return false;
        }
        switch (tag)
        {
            case TypeTag.Null when context != Context.TopLevel:
                error = "the null tag is only valid for a whole argument";
                return false;
            case TypeTag.Nullable when context != Context.Element:
                error = "the nullable tag is only valid for array and list elements";
                return false;
            case TypeTag.Enum or TypeTag.Json:
                return TryTypeKey(p, ref pos, out error);
            case TypeTag.Array or TypeTag.List:
                if (depth >= WireType.MaxDepth)
                {
                    error = $"arrays and lists nest deeper than {WireType.MaxDepth} levels";
                    return false;
                }
                return TryDescriptor(p, ref pos, depth + 1, Context.Element, out error);
            case TypeTag.Nullable:
                return TryDescriptor(p, ref pos, depth, Context.NullableInner, out error);
            default:
                error = null;
                return true;
        }
    }

    private static bool TryTypeKey(ReadOnlySpan<byte> p, ref int pos, out string? error)
    {
        if (!TryLength(p, ref pos, out int length, out error))
            return false;
        if (length == 0 || length > WireType.MaxTypeKeyBytes)
        {
            error = $"type key length {length} is outside 1..{WireType.MaxTypeKeyBytes}";
            return false;
        }
        if (!Utf8.IsValid(p.Slice(pos, length)))
        {
            error = "type key is not valid UTF-8";
            return false;
        }
        pos += length;
        return true;
    }

    /// <summary>Reads a non-negative int32 length that fits in the remaining bytes.</summary>
    private static bool TryLength(ReadOnlySpan<byte> p, ref int pos, out int length, out string? error)
    {
        length = 0;
        if (p.Length - pos < 4)
        {
            error = "payload ends inside a length";
            return false;
        }
        length = BinaryPrimitives.ReadInt32LittleEndian(p[pos..]);
        pos += 4;
        if (length < 0 || length > p.Length - pos)
        {
            error = $"length {length} exceeds the {p.Length - pos} bytes that remain";
            return false;
        }
        error = null;
        return true;
    }

    /// <summary>Validates the value whose (already validated) descriptor starts at <paramref name="descriptor"/>.</summary>
    private static bool TryValue(ReadOnlySpan<byte> p, int descriptor, ref int pos, bool withPresence, out string? error)
    {
        var tag = (TypeTag)p[descriptor];
        error = null;
        if (tag == TypeTag.Null)
            return true;
        if (withPresence)
        {
            if (pos >= p.Length)
            {
                error = "payload ends before an element";
                return false;
            }
            byte presence = p[pos++];
            if (presence > 1)
            {
                error = $"element presence byte is {presence}, expected 0 or 1";
                return false;
            }
            if (presence == 0)
                return true;
        }

        int size = TypeTags.FixedSize(tag);
        if (size > 0)
        {
            if (p.Length - pos < size)
            {
                error = $"payload ends inside a {TypeTags.Keyword(tag) ?? tag.ToString()} value";
                return false;
            }
            if (!TryFixed(tag, p.Slice(pos, size), out error))
                return false;
            pos += size;
            return true;
        }

        switch (tag)
        {
            case TypeTag.String:
                if (!TryLength(p, ref pos, out int length, out error))
                    return false;
                if (!Utf8.IsValid(p.Slice(pos, length)))
                {
                    error = "string is not valid UTF-8";
                    return false;
                }
                pos += length;
                return true;
            case TypeTag.Bytes or TypeTag.Json:
                if (!TryLength(p, ref pos, out length, out error))
                    return false;
                pos += length;
                return true;
            case TypeTag.Nullable:
                return TryValue(p, descriptor + 1, ref pos, withPresence: false, out error);
            case TypeTag.Array or TypeTag.List:
                return TryElements(p, descriptor + 1, ref pos, out error);
            default:
                error = $"tag {tag} has no value layout";
                return false;
        }
    }

    private static bool TryElements(ReadOnlySpan<byte> p, int elementDescriptor, ref int pos, out string? error)
    {
        if (p.Length - pos < 4)
        {
            error = "payload ends inside an element count";
            return false;
        }
        int count = BinaryPrimitives.ReadInt32LittleEndian(p[pos..]);
        pos += 4;
        var elementTag = (TypeTag)p[elementDescriptor];
        bool presence = TypeTags.HasPresenceByte(elementTag);
        int minSize = presence ? 1 : TypeTags.FixedSize(elementTag);
        // Every element takes at least one byte, so a hostile count cannot make us allocate or loop beyond the payload.
        if (count < 0 || count > (p.Length - pos) / minSize)
        {
            error = $"element count {count} cannot fit in the {p.Length - pos} bytes that remain";
            return false;
        }
        if (!presence && !NeedsCheck(elementTag))
        {
            pos += count * minSize;
            error = null;
            return true;
        }
        for (int i = 0; i < count; i++)
        {
            if (!TryValue(p, elementDescriptor, ref pos, presence, out error))
            {
                error = $"element {i}: {error}";
                return false;
            }
        }
        error = null;
        return true;
    }

    /// <summary>Fixed-size kinds with invalid bit patterns; the rest accept any bytes.</summary>
    private static bool NeedsCheck(TypeTag tag) => tag is TypeTag.Bool or TypeTag.Decimal or TypeTag.DateTime or TypeTag.DateTimeOffset;

    private static bool TryFixed(TypeTag tag, ReadOnlySpan<byte> v, out string? error)
    {
        error = tag switch
        {
            TypeTag.Bool when v[0] > 1 => $"bool byte is {v[0]}, expected 0 or 1",
            TypeTag.Decimal when !ValueReader.IsValidDecimal(v) => "decimal has an invalid scale or sign word",
            TypeTag.DateTime when !ValueReader.IsValidDateTime(v) => "DateTime ticks or kind are out of range",
            TypeTag.DateTimeOffset when !ValueReader.IsValidDateTimeOffset(v) => "DateTimeOffset ticks or offset are out of range",
            _ => null,
        };
        return error is null;
    }
}
