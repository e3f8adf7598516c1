using System.Diagnostics;
using System.Reflection;
using System.Text.Json;
using Isis.Tests.MultiProcess;
using Xunit.Abstractions;

namespace Isis.Tests.Tools;

/// <summary>
/// Smoke test of the closed-loop experiment (tools/Isis.ClosedLoop, issue 15 item 4) as its users run
/// it, in --quick mode: three instance processes on 127.0.0.1, closed-loop clients at two client
/// counts, the JSON and HTML reports. Asserts what the service did, never how fast: every client
/// count completed requests, none failed, no read returned a value nobody wrote, and after the load
/// each instance holds only values written, the instances agree and each reads back its own writes
/// (the tool PUTs at one instance and GETs there and at the others before it stops them; the report
/// lists those reads). The floor variant (a plain dictionary per instance, shared with nobody) is
/// held to what it can keep: no cross-instance agreement, the per-instance checks all the same.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class ClosedLoopSmokeTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(120);

    [Fact]
    public async Task Quick_run_on_replicated_collections_and_the_floor_completes_requests_at_each_client_count_and_reads_the_values_written()
    {
        string dir = Directory.CreateTempSubdirectory("isis-closedloop-smoke-").FullName;
        try
        {
            JsonElement root = await RunQuick(dir, "replicated,floor");
            JsonElement[] variants = [.. root.GetProperty("variants").EnumerateArray()];
            Assert.Equal(2, variants.Length);
            AssertVariantServed(variants[0], "replicated", root);
            AssertVariantServed(variants[1], "floor", root, sharesState: false);
            Assert.Empty(root.GetProperty("comparisons").EnumerateArray()); // no baseline: nothing to compare with it
            AssertFloorComparisons(root, postgres: false);
            string html = File.ReadAllText(Path.Combine(dir, "report.html"));
            Assert.Contains("Replicated collections (replicated)", html);
            Assert.Contains("not a correct service", html);
            Assert.Contains("Against the floor", html);
            Assert.Contains("--quick --store replicated,floor", html);
            Assert.Contains(">commit<", html);
            Assert.Contains("<svg", html);
            Assert.DoesNotContain("<script", html);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [SkippableFact]
    public async Task Quick_run_against_PostgreSQL_replicated_and_the_floor_completes_all_three_and_compares_them()
    {
        string? initdb = Directory.Exists("/usr/lib/postgresql")
            ? Directory.EnumerateDirectories("/usr/lib/postgresql").Select(d => Path.Combine(d, "bin", "initdb")).FirstOrDefault(File.Exists)
            : null;
        if (initdb == null) output.WriteLine("skipped: no PostgreSQL binaries (/usr/lib/postgresql/*/bin/initdb); tools/Isis.ClosedLoop/postgres.sh installs them as root");
        Skip.If(initdb == null, "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); the baseline needs it");

        string dir = Directory.CreateTempSubdirectory("isis-closedloop-smoke-").FullName;
        try
        {
            JsonElement root = await RunQuick(dir, "postgres,replicated,floor");
            JsonElement[] variants = [.. root.GetProperty("variants").EnumerateArray()];
            Assert.Equal(3, variants.Length);
            AssertVariantServed(variants[0], "postgres", root);
            AssertVariantServed(variants[1], "replicated", root);
            AssertVariantServed(variants[2], "floor", root, sharesState: false);
            // The baseline ran on a real server with durable commits, read back from its settings.
            string[] setup = [.. variants[0].GetProperty("setup").EnumerateArray().Select(s => s.GetString()!)];
            Assert.Contains("fsync = on", setup);
            Assert.Contains("synchronous_commit = on", setup);
            // A comparison per client count, with ratios (their values are this machine's business).
            JsonElement[] comparisons = [.. root.GetProperty("comparisons").EnumerateArray()];
            Assert.Equal([2, 16], comparisons.Select(c => c.GetProperty("clients").GetInt32()));
            Assert.All(comparisons, c => Assert.True(c.GetProperty("p50Ratio").GetDouble() > 0));
            Assert.All(comparisons, c => Assert.True(c.GetProperty("p99Ratio").GetDouble() > 0));
            Assert.NotEqual(JsonValueKind.Null, root.GetProperty("targetMet").ValueKind);
            AssertFloorComparisons(root, postgres: true);
            string html = File.ReadAllText(Path.Combine(dir, "report.html"));
            Assert.Contains("PostgreSQL baseline against replicated collections", html);
            Assert.Contains("p50 ratio", html);
            Assert.Contains("Three-tier baseline: PostgreSQL", html);
            Assert.Contains("p50 ratio the floor allows", html);
            // Nothing of the throwaway server is left behind.
            Assert.DoesNotContain(Directory.EnumerateDirectories("/var/tmp", "isis-closedloop-pg.*"), d => File.Exists(Path.Combine(d, "data", "postmaster.pid"))
                && ProcessAlive(File.ReadLines(Path.Combine(d, "data", "postmaster.pid")).First()));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    /// <summary>Runs the tool in --quick mode (2 and 16 clients, 2 s each) on the given stores; its exit code must be 0, and its JSON is returned.</summary>
    private async Task<JsonElement> RunQuick(string dir, string stores)
    {
        string dll = typeof(ClosedLoopSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "IsisClosedLoopDll").Value!;
        Assert.True(File.Exists(dll), $"tools/Isis.ClosedLoop was not built: {dll} is missing");
        string json = Path.Combine(dir, "results.json"), html = Path.Combine(dir, "report.html");
        var (exitCode, log) = await DotnetTool.RunToExit([dll, "--quick", "--store", stores, "--out", json, "--html", html], Limit);
        output.WriteLine(log);
        Assert.True(exitCode == 0, $"Isis.ClosedLoop --quick --store {stores} exited with {exitCode}:\n{log}");
        using JsonDocument document = JsonDocument.Parse(File.ReadAllText(json));
        JsonElement root = document.RootElement.Clone();
        Assert.True(root.GetProperty("quick").GetBoolean());
        Assert.Equal(1024, root.GetProperty("objects").GetInt32());
        Assert.Equal(3, root.GetProperty("instances").GetInt32());
        return root;
    }

    /// <summary>Each variant over the floor at both client counts: present and positive (their values are this machine's business).</summary>
    private static void AssertFloorComparisons(JsonElement root, bool postgres)
    {
        JsonElement[] floor = [.. root.GetProperty("floorComparisons").EnumerateArray()];
        Assert.Equal([2, 16], floor.Select(c => c.GetProperty("clients").GetInt32()));
        foreach (JsonElement c in floor)
        {
            Assert.True(c.GetProperty("replicatedP50OverFloor").GetDouble() > 0);
            Assert.True(c.GetProperty("replicatedP99OverFloor").GetDouble() > 0);
            if (postgres) Assert.True(c.GetProperty("postgresP50OverFloor").GetDouble() > 0);
            else Assert.Equal(JsonValueKind.Null, c.GetProperty("postgresP50OverFloor").ValueKind);
        }
    }

    /// <summary>
    /// The variant ran at every client count without a failure or a phantom read, and passed the checks
    /// after the load. <paramref name="sharesState"/> false (the floor): its instances share nothing, so
    /// only the per-instance checks apply (every object held with a value written, read-your-writes).
    /// </summary>
    private static void AssertVariantServed(JsonElement variant, string store, JsonElement root, bool sharesState = true)
    {
        Assert.Equal(store, variant.GetProperty("store").GetString());
        Assert.False(variant.TryGetProperty("skipped", out _), $"{store} was skipped");
        Assert.False(variant.TryGetProperty("failure", out JsonElement failure), $"{store} failed: {failure}");
        Assert.Equal(3, variant.GetProperty("instanceUrls").GetArrayLength());
        Assert.All(variant.GetProperty("instanceUrls").EnumerateArray(), u => Assert.StartsWith("http://127.0.0.1:", u.GetString()));

        JsonElement[] runs = [.. variant.GetProperty("runs").EnumerateArray()];
        Assert.Equal(root.GetProperty("clientCounts").EnumerateArray().Select(c => c.GetInt32()), runs.Select(r => r.GetProperty("clients").GetInt32()));
        foreach (JsonElement run in runs)
        {
            int clients = run.GetProperty("clients").GetInt32();
            Assert.True(run.GetProperty("completed").GetInt64() > 0, $"{store}, {clients} clients: no request completed");
            Assert.Equal(0, run.GetProperty("failed").GetInt64());
            Assert.Equal(0, run.GetProperty("phantomReads").GetInt64());
            foreach (string kind in (string[])["overall", "reads", "writes"])
                Assert.True(run.GetProperty(kind).GetProperty("samples").GetInt32() > 0, $"{store}, {clients} clients: no {kind} samples");
            Assert.Equal(run.GetProperty("overall").GetProperty("samples").GetInt32(),
                run.GetProperty("reads").GetProperty("samples").GetInt32() + run.GetProperty("writes").GetProperty("samples").GetInt32());
            Assert.True(run.GetProperty("issued").GetInt64() >= run.GetProperty("overall").GetProperty("samples").GetInt32());
        }

        // After the load: every instance holds every object and no value nobody wrote; the instances agree on
        // every object (where they share state); each write is read back where it was made (and at the others).
        JsonElement check = variant.GetProperty("verification");
        Assert.Empty(check.GetProperty("problems").EnumerateArray());
        Assert.Equal(3 * 1024, check.GetProperty("objectsHeld").GetInt32());
        Assert.Equal(0, check.GetProperty("unwrittenValues").GetInt32());
        Assert.Equal(sharesState, check.GetProperty("crossInstance").GetBoolean());
        Assert.True(check.GetProperty("readYourWritesChecks").GetInt32() > 0);
        Assert.Equal(0, check.GetProperty("readYourWritesFailures").GetInt32());
        Assert.Equal(0, check.GetProperty("otherInstanceFailures").GetInt32());
        if (sharesState)
        {
            Assert.True(check.GetProperty("instancesAgree").GetBoolean(), $"{store}: the instances do not agree: {check.GetProperty("problems")}");
            Assert.Equal(1024, check.GetProperty("objectsCompared").GetInt32());
            Assert.True(check.GetProperty("otherInstanceChecks").GetInt32() > 0);
        }
        else
        {
            Assert.Equal(0, check.GetProperty("otherInstanceChecks").GetInt32());
        }
        JsonElement[] samples = [.. check.GetProperty("samples").EnumerateArray()];
        Assert.NotEmpty(samples);
        foreach (JsonElement s in samples)
        {
            double written = s.GetProperty("written").GetDouble();
            JsonElement[] readBack = [.. s.GetProperty("readBack").EnumerateArray()];
            Assert.Equal(3, readBack.Length);
            if (sharesState) Assert.All(readBack, read => Assert.Equal(written, read.GetDouble()));
            else Assert.Equal(written, readBack[s.GetProperty("instance").GetInt32()].GetDouble());
        }
    }

    private static bool ProcessAlive(string pid)
    {
        try
        {
            using var p = Process.GetProcessById(int.Parse(pid, System.Globalization.CultureInfo.InvariantCulture));
            return !p.HasExited;
        }
        catch (ArgumentException)
        {
            return false;
        }
    }
}
