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
}
