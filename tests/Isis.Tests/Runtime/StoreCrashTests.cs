using System.Buffers.Binary;
using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Core.Wire;
using Isis.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.Runtime;

/// <summary>
/// Crash consistency of every on-disk store (the SafeSend history log, persistent checkpoints, the
/// membership replica log): a realistic workload runs through the real store code on a
/// <see cref="SimulatedDisk"/>, and for every crash point (after each file operation) every disk
/// the crash can leave is reopened with the real reading code, which must never throw and never
/// lose what the store acknowledged (a completed Sync, Commit or Rewrite).
/// </summary>
public sealed class StoreCrashTests(ITestOutputHelper output)
{
    private const string Directory = "/sim/data";

    /// <summary>
    /// One store call of a workload, with the operations it made on the disk: a crash inside it
    /// may leave the state before it or after it; a crash after it, only the state after it.
    /// </summary>
    private sealed record Step<TModel>(int FirstOperation, int EndOperation, TModel Before, TModel After);

    /// <summary>Runs <paramref name="check"/> on every disk a crash after every operation can leave; returns (crash points, disks).</summary>
    private static (int Points, int Disks) CheckEveryCrash<TModel>(SimulatedDisk disk, List<Step<TModel>> steps, TModel initial, Action<SimulatedDisk, IReadOnlyList<TModel>> check)
    {
        int disks = 0;
        for (int k = 0; k <= disk.OperationCount; k++)
        {
            // The states a crash after k operations may recover: the one after the last step that
            // ended by then, or (a step under way) the one after that step.
            var allowed = new List<TModel>();
            Step<TModel>? inside = steps.FirstOrDefault(s => s.FirstOperation < k && k < s.EndOperation);
            Step<TModel>? lastDone = steps.LastOrDefault(s => s.EndOperation <= k);
            if (inside != null) allowed.AddRange([inside.Before, inside.After]);
            else allowed.Add(lastDone is null ? initial : lastDone.After);
            foreach (SimulatedDisk crashed in disk.CrashesAfter(k))
            {
                disks++;
                try
                {
                    check(crashed, allowed);
                }
                catch (Exception e)
                {
                    throw new Xunit.Sdk.XunitException(
                        $"crash after operation {k} of {disk.OperationCount} ({(k == 0 ? "none" : disk.Operations[k - 1])}); files on the crashed disk: " +
                        $"{string.Join(", ", crashed.Files.Select(f => $"{f} ({crashed.Contents(f)!.Length} bytes)"))}\n{e}\n" +
                        $"operations:\n  {string.Join("\n  ", disk.Operations.Select((o, i) => $"{i + 1}: {o}"))}");
                }
            }
        }
        return (disk.OperationCount + 1, disks);
    }

    // ---------------------------------------------------------------- the SafeSend history log

    private static readonly NodeId Member = new(0x7F00_0001_1F90UL, 1);
    private static readonly NodeId Other = new(0x7F00_0001_1F91UL, 1);

    private static byte[] Incarnation(uint n) => HistoryLog.Incarnation(new PacketWriter(), Member with { Incarnation = n });

    private static byte[] View(long epoch, int viewId, NodeId founder) =>
        HistoryLog.View(new PacketWriter(), new HistoryViewRecord(new HistoryViewKey(epoch, viewId), new Lineage(founder, 1), Member, [Member, Other]));

    private static byte[] Entry(long index, int size = 40) =>
        HistoryLog.Entry(new PacketWriter(), new HistoryEntry(index, Other, 1, index, 2, Enumerable.Range(0, size).Select(i => (byte)(index + i)).ToArray()));

    /// <summary>One version of the log: its records (synced or not) and how many a restart must find (Acked).</summary>
    /// <param name="OrphanOf">For a rewrite that kept the old log aside: the old log, which must be found whole in an <c>*.orphan-*</c> file.</param>
    private sealed record LogVersion(byte[][] Records, int Acked, LogVersion? OrphanOf = null);

