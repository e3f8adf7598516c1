using System.Buffers;
using Isis.Core.Common;

namespace Isis.Serialization;

/// <summary>
/// An <see cref="IBufferWriter{T}"/> over arrays from a buffer pool: a Send's arguments are encoded
/// straight into the array the protocol then holds, so encoding allocates nothing. It refuses to
/// grow past <c>maxBytes</c>, so an oversized message fails as soon as it passes the limit instead
/// of after copying everything. One writer per thread (it is not thread-safe); <see cref="Detach"/>
/// hands the array over and leaves the writer empty.
/// </summary>
internal sealed class PooledBufferWriter(IBufferPool pool, int maxBytes = ArgumentCodecOptions.DefaultMaxPayloadBytes) : IBufferWriter<byte>
{
    private byte[]? _array;
    private int _written;

    public void Advance(int count)
    {
        if (count < 0 || _array == null || _written + count > _array.Length) throw new ArgumentOutOfRangeException(nameof(count));
        CheckRoom(count);
        _written += count;
    }

    public Memory<byte> GetMemory(int sizeHint = 0)
    {
        Ensure(sizeHint);
        return _array.AsMemory(_written);
    }

    public Span<byte> GetSpan(int sizeHint = 0)
    {
        Ensure(sizeHint);
        return _array.AsSpan(_written);
    }

    /// <summary>Gives the written bytes away: the caller owns the array (and returns it to the pool when done).</summary>
    public (byte[] Array, int Length) Detach()
    {
        Ensure(0);
        (byte[] Array, int Length) result = (_array!, _written);
        _array = null;
        _written = 0;
        return result;
    }

    /// <summary>Drops a partial encoding (after an encoding error): the array goes back to the pool.</summary>
    public void Reset()
    {
        if (_array != null) pool.Return(_array);
        _array = null;
        _written = 0;
    }

    private void Ensure(int sizeHint)
    {
        CheckRoom(sizeHint);
        int needed = _written + Math.Max(sizeHint, 1);
        if (_array != null && needed <= _array.Length) return;
        byte[] bigger = pool.Rent(Math.Min(Math.Max(needed, _array == null ? 256 : _array.Length * 2), Math.Max(needed, maxBytes)));
        if (_array != null)
        {
            _array.AsSpan(0, _written).CopyTo(bigger);
            pool.Return(_array);
        }
        _array = bigger;
    }

    private void CheckRoom(int bytes)
    {
        if (bytes > maxBytes - _written)
            throw new PayloadTooLargeException(
                $"The message arguments encode to more than the maximum payload size of {maxBytes} bytes ({maxBytes / (1024.0 * 1024.0):0.##} MiB). " +
                "Send less data per message (split it, or send a reference to it), or raise ArgumentCodecOptions.MaxPayloadBytes.");
    }
}

/// <summary>The encoded arguments exceed the payload limit; an <see cref="ArgumentException"/> so callers see a bad-argument failure at Send.</summary>
internal sealed class PayloadTooLargeException(string message) : ArgumentException(message);
