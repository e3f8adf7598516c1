using Isis.Core.Durability;
using Isis.Core.Node;

namespace Isis.Runtime;

/// <summary>
/// A group's SafeSend history log on disk (disk durability): the records the core writes through
/// <c>Outbox.HistoryWrites</c>, each framed with its length and CRC-32C by <see cref="DurableRecordFile"/>.
/// Appends are made durable by <see cref="Sync"/> before the event loop sends the step's packets;
/// a rewrite goes to a file aside, is synced, and is renamed over the log (the directory synced),
/// so at every moment the old log or the complete new one is on disk under the log's name. A copied
/// history is written aside in parts as it arrives (<see cref="Stage"/>, one fsync each) and renamed
/// over the log with its last part (<see cref="CommitStaged"/>): a crash in between leaves the old
/// log, and the incomplete copy aside, which <see cref="Open"/> deletes (the core copies anew).
/// </summary>
internal sealed class HistoryLogFile : IDisposable
{
    private readonly IDurableFiles _files;
    private DurableRecordFile _file;
    private DurableRecordFile? _staged; // a replacement written aside in parts, until its last part
    private IOException? _failure;

    private HistoryLogFile(string path, long intactLength, IDurableFiles files)
    {
        Path = path;
        _files = files;
        _file = new DurableRecordFile(path, truncateTo: intactLength, files);
    }

    public string Path { get; }

    /// <summary>Where a group's SafeSend log lives in a member's directory (the group's name, with characters unsafe in a file name replaced).</summary>
    public static string PathFor(string directory, string group, string suffix = ".safelog") =>
        System.IO.Path.Combine(directory, string.Concat(group.Select(c => char.IsLetterOrDigit(c) || c is '-' or '_' ? c : '_')) + suffix);

    /// <summary>The log's length in bytes (read from any thread: the SafeSend caller checks the bound with it).</summary>
    public long Length => Volatile.Read(ref _file).Length;

    /// <summary>What reading the log found wrong, for the operator (null when it was intact).</summary>
    public string? Damage { get; private init; }

    /// <summary>
    /// Opens the log at <paramref name="path"/> (creating it) and returns the records it holds. A
    /// record that fails its checksum, or is torn, ends the readable part, and so does a record
    /// that passes its checksum but is out of place in the history (where <see cref="HistoryLog.Read"/>
    /// stops): the bytes from it on are copied to a file beside the log (nothing is thrown away)
    /// and cut off the log, so that new records follow the readable ones and a restart reads them.
    /// </summary>
    /// <remarks>
    /// A replacement left aside by a crash (<c>.next</c>: a copy of the history that did not end, or
    /// a rewrite that was not renamed yet) was never the log and never will be: it is deleted, and
    /// <see cref="StaleCopyBytes"/> says how long it was.
    /// </remarks>
    public static (HistoryLogFile Log, List<byte[]> Records) Open(string path, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        long stale = DeleteStaleReplacement(files, path);
        DurableRecordFile.Contents contents = DurableRecordFile.Read(path, files);
        List<byte[]> records = contents.Records;
        int misplaced = HistoryLog.Read(records).Unreadable;
        int usable = records.Count - misplaced;
        long keep = contents.LengthOf(usable);
        string? damage = null;
        if (contents.FileLength > keep)
        {
            string aside = DurableFiles.AsidePath(files, path, "damaged");
            CopyTail(files, path, keep, aside);
            string what = misplaced == 0 ? "a record fails its checksum or is torn"
                : $"{misplaced} record(s) there pass their checksum but are out of place in the history" +
                  (contents.FileLength > contents.IntactLength ? ", and a later one fails its checksum or is torn" : "");
            damage = $"the SafeSend log {path} is damaged after byte {keep} of {contents.FileLength} ({what}): " +
                $"{usable} intact records are used, the {contents.FileLength - keep} bytes after them were moved to {aside}";
            records = records.GetRange(0, usable);
        }
        return (new HistoryLogFile(path, keep, files) { Damage = damage, StaleCopyBytes = stale }, records);
    }

    /// <summary>The length of the unfinished replacement <see cref="Open"/> found aside and deleted (0: none).</summary>
    public long StaleCopyBytes { get; private init; }

    private static long DeleteStaleReplacement(IDurableFiles files, string path)
    {
        string next = path + ".next";
        try
        {
            if (!files.Exists(next)) return 0;
            long length;
            using (Stream s = files.OpenRead(next)) length = s.Length;
            files.Delete(next);
            return Math.Max(length, 1);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // Harmless where it is (every replacement starts by truncating it): leave it.
            return 0;
        }
    }

