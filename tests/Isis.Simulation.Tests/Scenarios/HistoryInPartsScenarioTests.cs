using Isis.Core.Identity;
using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Issue 25 in the simulator: a member that copies the history writes it aside in parts as it
/// arrives (HistoryStage), the log replaced only by the last part, and every member that comes to
/// hold the history hands its replay over in slices, one per tick, with what happens meanwhile
/// held behind it. The durable families draw small chunk, part and slice sizes
/// (<see cref="Scenario.DurableParts"/>), so copies span many parts, crashes and torn writes cut
/// them short, and replays span many ticks while traffic, view changes and crashes go on; the
/// checker's RecoveredHistory judges every run. Sizes are asserted, never times.
/// </summary>
public sealed class HistoryInPartsScenarioTests(ITestOutputHelper output)
{
    [Theory]
    [InlineData("disk-chaos", 30, 60)]
    [InlineData("whole-restart", 0, 40)]
    public void Copies_are_written_aside_in_bounded_parts_and_replays_handed_over_in_bounded_slices(string family, int firstSeed, int seeds)
    {
        var failures = new List<string>();
        int parts = 0, commits = 0, slices = 0, slicedReplays = 0, crashedWithCopyAside = 0, cutReplays = 0;
        long largestPart = 0;
        for (ulong seed = (ulong)firstSeed; seed < (ulong)(firstSeed + seeds); seed++)
        {
            Scenario scenario = Scenario.ForFamily(family, seed);
            ProtocolOptions o = scenario.Protocol;
            var aside = new HashSet<NodeId>(); // incarnations with a copy begun and not ended
            var everAside = new HashSet<NodeId>();
            SimulationRun run = SimulationRun.Execute(seed, scenario, sim => sim.WriteObserver = (process, w) =>
            {
                if (w.Stage is HistoryStage.Begin or HistoryStage.Continue)
                {
                    parts++;
                    long bytes = w.Records.Sum(r => (long)r.Length);
                    largestPart = Math.Max(largestPart, bytes);
                    // What arrived since the last part: at most the part size, a chunk and the header more
                    // (each entry's record counted at most its payload and 64 bytes).
                    long bound = o.HistoryCopyPartBytes + o.HistoryChunkBytes + 64L * (1 + w.Records.Count) + 4096;
                    if (bytes > bound) failures.Add($"seed {seed}: {process} wrote a part of {bytes} bytes, more than {bound}");
                    aside.Add(process);
                    everAside.Add(process);
                }
                else if (w.Stage == HistoryStage.Commit)
                {
                    commits++;
                    if (!aside.Remove(process)) failures.Add($"seed {seed}: {process} ended a copy it had not begun");
                }
            });
            if (!run.Passed) failures.Add(run.Report);
            var events = run.History.Events;
            // A crash of an incarnation with a copy aside: the copy was cut short (its next incarnation copies anew).
            crashedWithCopyAside += events.Count(e => e.Kind == HistoryEventKind.Crash && aside.Contains(e.Process));
            // Slices: a process hands over at most one slice per step, and its steps have distinct times.
            foreach (var replay in events.Where(e => e.Kind == HistoryEventKind.Replay).GroupBy(e => e.Process))
            {
                // A member that leaves during its replay hands the rest over at once, before GroupLeft (the group goes with that step).
                var leftAt = events.Where(e => e.Kind == HistoryEventKind.LeaveCompleted && e.Process == replay.Key).Select(e => e.Time).ToHashSet();
                var perStep = replay.GroupBy(e => e.Time).Where(g => !leftAt.Contains(g.Key)).Select(g => g.Count()).ToList();
                slices += perStep.Count;
                if (perStep.Count > 1) slicedReplays++;
                foreach (int n in perStep.Where(n => n > o.HistoryReplaySliceEntries))
                {
                    failures.Add($"seed {seed}: {replay.Key} replayed {n} entries in one step, more than {o.HistoryReplaySliceEntries}");
                }
                bool ended = events.Any(e => e.Kind == HistoryEventKind.HistoryHeld && e.Process == replay.Key);
                if (!ended) cutReplays++;
            }
        }
        output.WriteLine($"{family} seeds {firstSeed}..{firstSeed + seeds - 1}: {parts} parts written aside (largest {largestPart} bytes), {commits} copies ended by a rename, " +
                         $"{crashedWithCopyAside} crashes with a copy aside; {slices} replay slices, {slicedReplays} replays in several slices, {cutReplays} cut short by a crash");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(slicedReplays >= seeds, $"only {slicedReplays} replays took several slices in {seeds} runs");
        if (family == "disk-chaos")
        {
            Assert.True(commits >= seeds / 2, $"only {commits} copies ended by a rename of parts written aside in {seeds} runs");
            Assert.True(crashedWithCopyAside >= 1, "no crash struck a member with a copy aside");
        }
    }

    /// <summary>
    /// The rule the slices add: what happens during a replay waits behind its last slice. Broken
    /// (the mutation hands live deliveries over between slices), a member delivers this view's
    /// messages before it has seen the whole history, which RecoveredHistory reports.
    /// </summary>
    [Fact]
    public void Handing_live_messages_over_before_the_replay_ends_is_caught()
    {
        const int Seeds = 40;
        var caught = new List<ulong>();
        for (ulong seed = 0; seed < Seeds; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "disk-chaos", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.LiveBeforeReplayEnds } });
            if (run.Result.Violates("RecoveredHistory")) caught.Add(seed);
        }
        output.WriteLine($"LiveBeforeReplayEnds caught in {caught.Count} of {Seeds} disk-chaos seeds: {string.Join(", ", caught)}");
        Assert.True(caught.Count >= Seeds / 4, $"the checker caught LiveBeforeReplayEnds in only {caught.Count} of {Seeds} seeds");
    }
}
