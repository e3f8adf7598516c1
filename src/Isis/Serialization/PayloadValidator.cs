using System.Runtime.CompilerServices;
using System.Text.Unicode;
using MessagePack;

namespace Isis.Serialization;

/// <summary>
/// Checks the structure of a received payload (one MessagePack array of the opcode, then a type
/// descriptor and a value per argument) without resolving any type name or creating any value, so
/// later reads can trust the offsets. Values are only measured here: scalars by their header
/// (<see cref="MessagePackSpan"/>), arrays and maps by MessagePack's iterative skip, which cannot
/// recurse or allocate whatever the counts say; each value is read when a handler whose parameter
/// type matches its descriptor asks for it. Never throws: every failure is a message naming the
/// argument and what is wrong.
/// </summary>
internal static class PayloadValidator
{
    private enum Context { TopLevel, Element, NullableInner }

    // scratch: Where to put the argument infos (at least ArgumentCodec.MaxArguments long), instead of a new array; arguments is then that array, of which the first count entries are valid.
    public static bool TryParse(ReadOnlyMemory<byte> payload, out int opcode, out ArgumentInfo[] arguments, out int count, out string? error, ArgumentInfo[]? scratch = null)
    {
        arguments = [];
        count = 0;
        ReadOnlySpan<byte> p = payload.Span;
        if (!TryReadHeader(p, out opcode, out int length, out int pos, out error))
            return false;
        if (length % 2 == 0)
        {
            error = $"the payload array has {length} elements; it must hold the opcode, then a type and a value per argument";
            return false;
        }
        count = length / 2;
        if (count > ArgumentCodec.MaxArguments)
        {
            error = $"argument count {count} exceeds the maximum of {ArgumentCodec.MaxArguments}";
            return false;
        }

        var infos = scratch ?? (count == 0 ? [] : new ArgumentInfo[count]);
        for (int i = 0; i < count; i++)
        {
            int descriptorStart = pos;
            TypeTag tag;
            if (pos < p.Length && p[pos] <= MessagePackCode.MaxFixInt && TypeTags.IsScalar((TypeTag)p[pos]))
            {
                tag = (TypeTag)p[pos++]; // the common case, a scalar's tag alone, without a call
            }
            else if (!TryDescriptor(p, ref pos, 1, Context.TopLevel, out tag, out error))
            {
                error = $"argument {i}: {error}";
                return false;
            }
            int valueStart = pos;
            // Scalars (most arguments) by their header alone; arrays and maps by an iterative count.
            int valueLength = tag == TypeTag.Null ? -1 : MessagePackSpan.ScalarLength(p[pos..]);
            if (valueLength < 0 && tag != TypeTag.Null) valueLength = MessagePackSpan.ValueLength(p[pos..]);
            if (valueLength >= 0)
            {
                pos += valueLength;
            }
            else if (!TryValue(p, payload, tag, ref pos, out error))
            {
                error = $"argument {i}: {error}";
                return false;
            }
            infos[i] = new ArgumentInfo(tag, descriptorStart, valueStart - descriptorStart, valueStart, pos - valueStart);
        }
        if (pos != p.Length)
        {
            error = $"{p.Length - pos} unexpected bytes follow the last argument";
            return false;
        }
        arguments = infos;
        error = null;
        return true;
    }

    /// <summary>Opcode of a payload, without validating the rest (for counters and logs).</summary>
    public static bool TryPeekOpcode(ReadOnlyMemory<byte> payload, out int opcode) =>
        TryReadHeader(payload.Span, out opcode, out _, out _, out _);

    /// <summary>The array header and the opcode; <paramref name="pos"/> is where the first argument starts.</summary>
    private static bool TryReadHeader(ReadOnlySpan<byte> p, out int opcode, out int length, out int pos, out string? error)
    {
        opcode = 0;
        pos = 0;
        if (!MessagePackSpan.TryReadArrayHeader(p, out length, out int header))
        {
            error = "the payload is not a MessagePack array";
            return false;
        }
        pos = header;
        if (length < 1)
        {
            error = "the payload array is empty; it must start with the opcode";
            return false;
        }
        if (!MessagePackSpan.TryReadInt64(p[pos..], out long op, out int n) || op is < int.MinValue or > int.MaxValue)
        {
            error = "the payload's first element is not a 32-bit opcode";
            return false;
        }
        opcode = (int)op;
        pos += n;
        error = null;
        return true;
    }

