using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using static Isis.Bench.HarnessShell;
using static Isis.Tools.ToolProcess;
using Isis.Tools;

namespace Isis.Bench;

/// <summary>
/// Side by side: our harness, JGroups 2.12 over UDP (the harness in ../shared/peers/jgroups) and
/// the C ping-pong floor (../shared/peers/limit), interleaved (ours, theirs, floor; ours, theirs,
/// floor; ...) so that all three see the same machine, 3 members, 100 B. Prints one table of
/// medians, ranges and ratios and writes it at the top of the HTML report, whose plots are our
/// last round's. JGroups is skipped, with the reason printed and put in the report, where Java,
/// the package, root (for the network namespace its IP multicast runs in) or the harness is missing.
/// </summary>
internal static class SideBySide
{
    public const string Usage =
        "Side by side with JGroups and the C floor: dotnet run -c Release --project tools/Isis.Bench -- --side-by-side [--rounds N] [--transport udp|tcp] [--members 3,5,10,20] [--quick] [--keep] [--out report.html]\n" +
        "  N rounds (default 3) of: our harness (3 members, 100 B: send, ordered, query, safe3), JGroups 2.12 UDP (FIFO, SEQUENCER, RpcDispatcher GET_ALL),\n" +
        "  the C UDP ping-pong. --transport tcp runs ours and JGroups over TCP instead; --transport multicast runs ours with IP multicast\n" +
        "  (JGroups' UDP stack multicasts either way). --members with other sizes than 3 compares Send alone\n" +
        "  (one-way latency and one sender's throughput) at each size. Needs root, java, javac and libjgroups-java for the JGroups part\n" +
        "  (skipped with the reason otherwise).";

    private const int DefaultMembers = 3;
    private const int Payload = 100;

    public static int Run(string[] args)
    {
        int rounds = Option(args, "--rounds", 3);
        bool quick = args.Contains("--quick");
        string transport = Text(args, "--transport") ?? "udp";
        if (transport is not ("udp" or "multicast" or "tcp")) throw new ArgumentException($"--transport must be udp, multicast or tcp; it is '{transport}'");
        // JGroups' UDP stack multicasts already (IP multicast on the namespace's loopback): it is the peer of both our UDP and our multicast.
        string peerStack = transport == "tcp" ? "tcp" : "udp";
        string? outPath = Text(args, "--out");
        int[] sizes = Text(args, "--members") is { } list
            ? [.. list.Split(',', StringSplitOptions.RemoveEmptyEntries).Select(v => int.Parse(v, CultureInfo.InvariantCulture))]
            : [DefaultMembers];
        if (sizes.Any(n => n < 3)) throw new ArgumentException("--members takes group sizes of at least 3, such as 3,5,10,20");
        // Sizes other than the default: Send alone at each size (the group-size scaling comparison).
        bool scaling = !(sizes.Length == 1 && sizes[0] == DefaultMembers);
        string work = Path.Combine(Path.GetTempPath(), $"isis-side-by-side-{Environment.ProcessId}");
        Directory.CreateDirectory(work);
        var wall = Stopwatch.StartNew();
        string loadAtStart = MachineFacts.LoadAverage();
        Console.WriteLine($"Isis.Bench side by side over {transport.ToUpperInvariant()}: {rounds} round(s) of ours, JGroups, C floor; {string.Join(",", sizes)} members, {Payload} B{(scaling ? ", Send only" : "")}; load average {loadAtStart}");

        using var jgroups = JGroupsHarness.Prepare(work, quick, peerStack, sizes);
        if (jgroups.SkipReason != null) Console.WriteLine($"  JGroups: skipped ({jgroups.SkipReason})");
        string? floorBinary = CompileFloor(work, out string? floorSkip);
        if (floorSkip != null) Console.WriteLine($"  C floor: skipped ({floorSkip})");

        var ours = new List<BenchReport>();
        var theirs = new List<List<JsonElement>>();
        var floor = new List<double>();
        try
        {
            for (int round = 1; round <= rounds; round++)
            {
                Console.WriteLine($"== {DateTime.UtcNow:HH:mm:ss} round {round}: ours");
                BenchReport? report = RunOurs(work, round, quick, transport, sizes, scaling);
                if (report == null) return 1;
                ours.Add(report);
                if (jgroups.SkipReason == null)
                {
                    Console.WriteLine($"== {DateTime.UtcNow:HH:mm:ss} round {round}: JGroups");
                    theirs.Add(scaling ? jgroups.RunSendAtEachSize(round) : jgroups.Run(round));
                }
                if (floorBinary != null)
                {
                    Console.WriteLine($"== {DateTime.UtcNow:HH:mm:ss} round {round}: C floor");
                    if (RunFloor(floorBinary, quick ? 2_000 : 20_000) is double rtt) floor.Add(rtt);
                }
            }
        }
        finally
        {
            if (args.Contains("--keep")) Console.WriteLine($"  work directory kept: {work} (JGroups logs in logs/, results in jg-*.jsonl)");
            else
            {
                try { Directory.Delete(work, recursive: true); } catch (IOException) { } // best effort: a temp directory
            }
        }

        var table = new SideBySideTable
        {
            Rounds = rounds,
            JGroupsSkipped = jgroups.SkipReason,
            FloorSkipped = floorSkip,
            LoadAverageAtStart = loadAtStart,
            LoadAverageAtEnd = MachineFacts.LoadAverage(),
            WallSeconds = wall.Elapsed.TotalSeconds,
            Transport = transport,
            Rows = scaling ? ScalingRows(ours, theirs, floor, peerStack, sizes) : Rows(ours, theirs, floor, peerStack),
        };
        Print(table);
        BenchReport last = ours[^1];
        last.Command = RunReport.DotnetRun("tools/Isis.Bench", args);
        last.SideBySide = table;
        last.LoadAverageAtStart = loadAtStart;
        last.LoadAverageAtEnd = table.LoadAverageAtEnd;
        last.WallSeconds = table.WallSeconds;
        if (outPath != null) Coordinator.Write(last, outPath);
        return 0;
    }

