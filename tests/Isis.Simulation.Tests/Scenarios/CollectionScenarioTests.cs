using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Replicated collections through the simulator (issue 15, item 6): Isis.Collections' own model on
/// every simulated member, under loss, crashes of members and of the sequencer, leaves and rejoins,
/// partitions and pauses, with handlers that stall while gossip repairs them. Every run must pass
/// the checker, whose Collections property wants one history sequence, issuer order, convergence
/// once faults stop, and nothing of a surviving issuer lost; the mutation test shows it notices a
/// merge of what a view left that differs between members.
/// </summary>
public sealed class CollectionScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 60;

    public static IEnumerable<object[]> Families() => Scenario.CollectionFamilies.Select(f => new object[] { f });

    [Theory]
    [MemberData(nameof(Families))]
    public void Collections_under_faults_keep_one_history_and_converge(string family)
    {
        long stalls = 0, repairs = 0;
        SeedSweep.AllPass(output, SeedSweep.Range(0, Seeds), seed => SimulationRun.Execute(seed, family), run =>
        {
            stalls += run.Simulator.CollectionStalls;
            repairs += run.Simulator.CollectionRepairs;
        });
        output.WriteLine($"{stalls} handler stalls, {repairs} gossip repairs in {Seeds} runs");
        // The runs did what they are for: handlers stalled, and gossip repaired members while they did.
        Assert.True(stalls >= Seeds, $"only {stalls} stalls in {Seeds} runs");
        Assert.True(repairs >= Seeds / 2, $"only {repairs} repairs in {Seeds} runs");
    }

    [Fact]
    public void A_merge_of_what_a_view_left_in_arrival_order_is_caught()
    {
        var runs = Enumerable.Range(0, 40)
            .Select(seed => SimulationRun.Execute((ulong)seed, "collections", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.CollectionLeftoverInArrivalOrder } }))
            .ToList();
        int caught = runs.Count(r => !r.Passed && r.Result.Violations.Any(v => v.Property == "Collections"));
        output.WriteLine($"caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count / 4, $"caught in only {caught} of {runs.Count} seeds");
    }
}
