using System.Text.Json.Nodes;
using System.Text.RegularExpressions;
using Isis.Simulation.Checking;
using Isis.Tests.MultiProcess;
using Xunit.Abstractions;
using static Isis.Tests.MultiHost.MultiHostCluster;

namespace Isis.Tests.MultiHost;

/// <summary>
/// IP multicast across five hosts (network namespaces on one bridge, root only): every process
/// runs with IsisOptions.Multicast, so the group of five gets an address and each Send crosses the
/// switch once; two hosts drop 30 % of the UDP datagrams they receive (nft), multicast and unicast
/// alike. Every member must deliver every message in FIFO order, the repairs coming by unicast,
/// and the merged event log must pass the simulator's checker.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed partial class MulticastMultiHostTests(ITestOutputHelper output)
{
    private const int Hosts = 5;
    private const int Suspicion = 20; // 2 s: 30 % loss also hits heartbeats, and the machine is shared
    private const int Sends = 3_000;
    private static readonly TimeSpan Liveness = TimeSpan.FromSeconds(60);

    private static int Delivered(JsonObject progress, int sender) =>
        ((JsonObject)progress["perSender"]!)[S(sender)] is { } n ? (int)n : 0;

    [GeneratedRegex(@"counter packets (\d+)")]
    private static partial Regex DroppedPackets();

    [SkippableFact]
    public void Five_hosts_multicasting_with_30_percent_loss_at_two_deliver_everything_in_fifo_order_and_the_event_log_passes_the_checker()
    {
        Skip.If(NamespaceNetwork.Unavailable is not null, NamespaceNetwork.Unavailable);
        Skip.If(NamespaceNetwork.NftUnavailable is not null, NamespaceNetwork.NftUnavailable);
        int[] lossy = [3, 4];
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-multicast-hosts-");
        ServiceHost[] services = [new(0, 7345), new(1, 7345), new(2, 7345)];
        string[] multicast = ["--multicast-port", "7346", "--multicast-range", "239.192.77.0/28"];
        using var cluster = new MultiHostCluster(output, Hosts, services, "multicast-hosts", Suspicion, everyProcess: multicast, beforeStart: network =>
        {
            network.EnableMulticast();
            foreach (int h in lossy) network.DropIncoming(h, 30);
        });
        cluster.Log($"multicast on 239.192.77.0/28 port 7346; hosts {string.Join(", ", lossy)} drop 30 % of incoming UDP");
        try
        {
            var members = new MemberProcess[Hosts];
            Parallel.For(0, Hosts, new ParallelOptions { MaxDegreeOfParallelism = Hosts }, i =>
                members[i] = cluster.StartMember(i, i, "--expect-members", S(Hosts), "--sends", S(Sends), "--event-log", Path.Combine(dir.FullName, $"member{i}.jsonl")));
            cluster.WaitForView(members, members, 0, Liveness, "all five installed the five-member view");
            foreach (MemberProcess m in members)
            {
                JsonObject done = m.WaitFor("done", Liveness);
                Assert.True((bool)done["fifoOk"]!, $"{m.Name}: {done.ToJsonString()}");
                for (int s = 0; s < Hosts; s++) Assert.Equal(Sends, Delivered(done, s));
            }
            cluster.Log($"every member delivered all {Hosts * Sends} Sends in FIFO order");

            // The Sends went by multicast (each sender's own copies came back to it), the loss was
            // real, and the members that suffered it asked for repairs.
            foreach (MemberProcess m in members)
            {
                JsonObject stats = m.Stats();
                Assert.True((long)stats["multicastEchoes"]! > 0, $"{m.Name} sent nothing by multicast: {stats.ToJsonString()}");
                Assert.True((long)stats["multicastReceived"]! > 0, $"{m.Name} received nothing by multicast: {stats.ToJsonString()}");
            }
            foreach (int h in lossy)
            {
                long dropped = long.Parse(DroppedPackets().Match(cluster.Network.DropCounter(h)).Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture);
                long naks = (long)members[h].Stats()["naksSent"]!;
                cluster.Log($"host {h}: nft dropped {dropped} datagrams; its member sent {naks} NAKs");
                Assert.True(dropped > 0, $"host {h}'s loss rule dropped nothing");
                Assert.True(naks > 0, $"member{h} lost datagrams but asked for no repair");
            }

            foreach (MemberProcess m in members) m.Command("quit");
            foreach (MemberProcess m in members) Assert.True(m.WaitForExit(Liveness), $"{m.Name} exits after quit");
            var logs = Enumerable.Range(0, Hosts).Select(i => EventLogMerge.Read(Path.Combine(dir.FullName, $"member{i}.jsonl"))).ToList();
            EventLogMerge.Result merged = EventLogMerge.Merge(logs);
            CheckResult result = HistoryChecker.Check(merged.History);
            cluster.Log($"merged {merged.History.Count} events: {result}");
            Assert.True(result.Passed, result.ToString());
        }
        catch
        {
            output.WriteLine(cluster.Describe());
            throw;
        }
        finally
        {
            try { dir.Delete(recursive: true); } catch (IOException) { /* best effort */ }
        }
    }
}
