using System.Diagnostics;
using Isis.Core.Node;
using Isis.Simulation.Checking;
using Isis.Simulation;

// The simulator's command line: run a range of seeds, or replay one seed with its event log.
//   dotnet run --project tools/Isis.Sim -- run --seeds 0..299
//   dotnet run --project tools/Isis.Sim -- replay --seed 42 --scenario chaos [--log run.jsonl]
// --mutation NAME runs a deliberately broken protocol variant (see ProtocolMutations), to watch the checker catch it.
return SimCommand.Run(args);

internal static class SimCommand
{
    public static int Run(string[] args)
    {
        if (args.Length == 0 || args[0] is "-h" or "--help")
        {
            Console.WriteLine("usage: Isis.Sim run [--seeds A..B] [--scenario FAMILY] [--mutation NAME]");
            Console.WriteLine("       Isis.Sim replay --seed N [--scenario FAMILY] [--mutation NAME] [--log FILE.jsonl]");
            Console.WriteLine("families: " + string.Join(", ", Scenario.Families));
            Console.WriteLine("mutations: " + string.Join(", ", Enum.GetNames<ProtocolMutations>().Where(n => n != nameof(ProtocolMutations.None))));
            return args.Length == 0 ? 2 : 0;
        }
        string? Option(string name)
        {
            int i = Array.IndexOf(args, name);
            return i >= 0 && i + 1 < args.Length ? args[i + 1] : null;
        }
        string? family = Option("--scenario");
        ProtocolMutations mutation = Option("--mutation") is { } m
            ? Enum.TryParse(m, ignoreCase: true, out ProtocolMutations parsed) && !m.Any(char.IsDigit) ? parsed
                : throw new ArgumentException($"unknown mutation '{m}'; known: {string.Join(", ", Enum.GetNames<ProtocolMutations>())}")
            : ProtocolMutations.None;
        Scenario Adjust(Scenario s) => mutation == ProtocolMutations.None ? s : s with { Protocol = s.Protocol with { Mutations = mutation } };
        switch (args[0])
        {
            case "run":
            {
                string range = Option("--seeds") ?? "0..99";
                string[] parts = range.Split("..");
                ulong first = ulong.Parse(parts[0]), last = ulong.Parse(parts.Length > 1 ? parts[1] : parts[0]);
                int failed = 0;
                var clock = Stopwatch.StartNew();
                for (ulong seed = first; seed <= last; seed++)
                {
                    SimulationRun run = SimulationRun.Execute(seed, family, Adjust);
                    Console.WriteLine(run.Summary);
                    if (!run.Passed) failed++;
                }
                Console.WriteLine($"{last - first + 1 - (ulong)failed} passed, {failed} failed in {clock.Elapsed.TotalSeconds:F1} s");
                return failed == 0 ? 0 : 1;
            }
            case "replay":
            {
                ulong seed = ulong.Parse(Option("--seed") ?? throw new ArgumentException("replay needs --seed N"));
                SimulationRun run = SimulationRun.Execute(seed, family, Adjust);
                Console.WriteLine(run.Report);
                if (Option("--log") is { } path)
                {
                    using var writer = new StreamWriter(path);
                    run.History.WriteJsonLines(writer);
                    Console.WriteLine($"event log: {path} ({run.History.Count} events)");
                }
                return run.Passed ? 0 : 1;
            }
            default:
                Console.Error.WriteLine($"unknown command '{args[0]}'; try --help");
                return 2;
        }
    }
}
