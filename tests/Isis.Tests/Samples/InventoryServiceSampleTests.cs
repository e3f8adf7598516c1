using System.Net;
using System.Text.Json;
using Isis.Tests.MultiProcess;
using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.Samples;

/// <summary>
/// The ASP.NET sample as its users run it: three instances as real processes on this machine, driven
/// over HTTP. A write to one is read at the others; the first instance (it founded the membership
/// service) is killed with SIGKILL, and the other two go on and answer the same state; a fourth
/// instance started afterwards answers it too (it got it by state transfer). A front end that is
/// not a member forwards deliveries through a GroupClient while an instance is killed, and each
/// counts once.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class InventoryServiceSampleTests(ITestOutputHelper output)
{
    [Fact]
    public async Task Three_instances_share_the_inventory_two_go_on_when_the_first_is_killed_and_a_new_one_starts_from_their_state()
    {
        string dll = SampleInstance.SampleDll("InventoryServiceDll");
        int isisPort = TestRuntimes.FreeUdpPort();
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        await SampleInstance.RunAll(output, async instances =>
        {
            await SampleInstance.StartOneByOne(instances, 3, _ => new SampleInstance(dll, isisPort), http); // each joins before the next starts

            HttpResponseMessage put = await http.PutAsync(instances[0].Url + "/items/apples?count=12", null);
            Assert.Equal(HttpStatusCode.NoContent, put.StatusCode);
            foreach (SampleInstance other in instances.Skip(1))
                await SampleInstance.Eventually(async () => await http.GetStringAsync(other.Url + "/items/apples") == "12" ? "ok" : null, "the others read the write");

            instances[0].Kill();
            output.WriteLine("killed the first instance");
            // The write waits for the view without the killed instance, then goes through.
            put = await SampleInstance.Eventually(async () => await http.PutAsync(instances[1].Url + "/items/pears?count=3", null) is { StatusCode: HttpStatusCode.NoContent } r ? r : null, "a write after the kill");
            string[] states = await Task.WhenAll(instances.Skip(1).Select(i => SampleInstance.Eventually(async () =>
            {
                string s = await http.GetStringAsync(i.Url + "/items");
                return s.Contains("pears") ? s : null;
            }, "the survivors hold the new write")));
            Assert.Equal(states[0], states[1]);
            var state = JsonSerializer.Deserialize<Dictionary<string, int>>(states[0])!;
            Assert.Equal(new Dictionary<string, int> { ["apples"] = 12, ["pears"] = 3 }, state);
            Assert.All(instances.Skip(1), i => Assert.DoesNotContain("Stopping the application", i.Log));

            // A new instance serves the inventory written before it existed, from its own copy.
            var late = new SampleInstance(dll, isisPort);
            instances.Add(late);
            await late.WaitHealthy(http, "the late instance is healthy");
            Assert.Equal(states[0], await http.GetStringAsync(late.Url + "/items"));
        });
    }

    [Fact]
    public async Task A_front_end_that_is_not_a_member_counts_each_delivery_once_while_an_instance_it_relays_through_is_killed()
    {
        string dll = SampleInstance.SampleDll("InventoryServiceDll");
        int isisPort = TestRuntimes.FreeUdpPort();
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(60) };
        await SampleInstance.RunAll(output, async instances =>
        {
            await SampleInstance.StartOneByOne(instances, 4, _ => new SampleInstance(dll, isisPort), http);
            var front = new SampleInstance(dll, isisPort, "--Inventory:FrontEnd=true");
            instances.Add(front);
            await front.WaitHealthy(http, "the front end found the instances");
            Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(front.Url + "/items/apples?count=0", null)).StatusCode);

            // 400 deliveries of one apple, four at a time (the front end spreads them over the
            // instances), while the first instance, the membership service's founder, is killed.
            const int deliveries = 400;
            int done = 0;
            List<Task> adds = [.. Enumerable.Range(0, 4).Select(async worker =>
            {
                for (int i = worker; i < deliveries; i += 4)
                {
                    using HttpResponseMessage r = await http.PostAsync(front.Url + "/items/apples/add?count=1", null);
                    Assert.Equal(HttpStatusCode.NoContent, r.StatusCode);
                    Interlocked.Increment(ref done);
                }
            })];
            await SampleInstance.Eventually(() => Task.FromResult(Volatile.Read(ref done) >= 50 ? "ok" : null), "50 deliveries");
            instances[0].Kill();
            output.WriteLine($"killed the first instance after {Volatile.Read(ref done)} deliveries");
            await Task.WhenAll(adds).WaitAsync(TimeSpan.FromSeconds(120));

            // Each delivery counted once at every survivor, and the front end's query agrees.
            foreach (SampleInstance survivor in instances.Skip(1).Take(3))
                await SampleInstance.Eventually(async () => await http.GetStringAsync(survivor.Url + "/items/apples") == "400" ? "ok" : null, $"{survivor.Url} counts 400 apples");
            Assert.Equal("400", await http.GetStringAsync(front.Url + "/items/apples"));
            Assert.Equal(HttpStatusCode.NotFound, (await http.GetAsync(front.Url + "/items/plums")).StatusCode);
            output.WriteLine($"{Volatile.Read(ref done)} deliveries; the front end's log:\n{front.Log}");
        });
    }

    [Fact]
    public async Task With_a_data_directory_the_inventory_survives_a_stop_of_every_instance()
    {
        string dll = SampleInstance.SampleDll("InventoryServiceDll");
        DirectoryInfo data = Directory.CreateTempSubdirectory("isis-inventory-");
        int isisPort = TestRuntimes.FreeUdpPort();
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        try
        {
            await SampleInstance.RunAll(output, async instances =>
            {
                await SampleInstance.StartOneByOne(instances, 2, i => new SampleInstance(dll, isisPort, "--Inventory:DataDirectory=" + Path.Combine(data.FullName, $"instance{i}")), http);
                Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[0].Url + "/items/apples?count=12", null)).StatusCode);
                Assert.Equal(HttpStatusCode.NoContent, (await http.PutAsync(instances[1].Url + "/items/pears?count=3", null)).StatusCode);
                await SampleInstance.Eventually(async () => (await http.GetStringAsync(instances[0].Url + "/items")).Contains("pears") ? "ok" : null, "both writes everywhere");

                // Every instance stops, as a redeploy stops them: the membership service goes with them.
                foreach (SampleInstance i in instances) Assert.True(i.Terminate(TimeSpan.FromSeconds(30)), $"{i.Url} stopped on SIGTERM");
                output.WriteLine("stopped every instance");

                // A new instance with an empty data directory starts first, before any that kept the
                // inventory: it must not start an empty inventory that the others would then copy.
                // It stops instead, saying where the inventory is (this machine's registry of durable groups).
                var newcomer = new SampleInstance(dll, isisPort, "--Inventory:DataDirectory=" + Path.Combine(data.FullName, "newcomer"));
                instances.Add(newcomer);
                Assert.True(newcomer.WaitForExit(TimeSpan.FromSeconds(60)), "the new instance stops instead of starting an empty inventory");
                Assert.Contains("registry of durable groups", newcomer.Log, StringComparison.Ordinal);
                Assert.Contains(Path.Combine(data.FullName, "instance0"), newcomer.Log, StringComparison.Ordinal);

                // One starts again on its directory and serves the inventory from its checkpoint; a new one gets it by transfer.
                var back = new SampleInstance(dll, isisPort, "--Inventory:DataDirectory=" + Path.Combine(data.FullName, "instance1"));
                instances.Add(back);
                await back.WaitHealthy(http, "the restarted instance is healthy");
                var state = JsonSerializer.Deserialize<Dictionary<string, int>>(await http.GetStringAsync(back.Url + "/items"))!;
                Assert.Equal(new Dictionary<string, int> { ["apples"] = 12, ["pears"] = 3 }, state);
                var fresh = new SampleInstance(dll, isisPort, "--Inventory:DataDirectory=" + Path.Combine(data.FullName, "instance2"));
                instances.Add(fresh);
                await fresh.WaitHealthy(http, "a new instance is healthy");
                Assert.Equal(await http.GetStringAsync(back.Url + "/items"), await http.GetStringAsync(fresh.Url + "/items"));
            });
        }
        finally
        {
            try { data.Delete(recursive: true); } catch (IOException) { }
        }
    }
}
