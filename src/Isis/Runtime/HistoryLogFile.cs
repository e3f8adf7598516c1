using System.Runtime.InteropServices;

namespace Isis.Runtime;

/// <summary>
/// A group's SafeSend history log on disk (disk durability): the records the core writes through
/// <c>Outbox.HistoryWrites</c>, each framed with its length and CRC-32C by <see cref="DurableRecordFile"/>.
/// Appends are made durable by <see cref="Sync"/> before the event loop sends the step's packets;
/// a rewrite goes to a file aside, is synced, and is renamed over the log, so at every moment the
/// old log or the complete new one is on disk.
/// </summary>
internal sealed class HistoryLogFile : IDisposable
{
    private DurableRecordFile _file;

    private HistoryLogFile(string path, long intactLength)
    {
        Path = path;
        _file = new DurableRecordFile(path, truncateTo: intactLength);
    }

    public string Path { get; }

    /// <summary>The log's length in bytes (read from any thread: the SafeSend caller checks the bound with it).</summary>
    public long Length => Volatile.Read(ref _file).Length;

    /// <summary>What reading the log found wrong, for the operator (null when it was intact).</summary>
    public string? Damage { get; private init; }

    /// <summary>
    /// Opens the log at <paramref name="path"/> (creating it) and returns the records it holds. A
    /// record that fails its checksum, or is torn, ends the readable part: the bytes from it on are
    /// copied to a file beside the log (nothing is thrown away) and cut off the log, so that new
    /// records follow the intact ones.
    /// </summary>
    public static (HistoryLogFile Log, List<byte[]> Records) Open(string path)
    {
        (List<byte[]> records, long intact) = DurableRecordFile.Read(path);
        string? damage = null;
        if (File.Exists(path) && new FileInfo(path).Length > intact)
        {
            long length = new FileInfo(path).Length;
            string aside = AsidePath(path, "damaged");
            using (var source = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.ReadWrite))
            using (var copy = new FileStream(aside, FileMode.CreateNew, FileAccess.Write))
            {
                source.Seek(intact, SeekOrigin.Begin);
                source.CopyTo(copy);
                copy.Flush(flushToDisk: true);
            }
            damage = $"the SafeSend log {path} is damaged after byte {intact} of {length} (a record fails its checksum or is torn): " +
                $"{records.Count} intact records are used, the {length - intact} bytes after them were moved to {aside}";
        }
        return (new HistoryLogFile(path, intact) { Damage = damage }, records);
    }

    /// <summary>A name beside <paramref name="path"/> that is not taken yet.</summary>
    private static string AsidePath(string path, string what)
    {
        string stamp = DateTime.UtcNow.ToString("yyyyMMdd'T'HHmmss", System.Globalization.CultureInfo.InvariantCulture);
        string candidate = $"{path}.{what}-{stamp}";
        for (int n = 2; File.Exists(candidate); n++) candidate = $"{path}.{what}-{stamp}-{n}";
        return candidate;
    }

    public void Append(IReadOnlyList<byte[]> records)
    {
        foreach (byte[] r in records) _file.Append(r);
    }

    /// <summary>
    /// Replaces the log by <paramref name="records"/>: written and synced aside, then renamed over
    /// it (with <paramref name="keepOldAside"/>, the old log is first renamed to a name beside it).
    /// </summary>
    /// <returns>Where the old log was kept, with <paramref name="keepOldAside"/>.</returns>
    public string? Rewrite(IReadOnlyList<byte[]> records, bool keepOldAside)
    {
        string next = Path + ".next";
        using (var file = new DurableRecordFile(next, truncateTo: 0))
        {
            foreach (byte[] r in records) file.Append(r);
            file.Sync();
        }
        _file.Dispose();
        string? kept = null;
        if (keepOldAside)
        {
            kept = AsidePath(Path, "orphan");
            File.Move(Path, kept);
        }
        File.Move(next, Path, overwrite: true);
        SyncDirectory();
        Volatile.Write(ref _file, new DurableRecordFile(Path));
        return kept;
    }

    /// <summary>Makes the rename durable: on Linux a rename is durable once its directory is fsynced.</summary>
    private void SyncDirectory() => SyncDirectoryOf(Path);

    /// <summary>Makes a rename into, or a new file in, the directory of <paramref name="path"/> durable (Linux: fsync of the directory).</summary>
    internal static void SyncDirectoryOf(string path)
    {
        if (!OperatingSystem.IsLinux()) return;
        string? directory = System.IO.Path.GetDirectoryName(System.IO.Path.GetFullPath(path));
        if (directory == null) return;
        // .NET opens no directory handles, so this goes to libc: open(O_RDONLY | O_DIRECTORY), fsync, close.
        int fd = NativeFiles.open(directory, NativeFiles.O_RDONLY | NativeFiles.O_DIRECTORY);
        if (fd < 0) throw new IOException($"cannot open directory {directory} to sync the rename of {path} (errno {Marshal.GetLastPInvokeError()})");
        try
        {
            if (NativeFiles.fsync(fd) != 0) throw new IOException($"fsync of directory {directory} failed (errno {Marshal.GetLastPInvokeError()})");
        }
        finally
        {
            _ = NativeFiles.close(fd);
        }
    }

    /// <summary>Makes every appended record durable (fsync).</summary>
    public void Sync() => _file.Sync();

    public void Dispose() => _file.Dispose();
}

/// <summary>The three libc calls that sync a directory (Linux).</summary>
internal static partial class NativeFiles
{
    public const int O_RDONLY = 0, O_DIRECTORY = 0x10000;

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int open(string path, int flags);

    [LibraryImport("libc", SetLastError = true)]
    public static partial int fsync(int fd);

    [LibraryImport("libc", SetLastError = true)]
    public static partial int close(int fd);
}
