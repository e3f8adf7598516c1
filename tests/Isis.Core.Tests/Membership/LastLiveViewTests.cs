using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests.Membership;

/// <summary>
/// The membership service's memory of how a group's incarnation ended (its last live view: id and
/// members), what the first view of the next incarnation carries to its members, the codec of that
/// carrier, and the replicas' snapshots that keep it.
/// </summary>
public sealed class LastLiveViewTests
{
    private static readonly NodeId A = new(1, 1), B = new(2, 1), C = new(3, 1), D = new(4, 2);

    // ---------------------------------------------------------------- the carrier's codec

    private static LastLiveView? Read(byte[] bytes, int nextViewId, NodeId[] nextMembers, out bool ok)
    {
        var r = new WireReader(bytes);
        LastLiveView? view = LastLiveView.ReadOptional(ref r, nextViewId, nextMembers);
        ok = r.Complete;
        return view;
    }

    [Fact]
    public void The_carrier_round_trips_present_and_absent()
    {
        var ended = new LastLiveView(7, [A, B, C]);
        byte[] present = LastLiveView.WriteOptional(new PacketWriter().BeginRecord(), ended).FinishRecord();
        LastLiveView? read = Read(present, 9, [D], out bool ok);
        Assert.True(ok);
        Assert.NotNull(read);
        Assert.True(read.Is(7, [A, B, C]));
        Assert.False(read.Is(7, [B, A, C])); // the order is the view's: its first member is its first acceptor

        byte[] absent = LastLiveView.WriteOptional(new PacketWriter().BeginRecord(), null).FinishRecord();
        Assert.Equal([(byte)0], absent);
        Assert.Null(Read(absent, 9, [D], out ok));
        Assert.True(ok);
    }

    [Fact]
    public void A_malformed_carrier_fails_the_read()
    {
        byte[] Carrier(byte presence, int id, params NodeId[] members) => new PacketWriter().BeginRecord().U8(presence).I32(id).Nodes(members).FinishRecord();
        var cases = new (string What, byte[] Bytes)[]
        {
            ("an unknown presence byte", Carrier(2, 7, A)),
            ("view id 0", Carrier(1, 0, A)),
            ("a negative view id", Carrier(1, -3, A)),
            ("the carrying view's own id", Carrier(1, 9, A)),
            ("a later view", Carrier(1, 10, A)),
            ("no members", Carrier(1, 7)),
            ("a member named twice", Carrier(1, 7, A, B, A)),
            ("the empty node id", Carrier(1, 7, A, NodeId.None)),
            ("a member of the carrying view", Carrier(1, 7, A, D)),
            ("a member count past the bytes", new PacketWriter().BeginRecord().U8(1).I32(7).I32(1000).Node(A).FinishRecord()),
        };
        foreach (var (what, bytes) in cases)
        {
            Assert.Null(Read(bytes, 9, [D], out bool ok));
            Assert.False(ok, $"{what} was taken");
        }
        byte[] whole = Carrier(1, 7, A, B);
        for (int length = 1; length < whole.Length; length++)
        {
            Assert.Null(Read(whole[..length], 9, [D], out bool ok));
            Assert.False(ok, $"a carrier cut to {length} bytes was taken");
        }
    }

    // ---------------------------------------------------------------- the service and the members

