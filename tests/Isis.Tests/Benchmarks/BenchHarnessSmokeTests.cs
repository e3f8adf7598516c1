using System.Diagnostics;
using System.Reflection;
using System.Text.Json;
using Isis.Tests.Tools;

namespace Isis.Tests.Benchmarks;

/// <summary>
/// CI smoke test of the multi-process harness (tools/Isis.Bench): it starts, forms its 3-member
/// group, runs the latency and throughput phases of send, ordered, safe3 and query plus the
/// response-delay phase, and writes its result file with the warm-up, measured and cool-down counts
/// of every phase; scale mode runs with 4 members; failover mode runs one round. Asserts counts
/// only, never a timing.
/// Runs alone: its four processes would otherwise starve the in-process runtime tests.
/// </summary>
[Collection(nameof(BenchHarnessCollection))]
public sealed class BenchHarnessSmokeTests
{
    [Fact]
    public async Task QuickRun_ExitsZero_AndWritesSampleCounts()
    {
        // The test project references tools/Isis.Bench (build order only) and records where its dll lands.
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchDll").Value!;
        Assert.True(File.Exists(dll), $"tools/Isis.Bench was not built: {dll} is missing");

        string dir = Directory.CreateTempSubdirectory("isis-bench-smoke-").FullName;
        string report = Path.Combine(dir, "quick.html");
        string output = Path.ChangeExtension(report, ".json");
        try
        {
            var (exitCode, log) = await DotnetTool.RunToExit([dll, "--quick", "--out", report], TimeSpan.FromSeconds(120));
            Assert.True(exitCode == 0, $"Isis.Bench --quick exited with {exitCode}:\n{log}");
            Assert.True(File.Exists(output), $"no result file at {output}:\n{log}");

            // The self-contained report: plots inline, the machine, the commit and the command on the page, sample counts in the tables.
            string html = File.ReadAllText(report);
            Assert.Contains("<svg", html);
            Assert.Contains("Latency against group size", html);
            Assert.Contains("Throughput against payload size", html);
            Assert.Contains("--quick --out", html);
            Assert.Contains(">commit<", html);
            Assert.Contains("Groups: settings and sample counts", html);
            Assert.Contains("cool-down rounds", html);
            Assert.DoesNotContain("<script", html);
            Assert.DoesNotContain("http://", html.Replace("http://www.w3.org/2000/svg", "", StringComparison.Ordinal));
            string csv = File.ReadAllText(Path.ChangeExtension(report, ".csv"));
            Assert.StartsWith("kind,members,payload_bytes,primitive", csv);
            Assert.Contains(",warmup,cooldown\n", csv);
            Assert.Contains("latency,3,100,send,", csv);
            Assert.Contains("group,3,100,,\"completed;", csv);

            using JsonDocument result = JsonDocument.Parse(File.ReadAllText(output));
            JsonElement root = result.RootElement;
            // Every phase states its counts: warm-up, measured and cool-down, for the run and for each group.
            Assert.True(root.GetProperty("cooldown").GetInt32() > 0, "no cool-down rounds reported");
            JsonElement group = Assert.Single(root.GetProperty("groups").EnumerateArray());
            Assert.True(group.GetProperty("completed").GetBoolean(), $"the group did not complete:\n{log}");
            Assert.Equal(3, group.GetProperty("members").GetInt32());
            foreach (string count in (string[])["latencyWarmupRounds", "latencyRecordedRounds", "latencyCooldownRounds", "responseDelayCooldownRounds"])
                Assert.True(group.GetProperty(count).GetInt32() > 0, $"group: {count} not reported");
            JsonElement[] runs = [.. root.GetProperty("runs").EnumerateArray()];
            // --quick covers Send plus at least one ordered and one safe primitive, and the Query round trip.
            string[] primitives = [.. runs.Select(r => r.GetProperty("primitive").GetString()!)];
            Assert.Contains("send", primitives);
            Assert.Contains("ordered", primitives);
            Assert.Contains("safe3", primitives);
            Assert.Contains("query", primitives);
            foreach (JsonElement run in runs)
            {
                string name = run.GetProperty("primitive").GetString()!;
                JsonElement[] latency = [.. run.GetProperty("latency").EnumerateArray()];
                Assert.NotEmpty(latency);
                Assert.All(latency, l => Assert.True(l.GetProperty("samples").GetInt32() > 0, $"{name}: no latency samples for {l.GetProperty("name")}"));
                Assert.All(latency, l => Assert.Equal(101, l.GetProperty("cdf").GetArrayLength()));
                Assert.True(run.GetProperty("latencyCooldownRounds").GetInt32() > 0, $"{name}: no cool-down rounds reported");
                Assert.Equal(run.GetProperty("latencyRecordedRounds").GetInt32(), latency[^1].GetProperty("samples").GetInt32()); // the sender's round trips
                JsonElement[] throughput = [.. run.GetProperty("throughput").EnumerateArray()];
                Assert.Equal(run.GetProperty("members").GetInt32(), throughput.Length);
                Assert.All(throughput, t => Assert.True(t.GetProperty("deliveries").GetInt64() > 0, $"{name}: member {t.GetProperty("member")} delivered nothing"));
                // The rate is over the middle of the blast: warm-up + measured + cool-down deliveries make the whole blast.
                int messages = run.GetProperty("messagesPerBlast").GetInt32();
                Assert.All(throughput, t =>
                {
                    Assert.True(t.GetProperty("cooldownDeliveries").GetInt64() > 0, $"{name}: no cool-down deliveries reported");
                    Assert.Equal(messages, t.GetProperty("warmupDeliveries").GetInt64() + t.GetProperty("measuredDeliveries").GetInt64() + t.GetProperty("cooldownDeliveries").GetInt64());
                    Assert.True(t.GetProperty("deliveriesPerSecond").GetDouble() > 0, $"{name}: member {t.GetProperty("member")}: no rate over the measured window");
                });
            }
            JsonElement[] delay = [.. root.GetProperty("responseDelay").EnumerateArray()];
            Assert.Contains(delay, d => d.GetProperty("mode").GetString() == "send+flush");
            Assert.Contains(delay, d => d.GetProperty("mode").GetString()!.StartsWith("safesend", StringComparison.Ordinal));
            Assert.All(delay, d => Assert.True(d.GetProperty("delay").GetProperty("samples").GetInt32() > 0, $"no response-delay rounds for {d.GetProperty("mode")}"));
            Assert.All(delay, d => Assert.True(d.GetProperty("cooldownRounds").GetInt32() > 0, $"no response-delay cool-down rounds for {d.GetProperty("mode")}"));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    /// <summary>
    /// Scale mode with 4 member processes: the group forms, every member delivers every member's
    /// Sends, a SIGKILLed member leaves every survivor's view, and the report holds a figure from
    /// every member. Fast failure detection (1 s) keeps it to a few seconds; asserts counts, never a timing.
    /// </summary>
    [Fact]
    public async Task ScaleRun_FourMembers_ExitsZero_AndReportsEveryMember()
    {
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchDll").Value!;
        Assert.True(File.Exists(dll), $"tools/Isis.Bench was not built: {dll} is missing");

        string dir = Directory.CreateTempSubdirectory("isis-bench-scale-smoke-").FullName;
        string output = Path.Combine(dir, "scale.json");
        try
        {
            var (exitCode, log) = await DotnetTool.RunToExit(
                [dll, "--scale", "--members", "4", "--sends", "5", "--idle-seconds", "1", "--heartbeat-ms", "100", "--suspicion", "10", "--timeout", "60", "--out", output],
                TimeSpan.FromSeconds(120));
            Assert.True(exitCode == 0, $"Isis.Bench --scale exited with {exitCode}:\n{log}");
            Assert.True(File.Exists(output), $"no result file at {output}:\n{log}");

            using JsonDocument result = JsonDocument.Parse(File.ReadAllText(output));
            JsonElement scale = result.RootElement.GetProperty("scale");
            Assert.Equal(4, scale.GetProperty("members").GetInt32());
            Assert.Equal(20, scale.GetProperty("deliveriesPerMember").GetInt64());
            Assert.Equal(100, scale.GetProperty("heartbeatMs").GetInt32());
            Assert.Equal(10, scale.GetProperty("suspicion").GetInt32());
            foreach (string all in (string[])["formedMs", "viewsToForm", "idleCpuPercentPerMember", "sendsDeliveredMs", "rssAfterFormMb", "rssAfterSendsMb", "heapAfterSendsMb"])
                Assert.True(scale.GetProperty(all).GetProperty("samples").GetInt32() == 4, $"{all}: not one figure per member:\n{log}");
            Assert.Equal(3, scale.GetProperty("killToViewMs").GetProperty("samples").GetInt32());
            Assert.True(scale.GetProperty("rssAfterFormMb").GetProperty("min").GetDouble() > 0, "VmRSS was not read");
            Assert.NotEqual(0, scale.GetProperty("killedRank").GetInt32()); // never the oldest member
            Assert.Contains("group formed", log);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    /// <summary>
    /// SafeSend with disk durability (--safe-log): every member logs and fsyncs before acknowledging,
    /// the run reports every recorded sample, and the members delete their logs when done.
    /// </summary>
    [Fact]
    public async Task SafeSendWithDiskLogging_ExitsZero_ReportsItsSamples_AndLeavesNoLogBehind()
    {
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchDll").Value!;
        string dir = Directory.CreateTempSubdirectory("isis-bench-safelog-smoke-").FullName;
        string logs = Path.Combine(dir, "logs");
        string output = Path.Combine(dir, "safe.json");
        try
        {
            var (exitCode, log) = await DotnetTool.RunToExit(
                [dll, "--primitive", "safe3", "--warmup", "10", "--samples", "100", "--messages", "500", "--safe-log", logs, "--timeout", "60", "--out", output],
                TimeSpan.FromSeconds(120));
            Assert.True(exitCode == 0, $"Isis.Bench --safe-log exited with {exitCode}:\n{log}");
            using JsonDocument result = JsonDocument.Parse(File.ReadAllText(output));
            JsonElement run = result.RootElement.GetProperty("runs")[0];
            Assert.Equal("safe3", run.GetProperty("primitive").GetString());
            JsonElement completed = run.GetProperty("latency").EnumerateArray().Single(l => l.GetProperty("name").GetString()!.StartsWith("SafeSendAsync", StringComparison.Ordinal));
            Assert.Equal(100, completed.GetProperty("samples").GetInt32());
            Assert.Contains("--safe-log", result.RootElement.GetProperty("command").GetString());
            Assert.True(Directory.Exists(logs), "the members never created their SafeSend logs");
            Assert.Empty(Directory.EnumerateFileSystemEntries(logs));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    /// <summary>Every BenchmarkDotNet suite runs once (BenchmarkDotNet's Dry job, in-process), so benchmarks cannot rot.</summary>
    [Fact]
    public async Task FailoverRun_OneRound_ExitsZero_AndReportsEveryMeasure()
    {
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchDll").Value!;
        string output = Path.Combine(Directory.CreateTempSubdirectory("isis-bench-failover-").FullName, "failover.json");
        try
        {
            var (exitCode, log) = await DotnetTool.RunToExit([dll, "--failover", "--members", "4", "--rounds", "1", "--out", output], TimeSpan.FromSeconds(120));
            Assert.True(exitCode == 0, $"Isis.Bench --failover exited with {exitCode}:\n{log}");
            using JsonDocument result = JsonDocument.Parse(File.ReadAllText(output));
            string[] measures = [.. result.RootElement.GetProperty("results").EnumerateArray().Select(r => r.GetProperty("measure").GetString()!)];
            Assert.Equal(5, measures.Length);
            Assert.Contains("leader's host SIGKILL -> view", measures);
            Assert.Contains("join, every original host gone", measures);
            Assert.All(result.RootElement.GetProperty("results").EnumerateArray(), r => Assert.Equal(1, r.GetProperty("samples").GetArrayLength()));
        }
        finally
        {
            Directory.Delete(Path.GetDirectoryName(output)!, recursive: true);
        }
    }

    [Fact]
    public async Task HandoffRun_ExitsZero_AndReportsEveryVariantBesideTheFloor()
    {
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchDll").Value!;
        var (exitCode, log) = await DotnetTool.RunToExit([dll, "--handoff", "--round-trips", "300", "--repeat", "1"], TimeSpan.FromSeconds(120));
        Assert.True(exitCode == 0, $"Isis.Bench --handoff exited with {exitCode}:\n{log}");
        Assert.Contains("C floor: ", log); // measured, or skipped with the reason
        foreach (string variant in (string[])["blocking receive", "busy-polling receive", "1 hand-off, ManualResetEventSlim", "2 hand-offs, SemaphoreSlim", "2 hand-offs, spin then block"])
            Assert.Matches($@"\| {System.Text.RegularExpressions.Regex.Escape(variant)}[^|]* \| [0-9.]+ us", log);
    }

    [Theory]
    [InlineData("udp", "UDP")]
    [InlineData("tcp", "TCP")]
    public async Task SideBySide_Quick_WritesOneTableWithEveryMeasure_AndJGroupsMeasuredOrSkippedWithAReason(string transport, string label)
    {
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchDll").Value!;
        string dir = Directory.CreateTempSubdirectory("isis-sbs-").FullName;
        try
        {
            string html = Path.Combine(dir, "sbs.html");
            var (exitCode, log) = await DotnetTool.RunToExit([dll, "--side-by-side", "--rounds", "1", "--quick", "--transport", transport, "--out", html], TimeSpan.FromSeconds(400));
            Assert.True(exitCode == 0, $"Isis.Bench --side-by-side exited with {exitCode}:\n{log}");
            string report = File.ReadAllText(html);
            Assert.Contains($"Side by side: Isis, JGroups 2.12 ({label}) and the C floor, interleaved", report);
            Assert.Contains($"<td>{transport}</td>", report); // our groups ran over it
            foreach (string measure in (string[])["Send, one-way delivery p50", "Send, the sender&#39;s own delivery p50", "Query(ALL) round trip p50", "SafeSend(3) in memory, one-way delivery p50", "OrderedSend throughput, per member"])
                Assert.Contains(measure, report);
            // Ours is always measured; JGroups either has figures in every row it shares with us, or the page says why it was skipped.
            Assert.Matches(@"Send, one-way delivery p50 \(us\)\s+[0-9.,]+ \(", log);
            bool skipped = log.Contains("JGroups skipped: ", StringComparison.Ordinal);
            if (skipped) Assert.Contains("<b>JGroups skipped</b>: ", report);
            else Assert.Matches(@"Send throughput, one sender, per member \(/s\)\s+[0-9.,]+ \([^)]*\)\s+[0-9.,]+ \(", log);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public async Task SideBySide_AtSeveralGroupSizes_OverIpMulticast_ComparesSendAtEachSize()
    {
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchDll").Value!;
        string dir = Directory.CreateTempSubdirectory("isis-sbs-sizes-").FullName;
        try
        {
            string html = Path.Combine(dir, "sizes.html");
            var (exitCode, log) = await DotnetTool.RunToExit([dll, "--side-by-side", "--rounds", "1", "--quick", "--members", "4,5", "--transport", "multicast", "--out", html], TimeSpan.FromSeconds(400));
            Assert.True(exitCode == 0, $"Isis.Bench --side-by-side --members 4,5 exited with {exitCode}:\n{log}");
            string report = File.ReadAllText(html);
            foreach (int n in (int[])[4, 5])
            {
                Assert.Contains($"{n} members: Send, one-way delivery p50", report);
                Assert.Matches($@"{n} members: Send throughput, one sender, per member \(/s\)\s+[0-9.,]+ \(", log);
                bool skipped = log.Contains("JGroups skipped: ", StringComparison.Ordinal);
                if (!skipped) Assert.Matches($@"{n} members: Send, one-way delivery p50 \(us\)\s+[0-9.,]+ \([^)]*\)\s+[0-9.,]+ \(", log);
            }
            Assert.DoesNotContain("Query(ALL)", report); // Send alone at each size
            Assert.Contains("Side by side: Isis (IP multicast), JGroups 2.12 (UDP)", report);
            Assert.Contains("<td>multicast</td>", report); // our groups ran with IsisOptions.Multicast
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public async Task BenchmarkSuites_DryRun_ExitsZero()
    {
        string dll = typeof(BenchHarnessSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "IsisBenchmarksDll").Value!;
        Assert.True(File.Exists(dll), $"benchmarks/Isis.Benchmarks was not built: {dll} is missing");
        string dir = Directory.CreateTempSubdirectory("isis-bdn-dry-").FullName; // BenchmarkDotNet writes its artifacts here
        try
        {
            var (exitCode, log) = await DotnetTool.RunToExit([dll, "--dry", "--filter", "*"], TimeSpan.FromSeconds(180), dir);
            Assert.True(exitCode == 0, $"the BenchmarkDotNet dry run exited with {exitCode}:\n{log}");
            Assert.Contains("LoopbackSendBenchmarks", log);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

[CollectionDefinition(nameof(BenchHarnessCollection), DisableParallelization = true)]
public sealed class BenchHarnessCollection;

/// <summary>
/// CI smoke test of the Perpetual micro-benchmarks (Isis.Bench --perpetual): figure 9 with 1+1 and 4+4
/// replica processes, synchronous and asynchronous, writes a row per configuration with a rate for each
/// round, and the PBFT-against-SafeSend rounds. Asserts counts only, never a timing.
/// </summary>
[Collection(nameof(BenchHarnessCollection))]
public sealed class PerpetualBenchSmokeTests
{
    [Fact]
    public async Task QuickRun_ExitsZero_AndWritesARowPerConfiguration()
    {
        string dll = typeof(PerpetualBenchSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "IsisBenchDll").Value!;
        string output = Path.Combine(Directory.CreateTempSubdirectory("isis-perpetual-bench-").FullName, "perpetual.json");
        try
        {
            var (exitCode, log) = await DotnetTool.RunToExit([dll, "--perpetual", "--quick", "--figure", "9", "--out", output], TimeSpan.FromSeconds(180));
            Assert.True(exitCode == 0, $"Isis.Bench --perpetual --quick exited with {exitCode}:\n{log}");
            using JsonDocument result = JsonDocument.Parse(File.ReadAllText(output));
            JsonElement[] rows = [.. result.RootElement.GetProperty("rows").EnumerateArray()];
            Assert.Equal([1, 1, 4, 4], rows.Select(r => r.GetProperty("replicas").GetInt32()));
            Assert.Equal([1, 32, 1, 32], rows.Select(r => r.GetProperty("window").GetInt32()));
            Assert.All(rows, r => Assert.True(r.GetProperty("callsPerSecond").EnumerateArray().Single().GetDouble() > 0));
            // The replica processes' CPU times were read: the one-machine-per-replica projection is there.
            Assert.All(rows, r => Assert.True(r.GetProperty("oneMachinePerReplica").EnumerateArray().Single().GetDouble() > 0));
            Assert.Contains("asynchronous against synchronous, 4+4", log);
            Assert.True(result.RootElement.GetProperty("quick").GetBoolean());
        }
        finally
        {
            Directory.Delete(Path.GetDirectoryName(output)!, recursive: true);
        }
    }
}
