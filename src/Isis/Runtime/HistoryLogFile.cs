using Isis.Core.Common;
using Isis.Core.Durability;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Runtime;

/// <summary>
/// A group's SafeSend history log on disk (disk durability): the records the core writes through
/// <c>Outbox.HistoryWrites</c>, each framed with its length and CRC-32C by <see cref="DurableRecordFile"/>,
/// kept in segment files. Appends are made durable by <see cref="Sync"/> before the event loop
/// sends the step's packets.
/// </summary>
/// <remarks>
/// <para><b>Segments.</b> The log is a generation of segment files: the first of generation 0 is
/// the log's own name (<see cref="Path"/>, as a log written before segments), the others
/// <c>{Path}.{generation}-{segment}</c>. Once the current segment holds <see cref="SegmentBytes"/>,
/// the next entry starts a new one (the old one synced first), which begins with a header that
/// restates the log's state (<see cref="HistorySegments"/>). The core trims its history by
/// appending a Trim record; once it is durable, the segments wholly behind it are deleted, so a
/// log whose group checkpoints keeps a bounded size, and trimming rewrites nothing.</para>
/// <para><b>Spare segments.</b> A segment behind the trim point is not deleted but kept as a
/// spare (<c>{Path}.spare-{n}</c>), and the next segment the log starts reuses it, as PostgreSQL
/// recycles its WAL segments: emptied, its disk reserved for a whole segment ahead of the writes
/// (fallocate), synced, then renamed into place. The log keeps segments' worth of files, live and
/// spare, up to its reserve (<see cref="ReservedSegments"/>): the larger of a floor the owner
/// sets (as PostgreSQL's <c>min_wal_size</c>) and the most it held live over its last
/// <see cref="ReserveWindow"/> segments started; it deletes the rest. Its footprint so stays at
/// the reserve while the live log saw-tooths between checkpoints and swells at a restart or a
/// slow checkpoint, and a disk too small for it shows when the reserve fills, not at a peak. A
/// spare is never read as log: reading takes segment names only.</para>
/// <para><b>Rewrites.</b> A rewrite (a recovery's new history, a copied history) goes to a file
/// aside, is synced, and is renamed to the first segment of the next generation (the directory
/// synced) before the older generation's segments are deleted; a reader takes the highest
/// generation, so at every moment the old log or the complete new one is the log. A copied
/// history is written aside in parts as it arrives (<see cref="Stage"/>, one fsync each) and
/// renamed with its last part (<see cref="CommitStaged"/>): a crash in between leaves the old log,
/// and the incomplete copy aside, which <see cref="Open"/> deletes (the core copies anew).</para>
/// </remarks>
internal sealed class HistoryLogFile : IDisposable
{
    /// <summary>How many bytes of records a segment holds before the next entry starts a new one.</summary>
    public const long DefaultSegmentBytes = 1L << 20;

    /// <summary>
    /// The segment size for a log bounded by <paramref name="maxLogBytes"/>: a 256th of it, from
    /// 64 KiB to 1 MiB. A trimmed log keeps up to a segment of entries behind its trim point, and
    /// its footprint is a whole number of segments (the live ones and the spares), so segments
    /// small against the log keep a checkpointing group far below its bound and its footprint in
    /// fine steps; each costs a few fsyncs and a rename when it starts, once per MiB logged.
    /// </summary>
    public static long SegmentBytesFor(long maxLogBytes) => Math.Clamp(maxLogBytes / 256, 64L << 10, DefaultSegmentBytes);

    private const int FrameBytes = 8; // DurableRecordFile's length and CRC before each record

    /// <summary>
    /// How many segment starts the reserve of segment files remembers its high-water mark for (a
    /// GiB logged, with 1 MiB segments): long enough that the reserve holds at the peaks a
    /// restarting member or a slow checkpoint brings, short enough that a burst's is given back.
    /// </summary>
    public const int ReserveWindow = 1024;

    private const string SpareSuffix = ".spare-";

    private readonly IDurableFiles _files;
    private readonly PacketWriter _writer = new();
    private DurableRecordFile _file; // the current segment
    private HistorySegments _segments;
    private long _generation;
    private readonly Dictionary<long, long> _closedLengths = []; // closed segments of this generation: bytes
    private long _closedBytes;
    private DurableRecordFile? _staged; // a replacement written aside in parts, until its last part
    private HistorySegments? _stagedSegments;
    private IOException? _failure;
    private readonly List<string> _spares = []; // emptied segment files kept for reuse, last used first
    private long _nextSpareName;
    private readonly HighWaterMark _recentLive = new(ReserveWindow); // live segments' worth after each of the last ReserveWindow starts
    private int _reserveFloor = 1; // segments' worth of files kept at least

