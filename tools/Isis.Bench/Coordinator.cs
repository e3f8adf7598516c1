using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Reflection;
using System.Text.Json;

namespace Isis.Bench;

/// <summary>
/// The parent process: hosts the membership service on a free loopback port, starts the three
/// members, waits for them (bounded), kills whatever is left, and summarizes their result files.
/// </summary>
internal static class Coordinator
{
    public static int Run(BenchOptions o)
    {
        var wall = Stopwatch.StartNew();
        string work = Directory.CreateTempSubdirectory("isis-bench-").FullName;
        int servicePort = FreeUdpPort();
        Console.WriteLine($"Isis.Bench: {BenchOptions.Members} members on 127.0.0.1, membership service on port {servicePort}" +
                          (o.Quick ? " (quick mode: smoke test, timings not meaningful)" : ""));
        Console.WriteLine($"  latency: {o.Warmup} warm-up + {o.Samples} recorded rounds; throughput: {o.Messages} messages of {o.Payload} B");

        using var service = new IsisRuntime(Options(MembershipServiceMode.Host, servicePort));
        service.Start();

        var children = new List<Process>();
        var results = new string[BenchOptions.Members];
        int exitCode = 1;
        try
        {
            for (int i = 0; i < BenchOptions.Members; i++)
            {
                results[i] = Path.Combine(work, $"member{i}.json");
                children.Add(StartMember(o, i, servicePort, results[i]));
            }
            // Wait for all members; one that fails makes the others pointless, so stop them at once.
            var limit = TimeSpan.FromSeconds(o.TimeoutSeconds + 10);
            while (!children.All(c => c.HasExited))
            {
                if (children.FirstOrDefault(c => c.HasExited && c.ExitCode != 0) is { } dead)
                {
                    Console.Error.WriteLine($"Isis.Bench: member {children.IndexOf(dead)} exited with code {dead.ExitCode}; stopping the others");
                    return 1;
                }
                if (wall.Elapsed > limit)
                {
                    Console.Error.WriteLine($"Isis.Bench: members still running after {limit.TotalSeconds:F0} s; killing them");
                    return 1;
                }
                Thread.Sleep(100);
            }
            foreach (Process child in children) child.WaitForExit(); // flush the redirected output
            var failed = children.Select((c, i) => (c.ExitCode, i)).Where(x => x.ExitCode != 0).ToList();
            foreach (var (code, i) in failed) Console.Error.WriteLine($"Isis.Bench: member {i} exited with code {code}");
            if (failed.Count > 0) return 1;

            MemberResult[] members = results.Select(path => JsonSerializer.Deserialize<MemberResult>(File.ReadAllText(path), ResultJson.Options)!).ToArray();
            BenchReport report = Summarize(o, members, wall.Elapsed.TotalSeconds);
            Print(report);
            if (o.Out != null) Write(report, o.Out);
            exitCode = 0;
            return exitCode;
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
            if (exitCode == 0) Directory.Delete(work, recursive: true);
            else Console.Error.WriteLine($"Isis.Bench: member result files kept in {work}");
        }
    }

    /// <summary>
    /// Runtime settings of every process in a run. Failure detection is slower than the default
    /// (expulsion after 3 s, isolation after 6 s): the machine is shared, and a benchmark that a
    /// scheduling hiccup turns into a view change measures nothing useful. Nobody fails here on purpose.
    /// </summary>
    public static IsisOptions Options(MembershipServiceMode mode, int servicePort) => new()
    {
        MembershipService = mode,
        MembershipServicePort = servicePort,
        HeartbeatInterval = TimeSpan.FromMilliseconds(100),
        SuspicionCount = 30,
    };

    private static Process StartMember(BenchOptions o, int index, int servicePort, string resultPath)
    {
        var (host, dll) = SelfCommand();
        var psi = new ProcessStartInfo(host)
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        if (dll != null) psi.ArgumentList.Add(dll);
        foreach (string a in o.MemberArguments(index, servicePort, resultPath, Environment.ProcessId)) psi.ArgumentList.Add(a);
        var p = new Process { StartInfo = psi };
        p.OutputDataReceived += (_, e) => { if (e.Data != null) Console.WriteLine($"[member {index}] {e.Data}"); };
        p.ErrorDataReceived += (_, e) => { if (e.Data != null) Console.Error.WriteLine($"[member {index}] {e.Data}"); };
        p.Start();
        p.BeginOutputReadLine();
        p.BeginErrorReadLine();
        return p;
    }

