using Isis.Core.Identity;
using Isis.Core.Groups;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

/// <summary>
/// A large group whose data travels along the stability tree (<see cref="ProtocolOptions.RelayThroughTree"/>,
/// what the TCP overlay uses): 12 members, the large-group rules from 4, a binary tree.
/// </summary>
public class RelayTests
{
    private const int Members = 12;

    private static readonly ProtocolOptions Relay = new() { GossipFromMembers = 4, GossipFanout = 2, StabilityTreeFanout = 2, RelayThroughTree = true };

    private static TestCluster Formed(ProtocolOptions? options = null)
    {
        var c = new TestCluster(Members, options ?? Relay);
        c.FormGroup(Members);
        return c;
    }

    private static GroupMember Member(TestCluster c, int i) => c[i].FindGroup(TestCluster.G)!;

    /// <summary>True if the two ranks are parent and child in a binary tree of ranks.</summary>
    private static bool Neighbours(int a, int b) => (a > 0 && (a - 1) / 2 == b) || (b > 0 && (b - 1) / 2 == a);

    [Fact]
    public void Data_repair_gossip_and_stability_travel_between_tree_neighbours_only_and_everything_arrives()
    {
        TestCluster c = Formed();
        GroupView view = c.CurrentView(0)!;
        int RankOf(ulong endpoint) => Array.FindIndex(view.Members, m => m.Endpoint == endpoint);
        var random = new Random(3);
        var strays = new List<string>();
        int relayed = 0;
        c.DropWhere(e =>
        {
            if (e.Kind is PacketKind.Data or PacketKind.Digest or PacketKind.Nak or PacketKind.StabilityReport or PacketKind.StabilityUpdate
                && e.Header.View == view.Id && e.To != TestCluster.OracleEndpoint)
            {
                int from = RankOf(e.From), to = RankOf(e.To);
                if (!Neighbours(from, to)) strays.Add($"{e.Kind} from rank {from} to rank {to}");
                if (e.Kind == PacketKind.Data && e.DataOrigin != from) relayed++;
            }
            return e.Kind >= PacketKind.Data && random.NextDouble() < 0.10;
        });
        for (int round = 0; round < 10; round++)
        {
            for (int i = 0; i < Members; i++) c.Send(i, $"m{i}-{round}");
            c.RunFor(2_000);
        }
        c.RunUntil(() => Enumerable.Range(0, Members).All(i => c.Delivered(i).Count == Members * 10), limit: 10_000_000);
        c.RunUntil(() => Enumerable.Range(0, Members).All(i => Member(c, i).UnstableOwnMessages == 0), limit: 10_000_000);

        ClusterChecks.AssertVirtualSynchronyAndFifo(c);
        Assert.Equal(view.Id, c.CurrentView(0)!.Id); // no view change hid anything
        Assert.True(strays.Count == 0, string.Join("; ", strays.Distinct().Take(10)));
        Assert.True(relayed > Members * 10, $"only {relayed} data packets were passed on by a member other than their sender");
    }

    [Fact]
    public void A_Flush_returns_once_the_tree_declares_its_messages_stable()
    {
        TestCluster c = Formed();
        int sender = 9; // a leaf: rank 9's parent is 4, whose parent is 1
        for (int k = 0; k < 5; k++) c.Send(sender, $"before-flush-{k}");
        c[sender].Flush(TestCluster.G, 42, 0, c.Now);
        c.RunUntil(() => c.Events[sender].OfType<FlushCompleted>().Any(f => f.Token == 42));
        // Returned only when every member held them.
        Assert.All(Enumerable.Range(0, Members), i => Assert.Contains($"{sender}:5:before-flush-4", c.Delivered(i)));
        Assert.Equal(0, Member(c, sender).UnstableOwnMessages);
    }

