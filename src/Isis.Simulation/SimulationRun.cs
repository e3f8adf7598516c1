using System.Text;
using Isis.Simulation.Checking;

namespace Isis.Simulation;

/// <summary>One seed run through the simulator and checked: what tests and the CLI both use.</summary>
internal sealed class SimulationRun
{
    private SimulationRun(Simulator simulator, History history, CheckResult result)
    {
        Simulator = simulator;
        History = history;
        Result = result;
    }

    public Simulator Simulator { get; }

    public History History { get; }

    public CheckResult Result { get; }

    public bool Passed => Result.Passed;

    /// <summary>Runs <paramref name="seed"/> in its own scenario family, or in <paramref name="family"/> if given.</summary>
    public static SimulationRun Execute(ulong seed, string? family = null, Func<Scenario, Scenario>? adjust = null)
    {
        Scenario scenario = family == null ? Scenario.FromSeed(seed) : Scenario.ForFamily(family, seed);
        if (adjust != null) scenario = adjust(scenario);
        return Execute(seed, scenario);
    }

    /// <param name="seed">Decides every coin flip.</param>
    /// <param name="scenario">The processes, faults and durations.</param>
    /// <param name="prepare">Called with the simulator before it runs (to set an <see cref="Simulator.Observer"/>, say).</param>
    public static SimulationRun Execute(ulong seed, Scenario scenario, Action<Simulator>? prepare = null)
    {
        var simulator = new Simulator(seed, scenario);
        prepare?.Invoke(simulator);
        History history;
        string? invariant = null;
        try
        {
            history = simulator.Run();
        }
        catch (Isis.Core.Common.ProtocolInvariantException e)
        {
            // A node stopped on a broken invariant: check what happened up to there, and report both.
            invariant = e.Message + Environment.NewLine + simulator.DescribeMembers();
            history = simulator.History;
        }
        CheckResult result = HistoryChecker.Check(history);
        if (invariant != null)
        {
            result = new CheckResult([new Violation("ProtocolInvariant", $"at {simulator.Now} us: {invariant}"), .. result.Violations], result.EventCount);
        }
        return new SimulationRun(simulator, history, result);
    }

    /// <summary>One line: seed, scenario, verdict, and how to replay it.</summary>
    public string Summary
    {
        get
        {
            var n = Simulator.Network;
            string verdict = Passed ? "ok" : $"FAILED ({Result.Violations.Count} violations: {Result.Violations[0]})";
            return $"seed {Simulator.Seed} {Simulator.Scenario.Name} n={Simulator.Scenario.Processes}: {verdict}; " +
                   $"{History.Count} events, {n.Sent} packets ({n.Lost} lost, {n.Duplicated} duplicated, {n.Partitioned} cut)" +
                   (Simulator.Scenario.Collections ? $", {Simulator.CollectionStalls} handler stalls, {Simulator.CollectionRepairs} repairs" : "") +
                   (Passed ? "" : $"; replay: {Simulator.ReplayCommand}");
        }
    }

    /// <summary>The summary plus every violation.</summary>
    public string Report
    {
        get
        {
            var sb = new StringBuilder(Summary).AppendLine();
            foreach (Violation v in Result.Violations.Take(50)) sb.Append("  ").AppendLine(v.ToString());
            if (!Passed) sb.AppendLine("live members at the end:").AppendLine(Simulator.DescribeMembers());
            return sb.ToString();
        }
    }
}
