using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Text.Json;
using Isis.Perpetual;
using Isis.Tools;
using static Isis.Bench.HarnessShell;

namespace Isis.Bench;

/// <summary>
/// The Perpetual-WS paper's micro-benchmarks (its figures 7, 8 and 9), as the throughput of the
/// calling service in a two-tier deployment of replica processes on this machine: a "caller" service
/// whose loop makes calls to a "target" service, synchronously (one outstanding) or asynchronously
/// (a window of outstanding calls), the target answering each at once or after a processing time.
/// Beside them, one PBFT request round inside a four-replica service against a SafeSend(phi=3)
/// round of this SDK's harness, in the same run.
/// </summary>
/// <remarks>
/// Each configuration starts its replicas as processes of this program, warms them up for a few
/// seconds (the JIT's tiers) and then sends <c>--rounds</c> measured requests of <c>--calls</c> calls each, and reports the
/// median over the rounds of calls completed per second at the caller (the time from the client's
/// request to the caller's answer, which comes after the last call completed). Processing time is a
/// sleep in the target's loop, not a busy loop: the paper gave each replica its own machine, and here
/// the replicas of both tiers share two cores, so a busy loop would measure the cores, not the protocol.
/// </remarks>
internal static class PerpetualExperiment
{
    public const string Usage =
        "Perpetual (BFT) micro-benchmarks: dotnet run -c Release --project tools/Isis.Bench -- --perpetual [--figure 7|8|9|round|all] [--calls N] [--rounds N] [--window N] [--warmup-seconds S] [--quick] [--verbose] [--out file.json]\n" +
        "  7: null calls, 1, 4, 7 and 10 replicas in both tiers; 8: 0 to 6 ms of processing at the target, 1 and 4 replicas;\n" +
        "  9: synchronous against asynchronous calls, 1 and 4 replicas; round: one PBFT request round in a 4-replica service\n" +
        "  against a SafeSend(phi=3) round of 4 members (this harness). Default: all; --calls 1000, --rounds 3, --window 32, --warmup-seconds 3.";

    private const string Caller = "caller", Target = "target";

    /// <summary>--verbose: each replica's view, executed count, divergent messages and dropped packets after each configuration.</summary>
    private static bool Verbose;

    /// <summary>How long each configuration warms up before it is measured (--warmup-seconds; 10 s, quick 1 s: eight to twenty processes reach the JIT's last tier on two cores only after several seconds, and a 1+1 round at 25,000 calls/s is over in a blink, hence 4,000 calls a round).</summary>
    private static TimeSpan WarmUp = TimeSpan.FromSeconds(10);

    /// <summary>One configuration's result.</summary>
    internal sealed class Row
    {
        public string Figure { get; set; } = "";
        public int Replicas { get; set; }
        public double ProcessingMs { get; set; }
        public int Window { get; set; }
        public int Calls { get; set; }
        /// <summary>Calls completed per second at the caller, each measured round.</summary>
        public double[] CallsPerSecond { get; set; } = [];
        public double Median => CallsPerSecond.Length == 0 ? 0 : HarnessShell.Median(CallsPerSecond);

        /// <summary>
        /// Each round's calls over the CPU time of its busiest replica process: the throughput with one
        /// machine per replica, as the paper ran it (every process its own core; the busiest one bounds).
        /// </summary>
        public double[] OneMachinePerReplica { get; set; } = [];
        public double MedianOneMachinePerReplica => OneMachinePerReplica.Length == 0 ? 0 : HarnessShell.Median(OneMachinePerReplica);
    }

    internal sealed class PerpetualReport : RunReport
    {
        public List<Row> Rows { get; set; } = [];
        /// <summary>One PBFT request round (client to a 4-replica service and back, null operation), microseconds.</summary>
        public LatencySummary? PbftRound { get; set; }
        /// <summary>The unreplicated request round (one replica), microseconds.</summary>
        public LatencySummary? UnreplicatedRound { get; set; }
        /// <summary>SafeSend(phi=3) latency in a group of 4 member processes of this harness, microseconds.</summary>
        public LatencySummary? SafeSendRound { get; set; }
    }