    /// <summary>How to run this program again: <c>dotnet Isis.Bench.dll</c> (or the apphost when there is no dotnet host).</summary>
    private static (string Host, string? Dll) SelfCommand()
    {
        string dll = Path.Combine(AppContext.BaseDirectory, Assembly.GetExecutingAssembly().GetName().Name + ".dll");
        string? current = Environment.ProcessPath;
        if (current != null && Path.GetFileNameWithoutExtension(current) == "dotnet") return (current, dll);
        string? hostPath = Environment.GetEnvironmentVariable("DOTNET_HOST_PATH");
        if (hostPath != null && File.Exists(hostPath)) return (hostPath, dll);
        return ("dotnet", dll);
    }

    private static int FreeUdpPort()
    {
        using var s = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        s.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        return ((IPEndPoint)s.LocalEndPoint!).Port;
    }

    private static BenchReport Summarize(BenchOptions o, MemberResult[] m, double wallSeconds)
    {
        var report = new BenchReport
        {
            Machine = Environment.MachineName,
            Runtime = System.Runtime.InteropServices.RuntimeInformation.FrameworkDescription,
            ProcessorCount = Environment.ProcessorCount,
            Quick = o.Quick,
            Members = BenchOptions.Members,
            PayloadBytes = o.Payload,
            Warmup = o.Warmup,
            MessagesPerBlast = o.Messages,
            WallSeconds = wallSeconds,
        };
        MemberResult[] receivers = m.Where(r => r.Index != 0).ToArray();
        report.Latency.Add(LatencySummary.Of("send->deliver, all receivers", receivers.SelectMany(r => r.LatencyTicks)));
        foreach (MemberResult r in receivers) report.Latency.Add(LatencySummary.Of($"send->deliver, member {r.Index}", r.LatencyTicks));
        report.Latency.Add(LatencySummary.Of("round trip (send -> both acks delivered at sender)", m[0].RoundTripTicks));

        report.Throughput = m[0].Throughput.OrderBy(t => t.Member).ToList();
        report.SenderSendCallsPerSecond = m[0].SendCallsSeconds > 0 ? o.Messages / m[0].SendCallsSeconds : 0;
        foreach (MemberResult r in receivers)
        {
            if (r.AfterLatency is { } a && r.Final is { } f && f.DatagramsReceived > a.DatagramsReceived)
                report.PacketsPerDatagramAtReceivers.Add((f.PacketsReceived - a.PacketsReceived) / (double)(f.DatagramsReceived - a.DatagramsReceived));
        }
        report.Counters = m.Select(r => new MemberCounters { Member = r.Index, AfterLatency = r.AfterLatency, Final = r.Final }).ToList();
        return report;
    }

    private static void Print(BenchReport r)
    {
        static string F(double v) => v.ToString("F1", CultureInfo.InvariantCulture).PadLeft(9);
        Console.WriteLine();
        Console.WriteLine($"Send latency ({r.PayloadBytes} B, one at a time), microseconds");
        Console.WriteLine($"  {"measure",-52} {"samples",8} {"p50",9} {"p90",9} {"p99",9} {"p99.9",9} {"max",9}");
        foreach (LatencySummary l in r.Latency)
            Console.WriteLine($"  {l.Name,-52} {l.Samples,8} {F(l.P50)} {F(l.P90)} {F(l.P99)} {F(l.P999)} {F(l.Max)}");
        Console.WriteLine();
        Console.WriteLine($"Send throughput, one sender, {r.MessagesPerBlast} messages of {r.PayloadBytes} B");
        foreach (ThroughputResult t in r.Throughput)
        {
            string role = t.Member == 0 ? "sender (local delivery)" : "receiver";
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  member {t.Member} {role,-24} {t.Deliveries,9} deliveries in {t.Seconds,7:F3} s = {t.DeliveriesPerSecond,10:N0} deliveries/s"));
        }
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  sender's Send calls: {r.SenderSendCallsPerSecond:N0}/s (they block on flow control)"));
        if (r.PacketsPerDatagramAtReceivers.Count > 0)
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  packets per datagram at receivers: {string.Join(", ", r.PacketsPerDatagramAtReceivers.Select(x => x.ToString("F1", CultureInfo.InvariantCulture)))}"));
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  wall time {r.WallSeconds:F1} s"));
    }

    private static void Write(BenchReport report, string path)
    {
        string full = Path.GetFullPath(path);
        if (Path.GetDirectoryName(full) is { } dir) Directory.CreateDirectory(dir);
        File.WriteAllText(full, path.EndsWith(".csv", StringComparison.OrdinalIgnoreCase)
            ? report.ToCsv()
            : JsonSerializer.Serialize(report, ResultJson.Options));
        Console.WriteLine($"results written to {full}");
    }
}
