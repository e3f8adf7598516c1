using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Tests.Durability;

/// <summary>
/// A log trimmed by appending Trim records, and kept in segments of which the ones behind the trim
/// point are dropped (<see cref="HistorySegments"/>), reads as the whole log does
/// (<see cref="HistoryLogReader"/>): the same entries after the trim point, the same count, trim
/// point and digest, the same last view, incarnations, give-ups and pending forced recovery.
/// </summary>
public class HistorySegmentsTests
{
    private static readonly NodeId A = new(1, 1), B = new(2, 1), C = new(3, 1);
    private static readonly Lineage Line = new(A, 1);

    private static HistoryEntry Entry(long index, int size) => new(index, B, 2, index, 2, new byte[size]);

    /// <summary>A random log as a member appends it: entries, views, trims at durable checkpoints, incarnations, forced recoveries and give-ups.</summary>
    private static List<byte[]> RandomLog(ulong seed, int steps)
    {
        var random = new Common.DeterministicRandom(seed);
        var w = new PacketWriter();
        var records = new List<byte[]> { HistoryLog.Incarnation(w, A) };
        int viewId = 1;
        NodeId[] members = [A, B];
        records.Add(HistoryLog.View(w, new HistoryViewRecord(new HistoryViewKey(1, viewId), Line, A, members)));
        long count = 0, trimmed = 0;
        var digests = new List<ulong> { HistoryDigest.Empty }; // digests[i]: of entries 1..i
        uint incarnation = 1;
        for (int s = 0; s < steps; s++)
        {
            int pick = random.Next(100);
            if (pick < 75)
            {
                HistoryEntry e = Entry(++count, random.Next(200));
                records.Add(HistoryLog.Entry(w, e));
                digests.Add(HistoryDigest.Next(digests[^1], e));
            }
            else if (pick < 85 && count > trimmed)
            {
                trimmed += 1 + random.Next((int)(count - trimmed));
                records.Add(HistoryLog.Trim(w, trimmed, digests[(int)trimmed]));
            }
            else if (pick < 90)
            {
                members = random.Chance(0.5) ? [A, B] : [A, B, C];
                records.Add(HistoryLog.View(w, new HistoryViewRecord(new HistoryViewKey(1, ++viewId), Line, A, members)));
            }
            else if (pick < 94)
            {
                records.Add(HistoryLog.Incarnation(w, A with { Incarnation = ++incarnation }));
            }
            else if (pick < 97)
            {
                records.Add(HistoryLog.ForcedRecovery(w, random.Chance(0.5) ? [] : [C]));
            }
            else
            {
                records.Add(HistoryLog.GaveUp(w, [C with { Incarnation = (uint)random.NextInRange(1, 4) }]));
            }
        }
        return records;
    }

    /// <summary>
    /// Writes <paramref name="records"/> through the bookkeeping into segments of
    /// <paramref name="segmentBytes"/>, dropping what it allows after each record (every record is
    /// durable at once here), and returns the segments left.
    /// </summary>
    private static SortedDictionary<long, List<byte[]>> Segmented(List<byte[]> records, long segmentBytes)
    {
        var w = new PacketWriter();
        var segments = new HistorySegments(segmentBytes, 0);
        var files = new SortedDictionary<long, List<byte[]>> { [0] = [] };
        foreach (byte[] r in records)
        {
            if (segments.StartsSegment(r))
            {
                long seq = segments.CurrentSeq + 1;
                files[seq] = segments.StartSegment(w, seq);
                foreach (byte[] h in files[seq]) Assert.True(segments.Take(h, h.Length + 8));
            }
            files[segments.CurrentSeq].Add(r);
            Assert.True(segments.Take(r, r.Length + 8));
            foreach (long gone in segments.TakeDroppable()) Assert.True(files.Remove(gone));
        }
        return files;
    }

    private static void AssertSameImage(HistoryLogImage expected, HistoryLogImage actual)
    {
        Assert.Equal(0, expected.Unreadable);
        Assert.Equal(0, actual.Unreadable);
        Assert.Equal(expected.Count, actual.Count);
        Assert.Equal(expected.Trimmed, actual.Trimmed);
        Assert.Equal(expected.TrimmedDigest, actual.TrimmedDigest);
        Assert.Equal(expected.DigestAt(expected.Count), actual.DigestAt(actual.Count));
        Assert.Equal(expected.Entries.Select(e => (e.Index, e.Seq, e.Payload.Length)), actual.Entries.Select(e => (e.Index, e.Seq, e.Payload.Length)));
        Assert.Equal(expected.LastView!.Key, actual.LastView!.Key);
        Assert.Equal(expected.LastView.Members, actual.LastView.Members);
        Assert.Equal(expected.Incarnations, actual.Incarnations);
        Assert.Equal(expected.GaveUp, actual.GaveUp);
        Assert.Equal(expected.ForcedWithout, actual.ForcedWithout);
    }

    [Theory]
    [InlineData(64)]
    [InlineData(700)]
    [InlineData(4096)]
    public void A_segmented_log_with_the_segments_behind_its_trim_point_dropped_reads_as_the_whole_log(long segmentBytes)
    {
        int dropped = 0;
        for (ulong seed = 1; seed <= 60; seed++)
        {
            List<byte[]> whole = RandomLog(seed, 400);
            SortedDictionary<long, List<byte[]>> left = Segmented(whole, segmentBytes);
            long written = left.Keys.Max() + 1;
            dropped += (int)(written - left.Count);
            HistoryLogImage expected = HistoryLog.Read(whole);
            AssertSameImage(expected, HistoryLog.Read(left.Values.SelectMany(s => s).ToList()));
            // Segments are dropped oldest first, so the ones left are the newest, without gaps.
            Assert.Equal(Enumerable.Range((int)(written - left.Count), left.Count).Select(i => (long)i), left.Keys);
        }
        Assert.True(dropped > 60, $"only {dropped} segments dropped in 60 logs");
    }