    public static int Run(string[] args)
    {
        string figure = Text(args, "--figure") ?? "all";
        bool quick = args.Contains("--quick");
        int calls = Option(args, "--calls", quick ? 100 : 4000);
        int rounds = Option(args, "--rounds", quick ? 1 : 3);
        int window = Option(args, "--window", 32);
        string? outPath = Text(args, "--out");
        Verbose = args.Contains("--verbose");
        WarmUp = TimeSpan.FromSeconds(Option(args, "--warmup-seconds", quick ? 1 : 10));
        var report = new PerpetualReport();
        report.Begin(RunReport.DotnetRun("tools/Isis.Bench", args), quick);
        Console.WriteLine($"Isis.Bench perpetual: figure {figure}, {calls} calls x {rounds} round(s), window {window}; load average {report.LoadAverageAtStart}");

        bool all = figure == "all";
        if (all || figure == "7")
        {
            // Fewer calls for the large services: on two cores, 14 or 20 processes share them.
            foreach (int n in quick ? [1, 4] : (int[])[1, 4, 7, 10]) report.Rows.Add(Measure("7", n, 0, window, n <= 4 ? calls : Math.Max(50, calls * 16 / (n * n)), rounds));
        }
        if (all || figure == "8")
        {
            foreach (double ms in quick ? [0.0, 2.0] : (double[])[0, 1, 2, 4, 6])
            {
                foreach (int n in (int[])[1, 4])
                    report.Rows.Add(Measure("8", n, ms, window, ms > 0 ? Math.Max(20, (int)(calls / (ms * 2))) : calls, rounds));
            }
        }
        if (all || figure == "9")
        {
            foreach (int n in (int[])[1, 4])
            {
                report.Rows.Add(Measure("9", n, 0, 1, Math.Max(20, calls / 4), rounds));
                report.Rows.Add(Measure("9", n, 0, window, calls, rounds));
            }
        }
        if (all || figure == "round")
        {
            report.UnreplicatedRound = Round(1, quick ? 200 : 2_000);
            report.PbftRound = Round(4, quick ? 200 : 2_000);
            report.SafeSendRound = SafeSendRound(quick);
        }
        report.End();
        Print(report);
        if (outPath != null)
        {
            File.WriteAllText(outPath, JsonSerializer.Serialize(report, RunReport.Json));
            Console.WriteLine($"written: {outPath}");
        }
        return 0;
    }

    // ---------------------------------------------------------------- the deployment

    /// <summary>A two-tier deployment of replica processes, and the harness as the caller's client.</summary>
    private sealed class Deployment : IDisposable
    {
        private readonly List<Process> _processes = new();
        public readonly PerpetualClient Client;

        /// <summary>Each replica process's CPU time so far (all its threads), seconds.</summary>
        public double[] CpuSeconds() => [.. _processes.Select(p =>
        {
            p.Refresh();
            return p.TotalProcessorTime.TotalSeconds;
        })];

        public Deployment(int replicas, double processingMs, bool oneTier = false)
        {
            byte[] key = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
            int[] ports = [.. Enumerable.Range(0, 2 * replicas + 1).Select(_ => LoopbackPorts.Next())];
            string[] common = [Convert.ToBase64String(key), string.Join(',', ports), replicas.ToString(CultureInfo.InvariantCulture), processingMs.ToString(CultureInfo.InvariantCulture)];
            foreach (string service in oneTier ? [Target] : (string[])[Target, Caller])
            {
                for (int i = 0; i < replicas; i++) _processes.Add(StartReplica(service, i, common));
            }
            foreach (Process p in _processes)
            {
                string? line = p.StandardOutput.ReadLine();
                if (line != "ready") throw new InvalidOperationException($"a replica process did not start: {line} {p.StandardError.ReadToEnd()}");
            }
            Client = new PerpetualClient(DeploymentOf(key, ports, replicas), "bench", oneTier ? Target : Caller);
        }

