using Isis.Core.Common;
using Isis.Core.Durability;
using Isis.Core.Node;

namespace Isis.Simulation.Driving;

/// <summary>
/// A group's SafeSend history log on a disk in memory, written as the runtime's HistoryLogFile
/// writes its files: appends into segments (small ones, so that runs start and drop many), a
/// rewrite or the end of a copy replacing the log whole (the old one kept aside when asked), a
/// copy's parts staged aside until their end renames them over the log, and the segments wholly
/// behind a Trim record dropped once a step's writes are durable. It survives a crash as a disk
/// would: <see cref="Records"/> are what the next start reads, and whatever was staged aside is
/// deleted then.
/// </summary>
internal sealed class MemoryHistoryLog
{
    private const long SegmentBytes = 2048;

    private HistorySegments _segments = new(SegmentBytes, 0);

    // How many of the records each segment holds, oldest first.
    private readonly List<(long Seq, int Records)> _segmentRecords = [(0, 0)];

    /// <summary>The records of the log's segments in order, as a start reads them.</summary>
    public List<byte[]> Records { get; } = new();

    /// <summary>A replacement of the log written aside in parts (a copied history) until its last part renames it over the log.</summary>
    public List<byte[]> Staged { get; } = new();

    /// <summary>Logs kept aside (another lineage's) instead of replaced.</summary>
    public List<List<byte[]>> KeptAside { get; } = new();

    /// <summary>Makes one history write durable.</summary>
    public void Apply(HistoryWrite w)
    {
        switch (w.Stage)
        {
            case HistoryStage.Begin:
                Staged.Clear();
                Staged.AddRange(w.Records.Select(r => r.ToArray()));
                return;
            case HistoryStage.Continue:
                Staged.AddRange(w.Records.Select(r => r.ToArray()));
                return;
            case HistoryStage.Commit:
                // The parts and this end are renamed over the log, whole.
                if (w.KeepOldAside) KeptAside.Add([.. Records]);
                Replace([.. Staged, .. w.Records]);
                Staged.Clear();
                return;
        }
        if (w.Rewrite)
        {
            if (w.KeepOldAside) KeptAside.Add([.. Records]);
            Staged.Clear(); // a rewrite goes through the same file aside
            Replace(w.Records);
            return;
        }
        foreach (byte[] r in w.Records) Append(r);
    }

    /// <summary>Appends a record: an entry that finds the current segment full starts a new one, with its header.</summary>
    public void Append(byte[] record)
    {
        if (_segments.StartsSegment(record))
        {
            long seq = _segments.CurrentSeq + 1;
            List<byte[]> header = _segments.StartSegment(new Isis.Core.Wire.PacketWriter(), seq);
            _segmentRecords.Add((seq, 0));
            foreach (byte[] h in header) AddToSegment(h);
        }
        AddToSegment(record);
    }

    /// <summary>The log is replaced whole (a rewrite, the end of a copy, a wiped disk): one segment.</summary>
    public void Replace(IEnumerable<byte[]> records)
    {
        Records.Clear();
        _segments = new HistorySegments(SegmentBytes, 0);
        _segmentRecords.Clear();
        _segmentRecords.Add((0, 0));
        foreach (byte[] r in records) AddToSegment(r);
    }

    /// <summary>Once a step's writes are durable, the segments wholly behind a Trim record go, as the runtime deletes them at its sync.</summary>
    public void DropBehindTrim()
    {
        foreach (long seq in _segments.TakeDroppable())
        {
            Invariant.Check(_segmentRecords[0].Seq == seq, "segments are dropped oldest first");
            Records.RemoveRange(0, _segmentRecords[0].Records);
            _segmentRecords.RemoveAt(0);
        }
    }

    private void AddToSegment(byte[] record)
    {
        Records.Add(record.ToArray());
        _segments.Take(record, record.Length + 8);
        _segmentRecords[^1] = (_segmentRecords[^1].Seq, _segmentRecords[^1].Records + 1);
    }
}
