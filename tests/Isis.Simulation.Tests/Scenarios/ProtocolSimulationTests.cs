namespace Isis.Simulation.Tests.Scenarios;

/// <summary>The simulator's public face, as a user of the Isis.Simulation package calls it.</summary>
public sealed class ProtocolSimulationTests
{
    [Fact]
    public void A_seed_runs_checks_and_reports_in_the_family_asked_for()
    {
        SimulationOutcome outcome = ProtocolSimulation.Run(7, "lossy");

        Assert.True(outcome.Passed, outcome.Report);
        Assert.Empty(outcome.Violations);
        Assert.Equal(7UL, outcome.Seed);
        Assert.Equal("lossy", outcome.Family);
        Assert.True(outcome.Processes >= 2);
        Assert.True(outcome.EventCount > 100, $"{outcome.EventCount} events");
        Assert.True(outcome.PacketsLost > 0, "a lossy run lost no packet");
        Assert.True(outcome.PacketsSent > outcome.PacketsLost);
        Assert.StartsWith("seed 7 lossy", outcome.Summary);
        Assert.Contains("--seed 7 --scenario lossy", outcome.ReplayCommand);
    }

    [Fact]
    public void Without_a_family_the_seed_picks_one_and_the_same_seed_replays_exactly()
    {
        ulong seed = (ulong)ProtocolSimulation.Families.Count + 2; // the third family
        SimulationOutcome first = ProtocolSimulation.Run(seed);
        SimulationOutcome again = ProtocolSimulation.Run(seed);

        Assert.Equal(ProtocolSimulation.Families[2], first.Family);
        var log1 = new StringWriter();
        var log2 = new StringWriter();
        first.WriteEventLog(log1);
        again.WriteEventLog(log2);
        string[] lines = log1.ToString().Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal(first.EventCount, lines.Length);
        Assert.StartsWith("{\"t\":", lines[0]);
        Assert.Equal(log1.ToString(), log2.ToString());
    }

    [Fact]
    public void An_unknown_family_is_refused_with_the_list_of_families()
    {
        var e = Assert.Throws<ArgumentException>(() => ProtocolSimulation.Run(1, "stormy"));
        Assert.Contains("'stormy' is not a scenario family", e.Message);
        Assert.Contains("chaos", e.Message);
        Assert.Contains("host-quorum-loss", e.Message);
    }
}
