using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Core.Wire;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>The SafeSend history log and its record file on the real disk (the crash points are in <see cref="StoreCrashTests"/>).</summary>
public sealed class HistoryLogFileTests : IDisposable
{
    private readonly DirectoryInfo _directory = Directory.CreateTempSubdirectory("isis-history-log-");

    private string LogPath => Path.Combine(_directory.FullName, "ledger.safelog");

    public void Dispose() => _directory.Delete(recursive: true);

    private static readonly NodeId Member = new(0x7F00_0001_1F90UL, 1);

    private static byte[] View(int founderView) =>
        HistoryLog.View(new PacketWriter(), new HistoryViewRecord(new HistoryViewKey(1, founderView), new Lineage(Member, founderView), Member, [Member]));

    private static byte[] Entry(long index) => HistoryLog.Entry(new PacketWriter(), new HistoryEntry(index, Member, 1, index, 1, new byte[] { (byte)index, 42 }));

    [Fact]
    public void Records_appended_after_an_out_of_place_record_are_read_after_a_restart()
    {
        using (var file = new DurableRecordFile(LogPath))
        {
            foreach (byte[] r in new[] { View(1), Entry(1), Entry(3), Entry(4) }) file.Append(r);
        }
        long intact = new FileInfo(LogPath).Length;
        (HistoryLogFile log, List<byte[]> records) = HistoryLogFile.Open(LogPath);
        using (log)
        {
            Assert.Equal([View(1), Entry(1)], records);
            Assert.Contains("2 record(s) there pass their checksum but are out of place", log.Damage);
            string aside = Assert.Single(Directory.GetFiles(_directory.FullName, "ledger.safelog.damaged-*"));
            Assert.Equal([Entry(3), Entry(4)], DurableRecordFile.Read(aside).Records);
            Assert.True(new FileInfo(LogPath).Length < intact);
            log.Append([Entry(2)]);
            log.Sync();
        }
        (HistoryLogFile again, List<byte[]> restarted) = HistoryLogFile.Open(LogPath);
        using (again)
        {
            Assert.Null(again.Damage);
            Assert.Equal([View(1), Entry(1), Entry(2)], restarted);
            Assert.Equal(0, HistoryLog.Read(restarted).Unreadable);
        }
    }

