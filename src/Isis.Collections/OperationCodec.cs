using System.Collections;

namespace Isis.Collections;

/// <summary>
/// How a collection's updates travel in bulk (a repair carries a run of history entries): as a
/// fixed number of arrays, one value of each update per array, in types the group can send.
/// </summary>
internal interface IOperationCodec<TOp>
{
    /// <summary>One empty list per array, typed as the Isis2 query form fills them (<c>List&lt;T[]&gt;</c>).</summary>
    IList[] NewReplyLists();

    /// <summary>The arrays that carry <paramref name="ops"/>.</summary>
    object[] Encode(IReadOnlyList<TOp> ops);

    /// <summary>The updates carried by the arrays at <paramref name="index"/> of <paramref name="lists"/>; null if they do not fit together.</summary>
    TOp[]? Decode(IList[] lists, int index);
}
