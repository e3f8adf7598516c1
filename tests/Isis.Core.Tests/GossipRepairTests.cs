using Isis.Core.Groups;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

/// <summary>
/// Large groups: digests gossiped to a few random members, stability through the tree
/// (<see cref="StabilityTree"/>). A 12-member group with the large-group rules from 4 members, two
/// gossip targets a round and a binary tree, so the tree is four ranks deep.
/// </summary>
public class GossipRepairTests
{
    private const int Members = 12;

    private static readonly ProtocolOptions Large = new() { GossipFromMembers = 4, GossipFanout = 2, StabilityTreeFanout = 2 };

    private static TestCluster Formed(ProtocolOptions? options = null)
    {
        var c = new TestCluster(Members, options ?? Large);
        c.FormGroup(Members);
        return c;
    }

    private static GroupMember Member(TestCluster c, int i) => c[i].FindGroup(TestCluster.G)!;

    [Fact]
    public void Every_message_reaches_every_member_through_loss_and_becomes_stable_everywhere()
    {
        TestCluster c = Formed();
        var random = new Random(7);
        var digestsPerRound = new Dictionary<(long Now, ulong From), int>();
        c.DropWhere(e =>
        {
            if (e.Kind == PacketKind.Digest && e.Header.Number == 0)
            {
                var key = (c.Now, e.From);
                digestsPerRound[key] = digestsPerRound.GetValueOrDefault(key) + 1;
            }
            // 10 % of every member-to-member packet is lost: data, digests, NAKs and the tree's.
            return e.Kind >= PacketKind.Data && random.NextDouble() < 0.10;
        });
        for (int round = 0; round < 20; round++)
        {
            for (int i = 0; i < Members; i++) c.Send(i, $"m{i}-{round}");
            c.RunFor(2_000);
        }
        c.RunUntil(() => Enumerable.Range(0, Members).All(i => c.Delivered(i).Count == Members * 20), limit: 10_000_000);
        c.RunUntil(() => Enumerable.Range(0, Members).All(i => Member(c, i).UnstableOwnMessages == 0), limit: 10_000_000);

        ClusterChecks.AssertVirtualSynchronyAndFifo(c);
        Assert.True(c.Dropped.Count > 100, $"the loss rule dropped only {c.Dropped.Count} packets");
        Assert.True(c.Dropped.Any(e => e.Kind == PacketKind.StabilityReport) && c.Dropped.Any(e => e.Kind == PacketKind.StabilityUpdate),
            "the loss should have hit the tree's packets too");
        // A round's digest goes to two members, never to all eleven others.
        Assert.NotEmpty(digestsPerRound);
        Assert.All(digestsPerRound, kv => Assert.True(kv.Value <= 2, $"member {kv.Key.From} sent {kv.Value} digests in one round at {kv.Key.Now}"));
    }

    [Fact]
    public void A_lost_last_message_is_repaired_by_gossip_with_nothing_sent_after_it()
    {
        TestCluster c = Formed();
        // The only message of sender 3 never reaches member 9 directly: only a gossiped digest can tell
        // member 9 that it exists, and member 9 must then pull it.
        c.DropFirst(e => e.Kind == PacketKind.Data && e.From == 4 && e.To == 10 && e.DataOrigin == 3);
        c.Send(3, "only");
        c.RunUntil(() => c.Delivered(9).Contains("3:1:only"), limit: 5_000_000);
        Assert.True(c[9].Counters.NaksSent > 0);
        c.RunUntil(() => Member(c, 3).UnstableOwnMessages == 0, limit: 5_000_000);
    }

    [Fact]
    public void Nothing_is_stable_while_a_member_deep_in_the_tree_is_silent()
    {
        // Rank 11's parent is 5, whose parent is 2, whose parent is the root: stability must wait for it.
        Nothing_stable_while_deep_leaf_silent(Large, expectStableWhileSilent: false);
    }

    [Fact]
    public void The_checks_notice_a_tree_that_leaves_the_subtree_out()
    {
        // The mutation makes the root's own holdings the stable prefix: the sender's messages become
        // stable (and are collected) while rank 11 holds none of them.
        Nothing_stable_while_deep_leaf_silent(Large with { Mutations = ProtocolMutations.StabilityIgnoresSubtree }, expectStableWhileSilent: true);
    }

    private static void Nothing_stable_while_deep_leaf_silent(ProtocolOptions options, bool expectStableWhileSilent)
    {
        TestCluster c = Formed(options);
        GroupView view = c.CurrentView(0)!;
        int silent = (int)view.Members[11].Endpoint - 1;
        int sender = (int)view.Members[4].Endpoint - 1;
        c.Stop(silent);
        for (int k = 0; k < 5; k++) c.Send(sender, $"while-silent-{k}");
        c.RunFor(200_000); // well inside failure detection (5 heartbeats of 100 ms)
        Assert.Equal(Members, c.CurrentView(sender)!.Members.Length);
        if (expectStableWhileSilent)
        {
            Assert.Equal(0, Member(c, sender).UnstableOwnMessages);
            return;
        }
        Assert.Equal(5, Member(c, sender).UnstableOwnMessages);
        // The service expels the silent member; in the next view everything settles.
        c.RunUntil(() => c.CurrentView(sender)!.Members.Length == Members - 1, limit: 3_000_000);
        c.RunUntil(() => Member(c, sender).UnstableOwnMessages == 0);
    }

