using Isis.Core.Identity;

namespace Isis.Core.Groups;

/// <summary>
/// One view of a group as decided by the membership service: members ordered oldest first (rank =
/// index), with the joiners and leavers (voluntary or failed) relative to the previous view.
/// Immutable: a view is a snapshot, never edited.
/// </summary>
internal sealed class GroupView
{
    public GroupView(int id, NodeId[] members, NodeId[] joiners, NodeId[] leavers)
    {
        Id = id;
        Members = members;
        Joiners = joiners;
        Leavers = leavers;
    }

    public int Id { get; }

    public NodeId[] Members { get; }

    public NodeId[] Joiners { get; }

    public NodeId[] Leavers { get; }

    /// <summary>Rank of <paramref name="node"/> in this view, or -1.</summary>
    public int RankOf(NodeId node) => Array.IndexOf(Members, node);

    public bool Contains(NodeId node) => RankOf(node) >= 0;

    public override string ToString() => $"v{Id}[{string.Join(",", Members)}]";
}