    [Fact]
    public void A_log_trimmed_by_an_appended_Trim_record_reads_as_the_log_rewritten_without_the_trimmed_entries()
    {
        var w = new PacketWriter();
        HistoryViewRecord view = new(new HistoryViewKey(1, 3), Line, A, [A, B]);
        var entries = Enumerable.Range(1, 10).Select(i => Entry(i, i)).ToList();
        ulong d6 = entries.Take(6).Aggregate(HistoryDigest.Empty, HistoryDigest.Next);
        var appended = new List<byte[]> { HistoryLog.Incarnation(w, A), HistoryLog.View(w, view) };
        appended.AddRange(entries.Select(e => HistoryLog.Entry(w, e)));
        appended.Add(HistoryLog.Trim(w, 6, d6));
        var rewritten = new List<byte[]> { HistoryLog.Incarnation(w, A), HistoryLog.View(w, view), HistoryLog.Trim(w, 6, d6) };
        rewritten.AddRange(entries.Skip(6).Select(e => HistoryLog.Entry(w, e)));
        AssertSameImage(HistoryLog.Read(rewritten), HistoryLog.Read(appended));
        Assert.Equal([7L, 8, 9, 10], HistoryLog.Read(appended).Entries.Select(e => e.Index));

        // A Trim record past the entries read, or whose digest is not theirs, is not the log's.
        HistoryLogImage past = HistoryLog.Read([.. appended, HistoryLog.Trim(w, 11, d6)]);
        Assert.Equal(1, past.Unreadable);
        HistoryLogImage wrong = HistoryLog.Read([.. appended.Take(12), HistoryLog.Trim(w, 10, d6)]);
        Assert.Equal(1, wrong.Unreadable);
    }

    [Fact]
    public void A_segment_left_over_from_before_a_drop_is_read_over_by_the_next_segment_and_a_header_at_the_next_index_must_agree_with_its_digest()
    {
        List<byte[]> whole = RandomLog(7, 600);
        SortedDictionary<long, List<byte[]>> left = Segmented(whole, 300);
        Assert.True(left.Count >= 3, $"{left.Count} segments left");
        HistoryLogImage expected = HistoryLog.Read(whole);

        // The first segment left, read twice (an older copy that outlived its deletion comes first):
        // the next one's header starts the entries again from its own index.
        List<byte[]> first = left.Values.First();
        AssertSameImage(expected, HistoryLog.Read([.. first, .. left.Values.SelectMany(s => s)]));

        // A segment missing in the middle: the log is read from the segment after the gap, as if
        // everything before it had been trimmed (the core then needs a checkpoint that covers it).
        List<byte[]> gap = [.. left.Values.First(), .. left.Values.Skip(2).SelectMany(s => s)];
        HistoryLogImage afterGap = HistoryLog.Read(gap);
        Assert.Equal(expected.Count, afterGap.Count);
        Assert.Equal(expected.Entries.Last().Index, afterGap.Entries.Last().Index);
        Assert.Equal(0, afterGap.Unreadable);

        // A segment header at the next index with another digest is damage: reading stops there.
        byte[] segment = left.Values.ElementAt(1)[0];
        Assert.True(HistoryLog.IsSegmentRecord(segment));
        var r = new WireReader(segment);
        r.U8();
        long firstIndex = r.I64();
        byte[] forged = HistoryLog.Segment(new PacketWriter(), firstIndex, 0x5eed);
        List<byte[]> damaged = [.. left.Values.First(), forged, .. left.Values.ElementAt(1).Skip(1)];
        Assert.True(HistoryLog.Read(damaged).Unreadable > 0);
    }

    [Fact]
    public void A_new_segment_starts_only_before_an_entry_once_the_current_one_is_full_and_the_current_segment_is_never_dropped()
    {
        var w = new PacketWriter();
        var segments = new HistorySegments(100, 5);
        HistoryViewRecord view = new(new HistoryViewKey(1, 1), Line, A, [A]);
        byte[] inc = HistoryLog.Incarnation(w, A), vw = HistoryLog.View(w, view);
        Assert.True(segments.Take(inc, 150) && segments.Take(vw, 50));
        Assert.False(segments.StartsSegment(vw)); // full, but only an entry starts a segment
        byte[] e1 = HistoryLog.Entry(w, Entry(1, 4));
        Assert.True(segments.StartsSegment(e1));
        List<byte[]> header = segments.StartSegment(w, 6);
        Assert.True(HistoryLog.IsSegmentRecord(header[0]));
        Assert.Equal(6, segments.CurrentSeq);
        foreach (byte[] h in header) Assert.True(segments.Take(h, 1));
        Assert.True(segments.Take(e1, 40));
        Assert.False(segments.StartsSegment(HistoryLog.Entry(w, Entry(2, 4)))); // 40 bytes and the header's few < 100
        Assert.True(segments.Take(HistoryLog.Trim(w, 1, HistoryDigest.Next(HistoryDigest.Empty, Entry(1, 4))), 20));
        Assert.Equal([5L], segments.TakeDroppable()); // segment 5 held no entry; 6 is current
        Assert.Empty(segments.TakeDroppable());
        Assert.Throws<ArgumentOutOfRangeException>(() => segments.StartSegment(w, 6));
    }
}
