using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// Groups whose data goes by IP multicast, through the simulator: the membership service
/// allocates the address with the view, each receiver's copy is lost, duplicated and delayed on
/// its own, and repairs come by unicast. Every run must pass the checker, and must really have
/// multicast.
/// </summary>
public sealed class MulticastScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 60;

    public static IEnumerable<object[]> Families() => Scenario.MulticastFamilies.Select(f => new object[] { f });

    [Theory]
    [MemberData(nameof(Families))]
    public void Multicast_groups_under_loss_crashes_and_partitions_keep_every_guarantee(string family)
    {
        long copies = 0, lost = 0;
        SeedSweep.AllPass(output, SeedSweep.Range(0, Seeds), seed => SimulationRun.Execute(seed, Scenario.ForFamily(family, seed)), run =>
        {
            Assert.True(run.Simulator.Network.MulticastCopies > 0, $"seed {run.Simulator.Seed}: no multicast was sent");
            copies += run.Simulator.Network.MulticastCopies;
            lost += run.Simulator.Network.Lost;
        });
        output.WriteLine($"{family}: {copies} multicast copies delivered or lost on their own; {lost} packets lost in all");
    }

    [Fact]
    public void With_multicast_a_group_sends_fewer_packets_for_the_same_run()
    {
        for (ulong seed = 0; seed < 10; seed++)
        {
            Scenario unicast = Scenario.ForFamily("steady", seed) with { Processes = 6 };
            Scenario multicast = unicast with { Protocol = unicast.Protocol with { Multicast = Scenario.SimulatedMulticast } };
            SimulationRun u = SimulationRun.Execute(seed, unicast), m = SimulationRun.Execute(seed, multicast);
            Assert.True(u.Passed && m.Passed, u.Report + m.Report);
            output.WriteLine($"seed {seed}: unicast {u.Simulator.Network.Sent} packets, multicast {m.Simulator.Network.Sent} packets ({m.Simulator.Network.MulticastCopies} copies)");
            // Six members: each Send is one datagram instead of five.
            Assert.True(m.Simulator.Network.Sent < u.Simulator.Network.Sent * 0.8, $"seed {seed}: {m.Simulator.Network.Sent} packets with multicast, {u.Simulator.Network.Sent} without");
        }
    }
}
