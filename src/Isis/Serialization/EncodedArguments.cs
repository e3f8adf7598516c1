using System.Buffers.Binary;
using System.Text;

namespace Isis.Serialization;

/// <summary>Where one argument sits in a validated payload.</summary>
internal readonly record struct ArgumentInfo(TypeTag Tag, int DescriptorStart, int DescriptorLength, int ValueStart, int ValueLength);

/// <summary>
/// The arguments of a validated payload, not yet turned into objects. Type keys stay bytes until a
/// handler's parameter type is compared with them, so a payload cannot choose what gets created.
/// A ref struct because it borrows the payload span; use it within the delivery that produced it.
/// </summary>
internal readonly ref struct EncodedArguments
{
    private readonly ReadOnlySpan<byte> _payload;
    private readonly ArgumentInfo[]? _arguments;
    private readonly int _count;

    // count: How many entries of arguments are this payload's (the array may be longer scratch).
    internal EncodedArguments(ReadOnlySpan<byte> payload, ArgumentInfo[] arguments, int count)
    {
        _payload = payload;
        _arguments = arguments;
        _count = count;
    }

    public int Count => _count;

    public ArgumentInfo this[int index] => (uint)index < (uint)_count ? _arguments![index] : throw new ArgumentOutOfRangeException(nameof(index));

    public TypeTag GetTag(int index) => this[index].Tag;

    /// <summary>The argument's type descriptor exactly as received.</summary>
    public ReadOnlySpan<byte> GetDescriptor(int index)
    {
        var a = this[index];
        return _payload.Slice(a.DescriptorStart, a.DescriptorLength);
    }

    /// <summary>Type key of an enum or JSON argument (diagnostics only; never resolved to a type).</summary>
    public string? GetTypeKey(int index)
    {
        var d = GetDescriptor(index);
        return TypeTags.HasTypeKey((TypeTag)d[0]) ? Encoding.UTF8.GetString(d.Slice(5, BinaryPrimitives.ReadInt32LittleEndian(d[1..]))) : null;
    }

    /// <summary>C#-style type of the argument as sent, e.g. "List&lt;int&gt;".</summary>
    public string GetDisplayName(int index)
    {
        int pos = 0;
        return Display(GetDescriptor(index), ref pos);
    }

    /// <summary>"(string, int)": the argument types as sent.</summary>
    public string DescribeTypes()
    {
        var sb = new StringBuilder("(");
        for (int i = 0; i < Count; i++)
            sb.Append(i == 0 ? "" : ", ").Append(GetDisplayName(i));
        return sb.Append(')').ToString();
    }

    /// <summary>Exact match: same descriptor bytes, or null for a parameter that accepts null.</summary>
    public bool Matches(int index, ParameterShape shape) =>
        GetTag(index) == TypeTag.Null ? shape.AcceptsNull : GetDescriptor(index).SequenceEqual(shape.Wire.Descriptor);

    /// <summary>
    /// Creates argument <paramref name="index"/> as <paramref name="targetType"/>, only if the
    /// argument was sent as exactly that type (JSON: type key equal to the type's key).
    /// </summary>
    public bool TryMaterialize(int index, Type targetType, out object? value, out string? error)
    {
        value = null;
        if (targetType is null)
        {
            error = "no target type";
            return false;
        }
        if (!ParameterShape.TryCreate(targetType, out var shape, out error))
        {
            error = $"{WireType.Display(targetType)} cannot be decoded: {error}";
            return false;
        }
        return TryMaterialize(index, shape!, out value, out error);
    }

    public bool TryMaterialize(int index, ParameterShape shape, out object? value, out string? error)
    {
        value = null;
        if ((uint)index >= (uint)Count)
        {
            error = $"argument {index} does not exist; the message has {Count}";
            return false;
        }
        if (!Matches(index, shape))
        {
            error = $"argument {index} was sent as {GetDisplayName(index)}, not {shape.DisplayName}";
            return false;
        }
        if (GetTag(index) == TypeTag.Null)
        {
            error = null;
            return true;
        }
        var a = this[index];
        int pos = a.ValueStart;
        if (!ValueReader.TryRead(_payload, ref pos, shape.Wire, withPresence: false, out value, out error))
        {
            error = $"argument {index}: {error}";
            return false;
        }
        return true;
    }

    private static string Display(ReadOnlySpan<byte> d, ref int pos)
    {
        var tag = (TypeTag)d[pos++];
        switch (tag)
        {
            case TypeTag.Array: return Display(d, ref pos) + "[]";
            case TypeTag.List: return "List<" + Display(d, ref pos) + ">";
            case TypeTag.Nullable: return Display(d, ref pos) + "?";
            case TypeTag.Enum or TypeTag.Json:
                int length = BinaryPrimitives.ReadInt32LittleEndian(d[pos..]);
                var key = Encoding.UTF8.GetString(d.Slice(pos + 4, length));
                pos += 4 + length;
                return key;
            default: return TypeTags.Keyword(tag) ?? tag.ToString();
        }
    }
}
