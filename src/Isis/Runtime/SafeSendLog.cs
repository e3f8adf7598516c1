using System.Buffers.Binary;
using Isis.Core.Wire;

namespace Isis.Runtime;

/// <summary>
/// An acceptor's durable log of the SafeSends it acknowledged: one append-only file per group,
/// fsynced before the acknowledgement leaves (the event loop writes, then sends). Records are
/// length- and CRC-framed, so a record torn by a crash ends the log instead of corrupting it.
/// </summary>
internal sealed class SafeSendLog : IDisposable
{
    private const int RecordHeader = 12; // length, CRC-32C, phi
    private readonly FileStream _file;
    private bool _dirty;

    public SafeSendLog(string path)
    {
        Path = path;
        _file = new FileStream(path, FileMode.Append, FileAccess.Write, FileShare.Read, 4096, FileOptions.None);
    }

    public string Path { get; }

    public void Append(int phi, ReadOnlySpan<byte> payload)
    {
        Span<byte> header = stackalloc byte[RecordHeader];
        BinaryPrimitives.WriteInt32LittleEndian(header, payload.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(header[4..], Crc32C.Compute(payload));
        BinaryPrimitives.WriteInt32LittleEndian(header[8..], phi);
        _file.Write(header);
        _file.Write(payload);
        _dirty = true;
    }

    /// <summary>Makes every appended record durable (fsync).</summary>
    public void Sync()
    {
        if (!_dirty) return;
        _file.Flush(flushToDisk: true);
        _dirty = false;
    }

    /// <summary>Reads the records of a log file, stopping at the first torn or corrupt one.</summary>
    public static List<(int Phi, byte[] Payload)> Read(string path)
    {
        var records = new List<(int, byte[])>();
        if (!File.Exists(path)) return records;
        ReadOnlySpan<byte> data = File.ReadAllBytes(path);
        while (data.Length >= RecordHeader)
        {
            int length = BinaryPrimitives.ReadInt32LittleEndian(data);
            uint crc = BinaryPrimitives.ReadUInt32LittleEndian(data[4..]);
            int phi = BinaryPrimitives.ReadInt32LittleEndian(data[8..]);
            if (length < 0 || length > data.Length - RecordHeader) break;
            ReadOnlySpan<byte> payload = data.Slice(RecordHeader, length);
            if (Crc32C.Compute(payload) != crc) break;
            records.Add((phi, payload.ToArray()));
            data = data[(RecordHeader + length)..];
        }
        return records;
    }

    public void Dispose()
    {
        Sync();
        _file.Dispose();
    }
}