    private HistoryLogFile(string path, long segmentBytes, IDurableFiles files, long generation, HistorySegments segments, string current, long intactLength)
    {
        Path = path;
        SegmentBytes = segmentBytes;
        _files = files;
        _generation = generation;
        _segments = segments;
        _file = new DurableRecordFile(current, truncateTo: intactLength, files);
    }

    /// <summary>The log's name: its first segment's in generation 0, and the stem of every other segment's.</summary>
    public string Path { get; }

    /// <summary>How many bytes of records a segment holds before the next entry starts a new one.</summary>
    public long SegmentBytes { get; }

    /// <summary>Where a group's SafeSend log lives in a member's directory (the group's name, with characters unsafe in a file name replaced).</summary>
    public static string PathFor(string directory, string group, string suffix = ".safelog") =>
        System.IO.Path.Combine(directory, string.Concat(group.Select(c => char.IsLetterOrDigit(c) || c is '-' or '_' ? c : '_')) + suffix);

    /// <summary>The log's length in bytes, every segment of it (read from any thread: the SafeSend caller checks the bound with it).</summary>
    public long Length => Volatile.Read(ref _closedBytes) + Volatile.Read(ref _file).Length;

    /// <summary>
    /// How many segments' worth of files, live and spare, the log keeps: its floor, or the most
    /// segments' worth it held live over its last <see cref="ReserveWindow"/> segment starts if more.
    /// </summary>
    public int ReservedSegments => Math.Max(_reserveFloor, _recentLive.Value);

    /// <summary>The spare segment files kept for reuse now.</summary>
    public int SpareSegments => _spares.Count;

    // The live segments in segments' worth: a rewrite's first segment holds a whole log, and counts as the segments it fills.
    private int LiveSegments => _closedLengths.Values.Sum(Worth) + Worth(Volatile.Read(ref _file).Length);

    private int Worth(long bytes) => (int)Math.Max(1, (bytes + SegmentBytes / 2) / SegmentBytes);

    /// <summary>What reading the log found wrong, for the operator (null when it was intact).</summary>
    public string? Damage { get; private init; }

    /// <summary>The file of segment <paramref name="seq"/> of generation <paramref name="generation"/> of the log <paramref name="path"/>.</summary>
    public static string SegmentPath(string path, long generation, long seq) => generation == 0 && seq == 0 ? path : $"{path}.{generation}-{seq}";

    /// <summary>The segment files of the log <paramref name="path"/> on disk, every generation, in order.</summary>
    internal static List<(long Generation, long Seq, string File)> SegmentFiles(IDurableFiles files, string path)
    {
        string name = System.IO.Path.GetFileName(path);
        var found = new List<(long, long, string)>();
        foreach (string file in files.FilesIn(DurableFiles.DirectoryOf(path), name))
        {
            string rest = System.IO.Path.GetFileName(file)[name.Length..];
            if (rest.Length == 0)
            {
                found.Add((0, 0, file));
                continue;
            }
            int dash = rest.IndexOf('-', StringComparison.Ordinal);
            if (rest[0] != '.' || dash < 0) continue;
            if (long.TryParse(rest.AsSpan(1, dash - 1), System.Globalization.NumberStyles.None, null, out long generation) &&
                long.TryParse(rest.AsSpan(dash + 1), System.Globalization.NumberStyles.None, null, out long seq))
            {
                found.Add((generation, seq, file));
            }
        }
        return found.OrderBy(f => f.Item1).ThenBy(f => f.Item2).ToList();
    }

    /// <summary>The bytes the log's segment files of every generation hold on disk now (any thread, any process).</summary>
    public static long BytesOnDisk(string path, IDurableFiles? files = null)
    {
        long total = 0;
        foreach (var (_, _, file) in SegmentFiles(files ?? DurableFiles.System, path))
        {
            try
            {
                total += new FileInfo(file).Length;
            }
            catch (IOException)
            {
                // Deleted meanwhile (a segment behind the trim point).
            }
        }
        return total;
    }

