using BenchmarkDotNet.Attributes;
using Isis.Simulation;

namespace Isis.Benchmarks;

/// <summary>
/// The deterministic simulator running a steady 5-member group (no faults) for 1 s of virtual time:
/// 5 processes start within the first 300 ms, join, and send with the scenario's workload; history
/// recording included, checking excluded. Tells how many seeds per second CI can afford.
/// </summary>
public class SimulatorBenchmarks
{
    private static readonly Scenario Steady5 = Scenario.ForFamily("steady", 1) with
    {
        Processes = 5,
        FaultPhase = 500_000,
        HealPhase = 500_000,
    };

    [Params(1UL)]
    public ulong Seed { get; set; }

    [Benchmark]
    public int Steady5Members_1sVirtual()
    {
        var simulator = new Simulator(Seed, Steady5);
        return simulator.Run().Count;
    }
}
