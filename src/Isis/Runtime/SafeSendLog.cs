using System.Buffers.Binary;

namespace Isis.Runtime;

/// <summary>
/// An acceptor's durable log of the SafeSends it acknowledged: one append-only file per group,
/// fsynced before the acknowledgement leaves (the event loop writes, then sends). Each record is
/// the SafeSend's phi followed by its payload.
/// </summary>
internal sealed class SafeSendLog(string path) : IDisposable
{
    private readonly DurableRecordFile _file = new(path);

    public string Path => _file.Path;

    public void Append(int phi, ReadOnlySpan<byte> payload)
    {
        var record = new byte[4 + payload.Length];
        BinaryPrimitives.WriteInt32LittleEndian(record, phi);
        payload.CopyTo(record.AsSpan(4));
        _file.Append(record);
    }

    /// <summary>Makes every appended record durable (fsync).</summary>
    public void Sync() => _file.Sync();

    /// <summary>Reads the records of a log file, stopping at the first torn or corrupt one.</summary>
    public static List<(int Phi, byte[] Payload)> Read(string path) =>
        DurableRecordFile.Read(path).Records
            .Where(r => r.Length >= 4)
            .Select(r => (BinaryPrimitives.ReadInt32LittleEndian(r), r[4..]))
            .ToList();

    public void Dispose() => _file.Dispose();
}
