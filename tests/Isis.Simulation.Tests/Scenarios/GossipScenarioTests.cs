using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Groups under the large-group rules (digests gossiped to a few random members, stability through
/// the tree; in the relay families data relayed along the tree too), through the simulator at sizes
/// a seed can afford: the rules start at 4 members here.
/// Every run must pass the checker; the mutation test below shows that the tree decides stability there.
/// </summary>
public sealed class GossipScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 60;

    public static IEnumerable<object[]> Families() => Scenario.GossipFamilies.Select(f => new object[] { f });

    [Theory]
    [MemberData(nameof(Families))]
    public void Large_group_rules_under_loss_crashes_and_partitions_keep_every_guarantee(string family)
    {
        SeedSweep.AllPass(output, SeedSweep.Range(0, Seeds), seed => SimulationRun.Execute(seed, Scenario.ForFamily(family, seed)));
    }

    [Fact]
    public void A_tree_that_leaves_the_subtree_out_is_caught()
    {
        // Members garbage-collect what the root holds, though members below it may lack it: a
        // member that lost such a message can never get it, and the checker sees what follows
        // (a query never answered, a flushed message gone).
        var runs = Enumerable.Range(0, 20)
            .Select(seed => SimulationRun.Execute((ulong)seed, "gossip", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.StabilityIgnoresSubtree } }))
            .ToList();
        int caught = runs.Count(r => !r.Passed);
        output.WriteLine($"caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count / 2, $"caught in only {caught} of {runs.Count} seeds");
    }

    [Fact]
    public void A_relay_that_labels_what_it_passes_on_as_its_own_is_caught()
    {
        // Data along the tree (as over the TCP overlay), but a member passing a message on files it
        // under its own rank: its neighbours deliver it as the relay's message, in the wrong stream.
        var runs = Enumerable.Range(0, 10)
            .Select(seed => SimulationRun.Execute((ulong)seed, "relay", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.RelayForwardsAsOwn } }))
            .ToList();
        Assert.All(runs, r => Assert.False(r.Passed, r.Summary));
    }

    [Fact]
    public void A_flush_routed_over_the_views_tree_instead_of_the_survivors_is_caught()
    {
        // Relaying, the coordinator's wedges and commits go along a tree. Over the view's tree, a
        // failed member inside it cuts its subtree off: the flush never completes, and the joins and
        // queries that wait for the next view hang (Liveness, QueryReplies).
        var runs = Enumerable.Range(0, 20)
            .Select(seed => SimulationRun.Execute((ulong)seed, "relay", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.FlushRoutesThroughViewTree } }))
            .ToList();
        int caught = runs.Count(r => !r.Passed);
        output.WriteLine($"caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count / 2, $"caught in only {caught} of {runs.Count} seeds");
    }

    [Fact]
    public void Relaying_Flush_k_returns_for_k_holders_and_the_checker_holds_it_to_k()
    {
        // In the relay families every other Flush is a Flush(k): it asks k - 1 members for their
        // digests directly (the tree only settles a Flush of all), and FlushDurability demands that
        // its messages survive any k - 1 failures.
        int returned = 0;
        for (ulong seed = 0; seed < 20; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "relay");
            Assert.True(run.Passed, run.Summary);
            var asked = new Dictionary<Isis.Core.Identity.NodeId, int>();
            foreach (HistoryEvent e in run.History.Events)
            {
                if (e.Kind == HistoryEventKind.FlushRequested) asked[e.Process] = e.Phi;
                else if (e.Kind == HistoryEventKind.FlushCompleted && asked.Remove(e.Process, out int k) && k > 0) returned++;
            }
        }
        output.WriteLine($"{returned} Flush(k) calls returned in 20 relay seeds");
        Assert.True(returned >= 20, $"only {returned} Flush(k) calls returned");
    }
}
