using Isis.Core.Identity;

namespace Isis.Core.Groups;

/// <summary>
/// One view of a group as decided by the membership service: members ordered oldest first (rank =
/// index), with the joiners and leavers (voluntary or failed) relative to the previous view, and
/// the IP multicast group endpoint its data goes to (0: one unicast copy per member), and, for the
/// first view of a new incarnation of the group, the last view of the previous one.
/// Immutable: a view is a snapshot, never edited.
/// </summary>
internal sealed class GroupView
{
    public GroupView(int id, NodeId[] members, NodeId[] joiners, NodeId[] leavers, ulong multicast = 0, LastLiveView? previousIncarnation = null)
    {
        Id = id;
        Members = members;
        Multicast = multicast;
        PreviousIncarnation = previousIncarnation;
        if (members.Length > LinearSearchLimit)
        {
            _ranks = new Dictionary<NodeId, int>(members.Length);
            for (int i = 0; i < members.Length; i++) _ranks.TryAdd(members[i], i); // the first rank, as Array.IndexOf finds it
        }
        Joiners = joiners;
        Leavers = leavers;
    }

    public int Id { get; }

    public NodeId[] Members { get; }

    public NodeId[] Joiners { get; }

    public NodeId[] Leavers { get; }

    /// <summary>
    /// The IP multicast group endpoint (a 224.0.0.0/4 address and the system's multicast port) the
    /// membership service allocated to this view: every member receives on it and the members'
    /// multicasts go there once; 0 when the view's data goes by unicast. Repairs are unicast either way.
    /// </summary>
    public ulong Multicast { get; }

    /// <summary>
    /// Only on the first view of a new incarnation of the group (none of its members was in the
    /// group's view before it): the group's last view with members before, whose members were all
    /// gone without passing into a later view (the service deleted the group, or every member
    /// failed), if the service remembers it. Null on every other view.
    /// </summary>
    public LastLiveView? PreviousIncarnation { get; }

    /// <summary>Views larger than this look ranks up in a dictionary rather than by a linear search.</summary>
    private const int LinearSearchLimit = 16;

    // Rank by member in a large view: every packet a member receives asks for its sender's rank,
    // which a linear search would make cost the group's size. Built once, read only afterwards.
    private readonly Dictionary<NodeId, int>? _ranks;

    /// <summary>Rank of <paramref name="node"/> in this view, or -1.</summary>
    public int RankOf(NodeId node) => _ranks == null ? Array.IndexOf(Members, node) : _ranks.GetValueOrDefault(node, -1);

    public bool Contains(NodeId node) => RankOf(node) >= 0;

    public override string ToString() => $"v{Id}[{string.Join(",", Members)}]{(Multicast != 0 ? " multicast" : "")}";
}
