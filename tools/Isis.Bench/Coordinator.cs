using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Reflection;
using System.Text.Json;
using Isis.Tools;

namespace Isis.Bench;

/// <summary>
/// The parent process: for each group size, hosts the membership service on a free loopback port, starts the
/// members, waits for them (bounded), kills whatever is left, and summarizes their result files.
/// </summary>
internal static class Coordinator
{
    public static int Run(BenchOptions o)
    {
        var report = new BenchReport
        {
            PayloadBytes = o.Payload,
            Warmup = o.Warmup,
            Samples = o.Samples,
            Cooldown = o.Cooldown,
        };
        report.Begin(CommandLine(), o.Quick);
        Console.WriteLine($"Isis.Bench: load average {report.LoadAverageAtStart}" + (o.Quick ? " (quick mode: smoke test, timings not meaningful)" : ""));
        // A group that fails (a member times out or is expelled) is reported as failed and the run goes on with
        // the next one: a long matrix keeps what it measured, and the exit code says that something failed.
        foreach (int payload in o.PayloadSizes)
        {
            foreach (int size in o.GroupSizes)
            {
                report.Groups.Add(RunGroup(o.ForGroupSize(size) with { Payload = payload }, report));
            }
        }
        report.End();
        Print(report);
        if (o.Out != null) Write(report, o.Out);
        var failed = report.Groups.Where(g => !g.Completed).ToList();
        foreach (GroupRun g in failed) Console.Error.WriteLine($"Isis.Bench: {g.Members} members, {g.PayloadBytes} B did not complete: {g.Failure}");
        return failed.Count == 0 ? 0 : 1;
    }

