using System.Diagnostics;
using System.Globalization;
using Isis.Core.Bft;

namespace Isis.Simulation.Bft;

/// <summary>The simulator's "bft" command: seeded runs of a BFT service (or a store calling a bank), with chosen faults, under the checker.</summary>
internal static class BftCommand
{
    public const string Usage =
        "       Isis.Sim bft [--seeds A..B] [--f F] [--tiers 1|2] [--faulty I:BEHAVIOUR,...] [--target-f F] [--target-faulty I:BEHAVIOUR,...]\n" +
        "                    [--clients C] [--requests R] [--outstanding K] [--loss P] [--call-timeout-ms MS] [--mutation NAME[,NAME]] [--verbose]\n" +
        "         3f+1 replicas ordering requests with PBFT (two tiers: clients call store, whose replicas call bank for each request);\n" +
        "         replica I of a service misbehaves as BEHAVIOUR; prints each seed's outcome and the checker's violations.";

    public static int Run(string[] args, Func<string, string?> option, TextWriter output)
    {
        string[] parts = (option("--seeds") ?? "0..19").Split("..");
        int first = int.Parse(parts[0], CultureInfo.InvariantCulture), last = int.Parse(parts[^1], CultureInfo.InvariantCulture);
        var scenario = new BftScenario
        {
            F = Int(option("--f"), 1),
            Tiers = Int(option("--tiers"), 1),
            Faulty = Faults(option("--faulty")),
            TargetF = Int(option("--target-f"), 1),
            TargetFaulty = Faults(option("--target-faulty")),
            Clients = Int(option("--clients"), 2),
            RequestsPerClient = Int(option("--requests"), 40),
            Outstanding = Int(option("--outstanding"), 3),
            Loss = option("--loss") is { } loss ? double.Parse(loss, CultureInfo.InvariantCulture) : 0.05,
            CallTimeout = Int(option("--call-timeout-ms"), 0) * 1000L,
            Options = new BftOptions { Mutations = Mutations(option("--mutation")) },
        };
        scenario = scenario with { ExpectProgress = scenario.Faulty.Count <= scenario.F && (scenario.TargetFaulty.Count <= scenario.TargetF || scenario.CallTimeout > 0) };
        int failed = 0;
        var clock = Stopwatch.StartNew();
        for (int seed = first; seed <= last; seed++)
        {
            BftRunResult r = new BftSimulation(scenario, seed).Run();
            output.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"seed {seed}: {(r.Ok ? "ok" : "FAILED")}, {r.Accepted}/{r.Issued} answered, executed [{string.Join(",", r.ExecutedPerReplica)}] in [{string.Join(",", r.SequenceNumbersPerReplica)}] sequence numbers, view {r.FinalView}, " +
                $"{r.ViewChanges} view changes, {r.Dropped} dropped, {r.Equivocations} equivocations refused, {r.ClockRefusals} clock refusals, {r.SimulatedMicros / 1000.0:F0} ms simulated, fingerprint {r.Fingerprint}"));
            foreach (string v in r.Violations) output.WriteLine("  " + v);
            if (!r.Ok && args.Contains("--verbose"))
            {
                foreach (string state in r.ReplicaStates) output.WriteLine("  " + state);
            }
            if (!r.Ok) failed++;
        }
        output.WriteLine(string.Create(CultureInfo.InvariantCulture, $"{last - first + 1 - failed} passed, {failed} failed in {clock.Elapsed.TotalSeconds:F1} s"));
        return failed == 0 ? 0 : 1;
    }

    private static int Int(string? value, int fallback) => value is null ? fallback : int.Parse(value, CultureInfo.InvariantCulture);

    private static Dictionary<int, ByzantineBehaviour> Faults(string? spec)
    {
        var faults = new Dictionary<int, ByzantineBehaviour>();
        foreach (string entry in (spec ?? "").Split(',', StringSplitOptions.RemoveEmptyEntries))
        {
            string[] f = entry.Split(':');
            if (f.Length != 2 || !int.TryParse(f[0], CultureInfo.InvariantCulture, out int replica) || !Enum.TryParse(f[1], ignoreCase: true, out ByzantineBehaviour b) || f[1].Any(char.IsDigit))
                throw new ArgumentException($"--faulty takes I:BEHAVIOUR pairs such as 0:Silent,2:WrongReplies; '{entry}' is not one. Behaviours: {string.Join(", ", Enum.GetNames<ByzantineBehaviour>())}");
            faults[replica] = b;
        }
        return faults;
    }

    private static BftMutations Mutations(string? spec)
    {
        var mutations = BftMutations.None;
        foreach (string name in (spec ?? "").Split(',', StringSplitOptions.RemoveEmptyEntries))
        {
            if (!Enum.TryParse(name, ignoreCase: true, out BftMutations m) || name.Any(char.IsDigit))
                throw new ArgumentException($"unknown BFT mutation '{name}'; known: {string.Join(", ", Enum.GetNames<BftMutations>().Where(n => n != "None"))}");
            mutations |= m;
        }
        return mutations;
    }
}
