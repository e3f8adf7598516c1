using System.Diagnostics;
using System.Net;
using System.Reflection;
using System.Text.Json;
using Isis.Tests.MultiProcess;
using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.Samples;

/// <summary>
/// The ASP.NET sample as its users run it: three instances as real processes on this machine, driven
/// over HTTP. A write to one is read at the others; the first instance (it founded the membership
/// service) is killed with SIGKILL, and the other two go on and answer the same state; a fourth
/// instance started afterwards answers it too (it got it by state transfer).
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class InventoryServiceSampleTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Liveness = TimeSpan.FromSeconds(60);

    private sealed class Instance : IDisposable
    {
        private readonly Process _process;
        private readonly System.Text.StringBuilder _log = new();

        public Instance(string dll, int httpPort, int isisPort, string? dataDirectory = null)
        {
            Url = $"http://127.0.0.1:{httpPort}";
            var psi = new ProcessStartInfo("dotnet") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (string a in (string[])[dll, "--urls", Url, $"--Isis:MembershipServicePort={isisPort}", "--Isis:SuspicionCount=20"]) psi.ArgumentList.Add(a);
            if (dataDirectory != null) psi.ArgumentList.Add($"--Inventory:DataDirectory={dataDirectory}");
            psi.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
            _process = Process.Start(psi)!;
            _process.OutputDataReceived += (_, e) => { lock (_log) _log.AppendLine(e.Data); };
            _process.ErrorDataReceived += (_, e) => { lock (_log) _log.AppendLine(e.Data); };
            _process.BeginOutputReadLine();
            _process.BeginErrorReadLine();
        }

        public string Url { get; }

        public string Log
        {
            get { lock (_log) return _log.ToString(); }
        }

        public void Kill() => _process.Kill(); // SIGKILL on Linux

        /// <summary>SIGTERM, as a supervisor stops a service, and waits for the host's graceful stop.</summary>
        public bool Terminate(TimeSpan timeout)
        {
            using (Process kill = Process.Start("kill", ["-TERM", _process.Id.ToString(System.Globalization.CultureInfo.InvariantCulture)])) kill.WaitForExit();
            return _process.WaitForExit(timeout);
        }

        public void Dispose()
        {
            try { if (!_process.HasExited) _process.Kill(); } catch (InvalidOperationException) { }
            _process.WaitForExit(5000);
            _process.Dispose();
        }
    }

    private static async Task<T> Eventually<T>(Func<Task<T?>> attempt, string what) where T : class
    {
        DateTime deadline = DateTime.UtcNow + Liveness;
        while (true)
        {
            try
            {
                if (await attempt() is { } result) return result;
            }
            catch (HttpRequestException) { }
            catch (TaskCanceledException) { }
            if (DateTime.UtcNow > deadline) throw new TimeoutException("not within 60 s: " + what);
            await Task.Delay(100);
        }
    }

    [Fact]
    public async Task Three_instances_share_the_inventory_two_go_on_when_the_first_is_killed_and_a_new_one_starts_from_their_state()
    {
        string dll = typeof(InventoryServiceSampleTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "InventoryServiceDll").Value!;
        Assert.True(File.Exists(dll), $"{dll} is built with the solution");
        int isisPort = TestRuntimes.FreeUdpPort();
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        var instances = new List<Instance>();
        try
        {
            for (int i = 0; i < 3; i++)
            {
                var instance = new Instance(dll, TcpPort(), isisPort);
                instances.Add(instance);
                // Each joins before the next starts.
                await Eventually(async () => await http.GetStringAsync(instance.Url + "/health") == "Healthy" ? "ok" : null, $"instance {i} is healthy");
            }

            HttpResponseMessage put = await http.PutAsync(instances[0].Url + "/items/apples?count=12", null);
            Assert.Equal(HttpStatusCode.NoContent, put.StatusCode);
            foreach (Instance other in instances.Skip(1))
                await Eventually(async () => await http.GetStringAsync(other.Url + "/items/apples") == "12" ? "ok" : null, "the others read the write");

            instances[0].Kill();
            output.WriteLine("killed the first instance");
            // The write waits for the view without the killed instance, then goes through.
            put = await Eventually(async () => await http.PutAsync(instances[1].Url + "/items/pears?count=3", null) is { StatusCode: HttpStatusCode.NoContent } r ? r : null, "a write after the kill");
            string[] states = await Task.WhenAll(instances.Skip(1).Select(i => Eventually(async () =>
            {
                string s = await http.GetStringAsync(i.Url + "/items");
                return s.Contains("pears") ? s : null;
            }, "the survivors hold the new write")));
            Assert.Equal(states[0], states[1]);
            var state = JsonSerializer.Deserialize<Dictionary<string, int>>(states[0])!;
            Assert.Equal(new Dictionary<string, int> { ["apples"] = 12, ["pears"] = 3 }, state);
            Assert.All(instances.Skip(1), i => Assert.DoesNotContain("Stopping the application", i.Log));

            // A new instance serves the inventory written before it existed, from its own copy.
            var late = new Instance(dll, TcpPort(), isisPort);
            instances.Add(late);
            await Eventually(async () => await http.GetStringAsync(late.Url + "/health") == "Healthy" ? "ok" : null, "the late instance is healthy");
            Assert.Equal(states[0], await http.GetStringAsync(late.Url + "/items"));
        }
        catch
        {
            foreach (Instance i in instances) output.WriteLine($"--- {i.Url}\n{i.Log}");
            throw;
        }
        finally
        {
            foreach (Instance i in instances) i.Dispose();
        }
    }

    [Fact]
    public async Task With_a_data_directory_the_inventory_survives_a_stop_of_every_instance()
    {
        string dll = typeof(InventoryServiceSampleTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "InventoryServiceDll").Value!;
        DirectoryInfo data = Directory.CreateTempSubdirectory("isis-inventory-");
        int isisPort = TestRuntimes.FreeUdpPort();
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        var instances = new List<Instance>();
        try
        {
            for (int i = 0; i < 2; i++)
            {
                var instance = new Instance(dll, TcpPort(), isisPort, Path.Combine(data.FullName, $"instance{i}"));
                instances.Add(instance);
                await Eventually(async () => await http.GetStringAsync(instance.Url + "/health") == "Healthy" ? "ok" : null, $"instance {i} is healthy");
            }
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[0].Url + "/items/apples?count=12", null)).StatusCode);
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[1].Url + "/items/pears?count=3", null)).StatusCode);
            await Eventually(async () => (await http.GetStringAsync(instances[0].Url + "/items")).Contains("pears") ? "ok" : null, "both writes everywhere");

            // Every instance stops, as a redeploy stops them: the membership service goes with them.
            foreach (Instance i in instances) Assert.True(i.Terminate(TimeSpan.FromSeconds(30)), $"{i.Url} stopped on SIGTERM");
            output.WriteLine("stopped every instance");

            // One starts again on its directory and serves the inventory from its checkpoint; a new one gets it by transfer.
            var back = new Instance(dll, TcpPort(), isisPort, Path.Combine(data.FullName, "instance1"));
            instances.Add(back);
            await Eventually(async () => await http.GetStringAsync(back.Url + "/health") == "Healthy" ? "ok" : null, "the restarted instance is healthy");
            var state = JsonSerializer.Deserialize<Dictionary<string, int>>(await http.GetStringAsync(back.Url + "/items"))!;
            Assert.Equal(new Dictionary<string, int> { ["apples"] = 12, ["pears"] = 3 }, state);
            var fresh = new Instance(dll, TcpPort(), isisPort, Path.Combine(data.FullName, "instance2"));
            instances.Add(fresh);
            await Eventually(async () => await http.GetStringAsync(fresh.Url + "/health") == "Healthy" ? "ok" : null, "a new instance is healthy");
            Assert.Equal(await http.GetStringAsync(back.Url + "/items"), await http.GetStringAsync(fresh.Url + "/items"));
        }
        catch
        {
            foreach (Instance i in instances) output.WriteLine($"--- {i.Url}\n{i.Log}");
            throw;
        }
        finally
        {
            foreach (Instance i in instances) i.Dispose();
            try { data.Delete(recursive: true); } catch (IOException) { }
        }
    }

    private static int TcpPort()
    {
        var l = new System.Net.Sockets.TcpListener(IPAddress.Loopback, 0);
        l.Start();
        int port = ((IPEndPoint)l.LocalEndpoint).Port;
        l.Stop();
        return port;
    }
}
