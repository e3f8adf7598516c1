using System.Buffers.Binary;
using Isis.Core.Wire;

namespace Isis.Runtime;

/// <summary>
/// An append-only file of records, each framed by its length and CRC-32C, made durable by
/// <see cref="Sync"/> (fsync). A record torn by a crash ends the file instead of corrupting it:
/// <see cref="Read"/> stops at the first damaged record. The SafeSend acceptor logs and the
/// membership replicas' logs are both kept this way.
/// </summary>
/// <remarks>
/// A write or fsync that fails poisons the file: every later <see cref="Append"/> and
/// <see cref="Sync"/> throws, so records the caller still holds are never appended a second time
/// behind the ones the failed write may have left (a reader stops at such a duplicate). The
/// process stops instead (the event loop's store failures).
/// </remarks>
internal sealed class DurableRecordFile : IDisposable
{
    private const int FrameHeader = 8; // length, CRC-32C
    private readonly IDurableFiles _files;
    private IDurableFile _file;
    private bool _dirty;
    private IOException? _failure;
    private long _length;

    /// <summary>
    /// Opens <paramref name="path"/> for appending, creating it (and syncing its directory) if
    /// missing; with <paramref name="truncateTo"/>, first cuts a damaged tail off (durable at once).
    /// </summary>
    public DurableRecordFile(string path, long? truncateTo = null, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        _files = files;
        Path = path;
        try
        {
            bool created = !files.Exists(path);
            _file = files.OpenAppend(path);
            if (created) files.SyncDirectory(DurableFiles.DirectoryOf(path));
            if (truncateTo is { } length && length < _file.Length)
            {
                _file.Truncate(length);
                _file.Sync(); // appends must follow the intact records, not a tail a crash could bring back
            }
            _length = _file.Length;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw Failed(path, "opened", e);
        }
    }

    public string Path { get; }

    /// <summary>The file's length with every appended record (read from any thread).</summary>
    public long Length => Volatile.Read(ref _length);

    /// <summary>True once a write or fsync failed: nothing more is appended.</summary>
    public bool Poisoned => _failure != null;

    public void Append(ReadOnlySpan<byte> record)
    {
        if (_failure != null) throw _failure;
        Span<byte> header = stackalloc byte[FrameHeader];
        BinaryPrimitives.WriteInt32LittleEndian(header, record.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(header[4..], Crc32C.Compute(record));
        try
        {
            _file.Write(header);
            _file.Write(record);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw _failure = Failed(Path, "written", e);
        }
        _dirty = true;
        Volatile.Write(ref _length, _length + FrameHeader + record.Length);
    }

    /// <summary>
    /// Replaces the file's records by <paramref name="records"/> (a compacted log): they are written
    /// to a file beside it and synced, renamed over it, and the directory synced; appends then go
    /// to the new file. A rename replaces its target atomically, so at every moment, crash or not,
    /// the path holds either the old log whole or the new one whole, never nothing.
    /// </summary>
    public void Rewrite(IReadOnlyList<byte[]> records)
    {
        if (_failure != null) throw _failure;
        string next = Path + ".next";
        try
        {
            using (var file = new DurableRecordFile(next, truncateTo: 0, _files))
            {
                foreach (byte[] r in records) file.Append(r);
                file.Sync();
            }
            _file.Dispose();
            _files.Rename(next, Path);
            _files.SyncDirectory(DurableFiles.DirectoryOf(Path));
            _file = _files.OpenAppend(Path);
            _dirty = false;
            Volatile.Write(ref _length, _file.Length);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // Which of the two logs is under the name after a failure is unknown: nothing more is written.
            throw _failure = Failed(Path, "rewritten", e);
        }
    }

    /// <summary>Makes every appended record durable (fsync).</summary>
    public void Sync()
    {
        if (_failure != null) throw _failure;
        if (!_dirty) return;
        try
        {
            _file.Sync();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // After a failed fsync the kernel may have dropped the dirty pages: what is on disk is unknown.
            throw _failure = Failed(Path, "synced", e);
        }
        _dirty = false;
    }

    /// <summary>Why a store stops: names the file and what failed, for the reason the process gives.</summary>
    internal static IOException Failed(string path, string what, Exception e) =>
        new($"{path} could not be {what} ({e.GetType().Name}: {e.Message})", e);

    /// <summary>The intact records of a record file, with where each starts (<see cref="Read"/>).</summary>
    /// <param name="Records">The records up to the first torn or corrupt one.</param>
    /// <param name="IntactLength">The length of the file's intact prefix: the end of the last intact record.</param>
    internal sealed record Contents(List<byte[]> Records, long IntactLength)
    {
        /// <summary>The byte offset at which each record's frame starts.</summary>
        public List<long> Starts { get; init; } = [];

        /// <summary>The file's length (more than <see cref="IntactLength"/> if its tail is damaged).</summary>
        public long FileLength { get; init; }

        /// <summary>The length of the file up to record <paramref name="count"/> (exclusive).</summary>
        public long LengthOf(int count) => count < Records.Count ? Starts[count] : IntactLength;
    }

    /// <summary>
    /// Reads the records of a file, streaming (any size; one record in memory beyond those
    /// returned), up to the first torn or corrupt one. A missing file reads as empty.
    /// </summary>
    public static Contents Read(string path, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        var records = new List<byte[]>();
        var starts = new List<long>();
        if (!files.Exists(path)) return new Contents(records, 0);
        using Stream file = files.OpenRead(path);
        long fileLength = file.Length;
        long intact = 0;
        Span<byte> header = stackalloc byte[FrameHeader];
        while (fileLength - intact >= FrameHeader)
        {
            file.ReadExactly(header);
            int length = BinaryPrimitives.ReadInt32LittleEndian(header);
            uint crc = BinaryPrimitives.ReadUInt32LittleEndian(header[4..]);
            // A length past the end is a torn (or corrupt) frame: never allocate for it.
            if (length < 0 || length > fileLength - intact - FrameHeader) break;
            byte[] record = new byte[length];
            file.ReadExactly(record);
            if (Crc32C.Compute(record) != crc) break;
            records.Add(record);
            starts.Add(intact);
            intact += FrameHeader + length;
        }
        return new Contents(records, intact) { Starts = starts, FileLength = fileLength };
    }

    public void Dispose()
    {
        try
        {
            if (_failure == null) Sync();
        }
        finally
        {
            try
            {
                _file.Dispose();
            }
            catch (IOException) when (_failure != null)
            {
                // Poisoned: what its buffer held is lost; the reader stops at the torn record.
            }
        }
    }
}
