using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

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
/// that name it are dropped and counted only (until the group moves to a new key: then it must
/// prove the new one).</item>
/// </list>
/// <para>Key rotation, through a view change. The new key never travels: each member's application
/// hands it to its process (<see cref="ProcessNode.StageGroupKey"/>, from its own secret store), and
/// the member announces its fingerprint in the group's total order ("I hold it"), again in each view
/// until the group moves. Once the announcements of every member of a view have been delivered
/// (every member sees them in the same order, so all decide at the same point), the group moves to
/// that key at the next view install: the view's oldest member asks the membership service for a view
/// change with the same members. At the install every survivor switches (each held the key). The
/// previous key still opens packets until the next view change, which the oldest member asks for at
/// once: what members that had not installed yet sent around the move is not refused (and does not
/// make them look like processes without the key), and a holder of the previous key can inject
/// nothing after that second view change. A member that took no part in a move (it joined in the view
/// the group moved at, or was away when it moved and came back with the old key and the new one)
/// adopts the next key it holds as soon as a packet of a member of its view opens only with that key:
/// members seal only with the key the group uses. A process that holds only keys the group left is
/// refused like any process without the key.</para>
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
        if (_suspectedForKey.Add(member)) _node.Suspect(member, Membership.ExpelReason.LacksGroupKey);
    }

    // Key rotation: the next key this member holds (its fingerprint), the fingerprints the view's
    // members announced (by rank), and the key the group moves to at the next install.
    private byte[]? _heldNextKey;
    private readonly Dictionary<int, byte[]> _keyHolders = new();
    private byte[]? _moveToKey;
    private long _nextViewChangeRequestAt;
    private int _retireAfterView = -1; // the previous key retires at the first install after this view (the one it moved in), which the oldest asks for

    /// <summary>The application handed its process the group's next key: announce it (now, or in the next view).</summary>
    public void OnKeyStaged(byte[] fingerprint)
    {
        if (_node.Sealer.UsesGroupKey(Id, fingerprint)) return;
        _heldNextKey = fingerprint;
        AnnounceHeldKey();
    }

    private void AnnounceHeldKey()
    {
        if (_heldNextKey == null || State is not (MemberState.Active or MemberState.Joining)) return;
        var message = new StreamMessage(MessageKind.KeyRotation, _heldNextKey);
        if (State == MemberState.Active && !_wedged && _node.LeaseHeld && Current && _pendingSends.Count == 0) SendNow(message);
        else _pendingSends.Enqueue(message);
    }

    /// <summary>A member's "I hold the next key", at its place in the total order.</summary>
    private void OnKeyHeld(int rank, ReadOnlySpan<byte> fingerprint)
    {
        if (!Security.PacketSealer.IsFingerprint(fingerprint)) { _node.Counters.DroppedMalformed++; return; }
        if (_moveToKey != null || _node.Sealer.UsesGroupKey(Id, fingerprint)) return;
        _keyHolders[rank] = fingerprint.ToArray();
        for (int r = 0; r < View!.Members.Length; r++)
        {
            if (!_keyHolders.TryGetValue(r, out byte[]? held) || !held.AsSpan().SequenceEqual(fingerprint)) return;
        }
        // Every member holds it: the group moves to it at the next install; the oldest asks for one.
        _moveToKey = fingerprint.ToArray();
        if (MyRank == 0) RequestViewChange(_node.Now);
    }

    private void RequestViewChange(long now)
    {
        _nextViewChangeRequestAt = now + Options.RetryInterval;
        _node.SendToOracle(_node.Writer.Begin(new PacketHeader(PacketKind.ViewChangeRequest, Self, Id, View!.Id, 0)).Finish());
    }

    /// <summary>The oldest member wants a view change: to move to the next key, or to retire the previous one.</summary>
    private bool WantsViewChange => (_moveToKey != null || _retireAfterView == View?.Id) && MyRank == 0 && State == MemberState.Active;

    /// <summary>Timers: the oldest member repeats its view change request until the view changes (the service does not replicate requests).</summary>
    private void TickKeyRotation(long now)
    {
        if (WantsViewChange && now >= _nextViewChangeRequestAt) RequestViewChange(now);
    }

    private long KeyRotationDeadline => WantsViewChange ? _nextViewChangeRequestAt : long.MaxValue;

    /// <summary>
    /// At each install, before the view is published: the previous key retires if the group moved
    /// at the last install; the group moves to its next key if every member of the last view held it.
    /// </summary>
    private void OnViewForKeyRotation(GroupView view)
    {
        byte[]? move = _moveToKey;
        _moveToKey = null;
        _keyHolders.Clear();
        if (move != null && _node.Sealer.UsesGroupKey(Id, move))
        {
            // It adopted the key in the last view, from a member that installed this one first: the
            // group moves now, so the previous key retires after this view, as everyone's does.
            _retireAfterView = view.Id;
            RequestRetirement();
            return;
        }
        if (_retireAfterView >= 0 && view.Id > _retireAfterView)
        {
            if ((Options.Mutations & ProtocolMutations.RetiredKeyStillOpens) == 0) _node.Sealer.RetireGroupKey(Id);
            _retireAfterView = -1;
            _node.Emit(new GroupKeyRetired(Id, view.Id));
        }
        if (move == null) return;
        // It announced the key, so it holds it.
        // The members that moved with it may not have installed the move yet: their packets still open with the previous key.
        NodeId[] movers = view.Members.Where(m => Array.IndexOf(view.Joiners, m) < 0).ToArray();
        bool switched = _node.Sealer.SwitchGroupKey(Id, move, movers);
        if (!switched) Invariant.Check(false, $"{Self} announced it held key {Convert.ToHexString(move)} of group {Name} but cannot switch to it");
        Adopted(view, move);
    }

    /// <summary>
    /// A packet of <paramref name="sender"/>, a member of this view, opened only with a next key this
    /// process holds: the sender seals with it, so the group uses it (a member that took part in the
    /// move, and installed it before this one did, or this member missed the move): adopt it now.
    /// </summary>
    internal void OnOpenedWithNextKey(NodeId sender, byte[] fingerprint)
    {
        if (View == null || !View.Contains(sender) || State == MemberState.Left) return;
        // The previous key keeps opening the packets of this view's other members until the next view change.
        if (!_node.Sealer.SwitchGroupKey(Id, fingerprint, View.Members)) return;
        Adopted(View, fingerprint);
    }

    /// <summary>The oldest member asks for the view change that retires the previous key, at the next tick.</summary>
    private void RequestRetirement()
    {
        if (MyRank == 0) _nextViewChangeRequestAt = _node.Now;
    }

    /// <summary>This member seals with the key named by <paramref name="fingerprint"/> from now on; the previous key retires after <paramref name="view"/>.</summary>
    private void Adopted(GroupView view, byte[] fingerprint)
    {
        _retireAfterView = view.Id;
        RequestRetirement();
        if (_heldNextKey != null && _heldNextKey.AsSpan().SequenceEqual(fingerprint)) _heldNextKey = null;
        // Everyone must prove the new key now: a process that lacks it is refused as any other would be.
        _authenticated.Clear();
        _authenticationFailures.Clear();
        _suspectedForKey.Clear();
        _node.Emit(new GroupKeyRotated(Id, view.Id, fingerprint));
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
