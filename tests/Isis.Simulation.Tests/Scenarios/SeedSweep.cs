using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>What every family test does: run a range of seeds, print each run's summary, and fail with the report of every run that broke a guarantee.</summary>
internal static class SeedSweep
{
    /// <param name="output">Where each run's one-line summary goes.</param>
    /// <param name="seeds">The seeds.</param>
    /// <param name="execute">Runs one seed.</param>
    /// <param name="each">Looks at each run (to count what the runs exercised) before the next one starts.</param>
    public static void AllPass(ITestOutputHelper output, IEnumerable<ulong> seeds, Func<ulong, SimulationRun> execute, Action<SimulationRun>? each = null)
    {
        var failures = new List<string>();
        foreach (ulong seed in seeds)
        {
            SimulationRun run = execute(seed);
            output.WriteLine(run.Summary);
            if (!run.Passed) failures.Add(run.Report);
            each?.Invoke(run);
        }
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
    }

    /// <summary>Seeds first, first + 1, ..., first + count - 1.</summary>
    public static IEnumerable<ulong> Range(ulong first, int count)
    {
        for (ulong seed = first; seed < first + (ulong)count; seed++) yield return seed;
    }
}
