using Isis.Core.Identity;
using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Hundreds of seeded runs across every scenario family (loss up to 20%, duplication, reordering,
/// partitions that heal, pauses, crashes of members and of view-change coordinators, leaves and
/// rejoins). Each must satisfy every property the checker knows. A failure prints the seed and
/// the one-line command that replays it.
/// </summary>
public sealed class SeededScenarioTests(ITestOutputHelper output)
{
    public const int SeedsPerBatch = 40;

    // 1,400 seeds: every family gets about 67 (21 families), the membership families 467 together.
    private const int BatchCount = 35;

    public static IEnumerable<object[]> Batches() => Enumerable.Range(0, BatchCount).Select(b => new object[] { b });

    [Theory]
    [MemberData(nameof(Batches))]
    public void Every_seeded_scenario_satisfies_every_guarantee(int batch)
    {
        SeedSweep.AllPass(output, SeedSweep.Range((ulong)(batch * SeedsPerBatch), SeedsPerBatch), seed => SimulationRun.Execute(seed));
    }

    [Fact]
    public void Thirty_processes_starting_together_form_their_group_in_a_few_view_changes()
    {
        // Batch membership: joins that arrive together are folded into one view change.
        foreach (ulong seed in new ulong[] { 1, 2, 3 })
        {
            SimulationRun run = SimulationRun.Execute(seed, "steady", s => s with { Processes = 30, StartWindow = 5_000, MessagesPerProcess = 5 });
            Assert.True(run.Passed, run.Report);
            int[] views = run.History.Events.Where(e => e.Kind == HistoryEventKind.ViewInstall).Select(e => e.ViewId).Distinct().ToArray();
            Assert.True(views.Length <= 3, $"seed {seed}: 30 joins within 5 ms took views {string.Join(", ", views)}");
            Assert.Contains(run.History.Events, e => e.Kind == HistoryEventKind.ViewInstall && e.Members!.Length == 30);
        }
    }

    [Fact]
    public void At_least_300_of_the_seeded_runs_exercise_the_replicated_membership_service()
    {
        int total = BatchCount * SeedsPerBatch;
        int membership = Enumerable.Range(0, total).Count(seed => Scenario.MembershipFamilies.Contains(Scenario.FromSeed((ulong)seed).Name));
        Assert.True(membership >= 300, $"{membership} of {total} seeds run a membership family");
    }

    [Fact]
    public void One_seed_replays_the_same_run_event_for_event()
    {
        string Log(ulong seed)
        {
            var writer = new StringWriter();
            SimulationRun.Execute(seed, "chaos").History.WriteJsonLines(writer);
            return writer.ToString();
        }
        string first = Log(1234);
        Assert.Equal(first, Log(1234));
        Assert.NotEqual(first, Log(1235));
    }

    [Fact]
    public void A_steady_run_forms_one_view_of_everyone_and_delivers_every_message_everywhere()
    {
        SimulationRun run = SimulationRun.Execute(7, "steady");
        Assert.True(run.Passed, run.Report);
        var events = run.History.Events;
        int processes = run.Simulator.Scenario.Processes;
        int sends = events.Count(e => e.Kind == HistoryEventKind.Send);
        Assert.Contains(events, e => e.Kind == HistoryEventKind.Deliver && e.Primitive == Isis.Core.Groups.MessageKind.Ordered);
        Assert.Contains(events, e => e.Kind == HistoryEventKind.Deliver && e.Primitive == Isis.Core.Groups.MessageKind.Send);
        int deliveries = events.Count(e => e.Kind == HistoryEventKind.Deliver);
        Assert.Equal(processes * run.Simulator.Scenario.MessagesPerProcess, sends);
        // Joins happen over the first 300 ms, so early messages reach fewer members; by the end
        // every member must have delivered most of everything.
        Assert.True(deliveries > sends * (processes - 1), $"{deliveries} deliveries for {sends} sends in a group of {processes}");
        var lastView = events.Last(e => e.Kind == HistoryEventKind.ViewInstall);
        Assert.Equal(processes, lastView.Members!.Length);
    }

    [Theory]
    [InlineData("crash")]
    [InlineData("coordinator-crash")]
    [InlineData("partition")]
    [InlineData("pause")]
    [InlineData("sequencer-crash")]
    public void Fault_families_really_inject_their_faults(string family)
    {
        // Guard against a scenario that silently stops testing anything: over a few seeds, the
        // family must cause expulsions, and view changes that remove members (joins only add).
        int expulsions = 0, removals = 0;
        for (ulong seed = 0; seed < 6; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, family);
            Assert.True(run.Passed, run.Report);
            expulsions += run.History.Events.Count(e => e.Kind == HistoryEventKind.Expel);
            var views = new Dictionary<int, NodeId[]>();
            foreach (HistoryEvent e in run.History.Events.Where(e => e.Kind == HistoryEventKind.ViewInstall)) views.TryAdd(e.ViewId, e.Members!);
            removals += views.Count(v => views.TryGetValue(v.Key - 1, out NodeId[]? before) && before.Except(v.Value).Any());
        }
        Assert.True(expulsions > 0, $"{family}: no process was ever expelled");
        Assert.True(removals >= 6, $"{family}: only {removals} view changes removed a member over 6 seeds");
    }
}
