using Isis.Core.Collections;

namespace Isis.Collections;

/// <summary>
/// Names one update of a replicated collection: the instance that issued it and its sequence number
/// there. Returned by every update; pass it to <c>WaitForAsync</c> to read after it.
/// </summary>
/// <param name="Issuer">The issuing collection: its member's address (which names one incarnation of one process), then the first view the collection had.</param>
/// <param name="Sequence">The issuer's count of updates to this collection, from 1.</param>
public readonly record struct OperationId(string Issuer, long Sequence) : IComparable<OperationId>
{
    /// <summary>Orders by issuer, then sequence: the order in which updates left unmerged at a view change are applied.</summary>
    /// <param name="other">The other id.</param>
    public int CompareTo(OperationId other)
    {
        int byIssuer = string.CompareOrdinal(Issuer, other.Issuer);
        return byIssuer != 0 ? byIssuer : Sequence.CompareTo(other.Sequence);
    }

    /// <inheritdoc />
    public override string ToString() => $"{Issuer}/{Sequence}";

    /// <summary>The merge model's name of the same update.</summary>
    internal UpdateId ToUpdate() => new(Issuer, Sequence);

    internal static OperationId From(UpdateId id) => new(id.Issuer, id.Sequence);
}

/// <summary>How the group agrees on the order in which pending updates join a collection's history.</summary>
public enum MergeOrdering
{
    /// <summary>The sequencer's merge lists go by OrderedSend: one total order, cheap.</summary>
    Ordered,

    /// <summary>
    /// The merge lists go by SafeSend: no member merges before the group's acceptors hold the list.
    /// That protects the order against crashes of acceptors, not the updates against a restart of
    /// every member (they travel by Send); for that, keep the collection with <see cref="Group.PersistCheckpoints"/>.
    /// </summary>
    Safe,
}

/// <summary>Options of a replicated collection; the same at every member.</summary>
public sealed class ReplicatedCollectionOptions
{
    /// <summary>How merge lists are ordered (default <see cref="MergeOrdering.Ordered"/>).</summary>
    public MergeOrdering Ordering { get; set; } = MergeOrdering.Ordered;

    /// <summary>
    /// How long the sequencer waits, once it has updates to list, before it announces their order
    /// (default <see cref="TimeSpan.Zero"/>: at once). Either way it keeps one list in flight: updates
    /// that arrive while its last list has not come back to it go in the next one, so under load each
    /// list carries many updates and an idle group lists each update at once. A positive interval
    /// sends fewer, larger lists at the price of staler pessimistic reads and slower
    /// <c>WaitForAsync</c>.
    /// </summary>
    public TimeSpan MergeInterval { get; set; } = TimeSpan.Zero;

    /// <summary>
    /// How often each member compares its history with a random peer's (default 1 s). A member whose
    /// history is still shorter than what a peer held a round earlier (its handlers trail) pulls the
    /// missing entries from the peer in bulk, off its delivery thread; the updates it then receives
    /// late are dropped as duplicates.
    /// </summary>
    public TimeSpan GossipInterval { get; set; } = TimeSpan.FromSeconds(1);
}