    /// <summary>True if a log of that name has a segment on disk.</summary>
    public static bool Exists(string path, IDurableFiles? files = null) => SegmentFiles(files ?? DurableFiles.System, path).Count > 0;

    /// <summary>
    /// Reads the log's records, every segment of its newest generation in order, without changing
    /// anything on disk: the records up to the first that is torn, fails its checksum or is out of
    /// place, and whether there was such a one (for the operator's tools).
    /// </summary>
    public static (List<byte[]> Records, bool Damaged) Inspect(string path, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        List<byte[]> records = [];
        Scan scan = ScanNewest(files, path, records);
        return (records, scan.StoppedIn >= 0);
    }

    /// <summary>What reading the newest generation found: its segments, where reading stopped (index into Segments, -1: it did not), and the intact length there.</summary>
    private sealed record Scan(long Generation, List<(long Generation, long Seq, string File)> Segments, HistorySegments Bookkeeping,
        int StoppedIn, long KeepLength, long FileLength, int Misplaced, Dictionary<long, long> Lengths);

    private static Scan ScanNewest(IDurableFiles files, string path, List<byte[]> records, long segmentBytes = DefaultSegmentBytes)
    {
        List<(long Generation, long Seq, string File)> all = SegmentFiles(files, path);
        long generation = all.Count == 0 ? 0 : all[^1].Generation;
        List<(long Generation, long Seq, string File)> mine = all.Where(s => s.Generation == generation).ToList();
        if (mine.Count == 0) mine.Add((0, 0, path));
        var segments = new HistorySegments(segmentBytes, mine[0].Seq);
        var lengths = new Dictionary<long, long>();
        for (int i = 0; i < mine.Count; i++)
        {
            if (i > 0) segments.Continue(mine[i].Seq);
            DurableRecordFile.Contents contents = DurableRecordFile.Read(mine[i].File, files);
            int usable = 0;
            while (usable < contents.Records.Count && segments.Take(contents.Records[usable], FrameBytes + contents.Records[usable].Length)) usable++;
            records.AddRange(contents.Records.Take(usable));
            long keep = contents.LengthOf(usable);
            lengths[mine[i].Seq] = keep;
            if (contents.FileLength > keep) return new Scan(generation, mine, segments, i, keep, contents.FileLength, contents.Records.Count - usable, lengths);
        }
        return new Scan(generation, mine, segments, -1, lengths[mine[^1].Seq], lengths[mine[^1].Seq], 0, lengths);
    }