    [Fact]
    public void A_rewrite_that_keeps_the_old_log_leaves_it_whole_beside_the_new_one()
    {
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath);
        string? kept;
        using (log)
        {
            log.Append([View(1), Entry(1), Entry(2)]);
            log.Sync();
            kept = log.Rewrite([View(7), Entry(1)], keepOldAside: true);
            log.Append([Entry(2)]);
            log.Sync();
        }
        Assert.NotNull(kept);
        Assert.Equal([View(1), Entry(1), Entry(2)], DurableRecordFile.Read(kept).Records);
        // The new log is the first segment of the next generation; the old one's segment is gone.
        Assert.Equal([View(7), Entry(1), Entry(2)], HistoryLogFile.Inspect(LogPath).Records);
        Assert.Equal([HistoryLogFile.SegmentPath(LogPath, 1, 0)], HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath).Select(f => f.File));
        Assert.False(File.Exists(LogPath + ".next"));
    }

    private static byte[] Trim(long through, IEnumerable<byte[]> entries)
    {
        ulong digest = HistoryDigest.Empty;
        foreach (HistoryEntry e in HistoryLog.Read([View(1), .. entries]).Entries.Take((int)through)) digest = HistoryDigest.Next(digest, e);
        return HistoryLog.Trim(new PacketWriter(), through, digest);
    }

    private static byte[] BigEntry(long index) => HistoryLog.Entry(new PacketWriter(), new HistoryEntry(index, Member, 1, index, 1, new byte[1000]));

    [Fact]
    public void A_log_kept_in_segments_deletes_the_ones_behind_a_durable_Trim_record_and_reads_back_as_one_log()
    {
        const long segment = 10_000;
        var appended = new List<byte[]> { View(1) };
        byte[] trim;
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (log)
        {
            log.Append([View(1)]);
            for (int i = 1; i <= 60; i++)
            {
                byte[] e = BigEntry(i);
                appended.Add(e);
                log.Append([e]);
            }
            log.Sync();
            // 60 entries of about 1 KB in segments of 10 KB: six or seven segments, none dropped yet.
            var before = HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath);
            Assert.InRange(before.Count, 6, 7);
            Assert.Equal(before.Sum(f => new FileInfo(f.File).Length), log.Length);

            // Trimmed through entry 45: every segment whose entries all are at or before it goes at the sync, not before.
            trim = Trim(45, appended.Skip(1));
            log.Append([trim]);
            Assert.Equal(before.Count, HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath).Count);
            log.Sync();
            var after = HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath);
            Assert.InRange(after.Count, 1, 3);
            Assert.False(File.Exists(LogPath)); // the first segment went with the others behind the trim point
            Assert.Equal(after.Sum(f => new FileInfo(f.File).Length), log.Length);
            log.Append([BigEntry(61)]);
            log.Sync();
        }
        (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (reopened)
        {
            Assert.Null(reopened.Damage);
            HistoryLogImage image = HistoryLog.Read(records);
            Assert.Equal(0, image.Unreadable);
            Assert.Equal(45, image.Trimmed);
            Assert.Equal(61, image.Count);
            Assert.Equal(Enumerable.Range(46, 16).Select(i => (long)i), image.Entries.Select(e => e.Index));
            Assert.Equal(HistoryLog.Read([.. appended, trim, BigEntry(61)]).DigestAt(61), image.DigestAt(61));
        }
    }

    /// <summary>
    /// <paramref name="cycles"/> times: about two and a half segments of entries from
    /// <paramref name="next"/> on (kept in <paramref name="appended"/>), then a checkpoint that keeps
    /// the last five, synced, then <paramref name="afterSync"/>. Returns the next entry's index.
    /// </summary>
    private static long CheckpointCycles(HistoryLogFile log, int cycles, List<byte[]> appended, long next, Action afterSync)
    {
        for (int c = 0; c < cycles; c++)
        {
            for (int i = 0; i < 25; i++, next++)
            {
                appended.Add(BigEntry(next));
                log.Append([appended[^1]]);
            }
            log.Append([Trim(next - 6, appended)]);
            log.Sync();
            afterSync();
        }
        return next;
    }

    /// <summary>
    /// A group that checkpoints makes its live log saw-tooth between checkpoints; the segment
    /// files do not: those behind the trim point become spares that later segments reuse, so the
    /// log keeps its high-water count of files, each with a whole segment reserved on disk, and a
    /// restart finds the spares and goes on reusing them.
    /// </summary>
    [Fact]
    public void A_checkpointing_log_keeps_its_segment_files_at_their_high_water_mark_and_reuses_them()
    {
        const long segment = 10_000;
        var appended = new List<byte[]>();
        long next = 1;
        var filesAfterSync = new List<int>();
        int Files() => Directory.GetFiles(_directory.FullName, "ledger.safelog*").Length;
        void Cycles(HistoryLogFile log, int cycles) => next = CheckpointCycles(log, cycles, appended, next, () => filesAfterSync.Add(Files()));
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (log)
        {
            log.Append([View(1)]);
            Cycles(log, 12);
            Assert.True(log.SpareSegments > 0, "no segment behind the trim point was kept as a spare");
            Assert.Equal(log.ReservedSegments, Files());
            string current = HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath)[^1].File;
            if (AllocatedBytes(current) is long allocated && new FileInfo(current).Length < segment / 2)
                Assert.True(allocated >= segment, $"the current segment has {allocated} bytes allocated for {new FileInfo(current).Length} written: its segment is not reserved");
        }
        // After the first cycles the count of files holds still, live segments and spares together.
        Assert.Single(filesAfterSync.Skip(3).Distinct());
        int steady = filesAfterSync[^1];
        (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (reopened)
        {
            Assert.Null(reopened.Damage);
            Assert.Equal(next - 1, HistoryLog.Read(records).Count);
            Assert.True(reopened.SpareSegments > 0, "a restart did not find the spares");
            Cycles(reopened, 6);
        }
        Assert.All(filesAfterSync.Skip(12), n => Assert.Equal(steady, n));
        // No spare was read as log: every entry after the last trim point is back, in order.
        (HistoryLogFile last, List<byte[]> final) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (last)
        {
            HistoryLogImage image = HistoryLog.Read(final);
            Assert.Equal(0, image.Unreadable);
            Assert.Equal(next - 1, image.Count);
            Assert.Equal(Enumerable.Range((int)image.Trimmed + 1, (int)(image.Count - image.Trimmed)).Select(i => (long)i), image.Entries.Select(e => e.Index));
        }
    }

    /// <summary>
    /// With a reserve floor the log keeps that many segments' worth of files even though its live
    /// log is far smaller: the footprint fills the floor and then holds still. A rewrite's first
    /// segment, which holds a whole log, counts as the segments it fills, and once trimmed it is
    /// deleted rather than kept as a spare, so no spare is ever much longer than a segment.
    /// </summary>
    [Fact]
    public void A_log_with_a_reserve_floor_fills_it_holds_there_and_never_keeps_a_long_rewritten_segment_as_a_spare()
    {
        const long segment = 10_000;
        const int floor = 12;
        var appended = new List<byte[]>();
        long next = 1;
        int Files() => Directory.GetFiles(_directory.FullName, "ledger.safelog*").Length;
        string[] Spares() => Directory.GetFiles(_directory.FullName, "ledger.safelog.spare-*");
        var filesAfterSync = new List<int>();
        void Cycles(HistoryLogFile log, int cycles) => next = CheckpointCycles(log, cycles, appended, next, () => filesAfterSync.Add(Files()));
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath, segmentBytes: segment, reserveFloorBytes: floor * segment);
        using (log)
        {
            log.Append([View(1)]);
            Cycles(log, 10);
            Assert.Equal(floor, log.ReservedSegments); // the live log alone would keep 3 or 4
            Assert.Equal(floor, Files());
            // Filled once (about 30 entries in), then still.
            Assert.All(filesAfterSync.Skip(6), n => Assert.Equal(floor, n));

            // A rewrite of about six segments' worth in one file: it counts as six, so the old
            // segments kept as spares leave the reserve where it was.
            appended.Clear();
            next = 1;
            for (; next <= 60; next++) appended.Add(BigEntry(next));
            log.Rewrite([View(1), .. appended], keepOldAside: false);
            string first = HistoryLogFile.SegmentPath(LogPath, 1, 0);
            Assert.True(new FileInfo(first).Length > 5 * segment);
            Assert.True(Files() is >= floor - 6 and <= floor - 4, $"{Files()} files after the rewrite: {string.Join(", ", Directory.GetFiles(_directory.FullName).Select(f => $"{Path.GetFileName(f)} {new FileInfo(f).Length}"))}");
            filesAfterSync.Clear();
            Cycles(log, 8);
            Assert.False(File.Exists(first), "the rewritten segment was not retired");
            Assert.All(Spares(), f => Assert.True(new FileInfo(f).Length < 2 * segment, $"{f} is a spare of {new FileInfo(f).Length} bytes"));
            Assert.Equal(floor, Files());
        }
        (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(LogPath, segmentBytes: segment, reserveFloorBytes: floor * segment);
        using (reopened)
        {
            Assert.Equal(next - 1, HistoryLog.Read(records).Count);
            filesAfterSync.Clear();
            Cycles(reopened, 4);
            Assert.All(filesAfterSync, n => Assert.Equal(floor, n));
        }
    }

    [Fact]
    public void A_copy_written_aside_takes_its_room_from_the_spares_so_the_footprint_stays_at_the_reserve()
    {
        // A restarting member's copy of the history is written aside in parts while its log and
        // spare segments are still there: the spares give way as the copy grows, so the log's
        // files and the copy never take more than the reserve (and a segment being started).
        const long segment = 10_000;
        const int floor = 12;
        var appended = new List<byte[]>();
        long Footprint() => Directory.GetFiles(_directory.FullName, "ledger.safelog*").Sum(f => new FileInfo(f).Length);
        long bound = (floor + 1) * segment;
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath, segmentBytes: segment, reserveFloorBytes: floor * segment);
        using (log)
        {
            log.Append([View(1)]);
            CheckpointCycles(log, 10, appended, 1, () => { });
            Assert.True(log.SpareSegments >= floor - 5, $"only {log.SpareSegments} spares: the reserve is not full");
            Assert.InRange(Footprint(), (floor - 1) * segment, bound);

            // A copy of about eight segments' worth, in parts of two.
            var copy = Enumerable.Range(1, 80).Select(i => BigEntry(i)).ToList();
            log.Stage([View(2), .. copy.Take(20)], begin: true);
            Assert.InRange(Footprint(), 0, bound);
            for (int part = 1; part < 3; part++)
            {
                log.Stage(copy.Skip(20 * part).Take(20).ToList(), begin: false);
                Assert.InRange(Footprint(), 0, bound);
            }
            log.CommitStaged(copy.Skip(60).ToList(), keepOldAside: false);
            Assert.InRange(Footprint(), 0, bound);

            // A whole rewrite of as much makes its room the same way.
            log.Rewrite([View(3), .. copy], keepOldAside: false);
            Assert.InRange(Footprint(), 0, bound);
        }
        (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(LogPath, segmentBytes: segment, reserveFloorBytes: floor * segment);
        using (reopened) Assert.Equal(80, HistoryLog.Read(records).Count);
    }

    /// <summary>The disk a file takes (st_blocks of stat(2)), where it can be read: Linux on x86-64 or arm64, whose struct stat both hold it at byte 64.</summary>
    private static long? AllocatedBytes(string path)
    {
        if (!OperatingSystem.IsLinux() || System.Runtime.InteropServices.RuntimeInformation.ProcessArchitecture is not
            (System.Runtime.InteropServices.Architecture.X64 or System.Runtime.InteropServices.Architecture.Arm64)) return null;
        byte[] stat = new byte[256];
        return Stat(path, stat) == 0 ? BitConverter.ToInt64(stat, 64) * 512 : null;
    }

    [System.Runtime.InteropServices.DllImport("libc", EntryPoint = "stat")]
    private static extern int Stat([System.Runtime.InteropServices.MarshalAs(System.Runtime.InteropServices.UnmanagedType.LPUTF8Str)] string path, [System.Runtime.InteropServices.Out] byte[] buffer);

    [Fact]
    public void Segments_of_an_older_generation_that_a_rewrite_did_not_get_to_delete_are_deleted_at_open_and_never_read()
    {
        const long segment = 5_000;
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (log)
        {
            log.Append([View(1), .. Enumerable.Range(1, 20).Select(i => BigEntry(i))]);
            log.Sync();
        }
        var oldSegments = HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath);
        Assert.True(oldSegments.Count >= 3);
        string saved = Path.Combine(_directory.FullName, "saved");
        Directory.CreateDirectory(saved);
        foreach (var f in oldSegments) File.Copy(f.File, Path.Combine(saved, Path.GetFileName(f.File)));

        (log, _) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (log) log.Rewrite([View(7), Entry(1)], keepOldAside: false);
        // A crash right after the rename: the old generation's segments are all still there.
        foreach (string f in Directory.GetFiles(saved)) File.Copy(f, Path.Combine(_directory.FullName, Path.GetFileName(f)), overwrite: true);
        Assert.Equal(oldSegments.Count + 1, HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath).Count);

        (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (reopened)
        {
            Assert.Null(reopened.Damage);
            Assert.Equal([View(7), Entry(1)], records);
            Assert.Equal([HistoryLogFile.SegmentPath(LogPath, 1, 0)], HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath).Select(f => f.File));
        }
    }

    [Fact]
    public void A_damaged_segment_ends_the_log_and_the_segments_after_it_are_moved_aside_whole()
    {
        const long segment = 5_000;
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (log)
        {
            log.Append([View(1), .. Enumerable.Range(1, 20).Select(i => BigEntry(i))]);
            log.Sync();
        }
        var segments = HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath);
        Assert.True(segments.Count >= 3);
        string second = segments[1].File;
        byte[] bytes = File.ReadAllBytes(second);
        bytes[^10] ^= 0xff; // a flipped byte in the second segment's last record
        File.WriteAllBytes(second, bytes);

        (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (reopened)
        {
            Assert.NotNull(reopened.Damage);
            Assert.Contains("later segment(s)", reopened.Damage);
            HistoryLogImage image = HistoryLog.Read(records);
            Assert.Equal(0, image.Unreadable);
            Assert.True(image.Count is > 1 and < 20, $"{image.Count} entries read");
            Assert.Equal(2, HistoryLogFile.SegmentFiles(DurableFiles.System, LogPath).Count);
            Assert.Equal(segments.Count - 2, Directory.GetFiles(_directory.FullName, "ledger.safelog.*.damaged-*").Length);
            reopened.Append([BigEntry(image.Count + 1)]);
            reopened.Sync();
        }
        (HistoryLogFile again, List<byte[]> next) = HistoryLogFile.Open(LogPath, segmentBytes: segment);
        using (again)
        {
            Assert.Null(again.Damage);
            Assert.Equal(HistoryLog.Read(records).Count + 1, HistoryLog.Read(next).Count);
        }
    }

    [Fact]
    public void Reading_streams_records_of_any_size_and_stops_at_a_torn_one()
    {
        byte[][] records = [new byte[200_000], [7], new byte[70_000], []];
        for (int i = 0; i < records.Length; i++) Array.Fill(records[i], (byte)(i + 1));
        using (var file = new DurableRecordFile(LogPath))
        {
            foreach (byte[] r in records) file.Append(r);
            file.Append(new byte[5000]);
        }
        long whole = new FileInfo(LogPath).Length;
        using (var f = new FileStream(LogPath, FileMode.Open)) f.SetLength(whole - 100); // the last record torn
        DurableRecordFile.Contents contents = DurableRecordFile.Read(LogPath);
        Assert.Equal(records, contents.Records);
        Assert.Equal([0L, 200_008L, 200_017L, 270_025L], contents.Starts);
        Assert.Equal(whole - 5008, contents.IntactLength);
        Assert.Equal(whole - 100, contents.FileLength);
    }
}
