using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Keyed groups through the simulator: a system key and a group key at every process, and an
/// attacker on the network that replays captured packets and forges Data packets in members' names.
/// Every run must pass the checker (a forgery that got through would be a delivery of a payload
/// nobody sent); the mutation test shows that the checker sees it when authentication is skipped.
/// </summary>
public sealed class SecuredScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 40;

    public static IEnumerable<object[]> Families() => Scenario.SecuredFamilies.Select(f => new object[] { f });

    [Theory]
    [MemberData(nameof(Families))]
    public void Keyed_groups_under_replays_and_forgeries_keep_every_guarantee(string family)
    {
        long forgeries = 0, replays = 0, withOldKeys = 0, rotations = 0;
        SeedSweep.AllPass(output, SeedSweep.Range(0, Seeds), seed => SimulationRun.Execute(seed, Scenario.ForFamily(family, seed)), run =>
        {
            forgeries += run.Simulator.AttackerSent.Forgeries;
            replays += run.Simulator.AttackerSent.Replays;
            withOldKeys += run.Simulator.OldKeyForgeriesSent;
            rotations += run.Simulator.KeyRotationsCompleted;
        });
        output.WriteLine($"the attacker sent {forgeries} forgeries ({withOldKeys} sealed with keys the group had retired) and {replays} replays; the groups rotated their key {rotations} times");
        Assert.True(forgeries > Seeds && replays > Seeds, $"the attacker sent only {forgeries} forgeries and {replays} replays");
        Assert.True(rotations >= Seeds / 2, $"the groups rotated their key only {rotations} times in {Seeds} runs");
        Assert.True(withOldKeys > 0, "no forgery was sealed with a retired key");
    }

    [Fact]
    public void A_key_that_never_retires_after_a_rotation_lets_forgeries_with_it_through_and_is_caught()
    {
        var runs = Enumerable.Range(0, 60)
            .Select(seed => SimulationRun.Execute((ulong)seed, "secured", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.RetiredKeyStillOpens } }))
            .ToList();
        int caught = runs.Count(r => !r.Passed);
        long withOldKeys = runs.Sum(r => r.Simulator.OldKeyForgeriesSent);
        output.WriteLine($"caught in {caught} of {runs.Count} seeds ({withOldKeys} forgeries sealed with retired keys)");
        Assert.True(caught >= 4, $"caught in only {caught} of {runs.Count} seeds");
    }

    [Fact]
    public void Taking_packets_that_do_not_authenticate_is_caught()
    {
        var runs = Enumerable.Range(0, 20)
            .Select(seed => SimulationRun.Execute((ulong)seed, "secured", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.AcceptUnauthenticated } }))
            .ToList();
        int caught = runs.Count(r => !r.Passed);
        output.WriteLine($"caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count / 2, $"caught in only {caught} of {runs.Count} seeds");
    }
}
