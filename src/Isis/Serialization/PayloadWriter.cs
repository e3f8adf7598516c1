using System.Buffers;
using System.Buffers.Binary;

namespace Isis.Serialization;

/// <summary>
/// Little-endian writer over an <see cref="IBufferWriter{T}"/> that enforces the payload limit
/// before each write, so an oversized message fails early instead of after copying everything.
/// </summary>
internal ref struct PayloadWriter(IBufferWriter<byte> output, int maxBytes)
{
    private readonly IBufferWriter<byte> _output = output;
    private readonly int _maxBytes = maxBytes;

    public int Written { get; private set; }

    public void WriteByte(byte value)
    {
        Begin(1)[0] = value;
        Commit(1);
    }

    public void WriteInt16(short value)
    {
        BinaryPrimitives.WriteInt16LittleEndian(Begin(2), value);
        Commit(2);
    }

    public void WriteInt32(int value)
    {
        BinaryPrimitives.WriteInt32LittleEndian(Begin(4), value);
        Commit(4);
    }

    public void WriteInt64(long value)
    {
        BinaryPrimitives.WriteInt64LittleEndian(Begin(8), value);
        Commit(8);
    }

    public void WriteBytes(scoped ReadOnlySpan<byte> bytes)
    {
        // Large blobs may exceed what the writer hands out at once, so copy in chunks.
        while (!bytes.IsEmpty)
        {
            CheckRoom(bytes.Length);
            var span = _output.GetSpan(Math.Min(bytes.Length, 64 * 1024));
            int n = Math.Min(span.Length, bytes.Length);
            bytes[..n].CopyTo(span);
            Commit(n);
            bytes = bytes[n..];
        }
    }

    /// <summary>Length-prefixed bytes.</summary>
    public void WriteBlob(scoped ReadOnlySpan<byte> bytes)
    {
        CheckRoom(4L + bytes.Length);
        WriteInt32(bytes.Length);
        WriteBytes(bytes);
    }

    /// <summary>Length-prefixed strict UTF-8.</summary>
    public void WriteString(string value)
    {
        int length;
        try
        {
            length = WireType.Utf8.GetByteCount(value);
        }
        catch (System.Text.EncoderFallbackException e)
        {
            throw new ArgumentException("A string argument is not valid UTF-16 (it contains an unpaired surrogate) and cannot be encoded as UTF-8.", e);
        }
        CheckRoom(4L + length);
        WriteInt32(length);
        if (length <= 64 * 1024)
        {
            WireType.Utf8.GetBytes(value, Begin(length));
            Commit(length);
        }
        else
        {
            WriteBytes(WireType.Utf8.GetBytes(value));
        }
    }

    public void CheckRoom(long bytes)
    {
        if (bytes > _maxBytes - Written)
            throw new PayloadTooLargeException(
                $"The message arguments encode to more than the maximum payload size of {_maxBytes} bytes ({_maxBytes / (1024.0 * 1024.0):0.##} MiB). " +
                "Send less data per message (split it, or send a reference to it), or raise ArgumentCodecOptions.MaxPayloadBytes.");
    }

    /// <summary>Space for a small write of exactly <paramref name="count"/> bytes; follow with <see cref="Commit"/>.</summary>
    private Span<byte> Begin(int count)
    {
        CheckRoom(count);
        return _output.GetSpan(count)[..count];
    }

    private void Commit(int count)
    {
        _output.Advance(count);
        Written += count;
    }
}

/// <summary>The encoded arguments exceed the payload limit; an <see cref="ArgumentException"/> so callers see a bad-argument failure at Send.</summary>
internal sealed class PayloadTooLargeException(string message) : ArgumentException(message);
