using System.Runtime.CompilerServices;
using MessagePack;
using MessagePack.Formatters;
using MessagePack.Resolvers;

namespace Isis.Serialization;

/// <summary>
/// The one MessagePack-CSharp configuration for argument values that are not scalars: enums,
/// arrays, lists, dictionaries, sets, tuples, <c>[MessagePackObject]</c> types, and plain records
/// and classes (by their public members, the contractless resolver). Immutable after construction,
/// so sharing it is not shared mutable state (the resolvers' formatter caches are internal).
/// </summary>
/// <remarks>
/// <list type="bullet">
/// <item><see cref="MessagePackSecurity.UntrustedData"/>: received bytes come from the network, so
/// object graphs are depth-limited and dictionaries and sets hash with collision-resistant comparers.</item>
/// <item>No typeless resolver: a <c>object</c>-typed member is read as primitives, maps and arrays,
/// never as a type named in the bytes, so nothing on the wire can choose what gets created.</item>
/// <item>Arrays and lists of int, long and double use span formatters (<see cref="NumericArrayFormatters"/>),
/// which write the same bytes as the library's and read them about ten times faster.</item>
/// <item><see cref="DateTime"/> keeps its <see cref="DateTimeKind"/> (the native resolver) and
/// <see cref="Guid"/> travels as its 16 bytes, wherever they appear.</item>
/// <item>Every formatter checks that the stack has room before it recurses, so an object graph with
/// a cycle fails at Send with an exception instead of overflowing the stack of the sending process.</item>
/// </list>
/// </remarks>
internal static class PayloadSerializer
{
    public static readonly MessagePackSerializerOptions Options = MessagePackSerializerOptions.Standard
        .WithResolver(StackGuardResolver.Instance)
        .WithSecurity(MessagePackSecurity.UntrustedData);

    /// <summary>The library's resolvers, in the order they are asked.</summary>
    private static readonly IFormatterResolver Inner = CompositeResolver.Create(
        NumericArrayFormatters.All,
        [NativeDateTimeResolver.Instance, NativeGuidResolver.Instance, ContractlessStandardResolver.Instance]);

    /// <summary>Hands out each formatter of <see cref="Inner"/> wrapped in a stack check.</summary>
    private sealed class StackGuardResolver : IFormatterResolver
    {
        public static readonly StackGuardResolver Instance = new();

        public IMessagePackFormatter<T>? GetFormatter<T>() => Cache<T>.Formatter;

        /// <summary>Built once per type on first use (the pattern the library's own resolvers use).</summary>
        private static class Cache<T>
        {
            public static readonly IMessagePackFormatter<T>? Formatter = Create();

            private static IMessagePackFormatter<T>? Create()
            {
                var inner = Inner.GetFormatter<T>();
                // Scalars and strings cannot recurse: no check, no extra call per element of a T[].
                return inner is null || typeof(T).IsPrimitive || typeof(T) == typeof(string) ? inner : new StackGuarded<T>(inner);
            }
        }
    }

    private sealed class StackGuarded<T>(IMessagePackFormatter<T> inner) : IMessagePackFormatter<T>
    {
        public void Serialize(ref MessagePackWriter writer, T value, MessagePackSerializerOptions options)
        {
            RuntimeHelpers.EnsureSufficientExecutionStack();
            inner.Serialize(ref writer, value, options);
        }

        public T Deserialize(ref MessagePackReader reader, MessagePackSerializerOptions options)
        {
            RuntimeHelpers.EnsureSufficientExecutionStack();
            return inner.Deserialize(ref reader, options);
        }
    }
}