    /// <summary>Copies the bytes of <paramref name="path"/> from <paramref name="from"/> on to a new file, durably (its name too), before the log is cut.</summary>
    private static void CopyTail(IDurableFiles files, string path, long from, string aside)
    {
        try
        {
            using (Stream source = files.OpenRead(path))
            using (IDurableFile copy = files.OpenAppend(aside, truncate: true))
            {
                source.Seek(from, SeekOrigin.Begin);
                byte[] buffer = new byte[1 << 16];
                for (int n; (n = source.Read(buffer)) > 0;) copy.Write(buffer.AsSpan(0, n));
                copy.Sync();
            }
            files.SyncDirectory(DurableFiles.DirectoryOf(aside));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw DurableRecordFile.Failed(aside, "written (the damaged part of the SafeSend log is copied there before the log is cut)", e);
        }
    }

    public void Append(IReadOnlyList<byte[]> records)
    {
        if (_failure != null) throw _failure;
        foreach (byte[] r in records) _file.Append(r);
    }

    /// <summary>
    /// Replaces the log by <paramref name="records"/>: written and synced aside, then renamed over
    /// it. With <paramref name="keepOldAside"/>, the old log first gets a second name beside it (a
    /// hard link), so that no moment passes without a whole log under the log's name.
    /// </summary>
    /// <returns>Where the old log was kept, with <paramref name="keepOldAside"/>.</returns>
    public string? Rewrite(IReadOnlyList<byte[]> records, bool keepOldAside)
    {
        if (_failure != null) throw _failure;
        try
        {
            DropStaged();
            using (var file = new DurableRecordFile(NextPath, truncateTo: 0, _files))
            {
                foreach (byte[] r in records) file.Append(r);
                file.Sync();
            }
            return ReplaceByNext(keepOldAside);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // Which of the two logs is under the name after a failure is unknown: nothing more is written.
            throw _failure = DurableRecordFile.Failed(Path, "rewritten", e);
        }
    }

    private string NextPath => Path + ".next";

    /// <summary>
    /// Writes a part of a replacement aside and makes it durable (<see cref="HistoryStage"/>): with
    /// <paramref name="begin"/> it starts a new one (an unfinished one is dropped), otherwise it
    /// follows the parts before. The log is unchanged.
    /// </summary>
    public void Stage(IReadOnlyList<byte[]> records, bool begin)
    {
        if (_failure != null) throw _failure;
        try
        {
            if (begin)
            {
                DropStaged();
                _staged = new DurableRecordFile(NextPath, truncateTo: 0, _files);
            }
            DurableRecordFile staged = _staged ?? throw new IOException($"{NextPath}: a part of a copied history came without the part that starts it");
            foreach (byte[] r in records) staged.Append(r);
            staged.Sync();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // The log itself is intact, but the copy aside is not what the core thinks: nothing more is written.
            throw _failure = DurableRecordFile.Failed(NextPath, "written (a copy of the history, aside)", e);
        }
    }

    /// <summary>
    /// Ends the replacement written aside with <paramref name="records"/>, makes it durable, and
    /// renames it over the log (as <see cref="Rewrite"/>, <paramref name="keepOldAside"/> included).
    /// </summary>
    /// <returns>Where the old log was kept, with <paramref name="keepOldAside"/>.</returns>
    public string? CommitStaged(IReadOnlyList<byte[]> records, bool keepOldAside)
    {
        if (_failure != null) throw _failure;
        try
        {
            DurableRecordFile staged = _staged ?? throw new IOException($"{NextPath}: the end of a copied history came without its start");
            foreach (byte[] r in records) staged.Append(r);
            staged.Sync();
            DropStaged();
            return ReplaceByNext(keepOldAside);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw _failure = DurableRecordFile.Failed(Path, "rewritten (the end of a copied history)", e);
        }
    }

    private void DropStaged()
    {
        _staged?.Dispose();
        _staged = null;
    }

    /// <summary>The whole, synced replacement aside takes the log's name (the old log first linked aside with <paramref name="keepOldAside"/>).</summary>
    private string? ReplaceByNext(bool keepOldAside)
    {
        string directory = DurableFiles.DirectoryOf(Path);
        _file.Dispose();
        string? kept = null;
        if (keepOldAside)
        {
            kept = DurableFiles.AsidePath(_files, Path, "orphan");
            _files.LinkOrCopy(Path, kept);
            _files.SyncDirectory(directory);
        }
        _files.Rename(NextPath, Path);
        _files.SyncDirectory(directory);
        Volatile.Write(ref _file, new DurableRecordFile(Path, files: _files));
        return kept;
    }

    /// <summary>Makes every appended record durable (fsync).</summary>
    public void Sync()
    {
        if (_failure != null) throw _failure;
        _file.Sync();
    }

    public void Dispose()
    {
        try
        {
            _staged?.Dispose();
            _file.Dispose();
        }
        catch (IOException) when (_failure != null)
        {
            // Already failed and reported: the process is stopping.
        }
    }
}
