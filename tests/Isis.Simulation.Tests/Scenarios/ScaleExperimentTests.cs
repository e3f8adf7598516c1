using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// The scale experiment on a small group: the outcomes it reports must be real (everyone in one
/// view, every message delivered everywhere once, the killed member gone, joins batched into few
/// view changes), and the recorded history must pass the checker. Virtual times are asserted only
/// where the protocol fixes them; wall-clock time never.
/// </summary>
public sealed class ScaleExperimentTests(ITestOutputHelper output)
{
    private const int Members = 50;

    [Fact]
    public void Fifty_members_joining_within_5_ms_form_one_group_deliver_everything_and_drop_a_killed_member()
    {
        // One join every 100 us, as 1,000 members joining within 100 ms.
        ScaleResult r = ScaleExperiment.Run(new ScaleOptions { Members = Members, Seed = 3, StartWindow = 5_000, CheckHistory = true });
        output.WriteLine(r.Summary);
        Assert.True(r.Passed, r.Summary);

        // Formed: the last view of the formation holds everyone; joins arriving while a view change
        // runs are folded into the next one, so there are far fewer view changes than joiners.
        Assert.Equal(Members, r.ViewSizes[^1]);
        Assert.Equal(r.FormedViewId, r.ViewSizes.Count);
        Assert.True(r.FormedViewId <= Members / 5, $"{r.FormedViewId} view changes for {Members} joiners");
        Assert.True(r.ViewSizes.Zip(r.ViewSizes.Skip(1)).All(p => p.First < p.Second), "views only grow while the group forms");

        // Every member delivered every member's messages, each once (the checker also verified FIFO,
        // virtual synchrony and no duplicates on the recorded history).
        Assert.Equal((long)Members * Members * 2, r.Deliveries);
        Assert.True(r.HistoryEvents > r.Deliveries, "the history was recorded and checked");

        // The killed member (never the oldest) was expelled and one view change removed it.
        Assert.InRange(r.KilledRank, 1, Members - 1);
        Assert.Equal(1, r.KillViewChanges);
        // Expulsion takes SuspicionCount silent heartbeat periods (5 x 100 ms), give or take one period.
        Assert.InRange(r.DetectionTime, 400_000, 700_000);
        Assert.True(r.KillToViewMin >= r.DetectionTime && r.KillToViewMin <= r.KillToViewMedian && r.KillToViewMedian <= r.KillToViewMax);
        // Memory is not asserted: it is measured on the whole process, which other tests share.
        Assert.True(r.Packets > 0);
    }

    [Fact]
    public void Members_starting_at_the_same_instant_are_batched_into_a_few_view_changes_with_three_replicas()
    {
        ScaleResult r = ScaleExperiment.Run(new ScaleOptions { Members = Members, Seed = 5, Replicas = 3, StartWindow = 0 });
        output.WriteLine(r.Summary);
        Assert.True(r.Passed, r.Summary);
        Assert.Equal(Members, r.ViewSizes[^1]);
        Assert.True(r.FormedViewId <= 3, $"{r.FormedViewId} view changes for {Members} simultaneous joiners");
        Assert.True(r.LeaderElectedAt > 0, "three replicas elect a leader before the processes start");
        Assert.Equal((long)Members * Members * 2, r.Deliveries);
        Assert.Equal(1, r.KillViewChanges);
    }

    [Fact]
    public void Under_10_percent_loss_a_members_cost_stays_flat_from_20_to_200_members_and_every_message_arrives()
    {
        // The same workload at both sizes (10 senders x 10 Sends), every packet lost with chance 0.1;
        // heartbeats are lost too, so failure detection waits 20 periods (no member is expelled for
        // five lost heartbeats in a row). Cost: packets sent plus arrived per member, from the sends
        // until every message is stable.
        static ScaleOptions Options(int members, int gossipFrom) => new()
        {
            Members = members, Seed = 4, Senders = 10, SendsPerMember = 10, LossRate = 0.10,
            Protocol = new Isis.Core.Node.ProtocolOptions { SuspicionCount = 20, IsolationTimeout = 4_000_000, GossipFromMembers = gossipFrom },
        };
        ScaleResult small = ScaleExperiment.Run(Options(20, 16));
        ScaleResult large = ScaleExperiment.Run(Options(200, 16));
        ScaleResult allToAll = ScaleExperiment.Run(Options(200, int.MaxValue));
        foreach (ScaleResult r in new[] { small, large, allToAll })
        {
            output.WriteLine(r.Summary);
            Assert.True(r.Passed, r.Summary);
            // Every member delivered all 100 messages, each once (the experiment checks each member).
            Assert.Equal((long)r.Options.Members * 100, r.Deliveries);
        }
        Assert.True(large.MessagesPacketsPerMember <= small.MessagesPacketsPerMember * 1.4,
            $"mean per member: {small.MessagesPacketsPerMember:F0} at 20 members, {large.MessagesPacketsPerMember:F0} at 200");
        Assert.True(large.MessagesPacketsMaxReceiver <= small.MessagesPacketsMaxReceiver * 2.5,
            $"most at a member that sent nothing: {small.MessagesPacketsMaxReceiver} at 20 members, {large.MessagesPacketsMaxReceiver} at 200");
        // Digests to every member, the small-group rule, cost each member far more at 200 members.
        Assert.True(allToAll.MessagesPacketsPerMember >= 2 * large.MessagesPacketsPerMember,
            $"mean per member at 200: {allToAll.MessagesPacketsPerMember:F0} with digests to all, {large.MessagesPacketsPerMember:F0} with gossip");
    }

    [Fact]
    public void After_ten_minutes_of_virtual_time_a_hundred_members_acknowledgement_tables_hold_a_fixed_number_of_rows()
    {
        // 100 members, the large-group rules (gossip to 3 a round, a stability tree of fan-out 8);
        // 4 senders Send once a second for 10 minutes of virtual time, so every member gets gossip
        // from every other many times over. A table with a row per member would reach 100 rows.
        ScaleResult r = ScaleExperiment.Run(new ScaleOptions { Members = 100, Seed = 7, Senders = 4, SteadyFor = 600_000_000 });
        output.WriteLine(r.Summary);
        Assert.True(r.Passed, r.Summary);
        Assert.Equal(100L * 4 * 600, r.SteadyDeliveries);
        // At most: the shared zero row, the rows of 9 tree neighbours (a parent and 8 children), and
        // three summaries (how much of ours each holds, per sender the most held and by whom).
        Assert.InRange(r.AcknowledgementEntriesMax, 4 * 100, 13 * 100);
    }

    [Fact]
    public void The_same_seed_measures_the_same_figures()
    {
        static string Figures(ScaleResult r) =>
            $"{r.FormationTime} {r.FormedViewId} {string.Join(",", r.ViewSizes)} {r.DeliveryTime} {r.StabilityTime} {r.KilledRank} " +
            $"{r.DetectionTime} {r.KillToViewMin} {r.KillToViewMedian} {r.KillToViewMax} {r.Packets} {r.Bytes}";
        var options = new ScaleOptions { Members = 20, Seed = 11 };
        ScaleResult first = ScaleExperiment.Run(options);
        Assert.True(first.Passed, first.Summary);
        Assert.Equal(Figures(first), Figures(ScaleExperiment.Run(options)));
        Assert.NotEqual(Figures(first), Figures(ScaleExperiment.Run(options with { Seed = 12 })));
    }
}
