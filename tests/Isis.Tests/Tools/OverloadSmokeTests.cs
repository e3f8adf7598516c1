using System.Diagnostics;
using System.Reflection;
using System.Text.Json;
using Xunit.Abstractions;

namespace Isis.Tests.Tools;

/// <summary>
/// Smoke test of the Tempest overload experiment (tools/Isis.Overload) in quick mode: three
/// ASP.NET instances as processes, one starved of CPU and flooded with junk datagrams for 4 s
/// while a writer and query threads run. Asserts what happened, never a timing: the report parses,
/// reads were sent in every bin at both replicas, the flood reached the starved runtime (it counted
/// malformed datagrams), the starved member stayed in the group, and every instance ended with the
/// same value and history length. Runs alone: its hogs take a whole CPU for the overload.
/// </summary>
[Collection(nameof(OverloadCollection))]
public sealed class OverloadSmokeTests(ITestOutputHelper output)
{
    [Fact]
    public async Task QuickRun_StarvesAndFloodsOneReplica_ReadsEveryBin_AndEveryInstanceConverges()
    {
        string dll = typeof(OverloadSmokeTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "IsisOverloadDll").Value!;
        Assert.True(File.Exists(dll), $"tools/Isis.Overload was not built: {dll} is missing");
        string dir = Directory.CreateTempSubdirectory("isis-overload-smoke-").FullName;
        string json = Path.Combine(dir, "quick.json"), html = Path.Combine(dir, "quick.html");
        try
        {
            var (exitCode, log) = await DotnetTool.RunToExit([dll, "--quick", "--out", json, "--html", html], TimeSpan.FromSeconds(150));
            output.WriteLine(log);
            Assert.True(exitCode == 0, $"Isis.Overload --quick exited with {exitCode}:\n{log}");

            using JsonDocument result = JsonDocument.Parse(File.ReadAllText(json));
            JsonElement root = result.RootElement;
            Assert.True(root.GetProperty("quick").GetBoolean());
            Assert.Equal(["sequencer (oldest member), writer's instance", "control reads", "starved"],
                root.GetProperty("instances").EnumerateArray().Select(i => i.GetProperty("role").GetString()!));
            Assert.NotEqual(0, root.GetProperty("instances")[2].GetProperty("rank").GetInt32()); // the starved one is not the sequencer

            // Reads were sent to the starved and the control replica in every bin, warm-up, overload and after.
            JsonElement[] bins = [.. root.GetProperty("bins").EnumerateArray()];
            Assert.Equal(7, bins.Length); // 4 + 4 + 6 s in bins of 2 s
            Assert.Equal(["warm-up", "overload", "after"], bins.Select(b => b.GetProperty("phase").GetString()!).Distinct());
            foreach (JsonElement bin in bins)
            {
                string at = $"bin {bin.GetProperty("start").GetDouble()} s";
                Assert.True(bin.GetProperty("starved").GetProperty("reads").GetInt32() > 0, $"{at}: no read sent to the starved replica");
                Assert.True(bin.GetProperty("control").GetProperty("answered").GetInt32() > 0, $"{at}: no read answered by the control replica");
            }
            Assert.True(root.GetProperty("writer").GetProperty("acknowledged").GetInt64() > 0, "no write was acknowledged");

            // The flood arrived: the starved runtime dropped junk datagrams as malformed.
            JsonElement flood = root.GetProperty("flood");
            Assert.True(flood.GetProperty("datagramsSent").GetInt64() > 0, "no junk datagram was sent");
            Assert.True(flood.GetProperty("droppedMalformedAtStarved").GetInt64() > 0, "the starved runtime counted no malformed datagram");

            // The starved member stayed, and afterwards every instance holds the same value and history (the writer's last value).
            Assert.False(root.GetProperty("starvedExpelled").GetBoolean(), "the starved member was expelled");
            JsonElement final = root.GetProperty("final");
            Assert.True(final.GetProperty("converged").GetBoolean(), "the instances did not converge after the writer stopped");
            JsonElement[] instances = [.. final.GetProperty("instances").EnumerateArray()];
            Assert.Equal(3, instances.Length);
            Assert.Single(instances.Select(i => (i.GetProperty("value").GetInt64(), i.GetProperty("historyLength").GetInt64())).Distinct());
            Assert.True(instances[0].GetProperty("value").GetInt64() >= root.GetProperty("writer").GetProperty("lastAcknowledgedValue").GetInt64());

            string page = File.ReadAllText(html);
            Assert.Contains("Per bin", page);
            Assert.Contains("--quick", page);
            Assert.DoesNotContain("<script", page);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

/// <summary>The overload experiment runs alone: it starves a CPU.</summary>
[CollectionDefinition(nameof(OverloadCollection), DisableParallelization = true)]
public sealed class OverloadCollection;
