namespace Isis.Serialization;

/// <summary>
/// What one thread needs to encode a Send without allocating: a writer over the runtime's buffer
/// pool and the descriptions of the argument types it has sent. One per thread per runtime.
/// </summary>
internal sealed class ThreadEncoder(Isis.Core.Common.IBufferPool pool)
{
    private readonly PooledBufferWriter _writer = new(pool);
    private readonly WireTypeCache _wireTypes = new();

    /// <summary>The payload in an array from the pool, which the caller then owns (see <see cref="ArgumentCodec.Encode(int, ReadOnlySpan{object}, PooledBufferWriter, WireTypeCache)"/>).</summary>
    public (byte[] Array, int Length) Encode(int opcode, ReadOnlySpan<object?> args) => ArgumentCodec.Encode(opcode, args, _writer, _wireTypes);
}
