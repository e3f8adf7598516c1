using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Isis.Tools;

namespace Isis.Bench;

/// <summary>
/// Failover mode: how fast the zero-configuration default recovers when the processes that run its
/// membership service go, against an ordinary member's failure measured in the same run.
/// </summary>
/// <remarks>
/// N member processes (default 5) run the default configuration on a private well-known port; the
/// service grows to three replicas among them. Each round measures, from the moment the parent acts
/// to the moment the last survivor's view handler ran without the process:
/// <list type="number">
/// <item>SIGKILL of a member that hosts no replica (the baseline: any member's failure);</item>
/// <item>SIGKILL of the process whose replica leads the service;</item>
/// <item>a graceful exit (Shutdown: hand the replica over, leave, stop) of the leader's host;</item>
/// </list>
/// and, once the three replica hosts of the round's start are all gone (the rest are SIGKILLed one
/// at a time), the join of a new process: runtime start to Join returning, against the join of a
/// replacement in step 1 while those hosts were still there. A replacement process keeps the group at N.
/// </remarks>
internal static class FailoverCoordinator
{
    public const string Usage =
        "Failover mode: the default (embedded, self-replicating) membership service losing its hosts:\n" +
        "  Isis.Bench --failover [--members N] [--rounds R] [--heartbeat-ms H] [--suspicion K] [--out FILE.json]\n" +
        "  --members       member processes, 4 or more (default 5)\n" +
        "  --rounds        rounds of (member SIGKILL, leader-host SIGKILL, leader-host exit, join without the old hosts) (default 5)\n" +
        "  --heartbeat-ms  heartbeat period (default 100, the runtime's default)\n" +
        "  --suspicion     silent periods before expulsion (default 5, the runtime's default)";

    private static readonly TimeSpan StepLimit = TimeSpan.FromSeconds(60);

    private sealed class Child
    {
        public required int Index;
        public required Process Process;
        public readonly List<(int Id, int Members, long At)> Views = new();
        public long RuntimeAt, JoinedAt;
        public bool Founded;
        public (bool Host, bool Leader)? Role;
        public string? Shutdown;
        public bool Gone;
    }

    public static int Run(string[] args)
    {
        int members = 5, rounds = 5, heartbeatMs = 100, suspicion = 5;
        string? outPath = null;
        for (int i = 0; i < args.Length; i++)
        {
            string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            switch (args[i])
            {
                case "--failover": break;
                case "--members": members = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--rounds": rounds = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--heartbeat-ms": heartbeatMs = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--suspicion": suspicion = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--out": outPath = Value(); break;
                default: throw new ArgumentException($"unknown option for --failover: {args[i]}\n{Usage}");
            }
        }
        if (members < 4) throw new ArgumentException("--failover needs --members 4 or more (three replica hosts and one that hosts none)");

        var run = new Rig(LoopbackPorts.Next(), heartbeatMs, suspicion);
        Console.WriteLine($"failover: {members} members, {rounds} rounds, heartbeat {heartbeatMs} ms x {suspicion}, well-known port {run.Port}");
        try
        {
            Child first = run.Start();
            run.WaitUntil(() => first.JoinedAt != 0, "the first member joins");
            if (!first.Founded) throw new InvalidOperationException("the first member did not found the service (is another system using the port?)");
            for (int i = 1; i < members; i++) run.Start();
            run.WaitForView(members);

            var samples = new Dictionary<string, List<double>>
            {
                ["member SIGKILL -> view (baseline)"] = new(),
                ["leader's host SIGKILL -> view"] = new(),
                ["leader's host graceful exit -> view"] = new(),
                ["join, original hosts present (baseline)"] = new(),
                ["join, every original host gone"] = new(),
            };
            for (int r = 1; r <= rounds; r++)
            {
                List<Child> originalHosts = run.WaitForHosts(3);

                Child plain = run.Live.First(c => !originalHosts.Contains(c));
                samples["member SIGKILL -> view (baseline)"].Add(run.Remove(plain, kill: true, members));
                samples["join, original hosts present (baseline)"].Add(run.JoinOne(members));

                Child leader = run.Leader(run.WaitForHosts(3));
                samples["leader's host SIGKILL -> view"].Add(run.Remove(leader, kill: true, members));
                run.JoinOne(members);

                leader = run.Leader(run.WaitForHosts(3));
                samples["leader's host graceful exit -> view"].Add(run.Remove(leader, kill: false, members));
                run.JoinOne(members);

                // The two steps above took at most two of the original hosts (a new leader may be a new host).
                List<Child> remaining = originalHosts.Where(h => !h.Gone).ToList();
                for (int k = 0; k < remaining.Count; k++)
                {
                    run.WaitForHosts(3);
                    run.Remove(remaining[k], kill: true, members);
                    if (k < remaining.Count - 1) run.JoinOne(members);
                }
                run.WaitForHosts(3);
                samples["join, every original host gone"].Add(run.JoinOne(members));
                Console.WriteLine($"failover: round {r} done");
            }

            double baseline = Median(samples["member SIGKILL -> view (baseline)"]);
            double joinBaseline = Median(samples["join, original hosts present (baseline)"]);
            Console.WriteLine();
            Console.WriteLine($"{"measure",-44} {"median ms",10} {"min",8} {"max",8} {"vs baseline",12}");
            var report = new List<Dictionary<string, object>>();
            foreach (var (name, values) in samples)
            {
                double median = Median(values);
                double ratio = median / (name.StartsWith("join", StringComparison.Ordinal) ? joinBaseline : baseline);
                Console.WriteLine($"{name,-44} {median,10:0.0} {values.Min(),8:0.0} {values.Max(),8:0.0} {ratio,11:0.00}x");
                report.Add(new() { ["measure"] = name, ["medianMs"] = median, ["minMs"] = values.Min(), ["maxMs"] = values.Max(), ["ratio"] = ratio, ["samples"] = values });
            }
            if (outPath != null)
            {
                File.WriteAllText(outPath, JsonSerializer.Serialize(new
                {
                    members, rounds, heartbeatMs, suspicion, command = "Isis.Bench " + string.Join(' ', args), results = report,
                }, new JsonSerializerOptions { WriteIndented = true }));
            }
            return 0;
        }
        catch (Exception e) when (e is TimeoutException or InvalidOperationException)
        {
            Console.Error.WriteLine("failover: " + e.Message);
            return 1;
        }
        finally
        {
            run.KillAll();
        }
    }

