using System.Buffers;
using System.Text;
using MessagePack;

namespace Isis.Serialization;

/// <summary>
/// How one .NET type is named on the wire: its tag, element type for collections, type key for
/// enums and other types, and the exact descriptor bytes (a MessagePack value, see
/// <see cref="TypeTag"/>) the encoder writes before the value. A received argument matches a
/// handler parameter when its descriptor bytes equal the parameter's, so matching is a byte
/// comparison and never resolves a type name from the wire.
/// </summary>
internal sealed class WireType
{
    /// <summary>Deepest nesting of arrays/lists the codec accepts, e.g. int[][] is depth 2.</summary>
    public const int MaxDepth = 8;

    /// <summary>Longest type key in UTF-8 bytes; keeps hostile descriptors small.</summary>
    public const int MaxTypeKeyBytes = 4096;

    private WireType(TypeTag tag, Type clrType, string? key, WireType? element)
    {
        Tag = tag;
        ClrType = clrType;
        Key = key;
        Element = element;
        Depth = element is null ? 1 : element.Depth + 1;
        Descriptor = BuildDescriptor();
        DisplayName = BuildDisplayName();
    }

    public TypeTag Tag { get; }

    /// <summary>The .NET type values of this wire type are read into.</summary>
    public Type ClrType { get; }

    /// <summary>Type key for <see cref="TypeTag.Enum"/> and <see cref="TypeTag.Object"/>, else null.</summary>
    public string? Key { get; }

    /// <summary>Element type of arrays and lists, inner type of nullable elements.</summary>
    public WireType? Element { get; }

    public int Depth { get; }

    /// <summary>The descriptor exactly as it appears on the wire (MessagePack).</summary>
    public byte[] Descriptor { get; }

    public string DisplayName { get; }

    /// <summary>Describes <paramref name="type"/>, or explains why the codec cannot carry it.</summary>
    public static bool TryFor(Type type, out WireType? wire, out string? error) => TryFor(type, 1, out wire, out error);

    /// <summary>
    /// Type key used on the wire for enums and <see cref="TypeTag.Object"/> types: <see cref="Type.FullName"/> for
    /// non-generic types; for generic ones the definition's full name with argument keys, so that
    /// sender and receiver need not share assembly versions of the type arguments.
    /// </summary>
    public static string? KeyOf(Type type)
    {
        if (type.IsArray)
            return KeyOf(type.GetElementType()!) is { } e ? e + (type.IsSZArray ? "[]" : "[" + new string(',', type.GetArrayRank() - 1) + "]") : null;
        if (!type.IsConstructedGenericType)
            return type.FullName;
        var sb = new StringBuilder(type.GetGenericTypeDefinition().FullName).Append('[');
        var args = type.GetGenericArguments();
        for (int i = 0; i < args.Length; i++)
        {
            if (KeyOf(args[i]) is not { } k) return null;
            sb.Append(i == 0 ? "" : ",").Append(k);
        }
        return sb.Append(']').ToString();
    }

    private static bool TryFor(Type type, int depth, out WireType? wire, out string? error)
    {
        wire = null;
        if (depth > MaxDepth)
        {
            error = $"arrays and lists nest more than {MaxDepth} levels deep; flatten the data or wrap it in a record";
            return false;
        }

        if (Primitive(type) is { } primitive)
        {
            wire = primitive;
            error = null;
            return true;
        }

        if (Unsupported(type) is { } reason)
        {
            error = reason;
            return false;
        }

        if (type.IsEnum)
            return WithKey(TypeTag.Enum, type, out wire, out error);

        if (type.IsSZArray || (type.IsConstructedGenericType && type.GetGenericTypeDefinition() == typeof(List<>)))
        {
            var elementType = type.IsArray ? type.GetElementType()! : type.GetGenericArguments()[0];
            if (!TryFor(elementType, depth + 1, out var element, out var inner))
            {
                error = $"element type {Display(elementType)}: {inner}";
                return false;
            }
            wire = new WireType(type.IsArray ? TypeTag.Array : TypeTag.List, type, null, element);
            error = null;
            return true;
        }

        if (Nullable.GetUnderlyingType(type) is { } underlying && (Primitive(underlying) is not null || underlying.IsEnum))
        {
            // Only scalars and enums get the Nullable wrapper; other nullable structs are Object
            // types (the serializer handles null), so one rule decides the descriptor.
            TryFor(underlying, depth, out var inner, out error);
            wire = new WireType(TypeTag.Nullable, type, null, inner);
            return true;
        }

        return WithKey(TypeTag.Object, type, out wire, out error);
    }

    private static bool WithKey(TypeTag tag, Type type, out WireType? wire, out string? error)
    {
        var key = KeyOf(type);
        if (key is null || Encoding.UTF8.GetByteCount(key) > MaxTypeKeyBytes)
        {
            wire = null;
            error = key is null ? "the type has no full name" : $"its type name is longer than {MaxTypeKeyBytes} bytes";
            return false;
        }
        wire = new WireType(tag, type, key, null);
        error = null;
        return true;
    }

