using System.Buffers;
using System.Buffers.Binary;

namespace Isis.Serialization;

/// <summary>
/// Encodes handler arguments into a payload and parses received payloads.
/// Layout: opcode (int32 LE), argument count (u8), then per argument a type descriptor (tag, plus
/// a type key for enums and JSON, plus the element descriptor for arrays and lists) and the value.
/// Built-in types use a fixed binary layout; any other type travels as System.Text.Json UTF-8.
/// </summary>
internal static class ArgumentCodec
{
    public const int HeaderSize = 5;

    public const int MaxArguments = 32;

    public static byte[] Encode(int opcode, ReadOnlySpan<object?> args, ArgumentCodecOptions? options = null)
    {
        var buffer = new ArrayBufferWriter<byte>(256);
        Encode(opcode, args, buffer, options);
        return buffer.WrittenSpan.ToArray();
    }

    /// <summary>Encodes into an array from <paramref name="writer"/>'s pool, which the caller then owns.</summary>
    public static (byte[] Array, int Length) Encode(int opcode, ReadOnlySpan<object?> args, PooledBufferWriter writer)
    {
        try
        {
            Encode(opcode, args, (IBufferWriter<byte>)writer);
        }
        catch
        {
            writer.Reset();
            throw;
        }
        return writer.Detach();
    }

    /// <summary>
    /// Appends the payload to <paramref name="output"/>. Throws <see cref="ArgumentException"/> for
    /// arguments that cannot be sent or a payload over the size limit; the output then holds a
    /// partial payload that the caller must discard.
    /// </summary>
    public static void Encode(int opcode, ReadOnlySpan<object?> args, IBufferWriter<byte> output, ArgumentCodecOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(output);
        if (args.Length > MaxArguments)
            throw new ArgumentException(
                $"A message carries at most {MaxArguments} arguments but {args.Length} were given; group related values into an array, a List<T> or a record.",
                nameof(args));

        var w = new PayloadWriter(output, (options ?? ArgumentCodecOptions.Default).MaxPayloadBytes);
        w.WriteInt32(opcode);
        w.WriteByte((byte)args.Length);
        for (int i = 0; i < args.Length; i++)
        {
            var value = args[i];
            if (value is null)
            {
                w.WriteByte((byte)TypeTag.Null);
                continue;
            }
            if (value is CancellationToken)
            {
                // SendAsync(1, 42, token) binds to the params overload, with the token as a message argument.
                throw new ArgumentException(
                    $"Argument {i} is a CancellationToken, which is not a message argument: to pass a token, give the arguments as an array, " +
                    "for example SendAsync(opcode, [arg1, arg2], cancellationToken).", nameof(args));
            }
            if (!WireType.TryFor(value.GetType(), out var wire, out var error))
                throw new ArgumentException($"Argument {i} of type {WireType.Display(value.GetType())} cannot be sent: {error}.", nameof(args));
            w.WriteBytes(wire!.Descriptor);
            try
            {
                ValueEncoder.Write(ref w, wire, value, withPresence: false);
            }
            catch (ArgumentException e) when (e is not PayloadTooLargeException)
            {
                throw new ArgumentException($"Argument {i} ({wire.DisplayName}) cannot be sent: {e.Message}", nameof(args), e);
            }
        }
    }

    /// <summary>
    /// Parses and fully validates a payload without creating argument objects or resolving type
    /// names. Never throws, whatever the bytes.
    /// </summary>
    // scratch: Reused storage for the argument infos (MaxArguments long), so parsing allocates nothing; valid until the next parse into it.
    public static bool TryReadHeader(ReadOnlySpan<byte> payload, out int opcode, out EncodedArguments args, out string? error, ArgumentInfo[]? scratch = null)
    {
        if (!PayloadValidator.TryParse(payload, out opcode, out var infos, out error, scratch))
        {
            args = default;
            return false;
        }
        args = new EncodedArguments(payload, infos, payload[4]);
        return true;
    }

    /// <summary>Opcode of a payload, without validating the rest (for counters and logs).</summary>
    public static bool TryPeekOpcode(ReadOnlySpan<byte> payload, out int opcode) =>
        BinaryPrimitives.TryReadInt32LittleEndian(payload, out opcode);

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
}
