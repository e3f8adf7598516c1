namespace Isis.Core.Groups;

/// <summary>
/// The causal gate of one view: CausalSends (and CausalQueries) that reached the head of their
/// sender's FIFO stream wait here until every causal message their sender had delivered before
/// sending them is delivered here too.
/// </summary>
/// <remarks>
/// A message's timestamp counts, per rank of the view, the causal messages its sender had
/// delivered when it sent it (its own count including the message itself). Timestamps live for
/// one view: the flush ends it, every survivor then holds the same causal messages, and counting
/// starts again at zero. The streams are FIFO, so each rank's waiting messages are in their
/// sender's order and only the head of each rank can be next.
/// </remarks>
internal sealed class CausalOrder
{
    private long[] _delivered = [];
    private Queue<(long Seq, StreamMessage Message)>[] _waiting = [];
    private int _waitingCount;

    /// <summary>Causal messages waiting for a predecessor.</summary>
    public int Waiting => _waitingCount;

    /// <summary>Causal messages delivered here from <paramref name="rank"/> in this view.</summary>
    public long DeliveredFrom(int rank) => _delivered[rank];

    /// <summary>A new view of <paramref name="members"/> ranks: counting starts again.</summary>
    public void Reset(int members)
    {
        _delivered = new long[members];
        _waiting = new Queue<(long, StreamMessage)>[members];
        for (int i = 0; i < members; i++) _waiting[i] = new Queue<(long, StreamMessage)>();
        _waitingCount = 0;
    }

    /// <summary>The timestamp of the next causal message this member (at <paramref name="myRank"/>) sends.</summary>
    public long[] Stamp(int myRank)
    {
        long[] stamp = (long[])_delivered.Clone();
        stamp[myRank]++;
        return stamp;
    }

    /// <summary>Whether <paramref name="stamp"/> is one this view can hold: a count per rank, none negative.</summary>
    public bool Fits(long[]? stamp) => stamp != null && stamp.Length == _delivered.Length && Array.TrueForAll(stamp, c => c >= 0);

    /// <summary>A causal message reached the head of its sender's stream.</summary>
    public void Add(int rank, long seq, StreamMessage message)
    {
        _waiting[rank].Enqueue((seq, message));
        _waitingCount++;
    }

    /// <summary>
    /// The next message whose predecessors are all delivered here, counted as delivered. Its own
    /// rank's predecessors are the messages ahead of it in the queue: the streams are FIFO.
    /// </summary>
    public bool TryTakeNext(out int rank, out long seq, out StreamMessage message)
    {
        if (_waitingCount > 0)
        {
            for (rank = 0; rank < _waiting.Length; rank++)
            {
                if (!_waiting[rank].TryPeek(out var head) || !Ready(rank, head.Message.Causal!)) continue;
                _waiting[rank].Dequeue();
                _waitingCount--;
                _delivered[rank]++;
                (seq, message) = head;
                return true;
            }
        }
        (rank, seq, message) = (-1, 0, default);
        return false;
    }

    private bool Ready(int rank, long[] stamp)
    {
        for (int k = 0; k < stamp.Length; k++)
        {
            if (k != rank && stamp[k] > _delivered[k]) return false;
        }
        return true;
    }

    /// <summary>
    /// The view ends (its flush committed and delivered every stream up to the cut): what can still
    /// be delivered in causal order is, and what is left depends on a message no survivor holds
    /// (its sender and every member that delivered it failed), so it is dropped here and, since
    /// every survivor holds the same messages, at every survivor. Returns the number dropped.
    /// </summary>
    public int DrainAtViewEnd(Action<int, long, StreamMessage> deliver)
    {
        while (TryTakeNext(out int rank, out long seq, out StreamMessage message)) deliver(rank, seq, message);
        int dropped = _waitingCount;
        foreach (var queue in _waiting) queue.Clear();
        _waitingCount = 0;
        return dropped;
    }
}
