using System.Text.Unicode;
using MessagePack;

namespace Isis.Serialization;

/// <summary>
/// Checks the structure of a received payload (one MessagePack array of the opcode, then a type
/// descriptor and a value per argument) without resolving any type name or creating any value, so
/// later reads can trust the offsets. Values are only skipped here (MessagePack's iterative skip,
/// which cannot recurse or allocate whatever the counts say); each is read when a handler whose
/// parameter type matches its descriptor asks for it. Never throws: every failure is a message
/// naming the argument and what is wrong.
/// </summary>
internal static class PayloadValidator
{
    private enum Context { TopLevel, Element, NullableInner }

    // scratch: Where to put the argument infos (at least ArgumentCodec.MaxArguments long), instead of a new array; arguments is then that array, of which the first count entries are valid.
    public static bool TryParse(ReadOnlyMemory<byte> payload, out int opcode, out ArgumentInfo[] arguments, out int count, out string? error, ArgumentInfo[]? scratch = null)
    {
        opcode = 0;
        count = 0;
        arguments = [];
        int argument = -1;
        var r = new MessagePackReader(payload);
        try
        {
            if (r.End || r.NextMessagePackType != MessagePackType.Array)
            {
                error = "the payload is not a MessagePack array";
                return false;
            }
            // TryReadArrayHeader: no check of the count against the bytes left, so a count over the
            // maximum is reported as such (the checks below bound everything that follows).
            if (!r.TryReadArrayHeader(out int length))
            {
                error = "the payload ends inside its array header";
                return false;
            }
            if (length >= 1)
                opcode = r.ReadInt32();
            if (length < 1 || length % 2 == 0)
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
            for (argument = 0; argument < count; argument++)
            {
                int descriptorStart = (int)r.Consumed;
                if (!TryDescriptor(ref r, 1, Context.TopLevel, out var tag, out error))
                {
                    error = $"argument {argument}: {error}";
                    return false;
                }
                int valueStart = (int)r.Consumed;
                if (tag == TypeTag.Null && !r.IsNil)
                {
                    error = $"argument {argument}: a null argument's value must be nil";
                    return false;
                }
                r.Skip();
                infos[argument] = new ArgumentInfo(tag, descriptorStart, valueStart - descriptorStart, valueStart, (int)r.Consumed - valueStart);
            }
            if (!r.End)
            {
                error = $"{r.Sequence.Length - r.Consumed} unexpected bytes follow the last argument";
                return false;
            }
            arguments = infos;
            error = null;
            return true;
        }
        catch (Exception e)
        {
            // The reader throws on truncation, unknown codes, integers out of range and lengths
            // past the end (several exception types); whatever it throws, the payload is malformed.
            error = (argument < 0 ? "header: " : argument < count ? $"argument {argument}: " : "") + $"malformed MessagePack ({e.Message})";
            return false;
        }
    }

    /// <summary>Opcode of a payload, without validating the rest (for counters and logs).</summary>
    public static bool TryPeekOpcode(ReadOnlyMemory<byte> payload, out int opcode)
    {
        opcode = 0;
        var r = new MessagePackReader(payload);
        try
        {
            if (!r.TryReadArrayHeader(out int length) || length < 1) return false;
            opcode = r.ReadInt32();
            return true;
        }
        catch (Exception)
        {
            return false;
        }
    }

    private static bool TryDescriptor(ref MessagePackReader r, int depth, Context context, out TypeTag tag, out string? error)
    {
        tag = TypeTag.Null;
        byte code = r.NextCode;
        if (code == MessagePackCode.Nil)
        {
            r.ReadNil();
            error = context == Context.TopLevel ? null : "the null type is only valid for a whole argument";
            return error is null;
        }
        bool composite = code is >= MessagePackCode.MinFixArray and <= MessagePackCode.MaxFixArray;
        if (composite && r.ReadArrayHeader() != 2)
        {
            error = "a composite type descriptor must be [tag, parameter]";
            return false;
        }
        if (r.NextCode > MessagePackCode.MaxFixInt)
        {
            error = $"a type descriptor must be a tag or [tag, parameter], not MessagePack code 0x{r.NextCode:X2}";
            return false;
        }
        byte raw = r.ReadByte();
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
                return TryTypeKey(ref r, out error);
            case TypeTag.Array or TypeTag.List:
                if (depth >= WireType.MaxDepth)
                {
                    error = $"arrays and lists nest deeper than {WireType.MaxDepth} levels";
                    return false;
                }
                return TryDescriptor(ref r, depth + 1, Context.Element, out _, out error);
            case TypeTag.Nullable:
                return TryDescriptor(ref r, depth, Context.NullableInner, out _, out error);
            default:
                error = null;
                return true;
        }
    }

    private static bool TryTypeKey(ref MessagePackReader r, out string? error)
    {
        if (r.NextMessagePackType != MessagePackType.String || !r.TryReadStringSpan(out ReadOnlySpan<byte> key))
        {
            error = "a type key must be a string";
            return false;
        }
        if (key.Length == 0 || key.Length > WireType.MaxTypeKeyBytes)
        {
            error = $"type key length {key.Length} is outside 1..{WireType.MaxTypeKeyBytes}";
            return false;
        }
        error = Utf8.IsValid(key) ? null : "type key is not valid UTF-8";
        return error is null;
    }
}