    /// <summary>
    /// Opens the log at <paramref name="path"/> (creating it) and returns the records it holds. A
    /// record that fails its checksum, or is torn, ends the readable part, and so does a record
    /// that passes its checksum but is out of place in the history (where <see cref="HistoryLogReader"/>
    /// refuses it): the bytes from it on are copied to a file beside the log (nothing is thrown
    /// away) and cut off the log, and any later segment is moved aside whole, so that new records
    /// follow the readable ones and a restart reads them.
    /// </summary>
    /// <remarks>
    /// A replacement left aside by a crash (<c>.next</c>: a copy of the history that did not end, or
    /// a rewrite that was not renamed yet) was never the log and never will be: it is deleted, and
    /// <see cref="StaleCopyBytes"/> says how long it was. Segments of a generation older than the
    /// newest were replaced by a rewrite that a crash kept from deleting them: they are deleted.
    /// </remarks>
    /// <param name="path">The log's name (<see cref="Path"/>).</param>
    /// <param name="files">The file layer (the real one by default).</param>
    /// <param name="segmentBytes">How many bytes of records a segment holds.</param>
    /// <param name="reserveFloorBytes">The disk the log keeps in segment files, live and spare, at least once it has filled it (rounded down to whole segments).</param>
    public static (HistoryLogFile Log, List<byte[]> Records) Open(string path, IDurableFiles? files = null, long segmentBytes = DefaultSegmentBytes, long reserveFloorBytes = 0)
    {
        files ??= DurableFiles.System;
        long stale = DeleteStaleReplacement(files, path);
        var records = new List<byte[]>();
        Scan scan = ScanNewest(files, path, records, segmentBytes);
        try
        {
            foreach (var old in SegmentFiles(files, path).Where(s => s.Generation < scan.Generation)) files.Delete(old.File);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw DurableRecordFile.Failed(path, "cleaned up (segments of a log a rewrite replaced)", e);
        }
        string? damage = null;
        var kept = scan.Segments;
        if (scan.StoppedIn >= 0)
        {
            string damaged = scan.Segments[scan.StoppedIn].File;
            string aside = DurableFiles.AsidePath(files, path, "damaged");
            CopyTail(files, damaged, scan.KeepLength, aside);
            var later = scan.Segments.Skip(scan.StoppedIn + 1).ToList();
            var movedAside = new List<string>();
            foreach (var segment in later)
            {
                string whole = DurableFiles.AsidePath(files, segment.File, "damaged");
                MoveAside(files, segment.File, whole);
                movedAside.Add(whole);
            }
            kept = scan.Segments.Take(scan.StoppedIn + 1).ToList();
            string what = scan.Misplaced == 0 ? "a record fails its checksum or is torn"
                : $"{scan.Misplaced} record(s) there pass their checksum but are out of place in the history";
            damage = $"the SafeSend log {damaged} is damaged after byte {scan.KeepLength} of {scan.FileLength} ({what}): " +
                $"{records.Count} intact records are used, the {scan.FileLength - scan.KeepLength} bytes after them were moved to {aside}" +
                (movedAside.Count > 0 ? $", and {movedAside.Count} later segment(s) of the log to {string.Join(", ", movedAside)}" : "");
        }
        var (_, currentSeq, currentFile) = kept[^1];
        var log = new HistoryLogFile(path, segmentBytes, files, scan.Generation, scan.Bookkeeping, currentFile, scan.Lengths[currentSeq])
        {
            Damage = damage,
            StaleCopyBytes = stale,
        };
        log._reserveFloor = (int)Math.Clamp(reserveFloorBytes / segmentBytes, 1, int.MaxValue);
        foreach (var (_, seq, _) in kept.Take(kept.Count - 1)) log._closedLengths[seq] = scan.Lengths[seq];
        log._closedBytes = log._closedLengths.Values.Sum();
        foreach (string spare in files.FilesIn(DurableFiles.DirectoryOf(path), System.IO.Path.GetFileName(path) + SpareSuffix))
        {
            if (!long.TryParse(spare.AsSpan(spare.LastIndexOf('-') + 1), System.Globalization.NumberStyles.None, null, out long n)) continue;
            log._spares.Add(spare);
            log._nextSpareName = Math.Max(log._nextSpareName, n + 1);
        }
        // The files found are the reserve until the log has started segments enough to know its own high-water mark.
        log._recentLive.Note(log.LiveSegments + log._spares.Count);
        return (log, records);
    }

