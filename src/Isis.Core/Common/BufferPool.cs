using System.Numerics;

namespace Isis.Core.Common;

/// <summary>
/// Byte arrays to reuse on the steady-state message path instead of allocating one per message.
/// <see cref="Rent"/> may hand out a longer array than asked for; whoever rents tracks the length it
/// uses. An array must be returned at most once and never touched after it is returned.
/// </summary>
internal interface IBufferPool
{
    byte[] Rent(int minimumLength);

    void Return(byte[] array);
}

/// <summary>
/// A pool of power-of-two arrays from 64 B to 64 KiB, each size keeping at most a few MiB of free
/// arrays; longer requests are simply allocated (and their return ignored). Not thread-safe: the
/// runtime wraps it in a lock (<c>Isis.Runtime.SharedBufferPool</c>); the simulator uses it as is.
/// </summary>
/// <remarks>
/// <see cref="Poison"/> overwrites every returned array, so a use after return reads garbage
/// instead of the old bytes: the simulator turns it on, and its checker then sees any such bug as
/// a corrupted delivery.
/// </remarks>
internal sealed class BufferPool : IBufferPool
{
    public const int MinLength = 64;
    public const int MaxLength = 64 * 1024;
    private const int BytesKeptPerSize = 4 * 1024 * 1024;
    private const byte PoisonByte = 0xDB;

    private readonly Stack<byte[]>[] _free;

    public BufferPool()
    {
        _free = new Stack<byte[]>[Bucket(MaxLength) + 1];
        for (int i = 0; i < _free.Length; i++) _free[i] = new Stack<byte[]>();
    }

    /// <summary>Overwrite returned arrays (finds uses after return; costs a memset per return).</summary>
    public bool Poison { get; init; }

    /// <summary>Arrays handed out and not yet returned (pooled sizes only): a leak or double-return check for tests.</summary>
    public long Outstanding { get; private set; }

    public byte[] Rent(int minimumLength)
    {
        if (minimumLength > MaxLength) return new byte[minimumLength];
        int bucket = Bucket(minimumLength);
        Outstanding++;
        return _free[bucket].TryPop(out byte[]? array) ? array : new byte[MinLength << bucket];
    }

    public void Return(byte[] array)
    {
        int length = array.Length;
        if (length < MinLength || length > MaxLength || !BitOperations.IsPow2(length)) return; // not one of ours
        int bucket = Bucket(length);
        Outstanding--;
        if (Poison) array.AsSpan().Fill(PoisonByte);
        Stack<byte[]> free = _free[bucket];
        if ((long)free.Count * length < BytesKeptPerSize) free.Push(array);
    }

    private static int Bucket(int length) =>
        length <= MinLength ? 0 : BitOperations.Log2((uint)length - 1) + 1 - BitOperations.Log2(MinLength);
}
