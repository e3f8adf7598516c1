using Isis.Core.Common;

namespace Isis.Runtime;

/// <summary>
/// The runtime's one buffer pool, shared by the API threads (encoding Sends), the event loop (the
/// core's held messages) and the delivery threads (payloads waiting for handlers). A lock around
/// the core's single-threaded <see cref="BufferPool"/>: held for a push or a pop, never contended for long.
/// </summary>
internal sealed class SharedBufferPool : IBufferPool
{
    private readonly Lock _gate = new();
    private readonly BufferPool _pool = new();

    public byte[] Rent(int minimumLength)
    {
        lock (_gate) return _pool.Rent(minimumLength);
    }

    public void Return(byte[] array)
    {
        lock (_gate) _pool.Return(array);
    }
}
