using System.Diagnostics;
using Isis.Core.Node;

namespace Isis.Simulation;

/// <summary>The simulator's command line (tools/Isis.Sim runs it): run, replay, fingerprints, catch-up, scale and bft.</summary>
internal static class SimCommand
{
    public static int Run(string[] args)
    {
        if (args.Length == 0 || args[0] is "-h" or "--help")
        {
            Console.WriteLine("usage: Isis.Sim run [--seeds A..B] [--scenario FAMILY] [--mutation NAME]");
            Console.WriteLine("       Isis.Sim catch-up [--decisions N] [--no-compaction]   (replacing a membership replica after N decisions)");
            Console.WriteLine("       Isis.Sim replay --seed N [--scenario FAMILY] [--mutation NAME] [--log FILE.jsonl]");
            Console.WriteLine("       Isis.Sim fingerprints [--seeds A..B] [--scenario FAMILY[,FAMILY...]|all]   (one line per run: family, seed, a hash of its event log)");
            Console.WriteLine("       Isis.Sim scale [--members N] [--seed S] [--replicas 1|3|5] [--window-ms MS] [--sends K] [--senders S] [--delay-us MIN-MAX] [--steady-s S [--steady-interval-ms MS]]");
            Console.WriteLine("                      [--loss P] [--suspicion K] [--digests all|gossip] [--multicast] [--check [--log FILE.jsonl]] [--json FILE]");
            Console.WriteLine("         N members (default 1000) join one group over MS ms of virtual time (default 100; 0 = all at once), each");
            Console.WriteLine("         sends K Sends (default 2), one is killed; prints the figures in virtual time. Packets take MIN-MAX us");
            Console.WriteLine("         (default 50-200, uniform per packet; --loss P loses each packet with chance P). --senders S: only the S oldest");
            Console.WriteLine("         members send. --digests all: every digest to every member at any size (default: gossip from 10 members).");
            Console.WriteLine("         --multicast: data by simulated IP multicast. --suspicion K: expel after K silent heartbeats. --check records the");
            Console.WriteLine("         history and runs the checker (memory-hungry for large N), --log writes it; --json appends the figures as one JSON line.");
            Console.WriteLine("         --steady-s S: before the kill, run S seconds of virtual time with each sender Sending every MS ms (default 1000),");
            Console.WriteLine("         then measure memory and the acknowledgement tables again (a long run's state).");
            Console.WriteLine("families: " + string.Join(", ", Scenario.Families));
            Console.WriteLine("  also, not in the default mix: host-partition (the leader's host cut off from everyone for a while), host-chaos (every host fault with partitions and crashes: two replica hosts can go at once,");
            Console.WriteLine("  and the group then waits, so only Liveness may fail, and only when a majority of the replicas was lost), host-growth (the host of a");
            Console.WriteLine("  replica the service's first growth adds stops until the heal: the service must go on), host-quorum-loss (a majority of the replica hosts crashed at once:");
            Console.WriteLine("  the group must wedge and never split; the restarted survivors found a new service once every old replica is gone),");
            Console.WriteLine("  host-restart (every process crashes and restarts while others still start, or the machine stalls while the well-known");
            Console.WriteLine("  port's holder restarts: the service must be founded again, one at a time, and the group re-form)");
            Console.WriteLine("  multicast, multicast-chaos (data by IP multicast, repairs by unicast), gossip, gossip-chaos (the large-group rules from 4 members:");
            Console.WriteLine("  digests gossiped to 2 random members a round, stability through a binary tree), relay, relay-chaos (the same, with data");
            Console.WriteLine("  relayed along the tree as over the TCP overlay); state-transfer, state-transfer-chaos (joins under traffic, the member");
            Console.WriteLine("  making a checkpoint crashing while it streams); secured, secured-chaos (a system key and a group key, with an attacker");
            Console.WriteLine("  replaying captured packets and forging Data packets in members' names); lost-disk (at a whole-group crash of a durable group a");
            Console.WriteLine("  member's disk is lost or stays away, and the operator forces the recovery); auto-recover (at a whole-group crash a member");
            Console.WriteLine("  of the last view other than its first loses its disk for good, the service stays up: the group recovers on its own)");
            Console.WriteLine("mutations: " + string.Join(", ", Enum.GetNames<ProtocolMutations>().Where(n => n != nameof(ProtocolMutations.None))));
            Console.WriteLine(Bft.BftCommand.Usage);
            Console.WriteLine("  behaviours: " + string.Join(", ", Enum.GetNames<Bft.ByzantineBehaviour>().Where(n => n != "None")));
            Console.WriteLine("  BFT mutations: " + string.Join(", ", Enum.GetNames<Isis.Core.Bft.BftMutations>().Where(n => n != "None")));
            return args.Length == 0 ? 2 : 0;
        }
        string? Option(string name)
        {
            int i = Array.IndexOf(args, name);
            return i >= 0 && i + 1 < args.Length ? args[i + 1] : null;
        }
        if (args[0] == "bft") return Bft.BftCommand.Run(args, Option, Console.Out);
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
            case "fingerprints":
            {
                // One line per run, "family seed fingerprint": a refactoring that must not change
                // behaviour leaves every line as it was (tests/Isis.Simulation.Tests/Baselines).
                string range = Option("--seeds") ?? "0..199";
                string[] parts = range.Split("..");
                ulong first = ulong.Parse(parts[0]), last = ulong.Parse(parts.Length > 1 ? parts[1] : parts[0]);
                string[] families = family is null or "all" ? Scenario.AllFamilies : family.Split(',');
                foreach (string f in families)
                {
                    for (ulong seed = first; seed <= last; seed++)
                    {
                        SimulationRun run = SimulationRun.Execute(seed, f, Adjust);
                        Console.WriteLine($"{f} {seed} {run.History.Fingerprint()}");
                    }
                }
                return 0;
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
            case "catch-up":
            {
                // Replacing a membership replica after many decisions: what the new replica needs.
                int decisions = int.Parse(Option("--decisions") ?? "100000");
                var protocol = new ProtocolOptions();
                if (args.Contains("--no-compaction")) protocol = protocol with { ReplicaSnapshotInterval = int.MaxValue };
                Console.WriteLine(ReplicaCatchUpExperiment.Run(decisions, protocol).Summary);
                return 0;
            }
            case "scale":
            {
                var options = new ScaleOptions
                {
                    Members = int.Parse(Option("--members") ?? "1000"),
                    Seed = ulong.Parse(Option("--seed") ?? "1"),
                    Replicas = int.Parse(Option("--replicas") ?? "1"),
                    StartWindow = long.Parse(Option("--window-ms") ?? "100") * 1000,
                    SendsPerMember = int.Parse(Option("--sends") ?? "2"),
                    Senders = int.Parse(Option("--senders") ?? "0"),
                    LossRate = double.Parse(Option("--loss") ?? "0", System.Globalization.CultureInfo.InvariantCulture),
                    CheckHistory = args.Contains("--check"),
                    SteadyFor = long.Parse(Option("--steady-s") ?? "0") * 1_000_000,
                    SteadySendInterval = long.Parse(Option("--steady-interval-ms") ?? "1000") * 1000,
                };
                if (Option("--delay-us") is { } delay)
                {
                    string[] range = delay.Split('-');
                    options = options with { MinDelay = long.Parse(range[0]), MaxDelay = long.Parse(range[^1]) };
                }
                ProtocolOptions protocol = Adjust(new Scenario()).Protocol;
                // --digests all: every digest to every member at any size (the small-group rules everywhere, for comparison).
                if (Option("--digests") is { } digests)
                {
                    protocol = digests switch
                    {
                        "all" => protocol with { GossipFromMembers = int.MaxValue },
                        "gossip" => protocol,
                        _ => throw new ArgumentException("--digests all|gossip"),
                    };
                }
                if (args.Contains("--multicast")) protocol = protocol with { Multicast = Scenario.SimulatedMulticast };
                if (Option("--suspicion") is { } suspicion) protocol = protocol with { SuspicionCount = int.Parse(suspicion), IsolationTimeout = 2 * int.Parse(suspicion) * protocol.HeartbeatInterval };
                options = options with { Protocol = protocol };
                ScaleResult result = ScaleExperiment.Run(options, Console.WriteLine);
                Console.WriteLine(result.Summary);
                string json = result.JsonLine();
                Console.WriteLine(json);
                if (Option("--json") is { } jsonPath) File.AppendAllText(jsonPath, json + Environment.NewLine);
                if (Option("--log") is { } logPath && result.History is { } history)
                {
                    using var writer = new StreamWriter(logPath);
                    history.WriteJsonLines(writer);
                    Console.WriteLine($"event log: {logPath} ({history.Count} events)");
                }
                return result.Passed ? 0 : 1;
            }
            default:
                Console.Error.WriteLine($"unknown command '{args[0]}'; try --help");
                return 2;
        }
    }
}
