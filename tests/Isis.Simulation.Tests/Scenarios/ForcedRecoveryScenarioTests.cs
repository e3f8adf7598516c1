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
                case HistoryNotice { Kind: HistoryNoticeKind.ForeignLog } n when n.Text.Contains("gave up", StringComparison.Ordinal): GivenUpLogsKept++; break;
                case HistoryNotice { Kind: HistoryNoticeKind.CheckpointNotUsed } n when n.Text.Contains("gave up", StringComparison.Ordinal): GivenUpCheckpointsIgnored++; break;
            }
        }
    }

    [Fact]
    public void A_forced_recovery_loses_only_what_the_given_up_members_alone_delivered_and_never_takes_their_logs_back()
    {
        var counts = new Counts();
        var failures = new List<string>();
        int runs = 0;
        for (ulong seed = 0; seed < 120; seed++)
        {
            runs++;
            SimulationRun run = SimulationRun.Execute(seed, Scenario.ForFamily("lost-disk", seed), sim => sim.Observer = (_, e) => counts.Observe(e));
            if (!run.Passed) failures.Add(run.Report);
        }
        // A lost disk that was not the first member's needs no force when the service remembers the
        // last view (the auto-recover family): those members recovered on their own.
        output.WriteLine($"{runs} lost-disk runs: {counts.Forced} members recovered by force without a member of the last view, {counts.Founded} founded anew by force, " +
                         $"{counts.OnTheirOwn} recovered on their own without a member whose disk was lost; " +
                         $"{counts.GivenUpLogsKept} given-up logs kept aside, {counts.GivenUpCheckpointsIgnored} members ignored given-up checkpoints");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(counts.Forced >= runs, $"only {counts.Forced} forced recoveries in {runs} runs");
        Assert.True(counts.GivenUpLogsKept >= runs / 4, $"only {counts.GivenUpLogsKept} given-up logs kept aside in {runs} runs");
        Assert.True(counts.GivenUpCheckpointsIgnored >= runs / 8, $"only {counts.GivenUpCheckpointsIgnored} given-up members ignored their checkpoints in {runs} runs");
    }

    [Fact]
    public void A_given_up_member_that_restores_its_own_checkpoint_brings_back_what_the_group_lost_and_the_checker_says_so()
    {
        // The mutation lets a given-up member use what it kept. Its application checkpointed after
        // delivering SafeSends of phi 1 alone (the lost-disk family makes it do so as it goes
        // down), so when it comes back soon after the forced recovery its checkpoint holds entries
        // the group replaced: two histories. Few seeds line this up (the group must not have
        // trimmed past that checkpoint yet when it rejoins); the same seeds pass without the mutation.
        var caught = Enumerable.Range(0, 120)
            .Where(seed => SimulationRun.Execute((ulong)seed, "lost-disk", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.GivenUpHistoryUsed } })
                .Result.Violates("RecoveredHistory"))
            .ToList();
        output.WriteLine($"the mutation was caught in {caught.Count} of 120 seeds: {string.Join(", ", caught)}");
        Assert.True(caught.Count >= 4, $"the checker caught the mutation in only {caught.Count} of 120 seeds");
    }
}