    private static double Median(List<double> values)
    {
        double[] sorted = values.Order().ToArray();
        return sorted.Length == 0 ? double.NaN : sorted.Length % 2 == 1 ? sorted[sorted.Length / 2] : (sorted[sorted.Length / 2 - 1] + sorted[sorted.Length / 2]) / 2;
    }

    private static double Ms(long ticks) => ticks * 1000.0 / Stopwatch.Frequency;

    private sealed class Rig(int port, int heartbeatMs, int suspicion)
    {
        private readonly List<Child> _children = new();
        private readonly Lock _gate = new();

        public int Port => port;

        public List<Child> Live
        {
            get { lock (_gate) return _children.Where(c => !c.Gone).ToList(); }
        }

        public Child Start()
        {
            var (host, dll) = ToolProcess.SelfCommand();
            var psi = new ProcessStartInfo(host) { UseShellExecute = false, RedirectStandardInput = true, RedirectStandardOutput = true, RedirectStandardError = true };
            if (dll != null) psi.ArgumentList.Add(dll);
            foreach (string a in new[] { "failover-member", "--service-port", Str(port), "--heartbeat-ms", Str(heartbeatMs), "--suspicion", Str(suspicion) }) psi.ArgumentList.Add(a);
            var p = new Process { StartInfo = psi };
            Child c;
            lock (_gate)
            {
                c = new Child { Index = _children.Count, Process = p };
                _children.Add(c);
            }
            p.OutputDataReceived += (_, e) => { if (e.Data != null) OnLine(c, e.Data); };
            p.ErrorDataReceived += (_, e) => { if (e.Data != null) Console.Error.WriteLine($"[member {c.Index}] {e.Data}"); };
            p.Start();
            p.BeginOutputReadLine();
            p.BeginErrorReadLine();
            return c;
        }

        private void OnLine(Child c, string line)
        {
            if (!line.StartsWith("@fo ", StringComparison.Ordinal))
            {
                Console.WriteLine($"[member {c.Index}] {line}");
                return;
            }
            string[] words = line[4..].Split(' ');
            var kv = words.Skip(1).Select(w => w.Split('=', 2)).Where(x => x.Length == 2).ToDictionary(x => x[0], x => x[1]);
            lock (_gate)
            {
                switch (words[0])
                {
                    case "runtime": c.RuntimeAt = long.Parse(kv["at"], CultureInfo.InvariantCulture); c.Founded = kv["founded"] == "true"; break;
                    case "joined": c.JoinedAt = long.Parse(kv["at"], CultureInfo.InvariantCulture); break;
                    case "view": c.Views.Add((int.Parse(kv["id"], CultureInfo.InvariantCulture), int.Parse(kv["members"], CultureInfo.InvariantCulture), long.Parse(kv["at"], CultureInfo.InvariantCulture))); break;
                    case "role": c.Role = (kv["host"] == "true", kv["leader"] == "true"); break;
                    case "shutdown":
                        c.Shutdown = kv["reason"];
                        Console.WriteLine($"[member {c.Index}] shut down: {c.Shutdown}");
                        break;
                }
            }
        }

