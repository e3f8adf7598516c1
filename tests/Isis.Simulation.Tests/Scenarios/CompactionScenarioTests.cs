using Isis.Core.Node;
using Isis.Simulation.Checking;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// The membership service's log compaction through the simulator: the replicas snapshot every few
/// decisions and drop their log behind the snapshot, while replicas crash and restart from their
/// compacted records (family compaction) or the hosts of embedded replicas crash and new replicas
/// catch up from a snapshot (family compaction-hosts). The checker judges every run, including
/// that every snapshot holds exactly the committed decisions (ServiceSnapshots).
/// </summary>
public sealed class CompactionScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 40;

    public static IEnumerable<object[]> Families() => Scenario.CompactionFamilies.Select(f => new object[] { f });

    [Theory]
    [MemberData(nameof(Families))]
    public void Replicas_that_snapshot_every_few_decisions_and_crash_or_are_replaced_never_break_a_guarantee(string family)
    {
        var failures = new List<string>();
        int taken = 0, installed = 0, runsInstalling = 0;
        for (ulong seed = 0; seed < Seeds; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, family);
            output.WriteLine(run.Summary);
            if (!run.Passed) failures.Add(run.Report);
            var snapshots = run.History.Events.Where(e => e.Kind == HistoryEventKind.ReplicaSnapshot).ToList();
            taken += snapshots.Count(e => e.Phi == 0);
            int installs = snapshots.Count(e => e.Phi == 1);
            installed += installs;
            if (installs > 0) runsInstalling++;
        }
        output.WriteLine($"{family}: {taken} snapshots taken, {installed} installed or restored, in {runsInstalling} of {Seeds} runs");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(taken >= Seeds * 10, $"{family}: only {taken} snapshots taken in {Seeds} runs");
        // Restarted replicas restore one, and new or lagging ones install one from the leader.
        Assert.True(runsInstalling >= Seeds / 2, $"{family}: a snapshot was installed or restored in only {runsInstalling} of {Seeds} runs");
    }

    [Fact]
    public void A_snapshot_that_claims_uncommitted_entries_is_caught()
    {
        int caught = 0;
        foreach (string family in Scenario.CompactionFamilies)
        {
            for (ulong seed = 0; seed < 20; seed++)
            {
                SimulationRun run = SimulationRun.Execute(seed, family, s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.SnapshotPastCommit } });
                if (run.Result.Violates(nameof(HistoryChecker.ServiceSnapshots))) caught++;
            }
        }
        output.WriteLine($"the mutation was caught by ServiceSnapshots in {caught} of 40 seeds");
        // A replica snapshots past its commit index only if it holds uncommitted entries when its
        // interval comes up, which most runs see (29 of these 40 when written).
        Assert.True(caught >= 20, $"the checker caught the mutation in only {caught} of 40 seeds");
    }
}