    // ---------------------------------------------------------------- the three harnesses

    private static BenchReport? RunOurs(string work, int round, bool quick, string transport, int[] sizes, bool scaling)
    {
        string json = Path.Combine(work, $"isis-{round}.json");
        (string host, string? dll) = ToolProcess.SelfCommand();
        var psi = new ProcessStartInfo(host) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        if (dll != null) psi.ArgumentList.Add(dll);
        string[] common = ["--members", string.Join(",", sizes), "--primitive", scaling ? "send" : "send,ordered,query,safe3", "--payload", "100", "--transport", transport, "--out", json];
        string[] counts = quick ? ["--quick"] : ["--samples", "5000", "--warmup", "1000", "--cooldown", "500", "--messages", "100000"];
        foreach (string a in common.Concat(counts)) psi.ArgumentList.Add(a);
        using Process p = Process.Start(psi)!;
        Task<string> stdout = p.StandardOutput.ReadToEndAsync();
        Task<string> stderr = p.StandardError.ReadToEndAsync();
        if (!p.WaitForExit(TimeSpan.FromMinutes(10)))
        {
            p.Kill(entireProcessTree: true);
            Console.Error.WriteLine("Isis.Bench side by side: our harness did not finish within 10 minutes");
            return null;
        }
        if (p.ExitCode != 0 || !File.Exists(json))
        {
            Console.Error.WriteLine($"Isis.Bench side by side: our harness failed (exit {p.ExitCode}):\n{stdout.Result}\n{stderr.Result}");
            return null;
        }
        return JsonSerializer.Deserialize<BenchReport>(File.ReadAllText(json), RunReport.Json);
    }

    private static string? CompileFloor(string work, out string? skip)
    {
        skip = null;
        string? source = RepoFile(Path.Combine("shared", "peers", "limit", "udp_pingpong.c"));
        if (source == null)
        {
            skip = "../shared/peers/limit/udp_pingpong.c not found";
            return null;
        }
        string binary = Path.Combine(work, "udp_pingpong");
        (int code, string output) = Exec(TimeSpan.FromMinutes(1), "gcc", "-O2", "-o", binary, source);
        if (code == 0) return binary;
        skip = $"gcc failed or is missing: {output.Trim()}";
        return null;
    }