        public void WaitUntil(Func<bool> condition, string what)
        {
            var clock = Stopwatch.StartNew();
            while (true)
            {
                lock (_gate)
                {
                    if (condition()) return;
                    if (_children.FirstOrDefault(c => c.Shutdown != null && !c.Gone) is { } stopped)
                        throw new InvalidOperationException($"member {stopped.Index} was shut down by the protocol ({stopped.Shutdown}) while waiting for: {what}");
                }
                if (clock.Elapsed > StepLimit) throw new TimeoutException($"not within {StepLimit.TotalSeconds} s: {what}\n{Describe()}");
                Thread.Sleep(2);
            }
        }

        private string Describe()
        {
            lock (_gate)
            {
                return string.Join('\n', _children.Select(c =>
                    $"  member {c.Index}: {(c.Gone ? "gone" : c.Process.HasExited ? $"exited {c.Process.ExitCode}" : "running")}, joined {c.JoinedAt != 0}, " +
                    $"views {string.Join(' ', c.Views.Select(v => $"{v.Id}:{v.Members}"))}"));
            }
        }

        private static int LastView(Child c) => c.Views.Count == 0 ? -1 : c.Views[^1].Members;

        public void WaitForView(int size) => WaitUntil(() => _children.Where(c => !c.Gone).All(c => LastView(c) == size), $"every member installs a view of {size}");

        public List<Child> WaitForHosts(int count)
        {
            List<Child> hosts;
            var clock = Stopwatch.StartNew();
            while (true)
            {
                List<Child> live = Live;
                lock (_gate) foreach (Child c in live) c.Role = null;
                foreach (Child c in live) c.Process.StandardInput.WriteLine("role");
                WaitUntil(() => live.All(c => c.Role != null), "every member reports its role");
                lock (_gate) hosts = live.Where(c => c.Role!.Value.Host).ToList();
                if (hosts.Count == count && hosts.Count(h => Role(h).Leader) == 1) return hosts;
                if (clock.Elapsed > StepLimit) throw new TimeoutException($"the service never ran {count} replicas with one leader");
                Thread.Sleep(20);
            }
        }

        private (bool Host, bool Leader) Role(Child c)
        {
            lock (_gate) return c.Role!.Value;
        }

        public Child Leader(List<Child> hosts) => hosts.Single(h => Role(h).Leader);

        /// <summary>Takes <paramref name="victim"/> away (SIGKILL, or quit for a graceful exit); returns ms until the last survivor installed the view without it.</summary>
        public double Remove(Child victim, bool kill, int members)
        {
            List<Child> survivors = Live.Where(c => c != victim).ToList();
            int[] seen;
            lock (_gate) seen = survivors.Select(c => c.Views.Count).ToArray();
            long t0 = Stopwatch.GetTimestamp();
            if (kill) victim.Process.Kill();
            else victim.Process.StandardInput.WriteLine("quit");
            lock (_gate) victim.Gone = true;
            WaitUntil(() => survivors.Select((c, i) => c.Views.Skip(seen[i]).Any(v => v.Members == members - 1)).All(x => x),
                $"the survivors install a view without member {victim.Index}");
            long last;
            lock (_gate) last = survivors.Select((c, i) => c.Views.Skip(seen[i]).First(v => v.Members == members - 1).At).Max();
            if (!kill && !victim.Process.WaitForExit(StepLimit)) throw new TimeoutException($"member {victim.Index} did not exit after quit");
            return Ms(last - t0);
        }

        /// <summary>Starts a new member; returns ms from its runtime's start to its Join returning, once everyone sees it.</summary>
        public double JoinOne(int members)
        {
            Child c = Start();
            WaitUntil(() => c.JoinedAt != 0, $"member {c.Index} joins");
            if (c.Founded) throw new InvalidOperationException($"member {c.Index} founded a second service");
            WaitForView(members);
            lock (_gate) return Ms(c.JoinedAt - c.RuntimeAt);
        }

        public void KillAll()
        {
            lock (_gate)
            {
                foreach (Child c in _children)
                {
                    try { if (!c.Process.HasExited) c.Process.Kill(); }
                    catch (InvalidOperationException) { }
                }
            }
        }

        private static string Str(int n) => n.ToString(CultureInfo.InvariantCulture);
    }
}
