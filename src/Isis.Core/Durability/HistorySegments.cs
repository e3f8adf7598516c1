using Isis.Core.Wire;

namespace Isis.Core.Durability;

/// <summary>
/// A driver's bookkeeping of a history log kept in segments (the runtime's segment files, the
/// simulator's disk): when a new segment starts, what it restates, and which segments a Trim
/// record lets the driver drop. Pure: the driver does the writing, syncing and deleting.
/// </summary>
/// <remarks>
/// <para>The core trims its log by appending a Trim record (<see cref="HistoryLog.Trim"/>): the
/// entries at or before its point are held in a persistent checkpoint. A log kept in one file would
/// only grow; kept in segments, every segment all of whose entries are at or before the point
/// can go once that record is durable, and the log that is left reads as the whole one did
/// (<see cref="HistoryLogReader"/>): each segment after the first starts with a header
/// (<see cref="HistoryLogReader.SegmentHeader"/>) that restates what a reader starting there needs.</para>
/// <para>Segments go oldest first and the current one never goes, so the state records of a
/// dropped segment (views, incarnations, give-ups) were restated in the header of the next one.
/// A segment starts only before an entry (never between a view and the entries it orders), once
/// the current one holds <see cref="SegmentBytes"/> or more.</para>
/// </remarks>
internal sealed class HistorySegments
{
    private readonly HistoryLogReader _reader = new(keepEntries: false);
    private readonly List<(long Seq, long LastIndex)> _closed = [];
    private long _currentBytes;

    /// <summary>Starts the bookkeeping of a log whose current (and only) segment is <paramref name="seq"/>.</summary>
    public HistorySegments(long segmentBytes, long seq)
    {
        if (segmentBytes < 1) throw new ArgumentOutOfRangeException(nameof(segmentBytes), segmentBytes, "a segment holds at least one byte");
        SegmentBytes = segmentBytes;
        CurrentSeq = seq;
    }

    /// <summary>How many bytes of records a segment holds before the next entry starts a new one.</summary>
    public long SegmentBytes { get; }

    /// <summary>The segment appends go to.</summary>
    public long CurrentSeq { get; private set; }

    /// <summary>The segments before the current one, oldest first.</summary>
    public IEnumerable<long> Closed => _closed.Select(c => c.Seq);

    /// <summary>The history's trim point as the records taken so far say.</summary>
    public long Trimmed => _reader.Trimmed;

    /// <summary>How long the history is as the records taken so far say.</summary>
    public long Count => _reader.Count;

    /// <summary>
    /// Takes a record the current segment holds (read at open, or appended), of
    /// <paramref name="bytes"/> bytes on disk; false if the log's reader refuses it (the driver
    /// cuts the log there). The segment's last entry is the history's count after it.
    /// </summary>
    public bool Take(byte[] record, long bytes)
    {
        if (!_reader.Accept(record)) return false;
        _currentBytes += bytes;
        return true;
    }

    /// <summary>True if <paramref name="record"/>, about to be appended, goes to a new segment (<see cref="StartSegment"/>) first.</summary>
    public bool StartsSegment(ReadOnlySpan<byte> record) => _currentBytes >= SegmentBytes && HistoryLog.EntryIndexOf(record) > 0;

    /// <summary>
    /// The current segment is closed and <paramref name="seq"/> starts with the returned records
    /// (the driver writes them there whole, before anything follows them, then takes each with <see cref="Take"/>).
    /// </summary>
    public List<byte[]> StartSegment(PacketWriter w, long seq)
    {
        List<byte[]> header = _reader.SegmentHeader(w);
        Continue(seq);
        return header;
    }

    /// <summary>The current segment is closed and the records that follow are <paramref name="seq"/>'s (a segment read at open).</summary>
    public void Continue(long seq)
    {
        if (seq <= CurrentSeq) throw new ArgumentOutOfRangeException(nameof(seq), seq, $"segments are numbered upward: the current one is {CurrentSeq}");
        _closed.Add((CurrentSeq, _reader.Count));
        CurrentSeq = seq;
        _currentBytes = 0;
    }

    /// <summary>
    /// The closed segments that hold no entry past the trim point, oldest first, taken out of the
    /// bookkeeping: the driver may delete them once every record taken so far is durable.
    /// </summary>
    public long[] TakeDroppable()
    {
        int n = 0;
        while (n < _closed.Count && _closed[n].LastIndex <= _reader.Trimmed) n++;
        if (n == 0) return []; // the common case, at every sync: nothing allocated
        long[] drop = new long[n];
        for (int i = 0; i < n; i++) drop[i] = _closed[i].Seq;
        _closed.RemoveRange(0, n);
        return drop;
    }
}
