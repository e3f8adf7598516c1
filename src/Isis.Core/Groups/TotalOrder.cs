using System.Buffers.Binary;

namespace Isis.Core.Groups;

/// <summary>
/// The total order of OrderedSend within one view, by a fixed sequencer: the oldest member (rank
/// 0) assigns positions in the order it receives ordered messages (FIFO per sender, so the total
/// order respects each sender's order) and announces them in its own stream. Every member delivers
/// an ordered message when the next announced position refers to it and it holds it.
/// </summary>
/// <remarks>
/// Cost: one multicast per message plus one announcement per sequencer step (many positions
/// each), so about one extra packet per batch, not per message. Latency: two hops (sender to
/// sequencer, sequencer to all) unless the sender is the sequencer. When the sequencer fails, the
/// view-change flush gives every survivor the same messages and announcements; what is left is
/// placed deterministically (<see cref="DrainAtViewEnd"/>), and the next view's oldest member
/// becomes the sequencer.
/// </remarks>
internal sealed class TotalOrder
{
    public const int SequencerRank = 0;

    private readonly Dictionary<(int Rank, long Seq), StreamMessage> _waiting = new();
    private readonly Queue<(int Rank, long Seq)> _positions = new();
    private readonly List<(int Rank, long Seq)> _toAnnounce = new();

    /// <summary>An ordered message reached the head of its stream; the sequencer also gives it the next position.</summary>
    public void Add(int rank, long seq, StreamMessage message, bool announce)
    {
        _waiting[(rank, seq)] = message;
        if (announce) _toAnnounce.Add((rank, seq));
    }

    /// <summary>Reads an announcement: a count, then (rank, seq) pairs.</summary>
    public bool TryAddPositions(byte[] announcement, int ranks)
    {
        ReadOnlySpan<byte> span = announcement;
        if (span.Length < 4) return false;
        int count = BinaryPrimitives.ReadInt32LittleEndian(span);
        if (count < 0 || (long)count * 12 != span.Length - 4) return false;
        var positions = new (int, long)[count];
        for (int i = 0; i < count; i++)
        {
            int rank = BinaryPrimitives.ReadInt32LittleEndian(span[(4 + i * 12)..]);
            long seq = BinaryPrimitives.ReadInt64LittleEndian(span[(8 + i * 12)..]);
            if (rank < 0 || rank >= ranks || seq <= 0) return false;
            positions[i] = (rank, seq);
        }
        foreach (var p in positions) _positions.Enqueue(p);
        return true;
    }

    /// <summary>The next ordered message, if its position is announced and its message is here.</summary>
    public bool TryTakeNext(out int rank, out long seq, out StreamMessage message)
    {
        if (_positions.TryPeek(out var head) && _waiting.Remove(head, out message))
        {
            _positions.Dequeue();
            (rank, seq) = (head.Rank, head.Seq);
            return true;
        }
        (rank, seq, message) = (0, 0, default);
        return false;
    }

    /// <summary>The sequencer's pending positions as one announcement, if any.</summary>
    public bool TryTakeAnnouncement(out byte[] announcement)
    {
        if (_toAnnounce.Count == 0)
        {
            announcement = [];
            return false;
        }
        announcement = new byte[4 + 12 * _toAnnounce.Count];
        BinaryPrimitives.WriteInt32LittleEndian(announcement, _toAnnounce.Count);
        for (int i = 0; i < _toAnnounce.Count; i++)
        {
            BinaryPrimitives.WriteInt32LittleEndian(announcement.AsSpan(4 + i * 12), _toAnnounce[i].Rank);
            BinaryPrimitives.WriteInt64LittleEndian(announcement.AsSpan(8 + i * 12), _toAnnounce[i].Seq);
        }
        _toAnnounce.Clear();
        return true;
    }

    /// <summary>
    /// At the end of a view: announced messages in announced order (a position whose message no
    /// survivor holds is skipped: no member can have delivered past it), then the unannounced ones
    /// by (rank, seq). Deterministic, so identical at every survivor.
    /// </summary>
    public IEnumerable<(int Rank, long Seq, StreamMessage Message)> DrainAtViewEnd()
    {
        while (_positions.TryDequeue(out var head))
        {
            if (_waiting.Remove(head, out StreamMessage message)) yield return (head.Rank, head.Seq, message);
        }
        foreach (var key in _waiting.Keys.OrderBy(k => k.Rank).ThenBy(k => k.Seq).ToList())
        {
            yield return (key.Rank, key.Seq, _waiting[key]);
            _waiting.Remove(key);
        }
        _toAnnounce.Clear();
    }

    public void Reset()
    {
        _waiting.Clear();
        _positions.Clear();
        _toAnnounce.Clear();
    }
}
