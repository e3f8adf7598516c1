using Isis.Core.Durability;
using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Forced recovery of the durable history (the lost-disk family): at each whole-group crash one
/// member's disk is lost for good or stays away until the heal, and once every other process is
/// back the operator forces the recovery at a member that waits. The checker's RecoveredHistory
/// then allows exactly one loss: SafeSends that only given-up incarnations delivered. A given-up
/// member that comes back copies the group's history; its own log and checkpoints are never used.
/// </summary>
public sealed class ForcedRecoveryScenarioTests(ITestOutputHelper output)
{
    private sealed class Counts
    {
        public int Forced, Founded, OnTheirOwn, GivenUpLogsKept, GivenUpCheckpointsIgnored;

        public void Observe(NodeEvent e)
        {
            switch (e)
            {
                case HistoryRecoveredWithout { Reason: HistoryRecovery.ProvedComplete }: OnTheirOwn++; break;
                case HistoryRecoveredWithout { Missing.Length: > 0 }: Forced++; break;
                case HistoryRecoveredWithout: Founded++; break;
                case HistoryNotice { Kind: HistoryNoticeKind.GivenUpLog }: GivenUpLogsKept++; break;
                case HistoryNotice { Kind: HistoryNoticeKind.CheckpointNotUsed } n when n.Text.Contains("gave up", StringComparison.Ordinal): GivenUpCheckpointsIgnored++; break;
            }
        }
    }

    [Fact]
    public void A_forced_recovery_loses_only_what_the_given_up_members_alone_delivered_and_never_takes_their_logs_back()
    {
        var counts = new Counts();
        var failures = new List<string>();
        int runs = 0, wiped = 0;
        for (ulong seed = 0; seed < 120; seed++)
        {
            runs++;
            SimulationRun run = SimulationRun.Execute(seed, Scenario.ForFamily("lost-disk", seed), sim => sim.Observer = (_, e) => counts.Observe(e));
            if (!run.Passed) failures.Add(run.Report);
            // A disk drawn to be lost for good is lost: wiped once its process is down (it goes down
            // last, after the others; the wipe once came too early, found it alive and was skipped).
            if (run.Simulator.DisksToWipe != run.Simulator.DisksWiped) failures.Add($"seed {seed}: {run.Simulator.DisksToWipe} disks to lose, {run.Simulator.DisksWiped} wiped");
            if (run.Simulator.DisksWiped > 0) wiped++;
        }
        // A lost disk that was not the first member's needs no force when the service remembers the
        // last view (the auto-recover family): those members recovered on their own.
        output.WriteLine($"{runs} lost-disk runs: {counts.Forced} members recovered by force without a member of the last view, {counts.Founded} founded anew by force, " +
                         $"{counts.OnTheirOwn} recovered on their own without a member whose disk was lost; " +
                         $"{counts.GivenUpLogsKept} given-up logs kept aside, {counts.GivenUpCheckpointsIgnored} members ignored given-up checkpoints; " +
                         $"{wiped} runs lost a disk for good");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(counts.Forced >= runs, $"only {counts.Forced} forced recoveries in {runs} runs");
        Assert.True(wiped >= runs / 6, $"only {wiped} of {runs} runs lost a disk for good");
        Assert.True(counts.GivenUpLogsKept >= runs / 4, $"only {counts.GivenUpLogsKept} given-up logs kept aside in {runs} runs");
        Assert.True(counts.GivenUpCheckpointsIgnored >= runs / 8, $"only {counts.GivenUpCheckpointsIgnored} given-up members ignored their checkpoints in {runs} runs");
    }

    [Fact]
    public void A_given_up_member_that_copied_the_history_writes_a_log_that_no_later_recovery_takes_for_a_given_up_one()
    {
        // Its old log is kept aside; the log it writes as it copies the history is the group's, so
        // it must not name the given-up incarnation (a later recovery would never count that log,
        // and would wait for, or give up, SafeSends it alone holds).
        int copied = 0;
        for (ulong seed = 0; seed < 60; seed++)
        {
            var keptAside = new HashSet<ulong>();
            SimulationRun run = SimulationRun.Execute(seed, Scenario.ForFamily("lost-disk", seed), sim => sim.Observer = (node, e) =>
            {
                if (e is HistoryNotice { Kind: HistoryNoticeKind.GivenUpLog }) keptAside.Add(node.Endpoint);
            });
            Assert.True(run.Passed, run.Report);
            for (int i = 0; i < run.Simulator.Scenario.Processes; i++)
            {
                if (run.Simulator.NodeOf(i) is not { } node || !keptAside.Contains(node.Self.Endpoint)) continue;
                HistoryLogImage log = run.Simulator.LogOnDisk(i);
                if (log.LastView == null) continue; // crashed again before it held the history
                copied++;
                Assert.True(log.GaveUp.Count > 0, $"seed {seed}: {node.Self}'s log names no give-up");
                Assert.DoesNotContain(log.Incarnations, log.GaveUp.Contains);
            }
        }
        output.WriteLine($"{copied} given-up members held the history by a log of their own at the end of 60 lost-disk runs");
        Assert.True(copied >= 5, $"only {copied} given-up members copied the history");
    }

