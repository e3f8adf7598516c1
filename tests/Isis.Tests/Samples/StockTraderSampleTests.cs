using System.Diagnostics;
using System.Net;
using System.Reflection;
using System.Text.Json;
using Isis.Collections;
using Isis.Tests.MultiProcess;
using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.Samples;

/// <summary>
/// The stock trader sample (issue 15, items 4 and 6) as its users run it: three instances as real
/// processes, a front-end reading them through RedundantQueryClient, and one instance killed with
/// SIGKILL while the others go on writing and reading the same replicated quotes and trades.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class StockTraderSampleTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Liveness = TimeSpan.FromSeconds(60);

    private sealed class Instance : IDisposable
    {
        private readonly Process _process;
        private readonly System.Text.StringBuilder _log = new();

        public Instance(string dll, int httpPort, int isisPort)
        {
            Url = $"http://127.0.0.1:{httpPort}";
            var psi = new ProcessStartInfo("dotnet") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (string a in (string[])[dll, "--urls", Url, $"--Isis:MembershipServicePort={isisPort}", "--Isis:SuspicionCount=20"]) psi.ArgumentList.Add(a);
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
    public async Task Three_instances_trade_on_replicated_quotes_a_front_end_reads_the_fastest_and_all_goes_on_when_one_is_killed()
    {
        string dll = typeof(StockTraderSampleTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "StockTraderDll").Value!;
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
                await Eventually(async () => await http.GetStringAsync(instance.Url + "/health") == "Healthy" ? "ok" : null, $"instance {i} is healthy");
            }
            using var frontEnd = new RedundantQueryClient(instances.Select(i => new Uri(i.Url)), new RedundantQueryOptions { ProbeInterval = TimeSpan.FromMilliseconds(200), Timeout = TimeSpan.FromSeconds(2) });

            // A write answered by one instance is in its history; the others merge it too.
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[0].Url + "/quotes/ACME?price=12.5", null)).StatusCode);
            Assert.Equal("12.5", await http.GetStringAsync(instances[0].Url + "/quotes/ACME"));
            foreach (Instance other in instances.Skip(1))
                await Eventually(async () => await http.GetStringAsync(other.Url + "/quotes/ACME") == "12.5" ? "ok" : null, "the others merged the quote");
            Assert.Equal(HttpStatusCode.Created, (await http.PostAsync(instances[1].Url + "/trades?symbol=ACME&quantity=10", null)).StatusCode);
            Assert.Equal("12.5", await frontEnd.GetStringAsync("/quotes/ACME"));

            // One instance dies; the front-end's reads and the others' writes go on.
            instances[0].Kill();
            output.WriteLine("killed the first instance");
            for (int n = 0; n < 10; n++) Assert.Equal("12.5", await frontEnd.GetStringAsync("/quotes/ACME")); // the dead one fails, another answers
            await Eventually(async () => (await http.PutAsync(instances[1].Url + "/quotes/INIT?price=3", null)).StatusCode == HttpStatusCode.NoContent ? "ok" : null, "a write after the kill");
            Assert.Equal(HttpStatusCode.Created, (await http.PostAsync(instances[2].Url + "/trades?symbol=INIT&quantity=7", null)).StatusCode);
            string[] quotes = await Task.WhenAll(instances.Skip(1).Select(i => Eventually(async () =>
            {
                string s = await http.GetStringAsync(i.Url + "/quotes");
                return s.Contains("INIT") ? s : null;
            }, "the survivors hold the new quote")));
            Assert.Equal(quotes[0], quotes[1]);
            Assert.Equal(new Dictionary<string, double> { ["ACME"] = 12.5, ["INIT"] = 3 }, JsonSerializer.Deserialize<Dictionary<string, double>>(quotes[0]));
            string[] trades = await Task.WhenAll(instances.Skip(1).Select(i => Eventually(async () =>
            {
                string s = await http.GetStringAsync(i.Url + "/trades");
                return s.Contains("INIT") ? s : null;
            }, "the survivors hold both trades")));
            Assert.Equal(trades[0], trades[1]);
            Assert.Equal(["ACME x10 @ 12.5", "INIT x7 @ 3"], JsonSerializer.Deserialize<string[]>(trades[0])!);
            Assert.False(frontEnd.Replicas.Single(r => r.BaseAddress == new Uri(instances[0].Url)).Up);
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

    private static int TcpPort()
    {
        var l = new System.Net.Sockets.TcpListener(IPAddress.Loopback, 0);
        l.Start();
        int port = ((IPEndPoint)l.LocalEndpoint).Port;
        l.Stop();
        return port;
    }
}
