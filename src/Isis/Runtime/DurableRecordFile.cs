using System.Buffers.Binary;
using Isis.Core.Wire;

namespace Isis.Runtime;

/// <summary>
/// An append-only file of records, each framed by its length and CRC-32C, made durable by
/// <see cref="Sync"/> (fsync). A record torn by a crash ends the file instead of corrupting it:
/// <see cref="Read"/> stops at the first damaged record. The SafeSend acceptor logs and the
/// membership replicas' logs are both kept this way.
/// </summary>
internal sealed class DurableRecordFile : IDisposable
{
    private const int FrameHeader = 8; // length, CRC-32C
    private readonly FileStream _file;
    private bool _dirty;

    /// <summary>Opens <paramref name="path"/> for appending; with <paramref name="truncateTo"/>, first cuts a damaged tail off.</summary>
    public DurableRecordFile(string path, long? truncateTo = null)
    {
        Path = path;
        _file = new FileStream(path, FileMode.OpenOrCreate, FileAccess.Write, FileShare.Read, 4096, FileOptions.None);
        if (truncateTo is { } length && length < _file.Length) _file.SetLength(length);
        _length = _file.Seek(0, SeekOrigin.End);
    }

    public string Path { get; }

    private long _length;

    /// <summary>The file's length with every appended record (read from any thread).</summary>
    public long Length => Volatile.Read(ref _length);

    public void Append(ReadOnlySpan<byte> record)
    {
        Span<byte> header = stackalloc byte[FrameHeader];
        BinaryPrimitives.WriteInt32LittleEndian(header, record.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(header[4..], Crc32C.Compute(record));
        _file.Write(header);
        _file.Write(record);
        _dirty = true;
        Volatile.Write(ref _length, _length + FrameHeader + record.Length);
    }

    /// <summary>Makes every appended record durable (fsync).</summary>
    public void Sync()
    {
        if (!_dirty) return;
        _file.Flush(flushToDisk: true);
        _dirty = false;
    }

    /// <summary>Reads the records of a file up to the first torn or corrupt one, and the length of that intact prefix.</summary>
    public static (List<byte[]> Records, long IntactLength) Read(string path)
    {
        var records = new List<byte[]>();
        if (!File.Exists(path)) return (records, 0);
        ReadOnlySpan<byte> data = File.ReadAllBytes(path);
        long intact = 0;
        while (data.Length >= FrameHeader)
        {
            int length = BinaryPrimitives.ReadInt32LittleEndian(data);
            uint crc = BinaryPrimitives.ReadUInt32LittleEndian(data[4..]);
            if (length < 0 || length > data.Length - FrameHeader) break;
            ReadOnlySpan<byte> record = data.Slice(FrameHeader, length);
            if (Crc32C.Compute(record) != crc) break;
            records.Add(record.ToArray());
            data = data[(FrameHeader + length)..];
            intact += FrameHeader + length;
        }
        return (records, intact);
    }

    public void Dispose()
    {
        Sync();
        _file.Dispose();
    }
}
