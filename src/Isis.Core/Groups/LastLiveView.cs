using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>
/// The last view of a group that had members, as the membership service remembers it once every
/// one of those members is gone (failed or left) and none of them passed into a later view: the
/// group's previous incarnation ended there. The first view of the next incarnation (the group
/// created again after it was deleted, or a view made only of joiners after every member of the
/// view before failed) carries it, so its members know how the group ended: no view between that
/// one and theirs had a member, so nobody delivered anything after it (see
/// <c>DurableHistory.DecideRecovery</c>, which recovers without an operator on that ground).
/// </summary>
/// <param name="Id">The view's id.</param>
/// <param name="Members">Its members, oldest first (as the view listed them).</param>
internal sealed record LastLiveView(int Id, NodeId[] Members)
{
    /// <summary>True if <paramref name="viewId"/> and <paramref name="members"/> (in order) are this view's.</summary>
    public bool Is(int viewId, NodeId[] members) => Id == viewId && Members.AsSpan().SequenceEqual(members);

    /// <summary>Writes it as the install of a view carries it: a presence byte, then the id and the members.</summary>
    public static PacketWriter WriteOptional(PacketWriter w, LastLiveView? view) =>
        view == null ? w.U8(0) : w.U8(1).I32(view.Id).Nodes(view.Members);

    /// <summary>
    /// Reads what <see cref="WriteOptional"/> wrote for the view <paramref name="nextViewId"/> with
    /// <paramref name="nextMembers"/>: null if absent. Fails the reader (and returns null) unless it
    /// is plausible: an earlier view, with at least one member, each named once and none of them in
    /// the view that carries it (an incarnation ends only when every member of its last view is gone).
    /// </summary>
    public static LastLiveView? ReadOptional(ref WireReader r, int nextViewId, NodeId[] nextMembers)
    {
        byte present = r.U8();
        if (present == 0) return null;
        int id = r.I32();
        NodeId[] members = r.Nodes();
        if (!r.Ok || present != 1 || id < 1 || id >= nextViewId || members.Length == 0
            || members.Any(m => m.IsNone || Array.IndexOf(nextMembers, m) >= 0) || members.Distinct().Count() != members.Length)
        {
            r.Fail();
            return null;
        }
        return new LastLiveView(id, members);
    }

    public override string ToString() => $"v{Id}[{string.Join(",", Members)}]";
}
