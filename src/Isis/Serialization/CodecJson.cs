using System.Text.Json;
using System.Text.Json.Serialization.Metadata;

namespace Isis.Serialization;

/// <summary>
/// The one System.Text.Json configuration used for JSON-coded arguments. Read-only after
/// construction, so sharing it is not shared mutable state (its metadata cache is internal).
/// </summary>
internal static class CodecJson
{
    public static readonly JsonSerializerOptions Options = Create();

    private static JsonSerializerOptions Create()
    {
        var options = new JsonSerializerOptions(JsonSerializerDefaults.General)
        {
            // Fields too, so value tuples and field-style message structs round-trip.
            IncludeFields = true,
            MaxDepth = 64,
            TypeInfoResolver = new DefaultJsonTypeInfoResolver(),
        };
        options.MakeReadOnly();
        return options;
    }
}
