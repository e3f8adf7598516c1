using Isis.Core.Durability;
using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// The "history founded twice" hazard (the history-refound family): every process of an embedded
/// service with a durable group restarts, so the service forgets the group, and a new process with
/// an empty disk starts first, founds the service again and is the oldest member of the group's
/// first view. The machine's registry of durable groups tells it a history exists: it waits for
/// the others' logs, and the group recovers the history they hold. The checker reads the whole run
/// at once (the history outlives the service era), so a second history founded over the first is
/// caught as two histories.
/// </summary>
public sealed class HistoryRefoundScenarioTests(ITestOutputHelper output)
{
    [Fact]
    public void A_new_process_first_after_a_whole_system_restart_waits_for_the_logs_and_the_group_keeps_its_history()
    {
        var failures = new List<string>();
        int runs = 0, waitedOnRegistry = 0, restarts = 0;
        for (ulong seed = 0; seed < 60; seed++)
        {
            runs++;
            bool waited = false;
            SimulationRun run = SimulationRun.Execute(seed, Scenario.ForFamily("history-refound", seed), sim => sim.Observer = (_, e) =>
            {
                if (e is HistoryNotice { Kind: HistoryNoticeKind.Waiting } n && n.Text.Contains("registry of durable groups", StringComparison.Ordinal)) waited = true;
            });
            if (!run.Passed) failures.Add(run.Report);
            if (waited) waitedOnRegistry++;
            restarts += run.Simulator.WholeSystemRestarts;
        }
        output.WriteLine($"{runs} history-refound runs, {restarts} whole-system restarts; the new process waited on the registry in {waitedOnRegistry}");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(restarts >= runs * 9 / 10, $"only {restarts} whole-system restarts in {runs} runs: the scenario did not do what it is for");
        Assert.True(waitedOnRegistry >= runs * 9 / 10, $"the new process waited on the registry in only {waitedOnRegistry} of {runs} runs");
    }

    [Fact]
    public void Founding_over_a_history_the_registry_names_is_caught_as_two_histories()
    {
        var caught = Enumerable.Range(0, 40)
            .Where(seed => SimulationRun.Execute((ulong)seed, "history-refound", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.FoundOverKnownHistory } })
                .Result.Violates("RecoveredHistory"))
            .ToList();
        output.WriteLine($"the mutation was caught in {caught.Count} of 40 seeds");
        Assert.True(caught.Count >= 30, $"the checker caught the mutation in only {caught.Count} of 40 seeds");
    }
}
