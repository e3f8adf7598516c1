namespace Isis.Core.Collections;

/// <summary>
/// Names one update of a replicated collection inside the merge model: the issuing collection
/// (its member's address, then the first view the collection had) and its sequence number there,
/// from 1. The public face of it is Isis.Collections' <c>OperationId</c>.
/// </summary>
internal readonly record struct UpdateId(string Issuer, long Sequence) : IComparable<UpdateId>
{
    /// <summary>Orders by issuer, then sequence: the order in which updates left unmerged at a view change are applied.</summary>
    public int CompareTo(UpdateId other)
    {
        int byIssuer = string.CompareOrdinal(Issuer, other.Issuer);
        return byIssuer != 0 ? byIssuer : Sequence.CompareTo(other.Sequence);
    }

    public override string ToString() => $"{Issuer}/{Sequence}";
}