    [Fact]
    public void An_interior_member_repeating_its_report_after_an_update_still_reports_its_subtree()
    {
        // Rank 4 (a child of rank 1) never gets rank 6's message, repairs included; rank 5 (under
        // rank 2) never gets rank 7's, so the root's stable vector stays behind rank 1's report and
        // rank 1 keeps repeating it. Then rank 8's message becomes stable everywhere, so rank 1
        // receives a stable vector from the root between two repeats. The repeats must still carry
        // rank 4's holdings: a report of rank 1's own would let the root declare stable (and every
        // member collect) a message rank 4 lacks.
        TestCluster c = Formed();
        GroupView view = c.CurrentView(0)!;
        int Node(int rank) => (int)view.Members[rank].Endpoint - 1;
        c.DropWhere(e => e.Kind == PacketKind.Data && e.To == view.Members[4].Endpoint && e.DataOrigin == 6);
        c.DropWhere(e => e.Kind == PacketKind.Data && e.To == view.Members[5].Endpoint && e.DataOrigin == 7);
        c.Send(Node(6), "rank-4-never-gets-this");
        c.Send(Node(7), "rank-5-never-gets-this");
        c.RunFor(150_000);
        c.Send(Node(8), "everyone-holds-this");
        c.RunUntil(() => Member(c, Node(8)).UnstableOwnMessages == 0, limit: 2_000_000);
        c.RunFor(300_000); // several repeats of every report, well inside failure detection
        Assert.DoesNotContain(c.Delivered(Node(4)), d => d.EndsWith("rank-4-never-gets-this", StringComparison.Ordinal));
        Assert.Equal(1, Member(c, Node(6)).UnstableOwnMessages);
        Assert.Equal(1, Member(c, Node(7)).UnstableOwnMessages);
    }

    [Fact]
    public void Tree_packets_from_the_wrong_member_or_beyond_what_we_hold_are_dropped_and_counted()
    {
        TestCluster c = Formed();
        GroupView view = c.CurrentView(0)!;
        int Index(int rank) => (int)view.Members[rank].Endpoint - 1;
        PacketWriter W(PacketKind kind, int fromRank, long number) =>
            new PacketWriter().Begin(new PacketHeader(kind, view.Members[fromRank], TestCluster.G, view.Id, number));
        var zeros = new long[Members];
        var huge = Enumerable.Repeat(5L, Members).ToArray();
        int target = Index(2); // rank 2: parent 0, children 5 and 6
        (string What, byte[] Packet, int FromRank)[] bad =
        [
            ("a report from a member that is not a child", W(PacketKind.StabilityReport, 7, 0).Longs(zeros).Finish(), 7),
            ("a report of the wrong length", W(PacketKind.StabilityReport, 5, 0).Longs([0, 0]).Finish(), 5),
            ("a report with a negative holding", W(PacketKind.StabilityReport, 5, 0).Longs(Enumerable.Repeat(-1L, Members).ToArray()).Finish(), 5),
            ("an update from a member that is not the parent", W(PacketKind.StabilityUpdate, 1, 9).Longs(zeros).Finish(), 1),
            ("an update declaring stable what this member does not hold", W(PacketKind.StabilityUpdate, 0, 9).Longs(huge).Finish(), 0),
            ("an update with version 0", W(PacketKind.StabilityUpdate, 0, 0).Longs(zeros).Finish(), 0),
            ("a truncated update", W(PacketKind.StabilityUpdate, 0, 9).Longs(zeros).Finish()[..^3], 0),
        ];
        foreach (var (what, packet, fromRank) in bad)
        {
            long before = c[target].Counters.DroppedMalformed;
            c.Inject(target, view.Members[fromRank].Endpoint, packet);
            Assert.True(c[target].Counters.DroppedMalformed == before + 1, $"{what}: not counted as malformed");
        }

        // None of it did harm: a message still settles everywhere.
        c.Send(Index(6), "after");
        c.RunUntil(() => Enumerable.Range(0, Members).All(i => c.Delivered(i).Contains($"{Index(6)}:1:after")));
        c.RunUntil(() => Member(c, Index(6)).UnstableOwnMessages == 0);
    }

    [Fact]
    public void A_small_group_counts_tree_packets_as_not_for_it()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        GroupView view = c.CurrentView(0)!;
        byte[] report = new PacketWriter().Begin(new PacketHeader(PacketKind.StabilityReport, view.Members[1], TestCluster.G, view.Id, 0)).Longs([0, 0, 0]).Finish();
        long before = c[0].Counters.DroppedNotForMe;
        c.Inject(0, view.Members[1].Endpoint, report);
        Assert.Equal(before + 1, c[0].Counters.DroppedNotForMe);
    }
}
