namespace Isis.Serialization;

/// <summary>
/// First byte of every type descriptor on the wire. Values are part of the wire format: never
/// renumber, only append.
/// </summary>
internal enum TypeTag : byte
{
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

    /// <summary>Followed by a type key; the value is the underlying number as int64.</summary>
    Enum = 20,

    /// <summary>One-dimensional array; followed by the element descriptor.</summary>
    Array = 21,

    /// <summary><see cref="List{T}"/>; followed by the element descriptor.</summary>
    List = 22,

    /// <summary>Nullable fixed-size element (only inside arrays and lists); followed by the inner descriptor.</summary>
    Nullable = 23,

    /// <summary>Followed by a type key; the value is System.Text.Json UTF-8.</summary>
    Json = 24,
}

/// <summary>Facts about tags that both the encoder and the validator rely on.</summary>
internal static class TypeTags
{
    public const TypeTag Last = TypeTag.Json;

    /// <summary>Size of a fixed-size value, or 0 when the value is length-prefixed or composite.</summary>
    public static int FixedSize(TypeTag tag) => tag switch
    {
        TypeTag.Bool or TypeTag.Byte or TypeTag.SByte => 1,
        TypeTag.Int16 or TypeTag.UInt16 or TypeTag.Char => 2,
        TypeTag.Int32 or TypeTag.UInt32 or TypeTag.Single => 4,
        TypeTag.Int64 or TypeTag.UInt64 or TypeTag.Double or TypeTag.TimeSpan or TypeTag.Enum => 8,
        TypeTag.DateTime => 9,
        TypeTag.DateTimeOffset => 10,
        TypeTag.Decimal or TypeTag.Guid => 16,
        _ => 0,
    };

    /// <summary>
    /// Elements of these kinds may be null, so inside arrays and lists each one starts with a
    /// presence byte (0 = null, 1 = value follows). Fixed-size kinds never can.
    /// </summary>
    public static bool HasPresenceByte(TypeTag tag) =>
        tag is TypeTag.String or TypeTag.Bytes or TypeTag.Array or TypeTag.List or TypeTag.Nullable or TypeTag.Json;

    public static bool HasTypeKey(TypeTag tag) => tag is TypeTag.Enum or TypeTag.Json;

    /// <summary>Fixed-size values whose raw little-endian memory layout equals their wire layout.</summary>
    public static bool IsBlittable(TypeTag tag) => tag is TypeTag.Byte or TypeTag.SByte or TypeTag.Int16
        or TypeTag.UInt16 or TypeTag.Int32 or TypeTag.UInt32 or TypeTag.Int64 or TypeTag.UInt64
        or TypeTag.Single or TypeTag.Double or TypeTag.Char;

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
