using System.Text.RegularExpressions;

namespace Isis.Tests.Api;

/// <summary>
/// The driver contract is coded once (src/Isis.Core/Node/NodeStep.cs): these checks read the
/// sources, so a driver that starts reading a node's outputs on its own, or advancing it, fails here.
/// </summary>
public sealed class DriverContractTests
{
    private static IEnumerable<(string Path, string Text)> Sources()
    {
        foreach (string folder in (string[])["src", "tools", "tests", "benchmarks", "samples"])
        {
            foreach (string file in Directory.EnumerateFiles(Path.Combine(RepoPaths.Root, folder), "*.cs", SearchOption.AllDirectories))
            {
                string relative = Path.GetRelativePath(RepoPaths.Root, file).Replace('\\', '/');
                if (relative.Contains("/obj/") || relative.Contains("/bin/")) continue;
                yield return (relative, File.ReadAllText(file));
            }
        }
    }

    [Fact]
    public void No_code_outside_the_core_touches_a_nodes_outbox()
    {
        var offenders = Sources()
            .Where(s => !s.Path.StartsWith("src/Isis.Core/", StringComparison.Ordinal) && Regex.IsMatch(s.Text, @"\." + "Outbox" + @"\b"))
            .Select(s => s.Path).ToList();
        Assert.True(offenders.Count == 0, "these read a node's Outbox instead of running NodeStep: " + string.Join(", ", offenders));
    }

    [Fact]
    public void Only_the_step_function_takes_a_nodes_outputs_and_advances_it()
    {
        // The simulator's timer check describes what an early tick produced (it reads, never advances).
        string[] takers = ["src/Isis.Core/Node/NodeStep.cs", "src/Isis.Simulation/Simulator.cs"];
        var taking = Sources().Where(s => Regex.IsMatch(s.Text, @"\.TakeReady\(\)")).Select(s => s.Path).Except(takers).ToList();
        Assert.True(taking.Count == 0, "these take a node's Ready themselves: " + string.Join(", ", taking));
        var advancing = Sources().Where(s => Regex.IsMatch(s.Text, @"\.Advance\(\)")).Select(s => s.Path)
            .Except(["src/Isis.Core/Node/NodeStep.cs"]).ToList();
        Assert.True(advancing.Count == 0, "these advance a node themselves: " + string.Join(", ", advancing));
        Assert.Contains("NodeStep.Run(", File.ReadAllText(Path.Combine(RepoPaths.Root, "src/Isis/Runtime/EventLoop.cs")));
        Assert.Contains("NodeStep.Run(", File.ReadAllText(Path.Combine(RepoPaths.Root, "src/Isis.Simulation/Simulator.cs")));
        Assert.Contains("NodeStep.Run(", File.ReadAllText(Path.Combine(RepoPaths.Root, "src/Isis.Simulation/Driving/MemoryDriver.cs")));
    }
}