    /// <summary>Skips the value that starts at <paramref name="pos"/>; a null argument's must be nil.</summary>
    // p: payload's span (taken once by the caller: Memory.Span is not free).
    private static bool TryValue(ReadOnlySpan<byte> p, ReadOnlyMemory<byte> payload, TypeTag tag, ref int pos, out string? error)
    {
        ReadOnlySpan<byte> rest = p[pos..];
        if (tag == TypeTag.Null && (rest.IsEmpty || rest[0] != MessagePackCode.Nil))
        {
            error = "a null argument's value must be nil";
            return false;
        }
        int length = MessagePackSpan.ValueLength(rest);
        if (length < 0 && !TrySkipWithLibrary(payload[pos..], out length, out error))
            return false;
        pos += length;
        error = null;
        return true;
    }

    /// <summary>Something the span measure refused (malformed, or an odd encoding): the library's skip measures it, iteratively, or says what is wrong.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static bool TrySkipWithLibrary(ReadOnlyMemory<byte> value, out int length, out string? error)
    {
        var r = new MessagePackReader(value);
        try
        {
            r.Skip();
        }
        catch (Exception e)
        {
            // Truncation, the unused code 0xc1, lengths past the end: whatever the reader throws, the value is malformed.
            length = 0;
            error = $"malformed MessagePack value ({e.Message})";
            return false;
        }
        length = (int)r.Consumed;
        error = null;
        return true;
    }

    private static bool TryDescriptor(ReadOnlySpan<byte> p, ref int pos, int depth, Context context, out TypeTag tag, out string? error)
    {
        tag = TypeTag.Null;
        if (pos >= p.Length)
        {
            error = "the payload ends inside a type descriptor";
            return false;
        }
        byte code = p[pos];
        if (code == MessagePackCode.Nil)
        {
            pos++;
            error = context == Context.TopLevel ? null : "the null type is only valid for a whole argument";
            return error is null;
        }
        bool composite = code is >= MessagePackCode.MinFixArray and <= MessagePackCode.MaxFixArray;
        if (composite)
        {
            if (code != MessagePackCode.MinFixArray + 2)
            {
                error = "a composite type descriptor must be [tag, parameter]";
                return false;
            }
            if (++pos >= p.Length)
            {
                error = "the payload ends inside a type descriptor";
                return false;
            }
        }
        byte raw = p[pos++];
        if (raw > MessagePackCode.MaxFixInt)
        {
            error = $"a type descriptor must be a tag or [tag, parameter], not MessagePack code 0x{raw:X2}";
            return false;
        }
        tag = (TypeTag)raw;
        if (raw == 0 || tag > TypeTags.Last)
        {
            error = $"unknown type tag {raw}";
            return false;
        }
        if (TypeTags.IsScalar(tag) == composite)
        {
            error = composite ? $"tag {tag} is a scalar and takes no parameter" : $"tag {tag} needs a parameter: [tag, parameter]";
            return false;
        }
        if (context == Context.NullableInner && !TypeTags.IsNullableInner(tag))
        {
            error = $"a nullable element must wrap a scalar value type or an enum, not {tag}";
            return false;
        }
        switch (tag)
        {
            case TypeTag.Nullable when context != Context.Element:
                error = "the nullable tag is only valid for array and list elements";
                return false;
            case TypeTag.Enum or TypeTag.Object:
                return TryTypeKey(p, ref pos, out error);
            case TypeTag.Array or TypeTag.List:
                if (depth >= WireType.MaxDepth)
                {
                    error = $"arrays and lists nest deeper than {WireType.MaxDepth} levels";
                    return false;
                }
                return TryDescriptor(p, ref pos, depth + 1, Context.Element, out _, out error);
            case TypeTag.Nullable:
                return TryDescriptor(p, ref pos, depth, Context.NullableInner, out _, out error);
            default:
                error = null;
                return true;
        }
    }

    private static bool TryTypeKey(ReadOnlySpan<byte> p, ref int pos, out string? error)
    {
        if (!MessagePackSpan.TryReadStringSpan(p[pos..], out ReadOnlySpan<byte> key, out int length))
        {
            error = "a type key must be a string that fits in the payload";
            return false;
        }
        if (key.Length == 0 || key.Length > WireType.MaxTypeKeyBytes)
        {
            error = $"type key length {key.Length} is outside 1..{WireType.MaxTypeKeyBytes}";
            return false;
        }
        if (!Utf8.IsValid(key))
        {
            error = "type key is not valid UTF-8";
            return false;
        }
        pos += length;
        error = null;
        return true;
    }
}
