namespace Isis.Serialization;

/// <summary>
/// The tag of a type descriptor: what a handler's parameter must be declared as for an argument to
/// reach it. Values are part of the wire format: never renumber, only append.
/// </summary>
/// <remarks>
/// A descriptor is a MessagePack value: a scalar's tag alone (a positive fixint), MessagePack nil
/// for a null argument, or a two-element array <c>[tag, parameter]</c> whose parameter is a type
/// key string (<see cref="Enum"/>, <see cref="Object"/>) or the element's descriptor
/// (<see cref="Array"/>, <see cref="List"/>, <see cref="Nullable"/>).
/// </remarks>
internal enum TypeTag : byte
{
    /// <summary>A null argument (nil on the wire); never a parameter's tag.</summary>
    Null = 0,
    Bool = 1,
    Byte = 2,
    SByte = 3,
    Int16 = 4,
    UInt16 = 5,
    Int32 = 6,
    UInt32 = 7,
    Int64 = 8,
    UInt64 = 9,
    Single = 10,
    Double = 11,
    Decimal = 12,
    Char = 13,
    String = 14,
    Bytes = 15,
    Guid = 16,
    DateTime = 17,
    DateTimeOffset = 18,
    TimeSpan = 19,

    /// <summary>An enum, named by its type key; the value is its underlying number.</summary>
    Enum = 20,

    /// <summary>One-dimensional array; the parameter is the element descriptor.</summary>
    Array = 21,

    /// <summary><see cref="List{T}"/>; the parameter is the element descriptor.</summary>
    List = 22,

    /// <summary>Nullable scalar or enum element (only inside arrays and lists); the parameter is the inner descriptor.</summary>
    Nullable = 23,

    /// <summary>
    /// Any other type (records, classes, structs, dictionaries, sets, tuples), named by its type key
    /// and serialized by MessagePack-CSharp: by its <c>[MessagePackObject]</c> contract when it has
    /// one, else by its public members (the contractless resolver).
    /// </summary>
    Object = 24,
}

/// <summary>Facts about tags that both the encoder and the validator rely on.</summary>
internal static class TypeTags
{
    public const TypeTag Last = TypeTag.Object;

    /// <summary>Tags written alone, with no parameter.</summary>
    public static bool IsScalar(TypeTag tag) => tag is >= TypeTag.Bool and <= TypeTag.TimeSpan;

    public static bool HasTypeKey(TypeTag tag) => tag is TypeTag.Enum or TypeTag.Object;

    /// <summary>Scalars and enums whose .NET type is a value type: what <see cref="TypeTag.Nullable"/> may wrap.</summary>
    public static bool IsNullableInner(TypeTag tag) => tag is TypeTag.Enum || (IsScalar(tag) && tag is not (TypeTag.String or TypeTag.Bytes));

    /// <summary>C#-style name used in diagnostics, e.g. "int".</summary>
    public static string? Keyword(TypeTag tag) => tag switch
    {
        TypeTag.Null => "null",
        TypeTag.Bool => "bool",
        TypeTag.Byte => "byte",
        TypeTag.SByte => "sbyte",
        TypeTag.Int16 => "short",
        TypeTag.UInt16 => "ushort",
        TypeTag.Int32 => "int",
        TypeTag.UInt32 => "uint",
        TypeTag.Int64 => "long",
        TypeTag.UInt64 => "ulong",
        TypeTag.Single => "float",
        TypeTag.Double => "double",
        TypeTag.Decimal => "decimal",
        TypeTag.Char => "char",
        TypeTag.String => "string",
        TypeTag.Bytes => "byte[]",
        TypeTag.Guid => "Guid",
        TypeTag.DateTime => "DateTime",
        TypeTag.DateTimeOffset => "DateTimeOffset",
        TypeTag.TimeSpan => "TimeSpan",
        _ => null,
    };
}
