using Isis.Core.Durability;
using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Recovery of the durable history without the operator (the auto-recover family): the whole
/// group crashes while the membership service stays up, and a member of the last view other than
/// its first never brings its log back. In some runs the first member stays away until the heal
/// after delivering SafeSends of phi 1 alone; in others the member that never brings its log back
/// first outlives the rest and delivers alone in a view of its own (it then keeps its disk and
/// returns at the heal). The group recovers on its own exactly when the service's last view is the
/// last view the logs name and the first member is back; the checker's RecoveredHistory allows no
/// loss at all (no ForcedRecovery event excuses any).
/// </summary>
public sealed class AutoRecoveryScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 60;

    [Fact]
    public void A_group_recovers_on_its_own_without_a_member_that_never_returns_when_nothing_can_be_lost_and_waits_otherwise()
    {
        var failures = new List<string>();
        int onTheirOwn = 0, firstAway = 0, loneSurvivor = 0, forced = 0;
        for (ulong seed = 0; seed < Seeds; seed++)
        {
            bool provedComplete = false;
            SimulationRun run = SimulationRun.Execute(seed, Scenario.ForFamily("auto-recover", seed), sim => sim.Observer = (_, e) =>
            {
                if (e is HistoryRecoveredWithout { Reason: HistoryRecovery.ProvedComplete, Missing.Length: > 0 }) provedComplete = true;
                else if (e is HistoryRecoveredWithout) forced++;
            });
            if (!run.Passed) failures.Add(run.Report);
            // The disk drawn to be lost for good is lost: wiped once its process is down.
            if (run.Simulator.DisksWiped != run.Simulator.DisksToWipe) failures.Add($"seed {seed}: {run.Simulator.DisksToWipe} disks to lose, {run.Simulator.DisksWiped} wiped");
            if (!run.Simulator.LoneSurvivorCarriedOn && run.Simulator.DisksWiped == 0) failures.Add($"seed {seed}: no disk lost for good, and no member carried the group on alone");
            if (run.Simulator.FirstAcceptorStayedAway) firstAway++;
            if (run.Simulator.LoneSurvivorCarriedOn)
            {
                // Its later view is the service's last, not the one the others' logs name: the
                // group waited for it (it came back at the heal), and the recovery needed nobody missing.
                loneSurvivor++;
                if (provedComplete) failures.Add($"seed {seed}: recovered without the member that carried the group on alone");
            }
            else if (provedComplete)
            {
                onTheirOwn++;
            }
        }
        output.WriteLine($"{onTheirOwn} of {Seeds} auto-recover runs recovered on their own without a member of the last view " +
                         $"(in {firstAway} only once the first member came back at the heal); in {loneSurvivor} a member carried the group on alone and the group waited for it");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.Equal(0, forced);
        // The member whose disk is lost never brings its log back, so every other run that
        // recovered at all (Liveness passed) recovered this way.
        Assert.Equal(Seeds - loneSurvivor, onTheirOwn);
        Assert.True(firstAway >= Seeds / 5, $"the first member stayed away in only {firstAway} of {Seeds} runs");
        Assert.True(loneSurvivor >= Seeds / 8, $"a member carried the group on alone in only {loneSurvivor} of {Seeds} runs");
    }

    [Theory]
    [InlineData(nameof(ProtocolMutations.AutoRecoverWithoutFirstAcceptor))] // loses what the first member delivered alone
    [InlineData(nameof(ProtocolMutations.AutoRecoverPastLastView))]         // loses what a member delivered alone in a later view
    public void Recovering_on_its_own_where_a_missing_member_may_hold_SafeSends_the_others_lack_is_caught(string mutationName)
    {
        var mutation = Enum.Parse<ProtocolMutations>(mutationName);
        // The same seeds pass with the real rule (above); these recover early, and the checker sees
        // a history without SafeSends that were delivered, or two histories, once the member that
        // held them comes back at the heal.
        var caught = Enumerable.Range(0, Seeds)
            .Where(seed => SimulationRun.Execute((ulong)seed, "auto-recover", s => s with { Protocol = s.Protocol with { Mutations = mutation } })
                .Result.Violates("RecoveredHistory"))
            .ToList();
        output.WriteLine($"{mutation} was caught in {caught.Count} of {Seeds} seeds: {string.Join(", ", caught)}");
        Assert.True(caught.Count >= 5, $"the checker caught {mutation} in only {caught.Count} of {Seeds} seeds");
    }
}
