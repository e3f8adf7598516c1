using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// The simulator's behaviour, pinned: the event log of the first seeds of every family must hash to
/// what <c>Baselines/event-log-fingerprints.txt</c> recorded. A refactoring that must not change
/// behaviour (issue 27: the driver contract as a type) keeps every line; the file holds 200 seeds
/// per family for the full check with <c>Isis.Sim fingerprints</c>, and this test runs the first
/// few of each, which is what CI can afford.
/// </summary>
public sealed class EventLogFingerprintTests(ITestOutputHelper output)
{
    private const int SeedsPerFamily = 2;

    private const string Regenerate =
        "dotnet build -c Release tools/Isis.Sim && dotnet run -c Release --no-build --project tools/Isis.Sim -- fingerprints --seeds 0..199 > tests/Isis.Simulation.Tests/Baselines/event-log-fingerprints.txt";

    [Fact]
    public void The_first_seeds_of_every_family_record_the_event_logs_of_the_baseline()
    {
        var baseline = new Dictionary<(string Family, ulong Seed), string>();
        foreach (string line in File.ReadLines(Path.Combine(AppContext.BaseDirectory, "Baselines", "event-log-fingerprints.txt")))
        {
            string[] fields = line.Split(' ');
            if (fields.Length == 3) baseline[(fields[0], ulong.Parse(fields[1]))] = fields[2];
        }
        var changed = new List<string>();
        foreach (string family in Scenario.AllFamilies)
        {
            for (ulong seed = 0; seed < SeedsPerFamily; seed++)
            {
                Assert.True(baseline.TryGetValue((family, seed), out string? expected), $"the baseline has no line for {family} seed {seed}: regenerate it with {Regenerate}");
                string actual = SimulationRun.Execute(seed, family).History.Fingerprint();
                if (actual != expected) changed.Add($"{family} seed {seed}: {expected} -> {actual}");
            }
        }
        output.WriteLine($"{Scenario.AllFamilies.Length * SeedsPerFamily} runs checked against {baseline.Count} recorded");
        Assert.True(changed.Count == 0,
            $"the event logs changed ({changed.Count}): {string.Join("; ", changed.Take(10))}. A refactoring must not change them; " +
            $"if the protocol's behaviour changed on purpose, regenerate the baseline: {Regenerate}");
    }

    [Fact]
    public void The_same_seed_gives_the_same_fingerprint_and_another_seed_another()
    {
        string a = SimulationRun.Execute(5, "chaos").History.Fingerprint();
        Assert.Equal(a, SimulationRun.Execute(5, "chaos").History.Fingerprint());
        Assert.NotEqual(a, SimulationRun.Execute(6, "chaos").History.Fingerprint());
        Assert.Matches("^[0-9a-f]{16}$", a);
    }
}
