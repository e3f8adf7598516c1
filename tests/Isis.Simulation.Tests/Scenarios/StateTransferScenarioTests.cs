using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// State transfer through the simulator: processes join under traffic (every restart is a join),
/// the member making a checkpoint crashes while it streams, chunks are lost and reordered. Every
/// run must pass the checker, whose StateTransfer property compares each joiner's first state with
/// the members' state at the join's cut; the mutation test shows that it notices a joiner that
/// does not wait for its state.
/// </summary>
public sealed class StateTransferScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 60;

    public static IEnumerable<object[]> Families() => Scenario.StateTransferFamilies.Select(f => new object[] { f });

    [Theory]
    [MemberData(nameof(Families))]
    public void Joins_under_traffic_with_checkpoint_makers_crashing_keep_every_guarantee(string family)
    {
        int made = 0, loaded = 0, restarted = 0, reset = 0;
        SeedSweep.AllPass(output, SeedSweep.Range(0, Seeds), seed => SimulationRun.Execute(seed, Scenario.ForFamily(family, seed), sim => sim.Observer = (_, e) =>
        {
            switch (e)
            {
                case StateRequested: made++; break;
                case StateReceived: loaded++; break;
                case StateTransferAborted: restarted++; break;
                case StateReset: reset++; break;
            }
        }));
        output.WriteLine($"{made} checkpoints made, {loaded} loaded, {restarted} transfers restarted, {reset} states lost and restarted empty");
        // The runs did what they are for: many transfers, and some cut short by their maker's crash.
        Assert.True(loaded >= Seeds, $"only {loaded} checkpoints loaded in {Seeds} runs");
        Assert.True(restarted > 0, "no transfer was cut short, so restarting was not exercised");
    }

    [Fact]
    public void A_joiner_that_does_not_wait_for_its_state_is_caught()
    {
        var runs = Enumerable.Range(0, 20)
            .Select(seed => SimulationRun.Execute((ulong)seed, "state-transfer", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.JoinerSkipsState } }))
            .ToList();
        int caught = runs.Count(r => !r.Passed && r.Result.Violations.Any(v => v.Property == "StateTransfer"));
        output.WriteLine($"caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count * 3 / 4, $"caught in only {caught} of {runs.Count} seeds");
    }
}