        private static Process StartReplica(string service, int index, string[] common)
        {
            (string host, string dll) = ToolProcess.SelfCommand();
            var psi = new ProcessStartInfo(host) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true, RedirectStandardInput = true };
            foreach (string a in (string[])[dll, "perpetual-replica", service, index.ToString(CultureInfo.InvariantCulture), .. common]) psi.ArgumentList.Add(a);
            return Process.Start(psi)!;
        }

        public void Dispose()
        {
            Client.Dispose();
            foreach (Process p in _processes) p.StandardInput.Close(); // each prints its view and counts, then stops
            foreach (Process p in _processes)
            {
                if (!p.WaitForExit(5_000)) p.Kill();
                string stats = p.StandardOutput.ReadToEnd().Trim();
                if (Verbose && stats.Length > 0) Console.WriteLine("    " + stats);
                p.Dispose();
            }
        }
    }

    private static PerpetualDeployment DeploymentOf(byte[] key, int[] ports, int replicas)
    {
        IPEndPoint[] At(int from) => [.. ports.Skip(from).Take(replicas).Select(p => new IPEndPoint(IPAddress.Loopback, p))];
        return new PerpetualDeployment(key).AddService(Target, At(0)).AddService(Caller, At(replicas)).AddClient("bench", new IPEndPoint(IPAddress.Loopback, ports[^1]));
    }

    /// <summary>
    /// A replica process: <c>perpetual-replica SERVICE INDEX KEY PORTS REPLICAS PROCESSING_MS</c>. The
    /// caller's loop serves each request [calls, window] by making that many calls to the target, at
    /// most window outstanding, and answers the count; the target answers each call at once or after
    /// sleeping the processing time. Prints "ready"; stops when its standard input closes.
    /// </summary>
    public static int RunReplica(string[] args)
    {
        string service = args[0];
        int index = int.Parse(args[1], CultureInfo.InvariantCulture);
        int[] ports = [.. args[3].Split(',').Select(p => int.Parse(p, CultureInfo.InvariantCulture))];
        int replicas = int.Parse(args[4], CultureInfo.InvariantCulture);
        var processing = TimeSpan.FromMilliseconds(double.Parse(args[5], CultureInfo.InvariantCulture));
        PerpetualDeployment deployment = DeploymentOf(Convert.FromBase64String(args[2]), ports, replicas);
        using PerpetualReplica replica = PerpetualReplica.Start(deployment, service, index, service == Caller ? CallerLoop : r => TargetLoop(r, processing));
        Console.WriteLine("ready");
        Console.In.ReadToEnd();
        if (CallTimes.Count > 0)
        {
            double[] t = [.. CallTimes.Order()];
            Console.Write($"call ms p10 {t[t.Length / 10]:F1} p50 {t[t.Length / 2]:F1} p90 {t[t.Length * 9 / 10]:F1} max {t[^1]:F1}; ");
        }
        Console.WriteLine($"{service}[{index}]: view {replica.View}, executed {replica.Executed}, divergent {replica.DivergentMessages}, dropped {replica.DroppedPackets} ({replica.DroppedByKind})");
        return 0;
    }

    /// <summary>At a caller replica: each asynchronous call's time from its sending to its reply, on the agreed clock (ms), for --verbose.</summary>
    private static readonly List<double> CallTimes = new();

    private static async Task CallerLoop(PerpetualReplica r)
    {
        while (true)
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            int[] ask = request.Read<int[]>();
            int calls = ask[0], window = ask[1], sent = 0, done = 0;
            if (window == 1)
            {
                for (; done < calls; done++) await r.SendReceiveAsync(Target, done);
            }
            else
            {
                var sentAt = new Dictionary<long, DateTimeOffset>();
                for (; sent < Math.Min(window, calls); sent++) sentAt[(await r.SendAsync(Target, sent)).Number] = r.CurrentTime;
                while (done < calls)
                {
                    PerpetualReply reply = await r.ReceiveReplyAsync();
                    CallTimes.Add((r.CurrentTime - sentAt[reply.Call.Number]).TotalMilliseconds);
                    done++;
                    if (sent < calls) sentAt[(await r.SendAsync(Target, sent++)).Number] = r.CurrentTime;
                }
            }
            r.SendReply(done, request);
        }
    }

    private static async Task TargetLoop(PerpetualReplica r, TimeSpan processing)
    {
        while (true)
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            if (processing > TimeSpan.Zero) Thread.Sleep(processing); // another machine's work: see the class remarks
            r.SendReply(0, request);
        }
    }

    // ---------------------------------------------------------------- measurements

    /// <summary>The shortest measured round: fifty ticks of the CPU-time clock.</summary>
    private static readonly TimeSpan MinRound = TimeSpan.FromMilliseconds(500);

    private static Row Measure(string figure, int replicas, double processingMs, int window, int calls, int rounds)
    {
        using var d = new Deployment(replicas, processingMs);
        // Warm-up: the JIT's tiers (a cold process runs at a third of its speed), the first view.
        var warm = Stopwatch.StartNew();
        while (warm.Elapsed < WarmUp) Invoke(d.Client, [Math.Min(calls, 200), window]);
        var rates = new List<double>();
        var projected = new List<double>();
        for (int round = 0; round < rounds; round++)
        {
            double[] cpuBefore = d.CpuSeconds();
            var clock = Stopwatch.StartNew();
            // The CPU times come from /proc in clock ticks of 10 ms: a round of a few milliseconds (a quick
            // 1+1 run) could show the busiest process using none, so a round lasts at least MinRound.
            int done = 0;
            do done += Invoke(d.Client, [calls, window]);
            while (clock.Elapsed < MinRound);
            rates.Add(done / clock.Elapsed.TotalSeconds);
            double busiest = d.CpuSeconds().Select((after, i) => after - cpuBefore[i]).Max();
            // A replica that sleeps its processing time uses no CPU for it, but on its own machine the time still passes.
            double bound = Math.Max(busiest, done * processingMs / 1000);
            projected.Add(bound > 0 ? done / bound : 0);
        }
        var row = new Row { Figure = figure, Replicas = replicas, ProcessingMs = processingMs, Window = window, Calls = calls, CallsPerSecond = [.. rates], OneMachinePerReplica = [.. projected] };
        Console.WriteLine($"  figure {figure}: {replicas}+{replicas} replicas, {processingMs} ms processing, window {window}: {row.Median:F0} calls/s (rounds: {string.Join(", ", rates.Select(x => x.ToString("F0", CultureInfo.InvariantCulture)))}); one machine per replica: {row.MedianOneMachinePerReplica:F0} calls/s");
        return row;
    }

    private static int Invoke(PerpetualClient client, int[] ask) =>
        client.InvokeAsync<int[], int>(ask).WaitAsync(TimeSpan.FromMinutes(5)).GetAwaiter().GetResult();

    /// <summary>Sequential null requests from the client to one service of <paramref name="replicas"/>: each one's round trip.</summary>
    private static LatencySummary Round(int replicas, int samples)
    {
        using var d = new Deployment(replicas, 0, oneTier: true);
        var warm = Stopwatch.StartNew();
        for (int i = 0; warm.Elapsed < WarmUp; i++) d.Client.InvokeAsync<int, int>(i).WaitAsync(TimeSpan.FromMinutes(1)).GetAwaiter().GetResult();
        var ticks = new List<long>();
        for (int i = 0; i < samples; i++)
        {
            long start = Stopwatch.GetTimestamp();
            d.Client.InvokeAsync<int, int>(i).WaitAsync(TimeSpan.FromMinutes(1)).GetAwaiter().GetResult();
            ticks.Add(Stopwatch.GetTimestamp() - start);
        }
        LatencySummary summary = LatencySummary.Of($"request round, {replicas} replica(s)", ticks);
        Console.WriteLine($"  {summary.Name}: median {summary.P50:F0} us, p90 {summary.P90:F0} us ({samples} sequential null requests)");
        return summary;
    }

    /// <summary>SafeSend(phi=3) latency of this harness with 4 member processes, run now (the same machine state).</summary>
    private static LatencySummary? SafeSendRound(bool quick)
    {
        string json = Path.Combine(Path.GetTempPath(), $"isis-perpetual-safe3-{Environment.ProcessId}.json");
        (string host, string dll) = ToolProcess.SelfCommand();
        string[] counts = quick ? ["--quick"] : ["--samples", "2000", "--warmup", "500", "--cooldown", "200", "--messages", "5000"];
        (int code, string output) = ToolProcess.Exec(TimeSpan.FromMinutes(10), host, [dll, "--members", "4", "--primitive", "safe3", "--payload", "100", "--out", json, .. counts]);
        try
        {
            if (code != 0 || !File.Exists(json))
            {
                Console.WriteLine($"  SafeSend(phi=3): the harness failed (exit {code}): {output}");
                return null;
            }
            BenchReport bench = JsonSerializer.Deserialize<BenchReport>(File.ReadAllText(json), RunReport.Json)!;
            LatencySummary? latency = bench.Runs.SelectMany(r => r.Latency).FirstOrDefault();
            if (latency != null) Console.WriteLine($"  SafeSend(phi=3), 4 members: median {latency.P50:F0} us, p90 {latency.P90:F0} us ({latency.Samples} rounds; {latency.Name})");
            return latency;
        }
        finally
        {
            File.Delete(json);
        }
    }

    private static void Print(PerpetualReport report)
    {
        Console.WriteLine();
        Console.WriteLine("figure  replicas  processing  window  calls/s (median)  vs 1+1   one machine per replica  vs 1+1");
        foreach (Row row in report.Rows)
        {
            Row? baseline = report.Rows.FirstOrDefault(b => b.Figure == row.Figure && b.Replicas == 1 && b.ProcessingMs == row.ProcessingMs && b.Window == row.Window);
            string ratio = baseline == null || baseline.Median == 0 ? "" : $"{100 * row.Median / baseline.Median:F0} %";
            string perMachineRatio = baseline == null || baseline.MedianOneMachinePerReplica == 0 ? "" : $"{100 * row.MedianOneMachinePerReplica / baseline.MedianOneMachinePerReplica:F0} %";
            Console.WriteLine($"{row.Figure,6}  {row.Replicas,4}+{row.Replicas,-3}  {row.ProcessingMs,7} ms  {row.Window,6}  {row.Median,16:F0}  {ratio,6}  {row.MedianOneMachinePerReplica,23:F0}  {perMachineRatio,6}");
        }
        foreach (string f in (string[])["9"])
        {
            foreach (int n in (int[])[1, 4])
            {
                Row? sync = report.Rows.FirstOrDefault(r => r.Figure == f && r.Replicas == n && r.Window == 1);
                Row? async = report.Rows.FirstOrDefault(r => r.Figure == f && r.Replicas == n && r.Window > 1);
                if (sync != null && async != null) Console.WriteLine($"asynchronous against synchronous, {n}+{n}: {async.Median / sync.Median:F1}x");
            }
        }
        if (report.PbftRound != null && report.SafeSendRound != null)
            Console.WriteLine($"PBFT request round (4 replicas) / SafeSend(phi=3) round (4 members): {report.PbftRound.P50 / report.SafeSendRound.P50:F2}x; unreplicated request round {report.UnreplicatedRound?.P50:F0} us");
    }
}
