using System.Net;
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
    [Fact]
    public async Task Three_instances_trade_on_replicated_quotes_a_front_end_reads_the_fastest_and_all_goes_on_when_one_is_killed()
    {
        string dll = SampleInstance.SampleDll("StockTraderDll");
        int isisPort = TestRuntimes.FreeUdpPort();
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        var instances = new List<SampleInstance>();
        try
        {
            await SampleInstance.StartOneByOne(instances, 3, _ => new SampleInstance(dll, isisPort), http);
            using var frontEnd = new RedundantQueryClient(instances.Select(i => new Uri(i.Url)), new RedundantQueryOptions { ProbeInterval = TimeSpan.FromMilliseconds(200), Timeout = TimeSpan.FromSeconds(2) });

            // A write answered by one instance is in its history; the others merge it too.
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[0].Url + "/quotes/ACME?price=12.5", null)).StatusCode);
            Assert.Equal("12.5", await http.GetStringAsync(instances[0].Url + "/quotes/ACME"));
            foreach (SampleInstance other in instances.Skip(1))
                await SampleInstance.Eventually(async () => await http.GetStringAsync(other.Url + "/quotes/ACME") == "12.5" ? "ok" : null, "the others merged the quote");
            Assert.Equal(HttpStatusCode.Created, (await http.PostAsync(instances[1].Url + "/trades?symbol=ACME&quantity=10", null)).StatusCode);
            Assert.Equal("12.5", await frontEnd.GetStringAsync("/quotes/ACME"));

            // One instance dies; the front-end's reads and the others' writes go on.
            instances[0].Kill();
            output.WriteLine("killed the first instance");
            for (int n = 0; n < 10; n++) Assert.Equal("12.5", await frontEnd.GetStringAsync("/quotes/ACME")); // the dead one fails, another answers
            await SampleInstance.Eventually(async () => (await http.PutAsync(instances[1].Url + "/quotes/INIT?price=3", null)).StatusCode == HttpStatusCode.NoContent ? "ok" : null, "a write after the kill");
            Assert.Equal(HttpStatusCode.Created, (await http.PostAsync(instances[2].Url + "/trades?symbol=INIT&quantity=7", null)).StatusCode);
            string[] quotes = await Task.WhenAll(instances.Skip(1).Select(i => SampleInstance.Eventually(async () =>
            {
                string s = await http.GetStringAsync(i.Url + "/quotes");
                return s.Contains("INIT") ? s : null;
            }, "the survivors hold the new quote")));
            Assert.Equal(quotes[0], quotes[1]);
            Assert.Equal(new Dictionary<string, double> { ["ACME"] = 12.5, ["INIT"] = 3 }, JsonSerializer.Deserialize<Dictionary<string, double>>(quotes[0]));
            string[] trades = await Task.WhenAll(instances.Skip(1).Select(i => SampleInstance.Eventually(async () =>
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
            foreach (SampleInstance i in instances) output.WriteLine($"--- {i.Url}\n{i.Log}");
            throw;
        }
        finally
        {
            foreach (SampleInstance i in instances) i.Dispose();
        }
    }
}
