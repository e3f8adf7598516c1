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
/// SIGKILL while the others go on writing and reading the same replicated quotes and trades, and a
/// shopping cart filled at two instances and checked out into trades.
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
        await SampleInstance.RunAll(output, async instances =>
        {
            await SampleInstance.StartOneByOne(instances, 3, _ => new SampleInstance(dll, isisPort), http);
            using var frontEnd = new RedundantQueryClient(instances.Select(i => new Uri(i.Url)), new RedundantQueryOptions { ProbeInterval = TimeSpan.FromMilliseconds(200), Timeout = TimeSpan.FromSeconds(2) });

            // A write answered by one instance is in its history; the others merge it too.
            using (HttpResponseMessage put = await http.PutAsync(instances[0].Url + "/quotes/ACME?price=12.5", null))
            {
                Assert.Equal(HttpStatusCode.NoContent, put.StatusCode);
                // The answer says where the write stands in the quotes' history; the front-end reads nothing older from now on.
                Assert.True(HistoryPosition.TryParse(string.Join(",", put.Headers.GetValues(HistoryPosition.HeaderName)), out HistoryPosition[] written));
                Assert.Equal("trader-quotes", Assert.Single(written).Collection);
                frontEnd.NoteSeen(written[0]);
            }
            Assert.Equal("12.5", await http.GetStringAsync(instances[0].Url + "/quotes/ACME"));
            foreach (SampleInstance other in instances.Skip(1))
                await SampleInstance.Eventually(async () => await http.GetStringAsync(other.Url + "/quotes/ACME") == "12.5" ? "ok" : null, "the others merged the quote");
            Assert.Equal(HttpStatusCode.Created, (await http.PostAsync(instances[1].Url + "/trades?symbol=ACME&quantity=10", null)).StatusCode);
            Assert.Equal("12.5", await frontEnd.GetStringAsync("/quotes/ACME"));
            Assert.True(frontEnd.SeenPositions["trader-quotes"] >= 1);

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

            // The shopping cart: lines added at the two survivors, read priced at one, and checked out
            // into trades everywhere.
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[1].Url + "/carts/alice/ACME?quantity=2", null)).StatusCode);
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[2].Url + "/carts/alice/INIT?quantity=5", null)).StatusCode);
            Assert.Equal(HttpStatusCode.NotFound, (await http.PutAsync(instances[2].Url + "/carts/alice/NOPE?quantity=1", null)).StatusCode);
            string cart = await SampleInstance.Eventually(async () =>
            {
                string s = await http.GetStringAsync(instances[1].Url + "/carts/alice");
                return s.Contains("INIT") ? s : null;
            }, "both lines of the cart at one instance");
            using (JsonDocument doc = JsonDocument.Parse(cart))
            {
                Assert.Equal(2 * 12.5 + 5 * 3, doc.RootElement.GetProperty("total").GetDouble());
                Assert.Equal(2, doc.RootElement.GetProperty("lines").GetArrayLength());
            }
            Assert.Equal(HttpStatusCode.OK, (await http.PostAsync(instances[1].Url + "/carts/alice/checkout", null)).StatusCode);
            Assert.Contains("\"lines\":[]", await http.GetStringAsync(instances[1].Url + "/carts/alice"));
            string[] after = await Task.WhenAll(instances.Skip(1).Select(i => SampleInstance.Eventually(async () =>
            {
                string s = await http.GetStringAsync(i.Url + "/trades");
                return s.Contains("alice: INIT") ? s : null;
            }, "the checkout's trades everywhere")));
            Assert.Equal(after[0], after[1]);
            Assert.Equal(["ACME x10 @ 12.5", "INIT x7 @ 3", "alice: ACME x2 @ 12.5", "alice: INIT x5 @ 3"], JsonSerializer.Deserialize<string[]>(after[0])!);
        });
    }

    [Fact]
    public async Task An_instance_cut_off_from_the_membership_service_answers_its_health_check_with_503_until_the_service_is_back()
    {
        string dll = SampleInstance.SampleDll("StockTraderDll");
        int isisPort = TestRuntimes.FreeUdpPort();
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        await SampleInstance.RunAll(output, async instances =>
        {
            // An isolation timeout far beyond the test: the cut-off instance stays up instead of stopping.
            await SampleInstance.StartOneByOne(instances, 3, _ => new SampleInstance(dll, isisPort, "--Isis:IsolationTimeout=00:02:00"), http);
            string replicaFile = new IsisOptions { MembershipServicePort = isisPort }.EmbeddedDirectoryPath;
            await SampleInstance.Eventually(() => Task.FromResult(Isis.Runtime.ServiceDirectoryFile.Read(replicaFile).Replicas.Length == 3 ? "ok" : null),
                "a membership replica on each instance");
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[0].Url + "/quotes/ACME?price=7", null)).StatusCode);

            // Two of the service's three replicas freeze: the third instance's lease runs out.
            instances[1].Freeze();
            instances[2].Freeze();
            output.WriteLine("froze instances 1 and 2");
            await SampleInstance.Eventually(async () =>
            {
                using HttpResponseMessage r = await http.GetAsync(instances[0].Url + "/health");
                return r.StatusCode == HttpStatusCode.ServiceUnavailable && await r.Content.ReadAsStringAsync() == "Degraded" ? "ok" : null;
            }, "instance 0 answers /health with 503 Degraded");
            // It still answers reads from its own copy (which may be stale): /health is what tells front-ends.
            Assert.Equal("7", await http.GetStringAsync(instances[0].Url + "/quotes/ACME"));

            instances[1].Thaw();
            instances[2].Thaw();
            output.WriteLine("thawed instances 1 and 2");
            await instances[0].WaitHealthy(http, "instance 0 is healthy again once the service answers");
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[0].Url + "/quotes/ACME?price=8", null)).StatusCode);
        });
    }
}
