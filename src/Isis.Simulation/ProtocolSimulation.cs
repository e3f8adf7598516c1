
namespace Isis.Simulation;

/// <summary>
/// Runs the Isis protocol core under the deterministic simulator and checks every guarantee on
/// the history: a seed decides every coin flip (message loss, duplication, reordering,
/// partitions, crashes, restarts), so a failing seed replays exactly. This is what the project's
/// own CI runs hundreds of times; use it to try the protocol under faults from a test of your own.
/// </summary>
/// <example>
/// <code>
/// foreach (ulong seed in Enumerable.Range(1, 50).Select(i => (ulong)i))
/// {
///     SimulationOutcome outcome = ProtocolSimulation.Run(seed, "chaos");
///     Assert.True(outcome.Passed, outcome.Report);
/// }
/// </code>
/// </example>
public static class ProtocolSimulation
{
    /// <summary>
    /// The scenario families, in the order a seed alone cycles through them: "steady", "lossy",
    /// "partition", "crash", "chaos", the membership service's own failures, and more.
    /// </summary>
    public static IReadOnlyList<string> Families => Array.AsReadOnly(Scenario.Families);

    /// <summary>
    /// Simulates one seed and checks the history it produced. With no <paramref name="family"/>,
    /// the family is the seed modulo <see cref="Families"/>'s count.
    /// </summary>
    /// <exception cref="ArgumentException"><paramref name="family"/> is not one of <see cref="Families"/>.</exception>
    public static SimulationOutcome Run(ulong seed, string? family = null)
    {
        if (family != null && !Scenario.Families.Contains(family) && !Scenario.EmbeddedServiceFamilies.Contains(family))
        {
            throw new ArgumentException(
                $"'{family}' is not a scenario family; use one of {string.Join(", ", Scenario.Families.Concat(Scenario.EmbeddedServiceFamilies).Distinct())}.",
                nameof(family));
        }
        return new SimulationOutcome(SimulationRun.Execute(seed, family));
    }
}

/// <summary>What one simulated seed did and whether the history kept every guarantee.</summary>
public sealed class SimulationOutcome
{
    private readonly SimulationRun _run;

    internal SimulationOutcome(SimulationRun run)
    {
        _run = run;
        Violations = [.. run.Result.Violations.Select(v => new GuaranteeViolation(v.Property, v.Description))];
    }

    /// <summary>The seed that decided the run.</summary>
    public ulong Seed => _run.Simulator.Seed;

    /// <summary>The scenario family the run belonged to.</summary>
    public string Family => _run.Simulator.Scenario.Name;

    /// <summary>How many member processes the scenario had.</summary>
    public int Processes => _run.Simulator.Scenario.Processes;

    /// <summary>True when the checker found no violation.</summary>
    public bool Passed => _run.Passed;

    /// <summary>Every guarantee the history broke, with what the checker saw; empty when <see cref="Passed"/>.</summary>
    public IReadOnlyList<GuaranteeViolation> Violations { get; }

    /// <summary>How many events (deliveries, view installs, sends, crashes, ...) the history holds.</summary>
    public int EventCount => _run.History.Count;

    /// <summary>Packets the simulated network carried.</summary>
    public long PacketsSent => _run.Simulator.Network.Sent;

    /// <summary>Packets the simulated network dropped as loss.</summary>
    public long PacketsLost => _run.Simulator.Network.Lost;

    /// <summary>The command that replays this run with the repository's simulator CLI.</summary>
    public string ReplayCommand => _run.Simulator.ReplayCommand;

    /// <summary>One line: seed, family, verdict, traffic, and the replay command when it failed.</summary>
    public string Summary => _run.Summary;

    /// <summary><see cref="Summary"/> and every violation, one per line.</summary>
    public string Report => _run.Report;

    /// <summary>
    /// Writes the run's history as JSON lines, one event per line (the event log format that the
    /// real-process tests write too), for reading or diffing a failed seed.
    /// </summary>
    public void WriteEventLog(TextWriter writer) => _run.History.WriteJsonLines(writer);

    /// <inheritdoc/>
    public override string ToString() => Summary;
}

/// <summary>One guarantee a simulated history broke.</summary>
/// <param name="Property">The guarantee, as the checker names it (for example "VirtualSynchrony", "FifoPerSender" or "Liveness").</param>
/// <param name="Description">What the checker saw: which processes, views and messages.</param>
public sealed record GuaranteeViolation(string Property, string Description);