    /// <summary>The ping-pong's round-trip p50 in microseconds (a 100 B datagram there and back between two C processes).</summary>
    private static double? RunFloor(string binary, int roundTrips)
    {
        int port = 47000 + Environment.ProcessId % 2000 * 2;
        (int code, string output) = Exec(TimeSpan.FromMinutes(2), binary, roundTrips.ToString(CultureInfo.InvariantCulture), port.ToString(CultureInfo.InvariantCulture));
        int at = output.IndexOf("p50 ", StringComparison.Ordinal);
        if (code != 0 || at < 0) return null;
        string number = new([.. output[(at + 4)..].TakeWhile(c => char.IsDigit(c) || c == '.')]);
        return double.Parse(number, CultureInfo.InvariantCulture);
    }

    /// <summary>JGroups 2.12 over UDP (IP multicast on the loopback of a private network namespace) or TCP, through the shared harness.</summary>
    private sealed class JGroupsHarness : IDisposable
    {
        private readonly string _work = "", _harness = "", _namespace = "", _transport = "udp";
        private readonly bool _quick;
        private readonly int[] _sizes = [];

        private JGroupsHarness(string? skip) => SkipReason = skip;

        private JGroupsHarness(string work, string harness, string ns, bool quick, string transport, int[] sizes)
        {
            (_work, _harness, _namespace, _quick, _transport, _sizes) = (work, harness, ns, quick, transport, sizes);
        }

        public string? SkipReason { get; }

        public static JGroupsHarness Prepare(string work, bool quick, string transport, int[] sizes)
        {
            const string Jar = "/usr/share/java/jgroups.jar";
            string? bench = RepoFile(Path.Combine("shared", "peers", "jgroups", "JgBench.java"));
            if (bench == null) return new("the harness ../shared/peers/jgroups was not found");
            if (!OperatingSystem.IsLinux()) return new("it runs in a Linux network namespace");
            if (Environment.UserName != "root") return new("it needs root, to make the network namespace its IP multicast runs in");
            if (!File.Exists(Jar)) return new($"{Jar} is missing: apt-get install libjgroups-java");
            foreach (string tool in new[] { "java", "javac", "python3", "ip" })
            {
                if (!OnPath(tool)) return new($"{tool} is not installed{(tool.StartsWith("java", StringComparison.Ordinal) ? ": apt-get install default-jdk-headless" : "")}");
            }
            string harness = Path.GetDirectoryName(bench)!;
            string classes = Path.Combine(work, "classes"), stacks = Path.Combine(work, "stacks");
            Directory.CreateDirectory(classes);
            Directory.CreateDirectory(stacks);
            (int code, string output) = Exec(TimeSpan.FromMinutes(3), "javac", "-cp", Jar, "-d", classes, bench);
            if (code != 0) return new($"javac failed: {output.Trim()}");
            foreach (int n in sizes)
            {
                // The TCP stack lists its initial members' ports, so each group size has its own stacks.
                string forSize = Path.Combine(stacks, n.ToString(CultureInfo.InvariantCulture));
                Directory.CreateDirectory(forSize);
                (code, output) = Exec(TimeSpan.FromMinutes(1), "python3", Path.Combine(harness, "gen_stacks.py"), Jar, forSize, n.ToString(CultureInfo.InvariantCulture));
                if (code != 0) return new($"gen_stacks.py failed: {output.Trim()}");
            }
            string ns = $"isis_sbs_{Environment.ProcessId}";
            (code, output) = Exec(TimeSpan.FromSeconds(30), "ip", "netns", "add", ns);
            if (code != 0) return new($"ip netns add failed: {output.Trim()}");
            Exec(TimeSpan.FromSeconds(30), "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up");
            Exec(TimeSpan.FromSeconds(30), "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "multicast", "on");
            return new(work, harness, ns, quick, transport, sizes);
        }

        /// <summary>One round: UDP FIFO (throughput, latency, GET_ALL), SEQUENCER throughput, SEQUENCER without bundling latency.</summary>
        public List<JsonElement> Run(int round)
        {
            string results = Path.Combine(_work, $"jg-{round}.jsonl");
            string tput = _quick ? "tput:100:1:5000" : "tput:100:1:100000";
            string lat = _quick ? "lat:100:0:200" : "lat:100:0:2000";
            string rpc = _quick ? "rpc:100:1:200" : "rpc:100:1:2000";
            string t = _transport;
            int n = _sizes[0];
            Cluster(n, $"{t}.xml", $"fifo-{round}", results, $"{t}-fifo", $"{tput},{lat},{rpc}");
            Cluster(n, $"{t}-seq.xml", $"seq-{round}", results, $"{t}-seq", tput);
            Cluster(n, $"{t}-seq-nb.xml", $"seqnb-{round}", results, $"{t}-seq-nobundle", lat);
            return ReadResults(results);
        }

        /// <summary>One round of the scaling comparison: at each group size, the FIFO stack's one-sender throughput and one-way latency.</summary>
        public List<JsonElement> RunSendAtEachSize(int round)
        {
            string results = Path.Combine(_work, $"jg-{round}.jsonl");
            string tput = _quick ? "tput:100:1:5000" : "tput:100:1:100000";
            string lat = _quick ? "lat:100:0:200" : "lat:100:0:2000";
            foreach (int n in _sizes) Cluster(n, $"{_transport}.xml", $"fifo{n}-{round}", results, FifoTag(_transport, n), $"{tput},{lat}");
            return ReadResults(results);
        }

        public static string FifoTag(string transport, int members) => $"{transport}-fifo-{members}";

        private static List<JsonElement> ReadResults(string results)
        {
            var rows = new List<JsonElement>();
            if (!File.Exists(results)) return rows;
            foreach (string line in File.ReadAllLines(results))
            {
                if (line.Trim().Length == 0) continue;
                using JsonDocument doc = JsonDocument.Parse(line);
                rows.Add(doc.RootElement.Clone());
            }
            return rows;
        }

        private void Cluster(int members, string stack, string name, string results, string tag, string experiments)
        {
            var psi = new ProcessStartInfo("bash") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            string size = members.ToString(CultureInfo.InvariantCulture);
            foreach (string a in new[] { Path.Combine(_harness, "run_cluster.sh"), _namespace, Path.Combine(_work, "stacks", size, stack), size,
                         $"isis-sbs-{Environment.ProcessId}-{name}", results, tag, experiments, Path.Combine(_work, "logs") }) psi.ArgumentList.Add(a);
            psi.Environment["JGB_CLASSES"] = Path.Combine(_work, "classes");
            psi.Environment["DEADLINE"] = "200"; // every JVM exits by then: the wait below is bounded
            using Process p = Process.Start(psi)!;
            Task<string> stdout = p.StandardOutput.ReadToEndAsync();
            Task<string> stderr = p.StandardError.ReadToEndAsync();
            if (!p.WaitForExit(TimeSpan.FromSeconds(260))) p.Kill(entireProcessTree: true);
            if (p.HasExited && p.ExitCode != 0) Console.WriteLine($"  JGroups {tag}: exit {p.ExitCode} {stderr.Result.Trim()}");
            _ = stdout.Result;
        }

        public void Dispose()
        {
            if (_namespace.Length > 0) Exec(TimeSpan.FromSeconds(30), "ip", "netns", "del", _namespace);
        }
    }

