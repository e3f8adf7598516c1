using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Core.Groups;

/// <summary>
/// A group with a key of its own: what a member does about view members whose packets do not open
/// with it (the sealing itself is <see cref="Security.PacketSealer"/>, before any packet reaches a member).
/// </summary>
/// <remarks>
/// Rules:
/// <list type="bullet">
/// <item>A joiner whose packets from the members never open holds a different key (or none): after
/// <see cref="JoinerGivesUpAfter"/> failures with no packet that opened, it leaves the group and the
/// application is told why (<see cref="GroupKeyRejected"/>). It waits for its state then, so it has
/// nothing of the group to lose.</item>
/// <item>Such a process cannot take part in a flush either (it cannot open the coordinator's request,
/// and its report would not open), so a view change would wait for it forever: a flush coordinator
/// that has no report from a survivor whose packets failed and never opened asks the membership
/// service to expel it, at its first retransmission. Other members do the same after
/// <see cref="SuspectAfter"/> failures. The process has by then told its application why.</item>
/// <item>A member whose packets opened once is never suspected for failures afterwards: forgeries
/// that name it are dropped and counted only.</item>
/// </list>
/// </remarks>
internal sealed partial class GroupMember
{
    private const int JoinerGivesUpAfter = 8;
    private const int SuspectAfter = 64;

    private readonly HashSet<NodeId> _authenticated = new();
    private readonly Dictionary<NodeId, int> _authenticationFailures = new();
    private readonly HashSet<NodeId> _suspectedForKey = new();
    private bool _keyRejected;

    /// <summary>A packet of <paramref name="sender"/> opened with the group's key.</summary>
    public void OnAuthenticated(NodeId sender) => _authenticated.Add(sender);

    /// <summary>A packet naming <paramref name="sender"/> did not open with the group's key (or came clear).</summary>
    public void OnUnauthenticated(NodeId sender, long now)
    {
        if (View == null || State == MemberState.Left || _authenticated.Contains(sender) || !View.Contains(sender)) return; // strangers are only counted
        int failures = _authenticationFailures[sender] = _authenticationFailures.GetValueOrDefault(sender) + 1;
        if (AwaitingState)
        {
            if (_keyRejected || _authenticated.Count > 0) return;
            int total = 0;
            foreach (int f in _authenticationFailures.Values) total += f;
            if (total < JoinerGivesUpAfter) return;
            _keyRejected = true;
            _node.Emit(new GroupKeyRejected(Id, $"no packet of the members of group '{Name}' opens with this process's key for it ({total} refused): " +
                "its key differs from theirs, or it has none where they have one. It leaves the group; give it the group's key and join again"));
            RequestLeave(now);
            return;
        }
        if (failures >= SuspectAfter) SuspectForKey(sender);
    }

    /// <summary>True if packets naming <paramref name="member"/> failed to open here and none ever opened: it does not hold the group's key.</summary>
    internal bool LacksKey(NodeId member) => !_authenticated.Contains(member) && _authenticationFailures.GetValueOrDefault(member) > 0;

    /// <summary>Asks the membership service to expel a member that does not hold the group's key (once).</summary>
    internal void SuspectForKey(NodeId member)
    {
        if (_suspectedForKey.Add(member)) _node.Suspect(member);
    }

    /// <summary>At each install: forget what is known of processes no longer in the view.</summary>
    private void OnViewForSecurity(GroupView view)
    {
        if (_authenticationFailures.Count == 0 && _authenticated.Count == 0) return;
        _authenticated.RemoveWhere(n => !view.Contains(n));
        foreach (NodeId n in _authenticationFailures.Keys.Where(n => !view.Contains(n)).ToList()) _authenticationFailures.Remove(n);
        _suspectedForKey.RemoveWhere(n => !view.Contains(n));
    }
}
