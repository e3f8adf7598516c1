using System.Buffers.Binary;

namespace Isis.Runtime;

/// <summary>
/// The parts of a checkpoint a joiner receives, kept until the last one arrives: the application
/// loads a checkpoint only whole, because a transfer whose maker fails is dropped and restarted.
/// Small checkpoints stay in memory; past <see cref="MemoryLimit"/> bytes the parts go to a
/// temporary file (deleted when the spool is disposed), so a large state costs the joiner disk, not
/// a second copy in memory.
/// </summary>
/// <remarks>The group's delivery thread only.</remarks>
internal sealed class CheckpointSpool : IDisposable
{
    /// <summary>Bytes kept in memory before the spool moves to a file.</summary>
    internal const long MemoryLimit = 16L << 20;

    private readonly long _memoryLimit;
    private readonly List<byte[]> _inMemory = new();
    private long _memoryBytes;
    private FileStream? _file;

    public CheckpointSpool(long memoryLimit = MemoryLimit) => _memoryLimit = memoryLimit;

    /// <summary>Parts received so far.</summary>
    public long Count { get; private set; }

    /// <summary>True once the parts went to a temporary file.</summary>
    public bool OnDisk => _file != null;

    /// <summary>Keeps the next part (an empty one is the end marker and is not kept).</summary>
    public void Add(byte[] part)
    {
        if (part.Length == 0) return;
        Count++;
        if (_file == null && _memoryBytes + part.Length <= _memoryLimit)
        {
            _inMemory.Add(part);
            _memoryBytes += part.Length;
            return;
        }
        if (_file == null)
        {
            _file = new FileStream(Path.Combine(Path.GetTempPath(), $"isis-checkpoint-{Guid.NewGuid():N}.part"), FileMode.CreateNew, FileAccess.ReadWrite,
                FileShare.None, 1 << 16, FileOptions.DeleteOnClose);
            foreach (byte[] earlier in _inMemory) Write(earlier);
            _inMemory.Clear();
            _memoryBytes = 0;
        }
        Write(part);
    }

    private void Write(byte[] part)
    {
        Span<byte> length = stackalloc byte[4];
        BinaryPrimitives.WriteInt32LittleEndian(length, part.Length);
        _file!.Write(length);
        _file.Write(part);
    }

    /// <summary>The parts in the order they arrived (read back from the file if they went there).</summary>
    public IEnumerable<ReadOnlyMemory<byte>> Parts()
    {
        if (_file == null)
        {
            foreach (byte[] part in _inMemory) yield return part;
            yield break;
        }
        _file.Flush();
        _file.Position = 0;
        byte[] length = new byte[4];
        byte[] buffer = [];
        while (_file.Position < _file.Length)
        {
            _file.ReadExactly(length);
            int n = BinaryPrimitives.ReadInt32LittleEndian(length);
            if (buffer.Length < n) buffer = new byte[Math.Max(n, buffer.Length * 2)];
            _file.ReadExactly(buffer, 0, n);
            yield return buffer.AsMemory(0, n);
        }
    }

    public void Dispose()
    {
        _file?.Dispose();
        _file = null;
        _inMemory.Clear();
    }
}