    /// <summary>Forms a group of three, then stops every member: the service expels them and deletes the group.</summary>
    private static (TestCluster Cluster, GroupView Last) GroupWhoseMembersAllFailed()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        GroupView last = c.CurrentView(0)!;
        for (int i = 0; i < 3; i++) c.Stop(i);
        return (c, last);
    }

    [Fact]
    public void A_group_deleted_after_all_its_members_failed_is_remembered_with_its_last_live_view_and_its_next_incarnation_learns_it()
    {
        var (c, last) = GroupWhoseMembersAllFailed();
        c.RunUntil(() => c.Oracle.CommittedView(TestCluster.G) == null);
        LastLiveView? remembered = c.Oracle.RememberedLastLiveView(TestCluster.G);
        Assert.NotNull(remembered);
        Assert.True(remembered.Is(last.Id, last.Members), $"remembered {remembered}, the last view was {last}");

        // The group is created again: its first view carries that view, later views do not.
        c.Restart(1);
        c.Join(1);
        c.RunUntil(() => c.CurrentView(1) is { Members.Length: 1 } v && v.Id > last.Id);
        GroupView first = c.CurrentView(1)!;
        Assert.Equal(last.Id + 2, first.Id); // after the empty view that ended the group
        Assert.NotNull(first.PreviousIncarnation);
        Assert.True(first.PreviousIncarnation.Is(last.Id, last.Members));
        Assert.Null(c.Oracle.RememberedLastLiveView(TestCluster.G)); // it lives again: nothing deleted to remember
        Assert.True(c[1].FindGroup(TestCluster.G)!.PreviousIncarnation!.Is(last.Id, last.Members)); // the first view's oldest member keeps it

        c.Restart(2);
        c.Join(2);
        c.RunUntil(() => c.CurrentView(2) is { Members.Length: 2 });
        Assert.Null(c.CurrentView(2)!.PreviousIncarnation);
        Assert.Null(c[2].FindGroup(TestCluster.G)!.PreviousIncarnation); // a later joiner never decides the history's plans
        Assert.True(c[1].FindGroup(TestCluster.G)!.PreviousIncarnation!.Is(last.Id, last.Members));
    }

    [Fact]
    public void A_view_of_joiners_only_after_every_member_failed_carries_the_failed_view_without_a_deletion()
    {
        var (c, last) = GroupWhoseMembersAllFailed();
        // A restarted process asks to join before the service noticed the failures: the view after
        // the failed one is made of it alone, with no flush, and begins a new incarnation.
        c.Restart(0);
        c.Join(0);
        c.RunUntil(() => c.CurrentView(0) is { } v && v.Id > last.Id);
        GroupView next = c.CurrentView(0)!;
        Assert.Equal([c.Id(0)], next.Members);
        Assert.Equal(last.Id + 1, next.Id);
        Assert.True(next.PreviousIncarnation?.Is(last.Id, last.Members), $"{next} carries {next.PreviousIncarnation}");
    }

    [Fact]
    public void A_group_whose_members_left_after_a_view_change_with_survivors_carries_nothing()
    {
        // A view with a survivor of the one before is no new incarnation.
        var c = new TestCluster(3);
        c.FormGroup(3);
        c.Leave(2);
        c.RunUntil(() => c.CurrentView(0)!.Members.Length == 2);
        Assert.All(c.Views(0), v => Assert.Null(v.PreviousIncarnation));
        Assert.Null(c.Oracle.CommittedPreviousIncarnation(TestCluster.G));
    }

    [Fact]
    public void An_install_whose_carrier_names_a_member_of_the_view_is_dropped_as_malformed()
    {
        var c = new TestCluster(2);
        c.FormGroup(2);
        GroupView current = c.CurrentView(0)!;
        byte[] install = LastLiveView.WriteOptional(new PacketWriter().Begin(new PacketHeader(PacketKind.InstallView, c.Oracle.Self, TestCluster.G, current.Id + 1, 0))
            .Node(c.Id(0)).Nodes([c.Id(0)]).Nodes([]).Nodes([c.Id(1)]).I64(0), new LastLiveView(current.Id, [c.Id(0), c.Id(1)])).Finish();
        long before = c[0].Counters.DroppedMalformed;
        c.Inject(0, c.Oracle.Self.Endpoint, install);
        Assert.Equal(before + 1, c[0].Counters.DroppedMalformed);
        Assert.Equal(current.Id, c.CurrentView(0)!.Id);
    }

    // ---------------------------------------------------------------- snapshots

    private static MembershipReplica Follower() =>
        new(new NodeId(201, 1), [new NodeId(200, 1), new NodeId(201, 1), new NodeId(202, 1)], new ProtocolOptions(), 0);

    private static bool Restore(MembershipReplica replica, byte[] snapshot) => ((IReplicatedLogHost)replica).RestoreSnapshot(1, snapshot);

    [Fact]
    public void A_snapshot_keeps_a_deleted_groups_last_live_view_and_the_one_a_first_view_carries()
    {
        var (c, last) = GroupWhoseMembersAllFailed();
        c.RunUntil(() => c.Oracle.CommittedView(TestCluster.G) == null);
        var host = (IReplicatedLogHost)c.Oracle;

        MembershipReplica afterDeletion = Follower();
        Assert.True(Restore(afterDeletion, host.TakeSnapshot()));
        Assert.True(afterDeletion.RememberedLastLiveView(TestCluster.G)?.Is(last.Id, last.Members));

        c.Restart(0);
        c.Join(0);
        c.RunUntil(() => c.CurrentView(0) is { } v && v.Id > last.Id);
        MembershipReplica afterCreation = Follower();
        Assert.True(Restore(afterCreation, host.TakeSnapshot()));
        Assert.Null(afterCreation.RememberedLastLiveView(TestCluster.G));
        Assert.True(afterCreation.CommittedPreviousIncarnation(TestCluster.G)?.Is(last.Id, last.Members));
        Assert.Equal(c.Oracle.CommittedView(TestCluster.G)!.Value.ViewId, afterCreation.CommittedView(TestCluster.G)!.Value.ViewId);
    }

    /// <summary>A snapshot as the replicas write it, one group and one deleted group, in format V1 (no carriers) or V2 (carriers as given).</summary>
    private static byte[] Snapshot(byte format, byte[]? groupCarrier, byte[]? deletedCarrier)
    {
        var w = new PacketWriter().BeginRecord();
        w.U8(format).I64(3).Nodes([]).Nodes([]);
        w.I32(1).I64(17).String("g").I32(12).Nodes([D]).Nodes([D]).Nodes([A, B]).I64(0);
        if (format == 2) w.Tail(groupCarrier!);
        w.I32(0).I32(1).I64(23).I32(1).I64(23).I32(5);
        if (format == 2) w.Tail(deletedCarrier!);
        w.I64(1).I32(1).Node(new NodeId(200, 1)).Node(NodeId.None);
        return w.FinishRecord();
    }

    private static byte[] Carrier(LastLiveView? view) => LastLiveView.WriteOptional(new PacketWriter().BeginRecord(), view).FinishRecord();

    [Fact]
    public void A_V1_snapshot_restores_with_no_last_live_view_known_and_a_V2_one_with_a_malformed_carrier_is_refused()
    {
        var groupId = new GroupId(17);
        var deletedId = new GroupId(23);

        MembershipReplica v1 = Follower();
        Assert.True(Restore(v1, Snapshot(1, null, null)));
        Assert.Equal(12, v1.CommittedView(groupId)!.Value.ViewId);
        Assert.Null(v1.CommittedPreviousIncarnation(groupId));
        Assert.Null(v1.RememberedLastLiveView(deletedId));
        Assert.Equal(1, v1.RememberedDeletedGroupCount);

        MembershipReplica v2 = Follower();
        Assert.True(Restore(v2, Snapshot(2, Carrier(new LastLiveView(10, [A, B])), Carrier(new LastLiveView(4, [C])))));
        Assert.True(v2.CommittedPreviousIncarnation(groupId)?.Is(10, [A, B]));
        Assert.True(v2.RememberedLastLiveView(deletedId)?.Is(4, [C]));

        // A carrier that names a member of the group's view, or one not before the deleted group's last view, is no state this service wrote.
        Assert.False(Restore(Follower(), Snapshot(2, Carrier(new LastLiveView(10, [A, D])), Carrier(null))));
        Assert.False(Restore(Follower(), Snapshot(2, Carrier(null), Carrier(new LastLiveView(5, [C])))));
        Assert.False(Restore(Follower(), Snapshot(3, Carrier(null), Carrier(null))));
    }
}