    // ---------------------------------------------------------------- the table

    private static List<SideBySideRow> Rows(List<BenchReport> ours, List<List<JsonElement>> theirs, List<double> floor, string transport)
    {
        double? Ours(BenchReport r, string primitive, string latency, Func<LatencySummary, double> pick) =>
            r.Runs.FirstOrDefault(x => x.Primitive == primitive)?.Latency.FirstOrDefault(l => l.Name == latency && l.Samples > 0) is { } s ? pick(s) : null;
        double? Rate(BenchReport r, string primitive) =>
            r.Runs.FirstOrDefault(x => x.Primitive == primitive) is { Throughput.Count: > 0 } run ? Median(run.Throughput.Select(t => t.DeliveriesPerSecond)) : null;
        double? Theirs(List<JsonElement> rows, string tag, string type, Func<JsonElement, double> pick)
        {
            foreach (JsonElement e in rows)
            {
                if (e.GetProperty("tag").GetString() == tag && e.GetProperty("exp").GetString()!.StartsWith(type + ":", StringComparison.Ordinal) && !e.TryGetProperty("error", out _)) return pick(e);
            }
            return null;
        }

        const string All = "send->deliver, all receivers";
        var rows = new List<SideBySideRow>
        {
            Row("Send, one-way delivery p50", "us", ours.Select(r => Ours(r, "send", All, l => l.P50)), theirs.Select(t => Theirs(t, $"{transport}-fifo", "lat", e => e.GetProperty("oneway_us").GetProperty("p50").GetDouble())), "<= 30 us, or 3x the floor's one-way"),
            Row("Send, one-way delivery p99", "us", ours.Select(r => Ours(r, "send", All, l => l.P99)), theirs.Select(t => Theirs(t, $"{transport}-fifo", "lat", e => e.GetProperty("oneway_us").GetProperty("p99").GetDouble())), "<= 300 us"),
            Row("Send, the sender's own delivery p50", "us", ours.Select(r => Ours(r, "send", "send->deliver, sender (local)", l => l.P50)), [], "<= 10 us"),
            Row("Send, round trip to every receiver's ack p50", "us", ours.Select(r => Ours(r, "send", "round trip (send -> every receiver's ack delivered at sender)", l => l.P50)), theirs.Select(t => Theirs(t, $"{transport}-fifo", "lat", e => e.GetProperty("rtt_all_acks_us").GetProperty("p50").GetDouble())), ""),
            Row("OrderedSend, one-way delivery p50 (JGroups: SEQUENCER, no bundling)", "us", ours.Select(r => Ours(r, "ordered", All, l => l.P50)), theirs.Select(t => Theirs(t, $"{transport}-seq-nobundle", "lat", e => e.GetProperty("oneway_us").GetProperty("p50").GetDouble())), "<= 60 us"),
            Row("Query(ALL) round trip p50 (JGroups: RpcDispatcher GET_ALL)", "us", ours.Select(r => Ours(r, "query", "round trip (QueryAsync(ALL) -> all replies)", l => l.P50)), theirs.Select(t => Theirs(t, $"{transport}-fifo", "rpc", e => e.GetProperty("lat_us").GetProperty("p50").GetDouble())), "<= 100 us"),
            Row("SafeSend(3) in memory, one-way delivery p50", "us", ours.Select(r => Ours(r, "safe3", All, l => l.P50)), [], "<= 100 us"),
            Row("SafeSend(3) in memory, SafeSendAsync completed p50", "us", ours.Select(r => Ours(r, "safe3", "SafeSendAsync -> task completed at sender", l => l.P50)), [], ""),
            Row("Send throughput, one sender, per member", "/s", ours.Select(r => Rate(r, "send")), theirs.Select(t => Theirs(t, $"{transport}-fifo", "tput", e => e.GetProperty("mcasts_per_s").GetDouble())), "no loss"),
            Row("OrderedSend throughput, per member (JGroups: SEQUENCER)", "/s", ours.Select(r => Rate(r, "ordered")), theirs.Select(t => Theirs(t, $"{transport}-seq", "tput", e => e.GetProperty("mcasts_per_s").GetDouble())), "no loss"),
            Row("C floor: UDP ping-pong one-way p50 (round trip / 2)", "us", floor.Select(v => (double?)(v / 2)), [], ""),
        };
        return rows;
    }

