using Isis.Core.Common;

namespace Isis.Core.Groups;

/// <summary>
/// What one member holds of one sender's FIFO stream in the current view.
/// </summary>
/// <remarks>
/// Sequence numbers start at 1 in every view. Three marks only ever move forward:
/// <c>Stable &lt;= Delivered &lt;= Contiguous</c>. <c>Contiguous</c> is the longest prefix held;
/// <c>Delivered</c> the prefix handed to the application (it lags only while the member is wedged
/// for a flush); <c>Stable</c> the prefix every member of the view is known to hold, which may be
/// garbage-collected. Messages above <c>Stable</c> stay in <see cref="Held"/>: they are what this
/// member retransmits on a NAK and contributes to a flush.
/// </remarks>
internal sealed class SenderStream
{
    public long Contiguous;
    public long Delivered;
    public long Stable;

    /// <summary>Highest sequence number this member knows exists (from data or digests).</summary>
    public long KnownMax;

    /// <summary>When the current gap may next be NAKed (0 = no NAK scheduled).</summary>
    public long NextNakAt;
    public int NakRound;

    /// <summary><see cref="Contiguous"/> when the NAK timer last fired: a gap is NAKed only if the stream made no progress since.</summary>
    public long ContiguousAtLastNakCheck;

    public readonly Dictionary<long, StreamMessage> Held = new();

    /// <summary>Stores a message; returns false for a duplicate.</summary>
    public bool Add(long seq, StreamMessage message)
    {
        if (seq <= Contiguous || !Held.TryAdd(seq, message)) return false;
        while (Held.ContainsKey(Contiguous + 1)) Contiguous++;
        if (seq > KnownMax) KnownMax = seq;
        Invariant.Check(Stable <= Delivered && Delivered <= Contiguous && Contiguous <= KnownMax,
            $"a stream's marks stay ordered: stable {Stable} <= delivered {Delivered} <= contiguous {Contiguous} <= known {KnownMax}");
        return true;
    }

    /// <summary>
    /// Moves the delivered mark over the next message and returns its sequence number: a stream is
    /// delivered in order, without a gap, and only what is held (the FIFO guarantee rests on this).
    /// </summary>
    public long DeliverNext()
    {
        Invariant.Check(Delivered < Contiguous, $"a stream delivers only what it holds contiguously: delivered {Delivered}, contiguous {Contiguous}");
        return ++Delivered; // held: only what is stable, and so delivered, leaves Held (the caller's Held[seq] reads it)
    }

    public bool HasGap => KnownMax > Contiguous;

    /// <summary>Drops messages up to <paramref name="stable"/> that were delivered here; their pooled arrays go back when <paramref name="outbox"/> clears.</summary>
    public void CollectGarbage(long stable, Node.Outbox outbox)
    {
        long upTo = Math.Min(stable, Delivered);
        for (long s = Stable + 1; s <= upTo; s++)
        {
            if (Held.Remove(s, out StreamMessage dropped) && dropped.Pooled is { } array) outbox.ReturnOnClear(array);
        }
        if (upTo > Stable) Stable = upTo;
        Invariant.Check(Stable <= Delivered, $"only delivered messages are collected: stable {Stable}, delivered {Delivered}");
    }
}
