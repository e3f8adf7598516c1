using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// SafeSend with disk durability in the simulator: every member keeps the history on a disk that
/// survives its crashes; whole groups crash and restart in random orders and subsets, some members
/// crash again during the recovery, and the checker's RecoveredHistory property requires that no
/// committed SafeSend is lost, invented, duplicated or reordered.
/// </summary>
public sealed class DurableHistoryScenarioTests(ITestOutputHelper output)
{
    [Fact]
    public void Whole_group_restarts_in_random_orders_and_subsets_keep_every_committed_SafeSend_in_order()
    {
        int recovered = 0, crashedDuringRecovery = 0, restoredRuns = 0;
        var failures = new List<string>();
        for (ulong seed = 0; seed < 120; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "whole-restart");
            if (!run.Passed) failures.Add(run.Report);
            // A recovery: some incarnation replayed a non-empty history after every process crashed.
            var events = run.History.Events;
            int lastWholeCrash = -1;
            for (int i = 0; i < events.Count; i++)
            {
                bool first = events[i].Kind is HistoryEventKind.Replay or HistoryEventKind.Restore && events[i].LogIndex == 1;
                if (first && lastWholeCrash >= 0 && i > lastWholeCrash) { recovered++; break; }
                if (events[i].Kind == HistoryEventKind.Crash) lastWholeCrash = i;
            }
            // An incarnation that asked to join after the crash and crashed before it replayed anything.
            var replayed = events.Where(e => e.Kind is HistoryEventKind.Replay or HistoryEventKind.Restore).Select(e => e.Process).ToHashSet();
            if (events.Any(e => e.Kind == HistoryEventKind.Restore)) restoredRuns++;
            var joined = events.Where(e => e.Kind == HistoryEventKind.JoinRequested).Select(e => e.Process).ToHashSet();
            if (events.Any(e => e.Kind == HistoryEventKind.Crash && joined.Contains(e.Process) && !replayed.Contains(e.Process) && e.Process.Incarnation > 1)) crashedDuringRecovery++;
        }
        output.WriteLine($"{recovered} of 120 runs recovered a history after a whole-group crash; {crashedDuringRecovery} had a member crash before it held the history; " +
                         $"in {restoredRuns} members restored persistent checkpoints and replayed only the entries after them");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(recovered >= 100, $"only {recovered} of 120 runs recovered a history");
        Assert.True(crashedDuringRecovery >= 10, $"only {crashedDuringRecovery} of 120 runs crashed a member during a recovery");
        Assert.True(restoredRuns >= 30, $"only {restoredRuns} of 120 runs restored a persistent checkpoint");
    }

    [Fact]
    public void A_restart_that_replays_from_past_where_its_checkpoint_ends_skips_a_SafeSend_and_the_checker_says_so()
    {
        var runs = Enumerable.Range(0, 40)
            .Select(seed => SimulationRun.Execute((ulong)seed, "whole-restart", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.RestoreSkipsAnEntry } }))
            .ToList();
        int withCheckpoints = runs.Count(r => r.History.Events.Any(e => e.Kind == HistoryEventKind.Restore));
        int caught = runs.Count(r => r.Result.Violates("RecoveredHistory"));
        output.WriteLine($"{caught} of the {withCheckpoints} seeds (of 40) that restored a checkpoint caught the mutation");
        Assert.True(withCheckpoints >= 10, $"only {withCheckpoints} of 40 seeds restored a checkpoint");
        Assert.True(caught >= withCheckpoints * 3 / 4, $"the checker caught the mutation in only {caught} of {withCheckpoints} seeds");
    }

    [Fact]
    public void SafeQueries_are_in_the_recovered_history_and_leaving_them_out_is_caught()
    {
        // SafeQuery has SafeSend's durability: its request joins the history, so a restart or a
        // joiner replays it in its place. The runs with the real protocol replay SafeQueries; the
        // same seeds with SafeQueries kept out of the log lose them, and RecoveredHistory says so.
        int replayedQueries = 0, withQueries = 0, caught = 0;
        var failures = new List<string>();
        for (ulong seed = 0; seed < 60; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "whole-restart", MoreSafeQueries);
            if (!run.Passed) failures.Add(run.Report);
            int queries = run.History.Events.Count(e => e.Kind == HistoryEventKind.Replay && e.IsQuery);
            replayedQueries += queries;
            if (queries == 0) continue;
            withQueries++;
            SimulationRun broken = SimulationRun.Execute(seed, "whole-restart",
                s => MoreSafeQueries(s) with { Protocol = s.Protocol with { Mutations = ProtocolMutations.SafeQueryNotLogged } });
            if (broken.Result.Violates("RecoveredHistory")) caught++;
        }
        // Joiners copy them too, under crashes, loss and leaves.
        int joinerQueries = 0;
        for (ulong seed = 0; seed < 40; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "disk-chaos", MoreSafeQueries);
            if (!run.Passed) failures.Add(run.Report);
            joinerQueries += run.History.Events.Count(e => e.Kind == HistoryEventKind.Replay && e.IsQuery);
        }
        output.WriteLine($"{replayedQueries} SafeQueries replayed in {withQueries} of 60 whole-restart runs; leaving them out of the log was caught in {caught} of those {withQueries} seeds; " +
                         $"{joinerQueries} SafeQueries replayed in 40 disk-chaos runs");
        Assert.True(joinerQueries >= 100, $"only {joinerQueries} SafeQueries were replayed in 40 disk-chaos runs");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(withQueries >= 20, $"only {withQueries} of 60 runs replayed a SafeQuery");
        Assert.True(caught >= withQueries * 3 / 4, $"the checker caught the mutation in only {caught} of {withQueries} seeds");
    }

    [Fact]
    public void A_crash_in_the_middle_of_a_steps_disk_writes_leaves_a_prefix_of_them_and_the_history_survives_it()
    {
        // disk-chaos crashes about half its victims while a step's records are being written
        // (Scenario.TornWrites, the rules of SimulatedDisk): a prefix of the appended records
        // survives (ending before the step's View record, if it has one), a rewrite whole or not
        // at all, and the step's packets never leave. Recovery,
        // copying and replay must take such logs as they are.
        int torn = 0, cutShort = 0;
        var failures = new List<string>();
        for (ulong seed = 0; seed < 60; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "disk-chaos");
            if (!run.Passed) failures.Add(run.Report);
            torn += run.Simulator.TornWriteCrashes;
            cutShort += run.Simulator.TornWritesCutShort;
        }
        output.WriteLine($"60 disk-chaos runs: {torn} crashes in the middle of a step's writes, {cutShort} of them kept some of its records but not all");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(torn >= 40, $"only {torn} crashes in the middle of writing in 60 runs");
        // (Fewer cut a step short than crash in one: most steps write one record, and a cut never keeps the step's View record.)
        Assert.True(cutShort >= 5, $"only {cutShort} torn steps kept a strict prefix in 60 runs");
    }

    [Fact]
    public void Logs_are_trimmed_behind_checkpoints_and_a_member_that_lacks_the_trimmed_part_copies_a_checkpoint_then_the_tail()
    {
        // With persistent checkpoints each member trims its log to the older of its two newest
        // checkpoints; a member that copies the history (a joiner, or a recovery after a total
        // crash) and has no checkpoint covering the source's trim point copies one first. Every
        // run must still pass every property, RecoveredHistory above all.
        int trims = 0, copies = 0, restoredCopies = 0, runs = 0;
        var failures = new List<string>();
        foreach (string family in new[] { "whole-restart", "disk-chaos" })
        {
            for (ulong seed = 0; seed < 80; seed++)
            {
                if (!Scenario.ForFamily(family, seed).PersistentCheckpoints) continue;
                runs++;
                SimulationRun run = SimulationRun.Execute(seed, Scenario.ForFamily(family, seed), sim => sim.Observer = (_, e) =>
                {
                    if (e is HistoryTrimmed) trims++;
                    if (e is CheckpointChunkReceived { Offset: 0 }) copies++;
                    if (e is CheckpointRestored r && r.Checkpoint.Name.Contains("#copy", StringComparison.Ordinal)) restoredCopies++;
                });
                if (!run.Passed) failures.Add(run.Report);
            }
        }
        output.WriteLine($"{runs} runs with persistent checkpoints: {trims} trims, {copies} checkpoint copies started, {restoredCopies} copied checkpoints restored");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(trims >= 20 * runs, $"only {trims} trims in {runs} runs");
        Assert.True(copies >= runs, $"only {copies} checkpoint copies in {runs} runs");
        Assert.True(restoredCopies >= runs / 2, $"only {restoredCopies} copied checkpoints were restored in {runs} runs");
    }

    [Fact]
    public void Trimming_what_no_checkpoint_holds_is_caught()
    {
        // The mutation drops the whole log at each checkpoint: a member's log then starts past
        // every checkpoint it has, so the history cannot be rebuilt (the recovery waits and says
        // so, the group never delivers again) or a copy cannot be completed.
        int withCheckpoints = 0, caught = 0;
        foreach (string family in new[] { "whole-restart", "disk-chaos" })
        {
            for (ulong seed = 0; seed < 40; seed++)
            {
                if (!Scenario.ForFamily(family, seed).PersistentCheckpoints) continue;
                withCheckpoints++;
                SimulationRun run = SimulationRun.Execute(seed, family, s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.TrimPastCheckpoints } });
                if (!run.Passed) caught++;
            }
        }
        output.WriteLine($"the mutation was caught in {caught} of {withCheckpoints} seeds with persistent checkpoints");
        Assert.True(caught >= withCheckpoints * 3 / 4, $"the checker caught the mutation in only {caught} of {withCheckpoints} seeds");
    }

    [Fact]
    public void Reusing_a_payload_slab_before_the_trim_point_passes_it_is_caught()
    {
        // The mutation reuses every filled slab of history payloads at each trim: a member that then
        // copies the history pulls entries whose bytes are another SafeSend's, and replays them.
        // Only runs with persistent checkpoints trim, and only a copy from a current member reads
        // what it holds in memory, so a share of the seeds see it.
        AssertRecoveredHistoryCatches(ProtocolMutations.SlabReusedBeforeTrim, "lost-disk", "history-refound");
    }

    [Fact]
    public void Keeping_a_returning_members_own_log_entries_without_comparing_them_with_the_pulled_ones_is_caught()
    {
        // A member coming back to a running group keeps its own log's entry where the source sends
        // the very same one. The mutation keeps its own unchecked: a log holding SafeSends the group
        // lost (their acceptors all delivered them and crashed, and the indices went to others)
        // puts them in the member's history.
        AssertRecoveredHistoryCatches(ProtocolMutations.OwnLogEntryUnchecked, "disk-chaos", "lost-disk");
    }

    /// <summary>Runs seeds 0..59 of each family with <paramref name="mutation"/>: RecoveredHistory must fail in at least 5 of them.</summary>
    private void AssertRecoveredHistoryCatches(ProtocolMutations mutation, params string[] families)
    {
        int caught = 0, runs = 0;
        foreach (string family in families)
        {
            for (ulong seed = 0; seed < 60; seed++)
            {
                runs++;
                SimulationRun run = SimulationRun.Execute(seed, family, s => s with { Protocol = s.Protocol with { Mutations = mutation } });
                if (run.Result.Violates("RecoveredHistory")) caught++;
            }
        }
        output.WriteLine($"{mutation} was caught in {caught} of {runs} seeds");
        Assert.True(caught >= 5, $"the checker caught {mutation} in only {caught} of {runs} seeds");
    }

    private static Scenario MoreSafeQueries(Scenario s) => s with { QueryChance = 0.3 };

    [Fact]
    public void Recovering_from_the_oldest_restarted_members_log_alone_loses_acknowledged_SafeSends_and_the_checker_says_so()
    {
        // Today's bug before this design: the oldest member of the first view after a restart
        // replayed its own log, without waiting for the members of the last view.
        var runs = Enumerable.Range(0, 100)
            .Select(seed => SimulationRun.Execute((ulong)seed, "whole-restart", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.RecoverFromOldestOnly } }))
            .ToList();
        int caught = runs.Count(r => r.Result.Violates("RecoveredHistory"));
        output.WriteLine($"{caught} of 100 seeds caught the mutation");
        Assert.True(caught >= 10, $"the checker caught the mutation in only {caught} of 100 seeds");
        // The same seeds with the real protocol pass (the family also runs in the seeded batches).
        Assert.All(runs.Where(r => r.Result.Violates("RecoveredHistory")).Take(5).Select(r => SimulationRun.Execute(r.Simulator.Seed, "whole-restart")), r => Assert.True(r.Passed, r.Report));
    }

    [Fact]
    public void Joiners_copy_the_history_under_crashes_loss_and_leaves()
    {
        var failures = new List<string>();
        int transfers = 0;
        for (ulong seed = 0; seed < 80; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "disk-chaos");
            if (!run.Passed) failures.Add(run.Report);
            transfers += run.History.Events.Count(e => e.Kind is HistoryEventKind.Replay or HistoryEventKind.Restore && e.LogIndex == 1);
        }
        output.WriteLine($"{transfers} histories replayed over 80 runs");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(transfers >= 200, $"only {transfers} histories were replayed in 80 runs");
    }

    [Fact]
    public void A_checkpoint_holding_SafeSends_the_group_lost_is_never_restored()
    {
        // disk-chaos seed 29: s5#1 sends SafeSends of phi 2 in view 4; both acceptors, s5#1 and
        // s1#1, deliver them and crash before the flush, so the group loses them (all their
        // acceptors failed) and gives their indices to other SafeSends. s1#1's persistent checkpoint
        // already held them: same lineage, an index within the history, but not a prefix of it. Its
        // next incarnations must find that out from the checkpoint's history digest and not restore
        // it; restoring it on lineage and index alone (the mutation) leaves s1's state with SafeSends
        // nobody else has, and the checker sees two histories.
        const ulong seed = 29;
        var (run, rejected) = Observe(seed, ProtocolMutations.None);
        Assert.True(run.Passed, run.Report);
        Assert.True(rejected > 0, "no checkpoint was found not to hold a prefix: the seed no longer reaches the lost SafeSends");

        var (broken, brokenRejected) = Observe(seed, ProtocolMutations.CheckpointPrefixUnchecked);
        Assert.True(broken.Result.Violates("RecoveredHistory"), broken.Report);
        Assert.Equal(0, brokenRejected);
    }

    private static (SimulationRun Run, int Rejected) Observe(ulong seed, ProtocolMutations mutations)
    {
        int rejected = 0;
        Scenario scenario = Scenario.ForFamily("disk-chaos", seed);
        scenario = scenario with { Protocol = scenario.Protocol with { Mutations = mutations } };
        SimulationRun run = SimulationRun.Execute(seed, scenario, sim => sim.Observer = (_, e) =>
        {
            if (e is HistoryNotice { Kind: HistoryNoticeKind.CheckpointNotUsed } n && n.Text.Contains("does not hold a prefix", StringComparison.Ordinal)) rejected++;
        });
        return (run, rejected);
    }
}
