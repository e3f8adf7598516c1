using Isis.Core.Node;

namespace Isis.Core.Groups;

/// <summary>
/// CausalSend and CausalQuery: each carries a timestamp of the view (per rank, the causal messages
/// its sender had delivered) and waits in <see cref="CausalOrder"/> until its predecessors are
/// delivered. The flush ends the view's timestamps; a Flush also waits for the causal messages
/// this member delivered to be stable, so the messages it sent after them survive its crash.
/// </summary>
internal sealed partial class GroupMember
{
    private readonly CausalOrder _causal = new();

    // Per rank, the stream position of the last causal message delivered here in this view: what a
    // Flush must see stable besides this member's own messages (see FlushSettled).
    private long[] _causalHorizon = [];

    /// <summary>Causal messages that reached this member and wait for a predecessor.</summary>
    public int CausalWaiting => _causal.Waiting;

    private void ResetCausal(int members)
    {
        _causal.Reset(members);
        _causalHorizon = new long[members];
    }

    /// <summary>Our causal message gets its timestamp as it is sent, in the view it is sent in.</summary>
    private StreamMessage StampCausal(StreamMessage message) =>
        message.Kind.IsCausal() ? message with { Causal = _causal.Stamp(MyRank) } : message;

    /// <summary>A causal message reached the head of its sender's stream.</summary>
    private void OnCausalArrived(int rank, long seq, StreamMessage message)
    {
        if ((Options.Mutations & ProtocolMutations.CausalDeliversOnArrival) != 0)
        {
            Deliver(rank, seq, message); // deliberate bug
            return;
        }
        _causal.Add(rank, seq, message);
        int waitingBefore = _causal.Waiting;
        DeliverCausal();
        if (!_wedged && _node.LeaseHeld && _causal.Waiting >= waitingBefore) _node.Counters.CausalHeld++;
    }

    /// <summary>Delivers every causal message whose predecessors are delivered, unless a flush wedged us (it delivers them at the view's end).</summary>
    private void DeliverCausal()
    {
        if (_wedged || !_node.LeaseHeld) return;
        while (_causal.TryTakeNext(out int rank, out long seq, out StreamMessage message)) DeliverCausalMessage(rank, seq, message, atViewEnd: false);
    }

    private void DeliverCausalMessage(int rank, long seq, StreamMessage message, bool atViewEnd)
    {
        _causalHorizon[rank] = seq;
        Deliver(rank, seq, message, atViewEnd);
    }

    /// <summary>The view ends: what is deliverable is, in causal order; what depends on a message no survivor holds is dropped everywhere alike.</summary>
    private void DeliverCausalAtViewEnd()
    {
        int dropped = _causal.DrainAtViewEnd((rank, seq, message) => DeliverCausalMessage(rank, seq, message, atViewEnd: true));
        _node.Counters.CausalDroppedAtViewEnd += dropped;
    }

    /// <summary>What a Flush requested now must also see stable: the causal messages delivered here so far (null if none).</summary>
    private long[]? CausalHorizonForFlush() =>
        Array.Exists(_causalHorizon, s => s > 0) ? (long[])_causalHorizon.Clone() : null;

    /// <summary>Whether every stream is stable up to <paramref name="horizon"/> (taken in view <paramref name="viewId"/>; an earlier view's flush settled it).</summary>
    private bool CausalPredecessorsStable(long[]? horizon, int viewId)
    {
        if (horizon == null || viewId != View!.Id || (Options.Mutations & ProtocolMutations.FlushIgnoresCausalPredecessors) != 0) return true;
        for (int rank = 0; rank < horizon.Length; rank++)
        {
            if (rank != MyRank && _streams[rank].Stable < horizon[rank]) return false;
        }
        return true;
    }
}
