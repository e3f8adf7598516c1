using Isis.Core.Common;
using MessagePack;

namespace Isis.Serialization;

/// <summary>
/// Encodes handler arguments into a payload and parses received payloads. A payload is one
/// MessagePack array: the opcode, then per argument a type descriptor (see <see cref="TypeTag"/>)
/// and the value, which MessagePack-CSharp writes (see <see cref="ArgumentValues"/>). The
/// descriptors are what dispatch matches handler signatures against; the values are plain
/// MessagePack, so any MessagePack tool can read a payload.
/// </summary>
internal static class ArgumentCodec
{
    /// <summary>Largest header: an array16 header (3 bytes) and an int32 opcode (5 bytes).</summary>
    public const int MaxHeaderBytes = 8;

    public const int MaxArguments = 32;

    /// <summary>Encodes into a new array of exactly the payload's length (tests, tools, and payloads kept apart from the pool).</summary>
    public static byte[] Encode(int opcode, ReadOnlySpan<object?> args, ArgumentCodecOptions? options = null)
    {
        var writer = new PooledBufferWriter(AllocatingPool.Instance, (options ?? ArgumentCodecOptions.Default).MaxPayloadBytes);
        (byte[] array, int length) = Encode(opcode, args, writer);
        return array.Length == length ? array : array.AsSpan(0, length).ToArray();
    }

    /// <summary>
    /// Encodes into an array from <paramref name="writer"/>'s pool, which the caller then owns.
    /// Throws <see cref="ArgumentException"/> for arguments that cannot be sent or a payload over
    /// the writer's limit (the writer is then empty again).
    /// </summary>
    // wireTypes: The calling thread's descriptions of argument types; null describes each afresh.
    public static (byte[] Array, int Length) Encode(int opcode, ReadOnlySpan<object?> args, PooledBufferWriter writer, WireTypeCache? wireTypes = null)
    {
        try
        {
            Write(opcode, args, writer, wireTypes);
        }
        catch
        {
            writer.Reset();
            throw;
        }
        return writer.Detach();
    }

    private static void Write(int opcode, ReadOnlySpan<object?> args, PooledBufferWriter output, WireTypeCache? wireTypes)
    {
        if (args.Length > MaxArguments)
            throw new ArgumentException(
                $"A message carries at most {MaxArguments} arguments but {args.Length} were given; group related values into an array, a List<T> or a record.",
                nameof(args));

        var w = new MessagePackWriter(output);
        w.WriteArrayHeader(1 + 2 * args.Length);
        w.Write(opcode);
        for (int i = 0; i < args.Length; i++)
        {
            var value = args[i];
            if (value is null)
            {
                w.WriteNil(); // descriptor
                w.WriteNil(); // value
                continue;
            }
            if (value is CancellationToken)
            {
                // SendAsync(1, 42, token) binds to the params overload, with the token as a message argument.
                throw new ArgumentException(
                    $"Argument {i} is a CancellationToken, which is not a message argument: to pass a token, give the arguments as an array, " +
                    "for example SendAsync(opcode, [arg1, arg2], cancellationToken).", nameof(args));
            }
            WireType? wire;
            string? error;
            if (!(wireTypes?.TryGet(value.GetType(), out wire, out error) ?? WireType.TryFor(value.GetType(), out wire, out error)))
                throw new ArgumentException($"Argument {i} of type {WireType.Display(value.GetType())} cannot be sent: {error}.", nameof(args));
            w.WriteRaw(wire!.Descriptor);
            try
            {
                ArgumentValues.Write(ref w, wire, value);
            }
            catch (ArgumentException e) when (e is not PayloadTooLargeException)
            {
                throw new ArgumentException($"Argument {i} ({wire.DisplayName}) cannot be sent: {e.Message}", nameof(args), e);
            }
        }
        w.Flush();
    }

    /// <summary>
    /// Parses and validates a payload's structure without creating argument objects or resolving
    /// type names. Never throws, whatever the bytes.
    /// </summary>
    // scratch: Reused storage for the argument infos (MaxArguments long), so parsing allocates nothing; valid until the next parse into it.
    public static bool TryReadHeader(ReadOnlyMemory<byte> payload, out int opcode, out EncodedArguments args, out string? error, ArgumentInfo[]? scratch = null)
    {
        if (!PayloadValidator.TryParse(payload, out opcode, out var infos, out int count, out error, scratch))
        {
            args = default;
            return false;
        }
        args = new EncodedArguments(payload, infos, count);
        return true;
    }

    /// <summary>Opcode of a payload, without validating the rest (for counters and logs).</summary>
    public static bool TryPeekOpcode(ReadOnlyMemory<byte> payload, out int opcode) => PayloadValidator.TryPeekOpcode(payload, out opcode);

    /// <summary>"(string, int)" for a handler signature.</summary>
    public static string DescribeTypes(ReadOnlySpan<Type> types)
    {
        var parts = new string[types.Length];
        for (int i = 0; i < types.Length; i++)
            parts[i] = WireType.Display(types[i]);
        return "(" + string.Join(", ", parts) + ")";
    }

    /// <summary>"(string, int)" for the arguments of a received message.</summary>
    public static string DescribeTypes(in EncodedArguments args) => args.DescribeTypes();

    /// <summary>"(string, int)" for values about to be sent; null shows as "null".</summary>
    public static string DescribeTypes(ReadOnlySpan<object?> args)
    {
        var parts = new string[args.Length];
        for (int i = 0; i < args.Length; i++)
            parts[i] = args[i] is { } v ? WireType.Display(v.GetType()) : "null";
        return "(" + string.Join(", ", parts) + ")";
    }

    /// <summary>A "pool" that allocates and forgets, for payloads that leave the codec as their own arrays.</summary>
    private sealed class AllocatingPool : IBufferPool
    {
        public static readonly AllocatingPool Instance = new();

        public byte[] Rent(int minimumLength) => new byte[minimumLength];

        public void Return(byte[] array)
        {
        }
    }
}