    /// <summary>The scaling table: Send's one-way latency and one sender's throughput at each group size.</summary>
    private static List<SideBySideRow> ScalingRows(List<BenchReport> ours, List<List<JsonElement>> theirs, List<double> floor, string transport, int[] sizes)
    {
        PrimitiveRun? Send(BenchReport r, int n) => r.Runs.FirstOrDefault(x => x.Primitive == "send" && x.Members == n);
        double? Latency(BenchReport r, int n, Func<LatencySummary, double> pick) =>
            Send(r, n)?.Latency.FirstOrDefault(l => l.Name == "send->deliver, all receivers" && l.Samples > 0) is { } s ? pick(s) : null;
        double? Rate(BenchReport r, int n) => Send(r, n) is { Throughput.Count: > 0 } run ? Median(run.Throughput.Select(t => t.DeliveriesPerSecond)) : null;
        double? Theirs(List<JsonElement> rows, int n, string type, Func<JsonElement, double> pick)
        {
            string tag = JGroupsHarness.FifoTag(transport, n);
            foreach (JsonElement e in rows)
            {
                if (e.GetProperty("tag").GetString() == tag && e.GetProperty("exp").GetString()!.StartsWith(type + ":", StringComparison.Ordinal) && !e.TryGetProperty("error", out _)) return pick(e);
            }
            return null;
        }

        var rows = new List<SideBySideRow>();
        foreach (int n in sizes)
        {
            rows.Add(Row($"{n} members: Send, one-way delivery p50", "us", ours.Select(r => Latency(r, n, l => l.P50)), theirs.Select(t => Theirs(t, n, "lat", e => e.GetProperty("oneway_us").GetProperty("p50").GetDouble())), "ahead of JGroups"));
            rows.Add(Row($"{n} members: Send, one-way delivery p99", "us", ours.Select(r => Latency(r, n, l => l.P99)), theirs.Select(t => Theirs(t, n, "lat", e => e.GetProperty("oneway_us").GetProperty("p99").GetDouble())), "ahead of JGroups"));
            rows.Add(Row($"{n} members: Send throughput, one sender, per member", "/s", ours.Select(r => Rate(r, n)), theirs.Select(t => Theirs(t, n, "tput", e => e.GetProperty("mcasts_per_s").GetDouble())), "ahead of JGroups"));
        }
        rows.Add(Row("C floor: UDP ping-pong one-way p50 (round trip / 2)", "us", floor.Select(v => (double?)(v / 2)), [], ""));
        return rows;
    }