    [Fact]
    public void A_silent_member_inside_the_tree_cuts_its_subtree_off_until_the_view_change_delivers_everything()
    {
        TestCluster c = Formed();
        GroupView view = c.CurrentView(0)!;
        int Index(int rank) => (int)view.Members[rank].Endpoint - 1;
        int silent = Index(1); // rank 1: children 3 and 4, grandchildren 7 to 10
        c.Stop(silent);
        for (int k = 0; k < 5; k++) c.Send(Index(0), $"cut-{k}");
        c.RunFor(100_000);
        Assert.DoesNotContain($"{Index(0)}:1:cut-0", c.Delivered(Index(7))); // only the tree carries data, and it is cut at rank 1
        c.RunUntil(() => c.CurrentView(Index(0))!.Members.Length == Members - 1, limit: 3_000_000);
        c.RunUntil(() => Enumerable.Range(0, Members).Where(i => i != silent).All(i => c.CurrentView(i)!.Members.Length == Members - 1));
        foreach (int i in Enumerable.Range(0, Members).Where(i => i != silent))
        {
            Assert.Contains($"{Index(0)}:5:cut-4", c.Delivered(i, view.Id)); // the flush gave it to every survivor in the old view
        }
        ClusterChecks.AssertVirtualSynchronyAndFifo(c);
    }

    [Fact]
    public void The_flush_routed_over_the_views_tree_instead_of_the_survivors_never_gets_past_a_silent_member_inside_it()
    {
        // The mutation FlushRoutesThroughViewTree: the wedges for ranks 3, 4 and 7 to 10 go through the
        // silent rank 1 and are lost, so those survivors never report and no next view is installed.
        TestCluster c = Formed(Relay with { Mutations = ProtocolMutations.FlushRoutesThroughViewTree });
        GroupView view = c.CurrentView(0)!;
        int silent = (int)view.Members[1].Endpoint - 1;
        c.Stop(silent);
        Assert.Throws<TimeoutException>(() =>
            c.RunUntil(() => Enumerable.Range(0, Members).Where(i => i != silent).All(i => c.CurrentView(i)!.Members.Length == Members - 1), limit: 20_000_000));
    }

    [Fact]
    public void Query_replies_and_the_view_change_flush_travel_between_tree_neighbours_only()
    {
        TestCluster c = Formed();
        GroupView view = c.CurrentView(0)!;
        int RankOf(ulong endpoint) => Array.FindIndex(view.Members, m => m.Endpoint == endpoint);
        int Index(int rank) => (int)view.Members[rank].Endpoint - 1;
        var strays = new List<string>();
        var routed = new Dictionary<int, int>(); // per packet kind inside an envelope, how many hops it made
        c.DropWhere(e =>
        {
            if (PacketKinds.IsMemberTraffic(e.Kind) && e.Header.Group == TestCluster.G && e.To != TestCluster.OracleEndpoint && e.From != e.To)
            {
                int from = RankOf(e.From), to = RankOf(e.To);
                if (!Neighbours(from, to)) strays.Add($"{e.Kind} from rank {from} to rank {to}");
                if (e.Kind == PacketKind.Routed)
                {
                    var r = new WireReader(e.Bytes.AsSpan(PacketHeader.Size));
                    r.Nodes();
                    var inner = (PacketKind)r.TailSpan()[3];
                    routed[(int)inner] = routed.GetValueOrDefault((int)inner) + 1;
                }
            }
            return false;
        });

        // A query from a leaf (rank 9: parent 4, grandparent 1) that every member answers: sent
        // directly, ten of the replies would open connections from members that are not its neighbours.
        int requester = Index(9);
        c[requester].Query(TestCluster.G, 7, MessageKind.QuerySend, "q"u8.ToArray(), QueryTracker.All, 10_000_000, QueryTimeoutAction.Abort, c.Now);
        c.RunUntil(() => Enumerable.Range(0, Members).All(i => c.Events[i].OfType<MessageDelivered>().Any(d => d.Sender == c.Id(requester) && d.Kind == MessageKind.QuerySend)));
        for (int i = 0; i < Members; i++) c[i].Reply(TestCluster.G, c.Id(requester), 7, ReplyKind.Values, BitConverter.GetBytes(i), c.Now);
        c.RunUntil(() => c.Events[requester].OfType<QueryCompleted>().Any());
        QueryCompleted done = c.Events[requester].OfType<QueryCompleted>().Single();
        Assert.Equal(QueryOutcome.Completed, done.Outcome);
        Assert.Equal(Members, done.Replies.Count);
        c.RunFor(200_000); // every reply acknowledged (back along its path): no retransmission left
        Assert.All(Enumerable.Range(0, Members), i => Assert.Equal(0, Member(c, i).RepliesAwaitingAcknowledgement));

        // A view change: the last rank leaves, so the survivors' tree is the view's tree without a leaf,
        // and the coordinator (rank 0) wedges, collects from and commits to ten others through it.
        for (int k = 0; k < 3; k++) c.Send(Index(5), $"before-leave-{k}");
        c.Leave(Index(11));
        c.RunUntil(() => Enumerable.Range(0, Members).Where(i => i != Index(11)).All(i => c.CurrentView(i)!.Members.Length == Members - 1));
        ClusterChecks.AssertVirtualSynchronyAndFifo(c);

        Assert.True(strays.Count == 0, string.Join("; ", strays.Distinct().Take(10)));
        foreach (PacketKind kind in new[] { PacketKind.Reply, PacketKind.ReplyAck, PacketKind.Wedge, PacketKind.FlushReport, PacketKind.FlushCommit, PacketKind.CommitAck })
        {
            Assert.True(routed.GetValueOrDefault((int)kind) > 0, $"no {kind} was routed: {string.Join(", ", routed.Select(e => $"{(PacketKind)e.Key}={e.Value}"))}");
        }
    }

