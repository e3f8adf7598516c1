using Isis.Simulation.Bft;

namespace Isis.Simulation.Tests.Bft;

/// <summary>Running seeds of a BFT scenario and requiring each to pass the checker (and to answer everything, where the scenario expects it).</summary>
internal static class BftRuns
{
    public static BftRunResult Run(BftScenario scenario, int seed) => new BftSimulation(scenario, seed).Run();

    public static void AllPass(BftScenario scenario, int seeds)
    {
        for (int seed = 0; seed < seeds; seed++)
        {
            BftRunResult r = Run(scenario, seed);
            Assert.True(r.Ok, $"seed {seed}: {string.Join("; ", r.Violations)}\n{string.Join("\n", r.ReplicaStates)}");
            if (scenario.ExpectProgress) Assert.Equal(r.Issued, r.Accepted);
        }
    }
}