    /// <summary>One group of <c>o.Members</c> processes running every primitive of the list, then the response-delay phase.</summary>
    private static GroupRun RunGroup(BenchOptions o, BenchReport report)
    {
        var wall = Stopwatch.StartNew();
        var group = new GroupRun
        {
            Members = o.Members,
            PayloadBytes = o.Payload,
            Transport = o.TransportName,
            HeartbeatMs = o.HeartbeatMs,
            Suspicion = o.Suspicion,
            TimeoutSeconds = o.TimeoutSeconds,
            LatencyWarmupRounds = o.Warmup,
            LatencyRecordedRounds = o.Samples,
            LatencyCooldownRounds = o.Cooldown,
            MessagesPerBlast = o.MessagesFor(Primitive.Send),
            SlowMessagesPerBlast = o.MessagesFor(Primitive.Query),
            BlastEdgeFraction = 0.1,
            ResponseDelayWarmupRounds = o.ResponseDelayBursts.Length > 0 ? o.ResponseWarmup : 0,
            ResponseDelayRecordedRounds = o.ResponseDelayBursts.Length > 0 ? o.Rounds : 0,
            ResponseDelayCooldownRounds = o.ResponseDelayBursts.Length > 0 ? o.ResponseCooldown : 0,
        };
        group.Failure = RunMembers(o, report, group);
        group.Completed = group.Failure == null;
        group.WallSeconds = wall.Elapsed.TotalSeconds;
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"Isis.Bench: {o.Members} members, {o.Payload} B: {(group.Completed ? "completed" : "FAILED")} in {group.WallSeconds:F1} s (all joined after {group.FormedSeconds:F1} s)"));
        return group;
    }

    /// <summary>Starts the members of one group and waits for them; null if every member finished, else why not.</summary>
    private static string? RunMembers(BenchOptions o, BenchReport report, GroupRun group)
    {
        var wall = Stopwatch.StartNew();
        string work = Directory.CreateTempSubdirectory("isis-bench-").FullName;
        int servicePort = LoopbackPorts.Next();
        if (o.Multicast && o.MulticastPort == 0) o = o with { MulticastPort = LoopbackPorts.Next() }; // every process of the run receives multicast there
        Console.WriteLine($"Isis.Bench: {o.Members} members on 127.0.0.1 over {o.TransportName.ToUpperInvariant()}, membership service on port {servicePort}; " +
                          $"primitives {string.Join(", ", o.PrimitiveList.Select(p => p.Name()))}" +
                          (o.ResponseDelayBursts.Length > 0 ? $"; response delay for K = {string.Join(", ", o.ResponseDelayBursts)}" : ""));
        Console.WriteLine($"  latency: at least {o.WarmupSeconds} s of warm-up rounds, then {o.Warmup} warm-up + {o.Samples} recorded + {o.Cooldown} cool-down rounds; throughput: {o.Messages} messages of {o.Payload} B " +
                          $"({o.MessagesFor(Primitive.Query)} for safe and query), the first and last 10 % not counted" +
                          (o.ResponseDelayBursts.Length > 0 ? $"; response delay: {o.ResponseWarmup} + {o.Rounds} + {o.ResponseCooldown} rounds" : "") +
                          $"; failure detection {o.HeartbeatMs} ms x {o.Suspicion}; time limit {o.TimeoutSeconds} s" + (o.Keys ? "; system and group keys (AES-256-GCM on every packet)" : ""));

        FreshServiceData(servicePort);
        using var service = new IsisRuntime(Options(MembershipServiceMode.Host, servicePort, o));
        service.Start();

        var children = new List<Process>();
        var results = new string[o.Members];
        var lastError = new string?[o.Members];
        bool ok = false;
        try
        {
            for (int i = 0; i < o.Members; i++)
            {
                results[i] = Path.Combine(work, $"member{i}.json");
                children.Add(StartMember(o, i, servicePort, results[i], lastError, group));
            }
            // Wait for all members; one that fails makes the others pointless, so stop them at once.
            var limit = TimeSpan.FromSeconds(o.TimeoutSeconds + 10);
            while (!children.All(c => c.HasExited))
            {
                if (children.FirstOrDefault(c => c.HasExited && c.ExitCode != 0) is { } dead)
                {
                    dead.WaitForExit(); // its last words
                    int index = children.IndexOf(dead);
                    Console.Error.WriteLine($"Isis.Bench: member {index} exited with code {dead.ExitCode}; stopping the others");
                    return $"member {index} exited with code {dead.ExitCode} after {wall.Elapsed.TotalSeconds:F0} s" + (lastError[index] is { } why ? ": " + why : "");
                }
                if (wall.Elapsed > limit)
                {
                    Console.Error.WriteLine($"Isis.Bench: members still running after {limit.TotalSeconds:F0} s; killing them");
                    return $"members still running after {limit.TotalSeconds:F0} s (--timeout {o.TimeoutSeconds})";
                }
                Thread.Sleep(100);
            }
            foreach (Process child in children) child.WaitForExit(); // flush the redirected output
            var failed = children.Select((c, i) => (c.ExitCode, i)).Where(x => x.ExitCode != 0).ToList();
            foreach (var (code, i) in failed) Console.Error.WriteLine($"Isis.Bench: member {i} exited with code {code}");
            if (failed.Count > 0) return $"member {failed[0].i} exited with code {failed[0].ExitCode}" + (lastError[failed[0].i] is { } why ? ": " + why : "");

            MemberResult[] members = results.Select(path => JsonSerializer.Deserialize<MemberResult>(File.ReadAllText(path), RunReport.Json)!).ToArray();
            group.FormedSeconds = members[0].FormedSeconds;
            Summarize(o, members, report);
            ok = true;
            return null;
        }
        finally
        {
            foreach (Process child in children)
            {
                try
                {
                    if (!child.HasExited) child.Kill(entireProcessTree: true);
                }
                catch (InvalidOperationException)
                {
                    // it exited meanwhile
                }
                child.Dispose();
            }
            service.Shutdown();
            if (ok) Directory.Delete(work, recursive: true);
            else Console.Error.WriteLine($"Isis.Bench: member result files kept in {work}");
        }
    }

    /// <summary>How this run was started, as the report states it.</summary>
    internal static string CommandLine() => RunReport.DotnetRun("tools/Isis.Bench", Environment.GetCommandLineArgs().Skip(1));

    /// <summary>
    /// Runtime settings of every process in a run. Failure detection is slower than the default
    /// (by default expulsion after 3 s, isolation after 6 s; scale mode 2 s and 4 s): the machine is
    /// shared, and a benchmark that a scheduling hiccup turns into a view change measures nothing
    /// useful. Only scale mode kills a member on purpose. The parent's embedded membership service
    /// uses the same settings: it is the one that counts the silent periods.
    /// </summary>
    public static IsisOptions Options(MembershipServiceMode mode, int servicePort, BenchOptions o) => new()
    {
        MembershipService = mode,
        MembershipServicePort = servicePort,
        HeartbeatInterval = TimeSpan.FromMilliseconds(o.HeartbeatMs),
        SuspicionCount = o.Suspicion,
        Transport = o.Transport,
        // A small range of our own: the run's groups (one at a time) each get one address.
        Multicast = o.Multicast ? new MulticastOptions { Port = o.MulticastPort, AddressRange = "239.192.88.0/28" } : null,
        LargeGroupFromMembers = o.LargeGroupFrom,
        SystemKey = o.Keys ? BenchOptions.BenchSystemKey : null,
        // The benchmark's one service replica keeps its log where the run can wipe it (FreshServiceData),
        // never where a later run on the same port would restore this run's groups.
        MembershipDataDirectory = ServiceDataDirectory(servicePort),
    };

    /// <summary>The folder of the benchmark service's replica log for a service on <paramref name="servicePort"/>.</summary>
    public static string ServiceDataDirectory(int servicePort) => Path.Combine(Path.GetTempPath(), "isis-bench", $"service-{servicePort}");

    /// <summary>Before a service starts: whatever an earlier run on the same port left is gone.</summary>
    public static void FreshServiceData(int servicePort)
    {
        string directory = ServiceDataDirectory(servicePort);
        if (Directory.Exists(directory)) Directory.Delete(directory, recursive: true);
    }

    private static Process StartMember(BenchOptions o, int index, int servicePort, string resultPath, string?[] lastError, GroupRun group)
    {
        var (host, dll) = ToolProcess.SelfCommand();
        var psi = new ProcessStartInfo(host)
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        if (dll != null) psi.ArgumentList.Add(dll);
        foreach (string a in o.MemberArguments(index, servicePort, resultPath, Environment.ProcessId)) psi.ArgumentList.Add(a);
        var p = new Process { StartInfo = psi };
        p.OutputDataReceived += (_, e) =>
        {
            if (e.Data == null) return;
            Console.WriteLine($"[member {index}] {e.Data}");
            // The sender's "all N members joined at X s": kept for the report even if the group fails later.
            const string joined = "members joined at ";
            int at = e.Data.IndexOf(joined, StringComparison.Ordinal);
            if (index == 0 && at >= 0 && double.TryParse(e.Data.AsSpan(at + joined.Length).TrimEnd(" s"), NumberStyles.Float, CultureInfo.InvariantCulture, out double seconds))
                group.FormedSeconds = seconds;
        };
        p.ErrorDataReceived += (_, e) =>
        {
            if (e.Data == null) return;
            Console.Error.WriteLine($"[member {index}] {e.Data}");
            if (e.Data.StartsWith($"member {index}: ", StringComparison.Ordinal)) lastError[index] = e.Data;
        };
        p.Start();
        p.BeginOutputReadLine();
        p.BeginErrorReadLine();
        return p;
    }

    private static void Summarize(BenchOptions o, MemberResult[] m, BenchReport report)
    {
        MemberResult[] receivers = m.Where(r => r.Index != 0).ToArray();
        for (int phase = 0; phase < o.PrimitiveList.Length; phase++)
        {
            Primitive p = o.PrimitiveList[phase];
            PhaseResult sender = m[0].Phases[phase];
            int n = o.MessagesFor(p);
            var run = new PrimitiveRun
            {
                Members = o.Members,
                PayloadBytes = o.Payload,
                Primitive = p.Name(),
                Phi = p.Phi(o.Members),
                MessagesPerBlast = n,
                LatencyWarmupRounds = o.Warmup,
                LatencyRecordedRounds = o.Samples,
                LatencyCooldownRounds = o.Cooldown,
                BlastWarmupDeliveries = BenchOptions.BlastEdge(n),
                BlastCooldownDeliveries = BenchOptions.BlastEdge(n),
            };
            run.Latency.Add(LatencySummary.Of("send->deliver, all receivers", receivers.SelectMany(r => r.Phases[phase].LatencyTicks)));
            foreach (MemberResult r in receivers) run.Latency.Add(LatencySummary.Of($"send->deliver, member {r.Index}", r.Phases[phase].LatencyTicks));
            run.Latency.Add(LatencySummary.Of("send->deliver, sender (local)", sender.LatencyTicks));
            if (p.IsSafe()) run.Latency.Add(LatencySummary.Of("SafeSendAsync -> task completed at sender", sender.CompletionTicks));
            run.Latency.Add(LatencySummary.Of(p == Primitive.Query
                ? "round trip (QueryAsync(ALL) -> all replies)"
                : "round trip (send -> every receiver's ack delivered at sender)", sender.RoundTripTicks));

            run.Throughput = receivers.Select(r => r.Phases[phase].Throughput[0]).Prepend(sender.Throughput[0]).OrderBy(t => t.Member).ToList();
            run.SenderCallsPerSecond = sender.MeasuredCallsSeconds > 0 ? sender.MeasuredCalls / sender.MeasuredCallsSeconds : 0;
            run.SenderCompletedPerSecond = sender.CompletedSeconds > 0 ? n / sender.CompletedSeconds : 0;
            foreach (MemberResult r in receivers)
            {
                if (r.Phases[phase] is { BlastStart: { } a, BlastEnd: { } f } && f.DatagramsReceived > a.DatagramsReceived)
                    run.PacketsPerDatagramAtReceivers.Add((f.PacketsReceived - a.PacketsReceived) / (double)(f.DatagramsReceived - a.DatagramsReceived));
            }
            report.Runs.Add(run);
        }
        foreach (ResponseDelayRaw d in m[0].ResponseDelay)
        {
            report.ResponseDelay.Add(new ResponseDelaySummary
            {
                Members = o.Members,
                PayloadBytes = o.Payload,
                K = d.K,
                Mode = d.Mode,
                WarmupRounds = o.ResponseWarmup,
                CooldownRounds = o.ResponseCooldown,
                Delay = LatencySummary.Of($"{d.Mode}, K={d.K}", d.Ticks),
            });
        }
        report.Counters.AddRange(m.Select(r => new MemberCounters { Members = o.Members, Member = r.Index, Final = r.Final }));
    }

    private static void Print(BenchReport r)
    {
        static string F(double v) => v.ToString("F1", CultureInfo.InvariantCulture).PadLeft(9);
        foreach (PrimitiveRun run in r.Runs)
        {
            Console.WriteLine();
            Console.WriteLine($"{run.Primitive}{(run.Phi > 0 ? $" (phi {run.Phi})" : "")}, {run.Members} members, latency ({run.PayloadBytes} B, one at a time; " +
                              $"{run.LatencyWarmupRounds} warm-up + {run.LatencyRecordedRounds} recorded + {run.LatencyCooldownRounds} cool-down rounds), microseconds");
            Console.WriteLine($"  {"measure",-62} {"samples",8} {"p50",9} {"p90",9} {"p99",9} {"p99.9",9} {"max",9}");
            foreach (LatencySummary l in run.Latency)
                Console.WriteLine($"  {l.Name,-62} {l.Samples,8} {F(l.P50)} {F(l.P90)} {F(l.P99)} {F(l.P999)} {F(l.Max)}");
            Console.WriteLine($"  throughput, one sender, {run.MessagesPerBlast} messages of {run.PayloadBytes} B; the rate over the middle " +
                              $"{run.MessagesPerBlast - run.BlastWarmupDeliveries - run.BlastCooldownDeliveries} deliveries at each member " +
                              $"(first {run.BlastWarmupDeliveries} and last {run.BlastCooldownDeliveries} not counted)");
            foreach (ThroughputResult t in run.Throughput)
            {
                string role = t.Member == 0 ? "sender (local delivery)" : "receiver";
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"    member {t.Member} {role,-24} {t.MeasuredDeliveries,9} deliveries in {t.Seconds,7:F3} s = {t.DeliveriesPerSecond,10:N0} deliveries/s (whole blast {t.WholeBlastPerSecond:N0}/s)"));
            }
            string completed = run.SenderCompletedPerSecond > 0
                ? string.Create(CultureInfo.InvariantCulture, $"; completed at the sender: {run.SenderCompletedPerSecond:N0}/s (whole blast)")
                : "";
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"    sender's calls: {run.SenderCallsPerSecond:N0}/s (they block on flow control)") + completed);
            if (run.PacketsPerDatagramAtReceivers.Count > 0)
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"    packets per datagram at receivers: {string.Join(", ", run.PacketsPerDatagramAtReceivers.Select(x => x.ToString("F1", CultureInfo.InvariantCulture)))}"));
        }
        if (r.ResponseDelay.Count > 0)
        {
            Console.WriteLine();
            Console.WriteLine("Response delay: time until the application may answer an outside user after K updates, microseconds");
            Console.WriteLine($"  {"members",7} {"K",5} {"mode",-18} {"rounds",7} {"p50",9} {"p90",9} {"p99",9} {"max",9}   (recorded rounds; warm-up and cool-down rounds before and after)");
            foreach (ResponseDelaySummary d in r.ResponseDelay)
                Console.WriteLine($"  {d.Members,7} {d.K,5} {d.Mode,-18} {d.Delay.Samples,7} {F(d.Delay.P50)} {F(d.Delay.P90)} {F(d.Delay.P99)} {F(d.Delay.Max)}");
        }
        Console.WriteLine();
        Console.WriteLine("Groups: failure detection, latency rounds (warm-up + recorded + cool-down) per primitive, blast messages, time until every member joined, wall time");
        foreach (GroupRun g in r.Groups)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  {g.Members,3} members {g.PayloadBytes,5} B  {g.HeartbeatMs} ms x {g.Suspicion}  {g.LatencyWarmupRounds} + {g.LatencyRecordedRounds} + {g.LatencyCooldownRounds} rounds  " +
                $"{g.MessagesPerBlast}/{g.SlowMessagesPerBlast} messages  joined {g.FormedSeconds:F1} s  wall {g.WallSeconds:F1} s  {(g.Completed ? "completed" : "FAILED: " + g.Failure)}"));
        }
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"wall time {r.WallSeconds:F1} s; load average {r.LoadAverageAtStart} at start, {r.LoadAverageAtEnd} at end"));
    }

    /// <summary>
    /// Writes the results: JSON, CSV (name ending in .csv), or the self-contained HTML report
    /// (.html), which also writes the CSV and the JSON beside it.
    /// </summary>
    internal static void Write(BenchReport report, string path)
    {
        string full = Path.GetFullPath(path);
        if (Path.GetDirectoryName(full) is { } dir) Directory.CreateDirectory(dir);
        if (path.EndsWith(".html", StringComparison.OrdinalIgnoreCase))
        {
            File.WriteAllText(full, HtmlReport.Render(report));
            File.WriteAllText(Path.ChangeExtension(full, ".csv"), report.ToCsv());
            File.WriteAllText(Path.ChangeExtension(full, ".json"), JsonSerializer.Serialize(report, RunReport.Json));
            Console.WriteLine($"report written to {full} (with {Path.GetFileName(Path.ChangeExtension(full, ".csv"))} and {Path.GetFileName(Path.ChangeExtension(full, ".json"))})");
            return;
        }
        File.WriteAllText(full, path.EndsWith(".csv", StringComparison.OrdinalIgnoreCase)
            ? report.ToCsv()
            : JsonSerializer.Serialize(report, RunReport.Json));
        Console.WriteLine($"results written to {full}");
    }
}