    private static SideBySideRow Row(string measure, string unit, IEnumerable<double?> ours, IEnumerable<double?> theirs, string target)
    {
        double[] o = [.. ours.Where(v => v.HasValue).Select(v => v!.Value)];
        double[] t = [.. theirs.Where(v => v.HasValue).Select(v => v!.Value)];
        return new SideBySideRow
        {
            Measure = measure,
            Unit = unit,
            Target = target,
            Ours = o,
            Theirs = t,
            OursMedian = o.Length > 0 ? Median(o) : null,
            TheirsMedian = t.Length > 0 ? Median(t) : null,
        };
    }

    private static void Print(SideBySideTable t)
    {
        Console.WriteLine();
        Console.WriteLine($"Side by side over {t.Transport.ToUpperInvariant()}, {t.Rounds} round(s) interleaved; load average {t.LoadAverageAtStart} at start, {t.LoadAverageAtEnd} at end; {t.WallSeconds:F0} s");
        if (t.JGroupsSkipped != null) Console.WriteLine($"  JGroups skipped: {t.JGroupsSkipped}");
        if (t.FloorSkipped != null) Console.WriteLine($"  C floor skipped: {t.FloorSkipped}");
        Console.WriteLine($"  {"measure",-72} {"Isis median (range)",-28} {"JGroups median (range)",-28} {"Isis/JGroups",12}  target");
        foreach (SideBySideRow r in t.Rows)
        {
            Console.WriteLine($"  {r.Measure + " (" + r.Unit + ")",-72} {Cell(r.OursMedian, r.Ours),-28} {Cell(r.TheirsMedian, r.Theirs),-28} {(r.Ratio is double x ? x.ToString("F2", CultureInfo.InvariantCulture) : "-"),12}  {r.Target}");
        }
    }

    internal static string Cell(double? median, double[] values) =>
        median is double m ? $"{Format(m)} ({Format(values.Min())}-{Format(values.Max())})" : "-";

    internal static string Format(double v) => v >= 1000 ? v.ToString("N0", CultureInfo.InvariantCulture) : v.ToString("F1", CultureInfo.InvariantCulture);

    // ---------------------------------------------------------------- helpers

    private static bool OnPath(string tool) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "").Split(Path.PathSeparator).Any(d => d.Length > 0 && File.Exists(Path.Combine(d, tool)));
}

/// <summary>The side-by-side table (<c>--side-by-side</c>): medians over interleaved rounds of ours, JGroups and the C floor.</summary>
internal sealed class SideBySideTable
{
    public int Rounds { get; set; }
    /// <summary>udp or tcp: ours and JGroups' stack both use it.</summary>
    public string Transport { get; set; } = "udp";
    public string? JGroupsSkipped { get; set; }
    public string? FloorSkipped { get; set; }
    public string LoadAverageAtStart { get; set; } = "";
    public string LoadAverageAtEnd { get; set; } = "";
    public double WallSeconds { get; set; }
    public List<SideBySideRow> Rows { get; set; } = [];
}

/// <summary>One measure: every round's value for us and for JGroups, their medians, and our median over theirs.</summary>
internal sealed class SideBySideRow
{
    public string Measure { get; set; } = "";
    public string Unit { get; set; } = "";
    public string Target { get; set; } = "";
    public double[] Ours { get; set; } = [];
    public double[] Theirs { get; set; } = [];
    public double? OursMedian { get; set; }
    public double? TheirsMedian { get; set; }
    public double? Ratio => OursMedian is double o && TheirsMedian is double t && t > 0 ? o / t : null;
}