    /// <summary>Why a type can never be sent or received, or null when it can.</summary>
    private static string? Unsupported(Type type)
    {
        if (type.IsByRef || type.IsPointer || type.IsFunctionPointer || type.IsByRefLike)
            return "ref, out, pointer and span-like types cannot be carried in a message; pass the value itself";
        if (type.ContainsGenericParameters)
            return "open generic types cannot be carried; use a closed type such as List<int>";
        if (type == typeof(object) || type == typeof(ValueType) || type == typeof(Enum) || type == typeof(Array))
            return "the declared type is too general to decode; declare the concrete type that Send passes";
        if (type.IsInterface || type.IsAbstract)
            return "interfaces and abstract classes cannot be decoded; declare a concrete type (for example List<T> or T[] instead of IList<T>)";
        if (type.IsArray && !type.IsSZArray)
            return "multi-dimensional arrays are not supported; use a jagged array (T[][])";
        if (typeof(Delegate).IsAssignableFrom(type) || typeof(System.Reflection.MemberInfo).IsAssignableFrom(type))
            return "delegates and reflection objects cannot be carried in a message";
        if (type == typeof(IntPtr) || type == typeof(UIntPtr) || type == typeof(void))
            return "native-sized and void types cannot be carried in a message; use long or ulong";
        return null;
    }

    /// <summary>The shared description of a scalar type (bool, numbers, char, string, byte[], Guid, dates), or null.</summary>
    public static WireType? Primitive(Type type) => Type.GetTypeCode(type) switch
    {
        _ when type.IsEnum => null,
        TypeCode.Boolean => Primitives.Bool,
        TypeCode.Byte => Primitives.Byte,
        TypeCode.SByte => Primitives.SByte,
        TypeCode.Int16 => Primitives.Int16,
        TypeCode.UInt16 => Primitives.UInt16,
        TypeCode.Int32 => Primitives.Int32,
        TypeCode.UInt32 => Primitives.UInt32,
        TypeCode.Int64 => Primitives.Int64,
        TypeCode.UInt64 => Primitives.UInt64,
        TypeCode.Single => Primitives.Single,
        TypeCode.Double => Primitives.Double,
        TypeCode.Decimal => Primitives.Decimal,
        TypeCode.Char => Primitives.Char,
        TypeCode.String => Primitives.String,
        TypeCode.DateTime => Primitives.DateTime,
        _ when type == typeof(byte[]) => Primitives.Bytes,
        _ when type == typeof(Guid) => Primitives.Guid,
        _ when type == typeof(DateTimeOffset) => Primitives.DateTimeOffset,
        _ when type == typeof(TimeSpan) => Primitives.TimeSpan,
        _ => null,
    };

    /// <summary>C#-style name for diagnostics: keywords for primitives, otherwise the type key.</summary>
    public static string Display(Type type)
    {
        if (type == typeof(object)) return "object";
        if (Nullable.GetUnderlyingType(type) is { } u) return Display(u) + "?";
        if (Primitive(type) is { } p) return p.DisplayName;
        if (type.IsSZArray) return Display(type.GetElementType()!) + "[]";
        if (type.IsConstructedGenericType && type.GetGenericTypeDefinition() == typeof(List<>))
            return "List<" + Display(type.GetGenericArguments()[0]) + ">";
        return KeyOf(type) ?? type.Name;
    }

    /// <summary>A scalar's tag alone, else <c>[tag, key]</c> or <c>[tag, element descriptor]</c>.</summary>
    private byte[] BuildDescriptor()
    {
        var buffer = new ArrayBufferWriter<byte>(16);
        var w = new MessagePackWriter(buffer);
        if (!TypeTags.IsScalar(Tag))
            w.WriteArrayHeader(2);
        w.Write((byte)Tag);
        if (Key is not null)
            w.Write(Key);
        else if (Element is not null)
            w.WriteRaw(Element.Descriptor);
        w.Flush();
        return buffer.WrittenSpan.ToArray();
    }

    private string BuildDisplayName() => Tag switch
    {
        TypeTag.Array => Element!.DisplayName + "[]",
        TypeTag.List => "List<" + Element!.DisplayName + ">",
        TypeTag.Nullable => Element!.DisplayName + "?",
        TypeTag.Enum or TypeTag.Object => Key!,
        _ => TypeTags.Keyword(Tag)!,
    };

    /// <summary>Shared immutable descriptions of the built-in scalar types; built once, never mutated.</summary>
    private static class Primitives
    {
        public static readonly WireType Bool = new(TypeTag.Bool, typeof(bool), null, null);
        public static readonly WireType Byte = new(TypeTag.Byte, typeof(byte), null, null);
        public static readonly WireType SByte = new(TypeTag.SByte, typeof(sbyte), null, null);
        public static readonly WireType Int16 = new(TypeTag.Int16, typeof(short), null, null);
        public static readonly WireType UInt16 = new(TypeTag.UInt16, typeof(ushort), null, null);
        public static readonly WireType Int32 = new(TypeTag.Int32, typeof(int), null, null);
        public static readonly WireType UInt32 = new(TypeTag.UInt32, typeof(uint), null, null);
        public static readonly WireType Int64 = new(TypeTag.Int64, typeof(long), null, null);
        public static readonly WireType UInt64 = new(TypeTag.UInt64, typeof(ulong), null, null);
        public static readonly WireType Single = new(TypeTag.Single, typeof(float), null, null);
        public static readonly WireType Double = new(TypeTag.Double, typeof(double), null, null);
        public static readonly WireType Decimal = new(TypeTag.Decimal, typeof(decimal), null, null);
        public static readonly WireType Char = new(TypeTag.Char, typeof(char), null, null);
        public static readonly WireType String = new(TypeTag.String, typeof(string), null, null);
        public static readonly WireType Bytes = new(TypeTag.Bytes, typeof(byte[]), null, null);
        public static readonly WireType Guid = new(TypeTag.Guid, typeof(Guid), null, null);
        public static readonly WireType DateTime = new(TypeTag.DateTime, typeof(DateTime), null, null);
        public static readonly WireType DateTimeOffset = new(TypeTag.DateTimeOffset, typeof(DateTimeOffset), null, null);
        public static readonly WireType TimeSpan = new(TypeTag.TimeSpan, typeof(TimeSpan), null, null);
    }
}
