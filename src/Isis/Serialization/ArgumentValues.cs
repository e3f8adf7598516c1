using System.Buffers;
using System.Text;
using MessagePack;

namespace Isis.Serialization;

/// <summary>
/// Writes and reads one argument value as MessagePack. Scalars and strings are written and read
/// here with <see cref="MessagePackWriter"/> / <see cref="MessagePackReader"/> directly (the same
/// bytes the library's formatters produce, without its per-type lookup and with strict UTF-8);
/// everything else goes through MessagePack-CSharp with <see cref="PayloadSerializer.Options"/>.
/// The type to read always comes from the handler's declaration, never from the payload.
/// </summary>
internal static class ArgumentValues
{
    /// <summary>Strict UTF-8: a string with a lone surrogate fails at Send, and invalid bytes fail at receipt, instead of turning into U+FFFD.</summary>
    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);

    /// <summary>Writes a non-null value of <paramref name="wire"/>'s type. Throws <see cref="ArgumentException"/> saying why it cannot be sent.</summary>
    public static void Write(ref MessagePackWriter w, WireType wire, object value)
    {
        switch (wire.Tag)
        {
            case TypeTag.Bool: w.Write((bool)value); return;
            case TypeTag.Byte: w.Write((byte)value); return;
            case TypeTag.SByte: w.Write((sbyte)value); return;
            case TypeTag.Int16: w.Write((short)value); return;
            case TypeTag.UInt16: w.Write((ushort)value); return;
            case TypeTag.Char: w.Write((char)value); return;
            case TypeTag.Int32: w.Write((int)value); return;
            case TypeTag.UInt32: w.Write((uint)value); return;
            case TypeTag.Int64: w.Write((long)value); return;
            case TypeTag.UInt64: w.Write((ulong)value); return;
            case TypeTag.Single: w.Write((float)value); return;
            case TypeTag.Double: w.Write((double)value); return;
            case TypeTag.String: WriteString(ref w, (string)value); return;
            case TypeTag.Bytes: w.Write((byte[])value); return;
        }
        try
        {
            MessagePackSerializer.Serialize(wire.ClrType, ref w, value, PayloadSerializer.Options);
        }
        catch (MessagePackSerializationException e)
        {
            // A payload over the limit is reported as such, not as a serialization failure.
            if (Find<PayloadTooLargeException>(e) is { } tooLarge) throw new PayloadTooLargeException(tooLarge.Message);
            if (Find<InsufficientExecutionStackException>(e) is not null)
                throw new ArgumentException("its object graph is too deep or contains a cycle; send a tree of values, not a graph with back references.", e);
            throw new ArgumentException(
                $"MessagePack cannot serialize it: {Describe(e)}. Send built-in types, a [MessagePackObject] type, or a record or class " +
                "with public properties and a constructor MessagePack can call.", e);
        }
    }

    /// <summary>
    /// Reads one value of <paramref name="wire"/>'s type that must take exactly the reader's bytes.
    /// Never throws: hostile bytes, and user constructors or setters that throw, become an error.
    /// </summary>
    // span: The same bytes as bytes (the caller has the payload's span already; Memory.Span is not free).
    public static bool TryRead(ReadOnlyMemory<byte> bytes, ReadOnlySpan<byte> span, WireType wire, out object? value, out string? error)
    {
        if (TryReadCommon(span, wire.Tag, out value, out error))
            return error is null;
        var r = new MessagePackReader(bytes);
        try
        {
            value = wire.Tag switch
            {
                TypeTag.Bool => r.ReadBoolean(),
                TypeTag.Byte => r.ReadByte(),
                TypeTag.SByte => r.ReadSByte(),
                TypeTag.Int16 => r.ReadInt16(),
                TypeTag.UInt16 => r.ReadUInt16(),
                TypeTag.Char => r.ReadChar(),
                TypeTag.Int32 => r.ReadInt32(),
                TypeTag.UInt32 => r.ReadUInt32(),
                TypeTag.Int64 => r.ReadInt64(),
                TypeTag.UInt64 => r.ReadUInt64(),
                TypeTag.Single => r.ReadSingle(),
                TypeTag.Double => r.ReadDouble(),
                TypeTag.String => ReadString(ref r),
                TypeTag.Bytes => r.ReadBytes()?.ToArray(),
                _ => MessagePackSerializer.Deserialize(wire.ClrType, ref r, PayloadSerializer.Options),
            };
        }
        catch (Exception e)
        {
            value = null;
            error = $"cannot read {wire.DisplayName}: {Describe(e)}";
            return false;
        }
        if (!r.End)
        {
            value = null;
            error = $"{wire.DisplayName} does not take the whole value: {r.Sequence.Length - r.Consumed} bytes remain";
            return false;
        }
        error = null;
        return true;
    }

    /// <summary>
    /// The common encodings of the hottest types, read from the span (see <see cref="MessagePackSpan"/>):
    /// true when it decided (<paramref name="error"/> says whether it failed), false to leave the
    /// value to <see cref="MessagePackReader"/>.
    /// </summary>
    private static bool TryReadCommon(ReadOnlySpan<byte> s, TypeTag tag, out object? value, out string? error)
    {
        value = null;
        error = null;
        switch (tag)
        {
            case TypeTag.Int32 or TypeTag.Int64 or TypeTag.UInt32 or TypeTag.Int16 or TypeTag.UInt16 or TypeTag.Byte or TypeTag.SByte:
                if (!MessagePackSpan.TryReadInt64(s, out long n, out int length) || length != s.Length) return false;
                value = tag switch
                {
                    TypeTag.Int32 when n is >= int.MinValue and <= int.MaxValue => (int)n,
                    TypeTag.Int64 => n,
                    TypeTag.UInt32 when n is >= 0 and <= uint.MaxValue => (uint)n,
                    TypeTag.Int16 when n is >= short.MinValue and <= short.MaxValue => (short)n,
                    TypeTag.UInt16 when n is >= 0 and <= ushort.MaxValue => (ushort)n,
                    TypeTag.Byte when n is >= 0 and <= byte.MaxValue => (byte)n,
                    TypeTag.SByte when n is >= sbyte.MinValue and <= sbyte.MaxValue => (sbyte)n,
                    _ => null,
                };
                if (value is null) error = $"cannot read {TypeTags.Keyword(tag)}: {n} is out of its range";
                return true;
            case TypeTag.Bool when s.Length == 1 && s[0] is MessagePackCode.True or MessagePackCode.False:
                value = s[0] == MessagePackCode.True;
                return true;
            case TypeTag.String:
                if (s.Length == 1 && s[0] == MessagePackCode.Nil) return true;
                if (!MessagePackSpan.TryReadStringSpan(s, out ReadOnlySpan<byte> utf8, out length) || length != s.Length) return false;
                try
                {
                    value = StrictUtf8.GetString(utf8);
                }
                catch (DecoderFallbackException)
                {
                    error = "cannot read string: the string is not valid UTF-8";
                }
                return true;
            default:
                return false;
        }
    }

    private static void WriteString(ref MessagePackWriter w, string value)
    {
        int length;
        try
        {
            length = StrictUtf8.GetByteCount(value);
        }
        catch (EncoderFallbackException e)
        {
            throw new ArgumentException("A string argument is not valid UTF-16 (it contains an unpaired surrogate) and cannot be encoded as UTF-8.", e);
        }
        w.WriteStringHeader(length);
        StrictUtf8.GetBytes(value, w.GetSpan(length));
        w.Advance(length);
    }

    private static string? ReadString(ref MessagePackReader r)
    {
        if (r.TryReadNil()) return null;
        ReadOnlySequence<byte> utf8 = r.ReadStringSequence()!.Value;
        try
        {
            return StrictUtf8.GetString(utf8);
        }
        catch (DecoderFallbackException)
        {
            throw new FormatException("the string is not valid UTF-8");
        }
    }

    private static T? Find<T>(Exception e) where T : Exception
    {
        for (Exception? x = e; x is not null; x = x.InnerException)
        {
            if (x is T found) return found;
        }
        return null;
    }

    /// <summary>"Type: message" for the exception and each inner one, so the root cause (a user constructor's message, say) shows.</summary>
    private static string Describe(Exception e)
    {
        var sb = new StringBuilder();
        for (Exception? x = e; x is not null; x = x.InnerException)
            sb.Append(x == e ? "" : " <- ").Append(x.GetType().Name).Append(": ").Append(x.Message);
        return sb.ToString();
    }
}