    [Fact]
    public void A_given_up_member_that_restores_its_own_checkpoint_brings_back_what_the_group_lost_and_the_checker_says_so()
    {
        // The mutation lets a given-up member use what it kept. Its application checkpointed after
        // delivering SafeSends of phi 1 alone (the lost-disk family makes it do so as it goes
        // down), so when it comes back soon after the forced recovery its checkpoint holds entries
        // the group replaced: two histories. Few seeds line this up (the group must not have
        // trimmed past that checkpoint yet when it rejoins); the same seeds pass without the mutation.
        // Such a checkpoint also fails the history digest (it holds other SafeSends at its index, or
        // will once the history reaches it), so the digest check is switched off too: with it on,
        // the given-up rule alone may go and nothing is restored that the group lost.
        const ProtocolMutations bothOff = ProtocolMutations.GivenUpHistoryUsed | ProtocolMutations.CheckpointPrefixUnchecked;
        var caught = Enumerable.Range(0, 120)
            .Where(seed => SimulationRun.Execute((ulong)seed, "lost-disk", s => s with { Protocol = s.Protocol with { Mutations = bothOff } })
                .Result.Violates("RecoveredHistory"))
            .ToList();
        output.WriteLine($"the mutation was caught in {caught.Count} of 120 seeds: {string.Join(", ", caught)}");
        Assert.True(caught.Count >= 4, $"the checker caught the mutation in only {caught.Count} of 120 seeds");
        Assert.All(caught.Take(4), seed =>
        {
            SimulationRun digestOnly = SimulationRun.Execute((ulong)seed, "lost-disk", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.GivenUpHistoryUsed } });
            Assert.False(digestOnly.Result.Violates("RecoveredHistory"), digestOnly.Report);
        });
    }
    [Theory]
    [InlineData(66ul)]
    [InlineData(679ul)]
    public void A_forced_plan_that_a_view_change_voided_gives_nobody_up_once_the_missing_member_is_back(ulong seed)
    {
        // lost-disk: the first acceptor keeps its disk and comes back around the operator's force.
        // In these seeds the forced plan (decided without it) is voided by the view change that
        // brings it in before anyone holds the history by the plan: the next view's recovery counts
        // its log again, so nobody is given up and no log is kept aside. Taking the voided plan's
        // give-ups for good (the mutation) keeps the returning member's log aside, though no forced
        // recovery ever gave it up, and the checker sees that (what only that log held would be
        // dropped silently: lost-disk seed 1164 once lost a burst of SafeSends of phi 1 that way).
        var (run, forcedPlans, forcedRecoveries, logsKeptAside) = Observe(seed, ProtocolMutations.None);
        Assert.True(run.Passed, run.Report);
        Assert.True(forcedPlans > 0, "no member followed a forced plan: the seed no longer reaches the voided plan");
        Assert.Equal(0, forcedRecoveries);
        Assert.Equal(0, logsKeptAside);

        var (broken, _, brokenForced, brokenKeptAside) = Observe(seed, ProtocolMutations.VoidedPlanGivesUp);
        Assert.True(broken.Result.Violates("RecoveredHistory"), broken.Report);
        Assert.Equal(0, brokenForced); // the loss is not even reported as a forced recovery
        Assert.True(brokenKeptAside > 0, "the returning member's log was not kept aside under the mutation");
    }

    private static (SimulationRun Run, int ForcedPlans, int ForcedRecoveries, int LogsKeptAside) Observe(ulong seed, ProtocolMutations mutations)
    {
        int forcedPlans = 0, forcedRecoveries = 0, logsKeptAside = 0;
        var followed = new HashSet<(string, int)>();
        Scenario scenario = Scenario.ForFamily("lost-disk", seed);
        scenario = scenario with { Protocol = scenario.Protocol with { Mutations = mutations } };
        SimulationRun run = SimulationRun.Execute(seed, scenario, sim =>
        {
            sim.Observer = (_, e) =>
            {
                switch (e)
                {
                    case HistoryRecoveredWithout { Missing.Length: > 0 }: forcedRecoveries++; break;
                    case HistoryNotice { Kind: HistoryNoticeKind.GivenUpLog }: logsKeptAside++; break;
                }
            };
            void Poll()
            {
                for (int i = 0; i < sim.Scenario.Processes; i++)
                {
                    if (sim.NodeOf(i) is not { IsShutDown: false } node) continue;
                    foreach (var g in node.Groups)
                    {
                        if (g.History?.Plan is { Reason: HistoryRecovery.Forced } && g.View is { } v && followed.Add((node.Self.ToString(), v.Id))) forcedPlans++;
                    }
                }
                if (sim.Now < 4_000_000) sim.Schedule(sim.Now + 1_000, Poll);
            }
            sim.Schedule(0, Poll);
        });
        return (run, forcedPlans, forcedRecoveries, logsKeptAside);
    }
}