    /// <summary>
    /// The history log: an old log with a record that passes its CRC but is out of place and a
    /// torn tail is opened (both cut aside), then appends with and without syncs, a rewrite (a
    /// recovery's new history), more appends, a rewrite that keeps the old log aside (another
    /// lineage), and a last append and sync. A restart must read a whole version: at least what
    /// was synced, only what was written, in order; never an empty or missing log instead of a
    /// complete old one; and a rewrite that kept the old log has it aside, whole.
    /// </summary>
    [Fact]
    public void History_log_recovers_every_acknowledged_record_after_a_crash_at_any_point()
    {
        string path = Directory + "/ledger.safelog";
        var disk = new SimulatedDisk();
        byte[][] good = [Incarnation(1), View(1, 1, Member), Entry(1), Entry(2)];
        using (var setup = new DurableRecordFile(path, files: disk))
        {
            foreach (byte[] r in good) setup.Append(r);
            setup.Append(Entry(4)); // passes its CRC, out of place: the history has no entry 3
            setup.Append(Entry(5));
        }
        byte[] torn = Frame(Entry(6));
        byte[] withTornTail = [.. disk.Contents(path)!, .. torn[..(torn.Length / 2)]];
        disk.Delete(path);
        using (IDurableFile f = disk.OpenAppend(path)) f.Write(withTornTail);
        disk.Settle();

        var initial = new LogVersion(good, good.Length);
        var steps = new List<Step<LogVersion>>();
        LogVersion model = initial;
        HistoryLogFile? log = null;
        void Do(Func<LogVersion, LogVersion> change, Action act)
        {
            int first = disk.OperationCount;
            act();
            LogVersion after = change(model);
            steps.Add(new Step<LogVersion>(first, disk.OperationCount, model, after));
            model = after;
        }
        void Append(params byte[][] records) => Do(m => m with { Records = [.. m.Records, .. records] }, () => log!.Append(records));
        void Sync() => Do(m => m with { Acked = m.Records.Length }, () => log!.Sync());
        void Rewrite(byte[][] records, bool keepOldAside) =>
            Do(m => new LogVersion(records, records.Length, keepOldAside ? m : null), () => log!.Rewrite(records, keepOldAside));

        Do(m => m, () =>
        {
            (log, List<byte[]> records) = HistoryLogFile.Open(path, disk);
            Assert.Equal(good, records); // the misplaced entry 4 and everything after it are cut aside
            Assert.Contains("out of place", log.Damage);
        });
        Append(Entry(3));
        Sync();
        Append(Entry(4), Entry(5));
        Append(Entry(6, size: 3000));
        Sync();
        Append(Entry(7)); // never synced: may be lost
        Rewrite([Incarnation(1), Incarnation(2), View(2, 1, Member), .. Enumerable.Range(1, 7).Select(i => Entry(i))], keepOldAside: false);
        Append(Entry(8));
        Sync();
        Rewrite([Incarnation(3), View(1, 3, Other), Entry(1), Entry(2)], keepOldAside: true);
        Append(Entry(3), Entry(4));
        Sync();
        log!.Dispose();

        (int points, int disks) = CheckEveryCrash(disk, steps, initial, (crashed, allowed) =>
        {
            (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(path, crashed);
            using (reopened)
            {
                Assert.True(allowed.Any(v => IsWholeVersion(crashed, path, v, records)),
                    $"the log holds {records.Count} records, which are no allowed version's ({string.Join(" or ", allowed.Select(v => $"{v.Acked}..{v.Records.Length} of a version of {v.Records.Length}"))})");
                // What the member writes next follows them, and the restart after reads it.
                reopened.Append([Incarnation(9)]);
                reopened.Sync();
            }
            (HistoryLogFile again, List<byte[]> next) = HistoryLogFile.Open(path, crashed);
            again.Dispose();
            Assert.Equal([.. records, Incarnation(9)], next);
        });
        output.WriteLine($"SafeSend history log: {points} crash points, {disks} crashed disks checked, {disk.OperationCount} file operations");
    }

    /// <summary>
    /// A history copied from another member is written aside in parts as it arrives (each part
    /// synced in its own step) and renamed over the log with its last part: an old log is opened,
    /// appended to and synced; a copy starts, gets two more parts, is abandoned (a view change
    /// restarts the copy) and starts again; the new copy's parts and its end replace the log,
    /// keeping the old one aside (another lineage); a second copy ends in place. After a crash at
    /// any point, the log is the old one or the whole new one, never a part of a copy, the
    /// unfinished copy aside is deleted when the log is opened, and what follows is read back.
    /// </summary>
    [Fact]
    public void A_history_copied_in_parts_replaces_the_log_whole_or_not_at_all_after_a_crash_at_any_point()
    {
        string path = Directory + "/copied.safelog";
        var disk = new SimulatedDisk();
        byte[][] old = [Incarnation(1), View(1, 1, Other), Entry(1), Entry(2)];
        var initial = new LogVersion([], 0);
        var steps = new List<Step<LogVersion>>();
        LogVersion model = initial;
        HistoryLogFile? log = null;
        var staged = new List<byte[]>();
        void Do(Func<LogVersion, LogVersion> change, Action act)
        {
            int first = disk.OperationCount;
            act();
            LogVersion after = change(model);
            steps.Add(new Step<LogVersion>(first, disk.OperationCount, model, after));
            model = after;
        }
        void Stage(bool begin, params byte[][] records) => Do(m => m, () =>
        {
            if (begin) staged.Clear();
            staged.AddRange(records);
            log!.Stage(records, begin);
        });
        void Commit(bool keepOldAside, params byte[][] records) => Do(m =>
        {
            byte[][] whole = [.. staged, .. records];
            return new LogVersion(whole, whole.Length, keepOldAside ? m : null);
        }, () => log!.CommitStaged(records, keepOldAside));

        Do(m => m, () => (log, _) = HistoryLogFile.Open(path, disk));
        Do(m => m with { Records = old }, () => log!.Append(old));
        Do(m => m with { Acked = m.Records.Length }, () => log!.Sync());
        // A copy that a view change abandons after three parts, then the copy of the next view.
        Stage(begin: true, [Incarnation(1), Incarnation(2), View(2, 3, Member), .. Enumerable.Range(1, 5).Select(i => Entry(i))]);
        Stage(begin: false, [.. Enumerable.Range(6, 5).Select(i => Entry(i, size: 900))]);
        Stage(begin: false, Entry(11));
        Stage(begin: true, [Incarnation(1), Incarnation(2), View(2, 4, Member), .. Enumerable.Range(1, 4).Select(i => Entry(i))]);
        Stage(begin: false, [.. Enumerable.Range(5, 6).Select(i => Entry(i, size: 700))]);
        Stage(begin: false, [.. Enumerable.Range(11, 3).Select(i => Entry(i))]);
        Commit(keepOldAside: true, Entry(14), Entry(15));
        Do(m => m with { Records = [.. m.Records, Entry(16)] }, () => log!.Append([Entry(16)]));
        Do(m => m with { Acked = m.Records.Length }, () => log!.Sync());
        // Copied again (a later view, same lineage): in two parts and an empty end, in place.
        Stage(begin: true, [Incarnation(1), Incarnation(2), Incarnation(3), View(3, 7, Member), .. Enumerable.Range(1, 10).Select(i => Entry(i))]);
        Stage(begin: false, [.. Enumerable.Range(11, 8).Select(i => Entry(i, size: 300))]);
        Commit(keepOldAside: false);
        log!.Dispose();

        (int points, int disks) = CheckEveryCrash(disk, steps, initial, (crashed, allowed) =>
        {
            (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(path, crashed);
            using (reopened)
            {
                Assert.True(allowed.Any(v => IsWholeVersion(crashed, path, v, records)),
                    $"the log holds {records.Count} records, which are no allowed version's ({string.Join(" or ", allowed.Select(v => $"{v.Acked}..{v.Records.Length} of a version of {v.Records.Length}"))})");
                Assert.DoesNotContain(path + ".next", crashed.Files); // an unfinished copy is deleted, never read
                reopened.Append([Incarnation(9)]);
                reopened.Sync();
            }
            (HistoryLogFile again, List<byte[]> next) = HistoryLogFile.Open(path, crashed);
            again.Dispose();
            Assert.Equal([.. records, Incarnation(9)], next);
        });
        output.WriteLine($"SafeSend history log copied in parts: {points} crash points, {disks} crashed disks checked, {disk.OperationCount} file operations");
    }

    /// <summary>A version of a segmented log as its history: entries by index, how many were acknowledged (synced), and its view.</summary>
    private sealed record HistoryVersion(int ViewId, long Written, long Acked, long TrimmedAtMost);

    /// <summary>
    /// The history log kept in small segments: appends roll over segments (each closed one synced,
    /// each new one started with its header), Trim records let the syncs retire the segments
    /// behind them (kept as spares that later segments reuse, or deleted), a rewrite starts a new
    /// generation and retires the old one, and more appends
    /// and trims follow. After a crash at any point the log read back holds a whole version: every
    /// acknowledged entry (those at or before a durable trim point may be gone with their segments,
    /// but never one after it), only written entries, each the one written at its index, in the
    /// version's view; never an exception, never a closed segment damaged.
    /// </summary>
    [Fact]
    public void A_segmented_history_log_keeps_every_acknowledged_entry_after_its_trim_point_after_a_crash_at_any_point()
    {
        const long SegmentBytes = 300;
        string path = Directory + "/segmented.safelog";
        var disk = new SimulatedDisk();
        var initial = new HistoryVersion(0, 0, 0, 0);
        var steps = new List<Step<HistoryVersion>>();
        HistoryVersion model = initial;
        HistoryLogFile? log = null;
        var digests = new Dictionary<int, List<ulong>>(); // per view (a version): digests[i] of entries 1..i
        void Do(Func<HistoryVersion, HistoryVersion> change, Action act)
        {
            int first = disk.OperationCount;
            act();
            HistoryVersion after = change(model);
            steps.Add(new Step<HistoryVersion>(first, disk.OperationCount, model, after));
            model = after;
        }
        HistoryEntry EntryOf(int viewId, long index) => new(index, Other, viewId, index, 2, Enumerable.Range(0, 40).Select(i => (byte)(index * viewId + i)).ToArray());
        void Entries(int viewId, long from, long to) => Do(m => m with { Written = to }, () =>
        {
            for (long i = from; i <= to; i++)
            {
                HistoryEntry e = EntryOf(viewId, i);
                digests[viewId].Add(HistoryDigest.Next(digests[viewId][^1], e));
                log!.Append([HistoryLog.Entry(new PacketWriter(), e)]);
            }
        });
        void Sync() => Do(m => m with { Acked = m.Written }, () => log!.Sync());
        void Trim(long through) => Do(m => m with { TrimmedAtMost = through }, () =>
            log!.Append([HistoryLog.Trim(new PacketWriter(), through, digests[model.ViewId][(int)through])]));
        byte[] ViewRecord(int viewId) => View(1, viewId, Member);

        Do(m => m, () => (log, _) = HistoryLogFile.Open(path, disk, SegmentBytes));
        digests[1] = [HistoryDigest.Empty];
        Do(m => m with { ViewId = 1 }, () => log!.Append([Incarnation(1), ViewRecord(1)]));
        Entries(1, 1, 12);
        Sync();
        Entries(1, 13, 20);
        Trim(9);
        Sync(); // the segments wholly at or before entry 9 go
        Entries(1, 21, 24);
        Trim(22);
        Entries(1, 25, 26); // the trim is not durable until the sync: nothing goes before it
        Sync();
        // A recovery's new history: the next generation, which replaces every segment of this one.
        digests[2] = [HistoryDigest.Empty];
        byte[][] rewritten = [Incarnation(1), Incarnation(2), ViewRecord(2), .. Enumerable.Range(1, 6).Select(i => HistoryLog.Entry(new PacketWriter(), EntryOf(2, i)))];
        Do(m => new HistoryVersion(2, 6, 6, 0), () =>
        {
            for (int i = 1; i <= 6; i++) digests[2].Add(HistoryDigest.Next(digests[2][^1], EntryOf(2, i)));
            log!.Rewrite(rewritten, keepOldAside: false);
        });
        Entries(2, 7, 15);
        Trim(11);
        Sync();
        Entries(2, 16, 17);
        log!.Dispose();

        // A segment behind the trim point is deleted or kept as a spare, and a spare is reused (emptied, synced, renamed) for a later segment.
        bool IsSegment(string name) => System.Text.RegularExpressions.Regex.IsMatch(name, @"\.safelog(\.[0-9]+-[0-9]+)?$");
        int deletedSegments = disk.Operations.Count(o => o.StartsWith("delete ", StringComparison.Ordinal) && IsSegment(o.Split(' ')[1]));
        int sparedSegments = disk.Operations.Count(o => o.StartsWith("rename ", StringComparison.Ordinal) && IsSegment(o.Split(' ')[1]) && o.Split(' ')[2].Contains(".spare-", StringComparison.Ordinal));
        int reusedSpares = disk.Operations.Count(o => o.StartsWith("rename ", StringComparison.Ordinal) && o.Split(' ')[1].Contains(".spare-", StringComparison.Ordinal) && IsSegment(o.Split(' ')[2]));
        Assert.True(deletedSegments + sparedSegments >= 4, $"only {deletedSegments + sparedSegments} segments retired: {string.Join("; ", disk.Operations)}");
        Assert.True(deletedSegments >= 1 && sparedSegments >= 4 && reusedSpares >= 4, $"{deletedSegments} deleted, {sparedSegments} spared, {reusedSpares} spares reused: {string.Join("; ", disk.Operations)}");
        (int points, int disks) = CheckEveryCrash(disk, steps, initial, (crashed, allowed) =>
        {
            (HistoryLogFile reopened, List<byte[]> records) = HistoryLogFile.Open(path, crashed, SegmentBytes);
            HistoryLogImage image = HistoryLog.Read(records);
            using (reopened)
            {
                // An unsynced tail torn by the crash is cut aside, as ever; a closed segment never is
                // (each is synced before the next exists), so no later segment is moved aside.
                Assert.DoesNotContain("later segment", reopened.Damage ?? "", StringComparison.Ordinal);
                Assert.Equal(0, image.Unreadable);
                Assert.True(allowed.Any(v => Holds(v, image)),
                    $"the log holds entries {image.Trimmed + 1}..{image.Count} of view {image.LastView?.Key.ViewId.ToString() ?? "none"}, which is no allowed version's " +
                    $"({string.Join(" or ", allowed.Select(v => $"view {v.ViewId}: {v.Acked}..{v.Written}, trimmed at most {v.TrimmedAtMost}"))})");
                reopened.Append([Incarnation(9)]);
                reopened.Sync();
            }
            (HistoryLogFile again, List<byte[]> next) = HistoryLogFile.Open(path, crashed, SegmentBytes);
            again.Dispose();
            Assert.Equal(image.Count, HistoryLog.Read(next).Count);
            Assert.Contains(Member with { Incarnation = 9 }, HistoryLog.Read(next).Incarnations);
        });
        output.WriteLine($"segmented SafeSend history log: {points} crash points, {disks} crashed disks checked, {disk.OperationCount} file operations, {deletedSegments} segments deleted, {sparedSegments} kept as spares, {reusedSpares} spares reused");

        bool Holds(HistoryVersion v, HistoryLogImage image)
        {
            if (image.LastView == null) return v.Acked == 0 && v.ViewId <= 1 && image.Count == 0; // the first view record was not synced yet
            if (image.LastView?.Key.ViewId != v.ViewId) return false;
            if (image.Count < v.Acked || image.Count > v.Written || image.Trimmed > v.TrimmedAtMost) return false;
            return image.Entries.All(e => e.Payload.Span.SequenceEqual(EntryOf(v.ViewId, e.Index).Payload.Span))
                && image.DigestAt(image.Count) == digests[v.ViewId][(int)image.Count];
        }
    }

    private static bool IsWholeVersion(SimulatedDisk crashed, string path, LogVersion v, List<byte[]> records)
    {
        if (records.Count < v.Acked || records.Count > v.Records.Length) return false;
        for (int i = 0; i < records.Count; i++)
        {
            if (!records[i].AsSpan().SequenceEqual(v.Records[i])) return false;
        }
        if (v.OrphanOf is not { } old) return true;
        // The old log of another lineage must be kept aside, whole.
        return crashed.Files.Where(f => f.StartsWith(path + ".orphan-", StringComparison.Ordinal)).Any(f =>
        {
            List<byte[]> kept = DurableRecordFile.Read(f, crashed).Records;
            return kept.Count >= old.Acked && kept.Count <= old.Records.Length && kept.Select((r, i) => r.AsSpan().SequenceEqual(old.Records[i])).All(x => x);
        });
    }

    private static byte[] Frame(byte[] record)
    {
        byte[] frame = new byte[8 + record.Length];
        BinaryPrimitives.WriteInt32LittleEndian(frame, record.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(frame.AsSpan(4), Crc32C.Compute(record));
        record.CopyTo(frame, 8);
        return frame;
    }

    // ---------------------------------------------------------------- persistent checkpoints

    private static byte[][] PartsOf(int checkpoint) =>
        [.. Enumerable.Range(0, 1 + checkpoint % 3).Select(p => Enumerable.Range(0, 50 + 700 * p).Select(i => (byte)(checkpoint * 31 + p * 7 + i)).ToArray())];

    /// <summary>
    /// Checkpoints: five are committed one after the other (the second one's writer is abandoned
    /// once before it, as after a handler that threw). After a crash at any point, the newest
    /// whole checkpoint among the newest and the previous file (what a join loads) is the last
    /// committed one, or the one being committed, and it loads whole with its own parts.
    /// </summary>
    [Fact]
    public void Checkpoints_keep_the_last_committed_one_whole_after_a_crash_at_any_point()
    {
        const string group = "ledger";
        var disk = new SimulatedDisk();
        var steps = new List<Step<int>>();
        int committed = 0;
        for (int n = 1; n <= 5; n++)
        {
            if (n == 2)
            {
                int start = disk.OperationCount;
                using (CheckpointFile.Writer abandoned = CheckpointFile.Create(Directory, group, null, null, null, new DateTime(2026, 1, 1, 0, 0, 0, DateTimeKind.Utc), disk))
                {
                    abandoned.Add(new byte[100]);
                }
                steps.Add(new Step<int>(start, disk.OperationCount, committed, committed));
            }
            int first = disk.OperationCount;
            using (CheckpointFile.Writer writer = CheckpointFile.Create(Directory, group, null, null, n == 3 ? new byte[32] : null, new DateTime(2026, 1, 1, 0, n, 0, DateTimeKind.Utc), disk))
            {
                foreach (byte[] part in PartsOf(n)) writer.Add(part);
                writer.Commit();
            }
            steps.Add(new Step<int>(first, disk.OperationCount, committed, n));
            committed = n;
        }

        (int points, int disks) = CheckEveryCrash(disk, steps, 0, (crashed, allowed) =>
        {
            CheckpointFile.Checked? loaded = LoadWhole(crashed, group);
            using (loaded)
            {
                int expected = allowed.Max(); // the newest a crash may keep; at least the earliest allowed must load
                if (allowed.Min() == 0 && loaded == null) return;
                Assert.NotNull(loaded);
                int n = loaded.WrittenUtc.Minute;
                Assert.InRange(n, allowed.Min(), expected);
                Assert.Equal(PartsOf(n), loaded.ReadParts().ToArray());
            }
        });
        output.WriteLine($"persistent checkpoints: {points} crash points, {disks} crashed disks checked, {disk.OperationCount} file operations");
    }

    /// <summary>
    /// A checkpoint copied from another member (to hold the history): its bytes arrive in chunks,
    /// appended to the copy file, synced once whole, then installed as the newest. After a crash at
    /// any point the member loads the checkpoint it had, or the copied one once installing began,
    /// whole; a copy cut short by the crash is found stale and started over.
    /// </summary>
    [Fact]
    public void A_copied_checkpoint_replaces_the_newest_whole_or_not_at_all_after_a_crash_at_any_point()
    {
        const string group = "ledger";
        var disk = new SimulatedDisk();
        var steps = new List<Step<int>>();
        // This member's own checkpoint 1, then a copy of checkpoint 2 made elsewhere.
        using (CheckpointFile.Writer writer = CheckpointFile.Create(Directory, group, null, null, null, new DateTime(2026, 1, 1, 0, 1, 0, DateTimeKind.Utc), disk))
        {
            foreach (byte[] part in PartsOf(1)) writer.Add(part);
            writer.Commit();
        }
        steps.Add(new Step<int>(0, disk.OperationCount, 0, 1));
        var elsewhere = new SimulatedDisk();
        using (CheckpointFile.Writer writer = CheckpointFile.Create(Directory, group, null, null, null, new DateTime(2026, 1, 1, 0, 2, 0, DateTimeKind.Utc), elsewhere))
        {
            foreach (byte[] part in PartsOf(2)) writer.Add(part);
            writer.Commit();
        }
        byte[] image;
        using (Stream read = elsewhere.OpenRead(CheckpointFile.NewestPath(Directory, group)))
        using (var copy = new MemoryStream())
        {
            read.CopyTo(copy);
            image = copy.ToArray();
        }

        string path = CheckpointFile.CopyPath(Directory, group);
        int first = disk.OperationCount;
        const int Chunk = 97; // several chunks, the last one short
        for (int offset = 0; offset < image.Length; offset += Chunk)
        {
            int length = Math.Min(Chunk, image.Length - offset);
            CheckpointFile.CopyProgress progress = CheckpointFile.AppendCopyChunk(disk, path, offset, image.AsSpan(offset, length), image.Length);
            Assert.Equal(offset + length < image.Length ? CheckpointFile.CopyProgress.More : CheckpointFile.CopyProgress.Whole, progress);
            // A chunk that does not start where the copy ends (the copy was cut short by a restart) is refused: the copy starts over.
            if (offset == 0) Assert.Equal(CheckpointFile.CopyProgress.Stale, CheckpointFile.AppendCopyChunk(disk, path, 2 * Chunk, image.AsSpan(2 * Chunk, Chunk), image.Length));
        }
        steps.Add(new Step<int>(first, disk.OperationCount, 1, 1)); // a copy not yet installed loads nowhere
        int installing = disk.OperationCount;
        using (CheckpointFile.Checked copy = CheckpointFile.Open(path, group, out string? problem, disk) ?? throw new InvalidOperationException(problem)) { }
        CheckpointFile.Install(Directory, group, path, disk);
        steps.Add(new Step<int>(installing, disk.OperationCount, 1, 2));
        Assert.Equal(CheckpointFile.CopyProgress.Stale, CheckpointFile.AppendCopyChunk(disk, path, Chunk, image.AsSpan(Chunk, Chunk), image.Length)); // installed: no copy left to append to

        (int points, int disks) = CheckEveryCrash(disk, steps, 0, (crashed, allowed) =>
        {
            CheckpointFile.Checked? loaded = LoadWhole(crashed, group);
            using (loaded)
            {
                if (allowed.Min() == 0 && loaded == null) return; // before its own first checkpoint was committed
                Assert.NotNull(loaded);
                int n = loaded.WrittenUtc.Minute;
                Assert.InRange(n, allowed.Min(), allowed.Max());
                Assert.Equal(PartsOf(n), loaded.ReadParts().ToArray());
            }
        });
        output.WriteLine($"copied checkpoint: {points} crash points, {disks} crashed disks checked");
    }

    /// <summary>What a join loads from a crashed disk: the newest checkpoint if whole, else the previous one if whole.</summary>
    private static CheckpointFile.Checked? LoadWhole(SimulatedDisk crashed, string group)
    {
        CheckpointFile.Checked? loaded = null;
        foreach (string path in new[] { CheckpointFile.NewestPath(Directory, group), CheckpointFile.PreviousPath(Directory, group) })
        {
            CheckpointFile.Checked? c = CheckpointFile.Open(path, group, out _, crashed);
            if (loaded == null) loaded = c;
            else c?.Dispose();
        }
        return loaded;
    }

    // ---------------------------------------------------------------- the membership replica log

    private static byte[] ReplicaRecord(int n) => Enumerable.Range(0, 10 + n * 13 % 200).Select(i => (byte)(n ^ i)).ToArray();

    /// <summary>
    /// A replica's log: batches of records, each synced before the step's packets would leave (as
    /// ServiceHost.SendPackets does), a restart that finds a torn tail and cuts it, and more
    /// batches. After a crash at any point a restart finds every synced record, in order, nothing
    /// that was not written, and the records it appends next are read by the restart after.
    /// </summary>
    [Fact]
    public void Replica_log_recovers_every_synced_record_after_a_crash_at_any_point()
    {
        string path = Directory + "/replica-127.0.0.1-7345.log";
        var disk = new SimulatedDisk();
        var steps = new List<Step<(int Written, int Acked)>>();
        (int Written, int Acked) model = (0, 0);
        int next = 1;
        DurableRecordFile log = null!;
        void Do((int, int) after, Action act)
        {
            int first = disk.OperationCount;
            act();
            steps.Add(new Step<(int, int)>(first, disk.OperationCount, model, after));
            model = after;
        }
        void Batch(int records) => Do((model.Written + records, model.Written + records), () =>
        {
            for (int i = 0; i < records; i++) log.Append(ReplicaRecord(next++));
            log.Sync();
        });

        void CheckEveryCrashOfReplicaLog((int Written, int Acked) initial, ref int points, ref int disks)
        {
            (int p, int d) = CheckEveryCrash(disk, steps, initial, (crashed, allowed) =>
            {
                (DurableRecordFile reopened, List<byte[]> records) = ServiceHost.OpenReplicaLog(path, crashed);
                using (reopened)
                {
                    Assert.InRange(records.Count, allowed.Min(a => a.Acked), allowed.Max(a => a.Written));
                    Assert.Equal(Enumerable.Range(1, records.Count).Select(ReplicaRecord), records);
                    reopened.Append(ReplicaRecord(1000));
                    reopened.Sync();
                }
                (DurableRecordFile again, List<byte[]> after) = ServiceHost.OpenReplicaLog(path, crashed);
                again.Dispose();
                Assert.Equal([.. records, ReplicaRecord(1000)], after);
            });
            points += p;
            disks += d;
        }

        // A new replica: its log is created, then batches.
        int points = 0, disks = 0;
        Do(model, () => log = ServiceHost.OpenReplicaLog(path, disk).Log);
        Batch(1);
        Batch(3);
        Batch(2);
        log.Dispose();
        CheckEveryCrashOfReplicaLog((0, 0), ref points, ref disks);
        int operations = disk.OperationCount;

        // A crash tore the last write: the restart cuts it off and goes on after the intact records.
        using (IDurableFile f = disk.OpenAppend(path)) f.Write(Frame(ReplicaRecord(99))[..7]);
        disk.Settle();
        steps.Clear();
        (int, int) restarted = model;
        Do(model, () =>
        {
            (log, List<byte[]> restored) = ServiceHost.OpenReplicaLog(path, disk);
            Assert.Equal(Enumerable.Range(1, 6).Select(ReplicaRecord), restored);
        });
        Batch(1);
        Batch(4);
        log.Dispose();
        CheckEveryCrashOfReplicaLog(restarted, ref points, ref disks);
        operations += disk.OperationCount;
        output.WriteLine($"membership replica log: {points} crash points, {disks} crashed disks checked, {operations} file operations (a new log, then a restart that cut a torn tail)");
    }

    /// <summary>
    /// A replica's log compacted behind a snapshot: batches appended and synced, then the whole
    /// log replaced by a snapshot record and the records after it (DurableRecordFile.Rewrite, as
    /// ServiceHost.SendPackets does for Outbox.ReplicaRecordsReplaceLog), more batches, another
    /// rewrite. After a crash at any point a restart finds the whole old log or the whole new one
    /// (never an empty or mixed one), with every synced record, and appends after it.
    /// </summary>
    [Fact]
    public void Replica_log_compacted_behind_a_snapshot_keeps_a_whole_log_after_a_crash_at_any_point()
    {
        string path = Directory + "/replica-127.0.0.1-7346.log";
        var disk = new SimulatedDisk();
        var steps = new List<Step<int[]>>();
        int[] model = [];
        DurableRecordFile log = null!;
        void Do(int[] after, Action act)
        {
            int first = disk.OperationCount;
            act();
            steps.Add(new Step<int[]>(first, disk.OperationCount, model, after));
            model = after;
        }
        void Batch(params int[] records) => Do([.. model, .. records], () =>
        {
            foreach (int n in records) log.Append(ReplicaRecord(n));
            log.Sync();
        });
        void Compact(params int[] records) => Do(records, () =>
        {
            log.Rewrite(records.Select(ReplicaRecord).ToList());
            log.Sync();
        });

        Do(model, () => log = ServiceHost.OpenReplicaLog(path, disk).Log);
        Batch(1, 2, 3);
        Batch(4);
        Compact(100, 3, 4); // a snapshot up to 2, then the entries after it
        Batch(5, 6);
        Compact(101, 6);
        Batch(7);
        log.Dispose();

        static bool StartsWith(int[] list, int[] prefix) => list.Length >= prefix.Length && list.AsSpan(0, prefix.Length).SequenceEqual(prefix);
        (int points, int disks) = CheckEveryCrash(disk, steps, [], (crashed, allowed) =>
        {
            (DurableRecordFile reopened, List<byte[]> records) = ServiceHost.OpenReplicaLog(path, crashed);
            int[] found;
            using (reopened)
            {
                // Which records: identified by content (each number makes distinct bytes).
                found = records.Select(r => Array.FindIndex(Enumerable.Range(0, 200).ToArray(), n => ReplicaRecord(n).AsSpan().SequenceEqual(r))).ToArray();
                bool whole = allowed.Any(a => a.AsSpan().SequenceEqual(found));
                // Inside an append batch, any prefix of the batch may have reached the disk.
                bool batchPrefix = allowed.Count == 2 && StartsWith(found, allowed[0]) && StartsWith(allowed[1], found);
                Assert.True(whole || batchPrefix, $"found [{string.Join(", ", found)}], allowed {string.Join(" or ", allowed.Select(a => $"[{string.Join(", ", a)}]"))}");
                reopened.Append(ReplicaRecord(199));
                reopened.Sync();
            }
            (DurableRecordFile again, List<byte[]> after) = ServiceHost.OpenReplicaLog(path, crashed);
            again.Dispose();
            Assert.Equal([.. found.Select(ReplicaRecord), ReplicaRecord(199)], after);
        });
        output.WriteLine($"compacted membership replica log: {points} crash points, {disks} crashed disks checked, {disk.OperationCount} file operations");
    }
}
