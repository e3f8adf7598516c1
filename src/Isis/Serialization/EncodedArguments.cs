using System.Text;
using MessagePack;

namespace Isis.Serialization;

/// <summary>Where one argument sits in a validated payload.</summary>
internal readonly record struct ArgumentInfo(TypeTag Tag, int DescriptorStart, int DescriptorLength, int ValueStart, int ValueLength);

/// <summary>
/// The arguments of a validated payload, not yet turned into objects. Type keys stay bytes until a
/// handler's parameter type is compared with them, so a payload cannot choose what gets created.
/// Borrows the payload and (on the dispatch path) a reused array of infos: use it within the
/// delivery that produced it.
/// </summary>
internal readonly struct EncodedArguments
{
    private readonly ReadOnlyMemory<byte> _payload;

    // The payload's array, when it has one (always, in the runtime): a span over it costs less than
    // ReadOnlyMemory.Span, which dispatch would otherwise pay per handler and argument it compares.
    private readonly byte[]? _array;
    private readonly int _offset;
    private readonly ArgumentInfo[]? _arguments;
    private readonly int _count;

    // count: How many entries of arguments are this payload's (the array may be longer scratch).
    internal EncodedArguments(ReadOnlyMemory<byte> payload, ArgumentInfo[] arguments, int count)
    {
        _payload = payload;
        if (System.Runtime.InteropServices.MemoryMarshal.TryGetArray(payload, out ArraySegment<byte> segment))
        {
            _array = segment.Array;
            _offset = segment.Offset;
        }
        _arguments = arguments;
        _count = count;
    }

    private ReadOnlySpan<byte> Payload => _array is not null ? new ReadOnlySpan<byte>(_array, _offset, _payload.Length) : _payload.Span;

    public int Count => _count;

    public ArgumentInfo this[int index] => (uint)index < (uint)_count ? _arguments![index] : throw new ArgumentOutOfRangeException(nameof(index));

    public TypeTag GetTag(int index) => this[index].Tag;

    /// <summary>The argument's type descriptor exactly as received.</summary>
    public ReadOnlySpan<byte> GetDescriptor(int index)
    {
        var a = this[index];
        return Payload.Slice(a.DescriptorStart, a.DescriptorLength);
    }

    /// <summary>Type key of an enum or Object argument (diagnostics only; never resolved to a type).</summary>
    public string? GetTypeKey(int index)
    {
        if (!TypeTags.HasTypeKey(GetTag(index))) return null;
        var r = Descriptor(index);
        r.ReadArrayHeader();
        r.ReadByte();
        return r.ReadString();
    }

    /// <summary>C#-style type of the argument as sent, e.g. "List&lt;int&gt;".</summary>
    public string GetDisplayName(int index)
    {
        var r = Descriptor(index);
        return Display(ref r);
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
    /// argument was sent as exactly that type (Object and enum: type key equal to the type's key).
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
        ArgumentInfo a = _arguments![index];
        ReadOnlySpan<byte> payload = Payload;
        bool matches = a.Tag == TypeTag.Null
            ? shape.AcceptsNull
            : payload.Slice(a.DescriptorStart, a.DescriptorLength).SequenceEqual(shape.Wire.Descriptor);
        if (!matches)
        {
            error = $"argument {index} was sent as {GetDisplayName(index)}, not {shape.DisplayName}";
            return false;
        }
        if (a.Tag == TypeTag.Null)
        {
            error = null;
            return true;
        }
        if (!ArgumentValues.TryRead(_payload.Slice(a.ValueStart, a.ValueLength), payload.Slice(a.ValueStart, a.ValueLength), shape.Wire, out value, out error))
        {
            error = $"argument {index}: {error}";
            return false;
        }
        if (value is null && !shape.AcceptsNull)
        {
            error = $"argument {index} is nil, which {shape.DisplayName} cannot hold";
            return false;
        }
        return true;
    }

    private MessagePackReader Descriptor(int index)
    {
        var a = this[index];
        return new MessagePackReader(_payload.Slice(a.DescriptorStart, a.DescriptorLength));
    }

    /// <summary>Display name of a descriptor that <see cref="PayloadValidator"/> accepted.</summary>
    private static string Display(ref MessagePackReader r)
    {
        if (r.TryReadNil()) return "null";
        if (r.NextMessagePackType != MessagePackType.Array) return TypeTags.Keyword((TypeTag)r.ReadByte())!;
        r.ReadArrayHeader();
        var tag = (TypeTag)r.ReadByte();
        return tag switch
        {
            TypeTag.Array => Display(ref r) + "[]",
            TypeTag.List => "List<" + Display(ref r) + ">",
            TypeTag.Nullable => Display(ref r) + "?",
            _ => r.ReadString()!,
        };
    }
}