    private static void MoveAside(IDurableFiles files, string file, string aside)
    {
        try
        {
            files.Rename(file, aside);
            files.SyncDirectory(DurableFiles.DirectoryOf(aside));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw DurableRecordFile.Failed(file, $"moved to {aside} (a segment after the damaged part of the SafeSend log)", e);
        }
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

    /// <summary>
    /// Appends <paramref name="records"/> (durable at the next <see cref="Sync"/>); an entry that
    /// finds the current segment full starts a new one, after syncing it.
    /// </summary>
    public void Append(IReadOnlyList<byte[]> records)
    {
        if (_failure != null) throw _failure;
        foreach (byte[] r in records)
        {
            if (_segments.StartsSegment(r)) StartSegment();
            _file.Append(r);
            Invariant.Check(_segments.Take(r, FrameBytes + r.Length), "the core appends only records that continue its log");
        }
    }

    /// <summary>Closes the current segment (synced: nothing of it may be lost once a later one exists) and starts the next with its header.</summary>
    private void StartSegment()
    {
        _file.Sync();
        long closed = _segments.CurrentSeq, seq = closed + 1;
        string path = SegmentPath(Path, _generation, seq);
        ReserveSegmentFile(path);
        List<byte[]> header = _segments.StartSegment(_writer, seq);
        var next = new DurableRecordFile(path, files: _files);
        foreach (byte[] h in header)
        {
            next.Append(h);
            _segments.Take(h, FrameBytes + h.Length);
        }
        _closedLengths[closed] = _file.Length;
        DurableRecordFile old = _file;
        Volatile.Write(ref _file, next);
        Volatile.Write(ref _closedBytes, _closedBytes + old.Length);
        old.Dispose();
        _recentLive.Note(LiveSegments);
    }

    /// <summary>
    /// Puts an empty file at <paramref name="path"/> with a segment's disk reserved: a new file
    /// while the reserve is not full, else a spare, emptied and synced before it takes the name (a
    /// crash never shows an old segment's records under a new segment's name), else a new file;
    /// the name made durable.
    /// </summary>
    private void ReserveSegmentFile(string path)
    {
        if (_spares.Count > 0 && LiveSegments + _spares.Count >= ReservedSegments)
        {
            string spare = _spares[^1];
            _spares.RemoveAt(_spares.Count - 1);
            using (IDurableFile emptied = _files.OpenAppend(spare, truncate: true, reserveBytes: SegmentBytes)) emptied.Sync();
            _files.Rename(spare, path);
        }
        else
        {
            using IDurableFile created = _files.OpenAppend(path, truncate: true, reserveBytes: SegmentBytes);
        }
        _files.SyncDirectory(DurableFiles.DirectoryOf(path));
    }

    /// <summary>
    /// A segment file the log no longer reads: kept as a spare while the reserve has room, else
    /// deleted. Renamed without a directory sync: a crash that undoes it brings back a segment
    /// behind the trim point, which is harmless.
    /// </summary>
    private void Retire(string file, long length)
    {
        // A file longer than a segment (a rewrite's first) is deleted: reused, it would give back all
        // but a segment of its disk at once, so the footprint would dip and then climb back.
        if (Worth(length) == 1 && LiveSegments + _spares.Count < ReservedSegments)
        {
            string spare = Path + SpareSuffix + _nextSpareName++.ToString(System.Globalization.CultureInfo.InvariantCulture);
            _files.Rename(file, spare);
            _spares.Add(spare);
        }
        else
        {
            _files.Delete(file);
        }
    }

    /// <summary>
    /// Makes every appended record durable (fsync), then retires the segments that a durable Trim
    /// record left wholly behind the trim point (kept as spares or deleted; a deletion or rename a
    /// crash undoes is harmless: the next segment's header starts the log again where it begins).
    /// </summary>
    public void Sync()
    {
        if (_failure != null) throw _failure;
        _file.Sync();
        foreach (long seq in _segments.TakeDroppable())
        {
            string file = SegmentPath(Path, _generation, seq);
            if (_closedLengths.Remove(seq, out long length)) Volatile.Write(ref _closedBytes, _closedBytes - length);
            try
            {
                Retire(file, length);
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                throw _failure = DurableRecordFile.Failed(file, "retired (a segment of the SafeSend log behind its trim point)", e);
            }
        }
    }

    /// <summary>
    /// Replaces the log by <paramref name="records"/>: written and synced aside, then renamed to
    /// the first segment of the next generation, and the old segments deleted. With
    /// <paramref name="keepOldAside"/>, the old log is first kept whole under another name beside it.
    /// </summary>
    /// <returns>Where the old log was kept, with <paramref name="keepOldAside"/>.</returns>
    public string? Rewrite(IReadOnlyList<byte[]> records, bool keepOldAside)
    {
        if (_failure != null) throw _failure;
        try
        {
            DropStaged();
            MakeRoomAside(Framed(records));
            var segments = new HistorySegments(SegmentBytes, 0);
            using (var file = new DurableRecordFile(NextPath, truncateTo: 0, _files))
            {
                foreach (byte[] r in records)
                {
                    file.Append(r);
                    segments.Take(r, FrameBytes + r.Length);
                }
                file.Sync();
            }
            return ReplaceByNext(keepOldAside, segments);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // Which of the two logs is the log after a failure is unknown: nothing more is written.
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
                _stagedSegments = new HistorySegments(SegmentBytes, 0);
            }
            DurableRecordFile staged = _staged ?? throw new IOException($"{NextPath}: a part of a copied history came without the part that starts it");
            MakeRoomAside(staged.Length + Framed(records));
            foreach (byte[] r in records)
            {
                staged.Append(r);
                _stagedSegments!.Take(r, FrameBytes + r.Length);
            }
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
    /// makes it the log (as <see cref="Rewrite"/>, <paramref name="keepOldAside"/> included).
    /// </summary>
    /// <returns>Where the old log was kept, with <paramref name="keepOldAside"/>.</returns>
    public string? CommitStaged(IReadOnlyList<byte[]> records, bool keepOldAside)
    {
        if (_failure != null) throw _failure;
        try
        {
            DurableRecordFile staged = _staged ?? throw new IOException($"{NextPath}: the end of a copied history came without its start");
            HistorySegments segments = _stagedSegments!;
            MakeRoomAside(staged.Length + Framed(records));
            foreach (byte[] r in records)
            {
                staged.Append(r);
                segments.Take(r, FrameBytes + r.Length);
            }
            staged.Sync();
            DropStaged();
            return ReplaceByNext(keepOldAside, segments);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw _failure = DurableRecordFile.Failed(Path, "rewritten (the end of a copied history)", e);
        }
    }

    private static long Framed(IReadOnlyList<byte[]> records)
    {
        long bytes = 0;
        foreach (byte[] r in records) bytes += FrameBytes + r.Length;
        return bytes;
    }

    /// <summary>
    /// A replacement written aside takes disk beside the log until it is renamed: spare segments
    /// give way to it as it grows (<paramref name="asideBytes"/>, what it will hold once the records
    /// at hand are in), so that the log's files and the copy together stay within the reserve, and
    /// a restarting member's footprint does not jump by the copy for the second it takes. A spare's
    /// deletion needs no directory sync: one a crash brings back is found again at open.
    /// </summary>
    private void MakeRoomAside(long asideBytes) => DeleteSparesPastReserve((int)Math.Min(int.MaxValue, (asideBytes + SegmentBytes - 1) / SegmentBytes));

    /// <summary>Deletes spare segments until the live log, <paramref name="besides"/> segments' worth more, and the spares fit the reserve.</summary>
    private void DeleteSparesPastReserve(int besides)
    {
        int live = LiveSegments;
        while (_spares.Count > 0 && live + besides + _spares.Count > ReservedSegments)
        {
            _files.Delete(_spares[0]);
            _spares.RemoveAt(0);
        }
    }

    private void DropStaged()
    {
        _staged?.Dispose();
        _staged = null;
        _stagedSegments = null;
    }

    /// <summary>
    /// The whole, synced replacement aside becomes the first segment of the next generation, and
    /// then the old generation's segments go (the old log first kept aside with <paramref name="keepOldAside"/>).
    /// </summary>
    private string? ReplaceByNext(bool keepOldAside, HistorySegments segments)
    {
        string directory = DurableFiles.DirectoryOf(Path);
        _file.Dispose();
        List<(string File, long Length)> old = [.. _closedLengths.OrderBy(c => c.Key).Select(c => (SegmentPath(Path, _generation, c.Key), c.Value)), (SegmentPath(Path, _generation, _segments.CurrentSeq), _file.Length)];
        string? kept = keepOldAside ? KeepAside(old.Select(o => o.File).ToList()) : null;
        long generation = _generation + 1;
        string first = SegmentPath(Path, generation, 0);
        _files.Rename(NextPath, first);
        _files.SyncDirectory(directory); // the new generation is the log from here on: a reader takes the newest
        _generation = generation;
        _segments = segments;
        _closedLengths.Clear();
        Volatile.Write(ref _closedBytes, 0);
        Volatile.Write(ref _file, new DurableRecordFile(first, files: _files));
        // A lone segment kept aside is a hard link to the same file: it must not become a spare.
        foreach (var (file, length) in old)
        {
            if (kept == null) Retire(file, length);
            else _files.Delete(file);
        }
        // The new log may fill more segments than the old: spares past the reserve go.
        DeleteSparesPastReserve(0);
        return kept;
    }

    /// <summary>Keeps the old log's segments whole under one name beside the log (a link to a lone segment, else their bytes in order: a log's records read the same across its segments).</summary>
    private string KeepAside(List<string> segments)
    {
        string aside = DurableFiles.AsidePath(_files, Path, "orphan");
        if (segments.Count == 1)
        {
            _files.LinkOrCopy(segments[0], aside);
        }
        else
        {
            using IDurableFile copy = _files.OpenAppend(aside, truncate: true);
            byte[] buffer = new byte[1 << 16];
            foreach (string segment in segments)
            {
                using Stream source = _files.OpenRead(segment);
                for (int n; (n = source.Read(buffer)) > 0;) copy.Write(buffer.AsSpan(0, n));
            }
            copy.Sync();
        }
        _files.SyncDirectory(DurableFiles.DirectoryOf(aside));
        return aside;
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
