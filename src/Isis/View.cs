using Isis.Core.Groups;

namespace Isis;

/// <summary>
/// One membership view of a group: every member installs the same views in the same order, and
/// between two views all surviving members deliver the same messages.
/// </summary>
public sealed class View
{
    private readonly Address _self;

    internal View(GroupView view, Address self, string groupName)
    {
        ViewId = view.Id;
        GroupName = groupName;
        Members = Array.ConvertAll(view.Members, n => new Address(n));
        Joiners = Array.ConvertAll(view.Joiners, n => new Address(n));
        Leavers = Array.ConvertAll(view.Leavers, n => new Address(n));
        _self = self;
    }

    /// <summary>The view number: 1 for the first view of a group, then consecutive.</summary>
    public int ViewId { get; }

    /// <summary>The group this view belongs to.</summary>
    public string GroupName { get; }

    /// <summary>Members, oldest first; a member's rank is its index here.</summary>
    public Address[] Members { get; }

    /// <summary>Members that joined with this view.</summary>
    public Address[] Joiners { get; }

    /// <summary>Members of the previous view that are not in this one (they left or failed).</summary>
    public Address[] Leavers { get; }

    /// <summary>This process's rank in the view (0 is the oldest member), or -1 if it is not a member.</summary>
    public int GetMyRank() => GetRankOf(_self);

    /// <summary>The rank of <paramref name="member"/>, or -1 if it is not a member of this view.</summary>
    public int GetRankOf(Address member) => Array.IndexOf(Members, member);

    /// <inheritdoc />
    public override string ToString() => $"{GroupName} view {ViewId} [{string.Join(", ", (object[])Members)}]";
}