    [Fact]
    public void An_envelope_is_passed_on_only_by_a_member_on_its_path_and_opened_only_if_it_names_its_first_member_as_sender()
    {
        TestCluster c = Formed();
        GroupView view = c.CurrentView(0)!;
        int Index(int rank) => (int)view.Members[rank].Endpoint - 1;
        NodeId r0 = view.Members[0], r1 = view.Members[1], r3 = view.Members[3];
        byte[] Envelope(NodeId hop, NodeId[] path, long at, byte[] inner) =>
            new PacketWriter().Begin(new PacketHeader(PacketKind.Routed, hop, TestCluster.G, 0, at)).Nodes(path).Tail(inner).Finish();
        byte[] Ack(NodeId sender, NodeId target) =>
            new PacketWriter().Begin(new PacketHeader(PacketKind.ReplyAck, sender, TestCluster.G, view.Id, 5)).Node(target).Finish();
        ProcessNode at1 = c[Index(1)];

        // Rank 1 is not where the envelope is going next: counted, not passed on.
        long notForMe = at1.Counters.DroppedNotForMe;
        c.Inject(Index(1), r0.Endpoint, Envelope(r0, [r0, r3, r1], 1, Ack(r0, r1)));
        Assert.Equal(notForMe + 1, at1.Counters.DroppedNotForMe);
        // The hop that sent it is not the path's previous member: malformed.
        long malformed = at1.Counters.DroppedMalformed;
        c.Inject(Index(1), r3.Endpoint, Envelope(r3, [r0, r1, r3], 1, Ack(r0, r3)));
        Assert.Equal(malformed + 1, at1.Counters.DroppedMalformed);
        // One that came along its path from its first member is opened: nothing is dropped.
        long drops = at1.Counters.DroppedMalformed + at1.Counters.DroppedNotForMe + at1.Counters.DroppedFirewall;
        c.Inject(Index(1), r0.Endpoint, Envelope(r0, [r3, r0, r1], 2, Ack(r3, r1)));
        Assert.Equal(drops, at1.Counters.DroppedMalformed + at1.Counters.DroppedNotForMe + at1.Counters.DroppedFirewall);
        // The packet inside claims a sender other than the path's first member: malformed.
        c.Inject(Index(1), r0.Endpoint, Envelope(r0, [r3, r0, r1], 2, Ack(view.Members[4], r1)));
        Assert.Equal(malformed + 2, at1.Counters.DroppedMalformed);
        // An envelope inside an envelope is not a kind that travels this way: malformed.
        c.Inject(Index(1), r0.Endpoint, Envelope(r0, [r3, r0, r1], 2, Envelope(r3, [r3, r0, r1], 1, Ack(r3, r1))));
        Assert.Equal(malformed + 3, at1.Counters.DroppedMalformed);
        // A member on the path passes it on to the next one.
        long forwarded = 0;
        c.DropWhere(e =>
        {
            if (e.Kind == PacketKind.Routed && e.From == r1.Endpoint && e.To == r3.Endpoint && e.Header.Number == 2) forwarded++;
            return false;
        });
        c.Inject(Index(1), r0.Endpoint, Envelope(r0, [r0, r1, r3], 1, Ack(r0, r3)));
        c.DeliverAll();
        Assert.Equal(1, forwarded);
    }
}
