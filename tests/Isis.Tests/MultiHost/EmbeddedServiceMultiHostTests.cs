using System.Text.Json.Nodes;
using Isis.Tests.MultiProcess;
using Xunit.Abstractions;
using static Isis.Tests.MultiHost.MultiHostCluster;

namespace Isis.Tests.MultiHost;

/// <summary>
/// The default, embedded membership service across machines (network namespaces, root only): the
/// only configuration is the seed list (every host's well-known address, host 0 first). The
/// founder's machine loses its process; a partition cuts off a minority holding one replica; and a
/// new process on the founder's machine joins the running service instead of founding another.
/// Waits are generous liveness bounds, never timings.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class EmbeddedServiceMultiHostTests(ITestOutputHelper output)
{
    private const int Hosts = 5;
    private const int Suspicion = 20; // 2 s to expulsion: the loaded 2-core machine stalls event loops (see MultiProcessCluster)
    private const int Round = 100;
    private static readonly TimeSpan Liveness = TimeSpan.FromSeconds(40);

    private static int Delivered(JsonObject progress, int sender) =>
        ((JsonObject)progress["perSender"]!)[S(sender)] is { } n ? (int)n : 0;

    /// <param name="transport">The namespace suite runs once per transport: UDP, and the TCP overlay.</param>
    [SkippableTheory]
    [InlineData("udp")]
    [InlineData("tcp")]
    public void Seeds_find_the_service_on_other_hosts_and_it_survives_its_founder_and_a_partitioned_replica(string transport)
    {
        Skip.If(NamespaceNetwork.Unavailable is not null, NamespaceNetwork.Unavailable);
        using var cluster = new MultiHostCluster(output, Hosts, [], "embedded-hosts", Suspicion, transport);
        var sent = new Dictionary<int, int>();
        try
        {
            // 1. Host 0, the first seed, founds the service; one member on every other host joins it.
            MemberProcess founder = cluster.StartMember(0, 0, "--expect-members", S(Hosts));
            Assert.True((bool)founder.WaitFor("ready", Liveness)["founded"]!, "the first seed's host founds the service");
            var members = new Dictionary<int, MemberProcess> { [0] = founder };
            Parallel.For(1, Hosts, h => { MemberProcess m = cluster.StartMember(h, h, "--expect-members", S(Hosts)); lock (members) members[h] = m; });
            Assert.All(members.Values.Where(m => m != founder), m => Assert.False((bool)m.WaitFor("ready", Liveness)["founded"]!, $"{m.Name} founded a second service"));
            int view = cluster.WaitForView(members.Values, members.Values.ToList(), 0, Liveness, "five hosts in one view");

            void SendRound(IEnumerable<int> senders)
            {
                foreach (int h in senders)
                {
                    members[h].Command("send " + S(Round));
                    sent[h] = sent.GetValueOrDefault(h) + Round;
                }
            }
            void WaitDelivered(int[] live, string what)
            {
                DateTime deadline = DateTime.UtcNow + Liveness;
                foreach (int h in live)
                {
                    JsonObject p = cluster.WaitForProgress(members[h], p => live.All(s => Delivered(p, s) >= sent[s]), deadline, what);
                    Assert.True((bool)p["fifoOk"]!, $"{members[h].Name}: {p.ToJsonString()}");
                }
                cluster.Log(what);
            }
            List<int> Hosting(IEnumerable<int> live) => live.Where(h => (bool)members[h].Stats()["hostsMembershipService"]!).ToList();
            List<int> WaitForHosting(int[] live, int count)
            {
                DateTime deadline = DateTime.UtcNow + Liveness;
                List<int> hosting;
                while ((hosting = Hosting(live)).Count != count)
                {
                    if (DateTime.UtcNow > deadline) throw new TimeoutException($"the service never ran {count} replicas on hosts {string.Join(",", live)} (now: {string.Join(",", hosting)})");
                    Thread.Sleep(100);
                }
                cluster.Log($"replicas on hosts {string.Join(",", hosting)}");
                return hosting;
            }

            int[] all = [.. Enumerable.Range(0, Hosts)];
            WaitForHosting(all, 3);
            SendRound(all);
            WaitDelivered(all, "round 1 delivered on every host");

            // 2. The founder's process is SIGKILLed: the other hosts go on, and a replica moves.
            founder.Kill();
            int[] live = [1, 2, 3, 4];
            view = cluster.WaitForView(live.Select(h => members[h]), live.Select(h => members[h]).ToList(), view, Liveness, "four hosts without the founder");
            SendRound(live);
            WaitDelivered(live, "round 2 delivered without the founder");
            List<int> hosting = WaitForHosting(live, 3);

            // 3. A partition cuts off one replica host and the one process that hosts none: the
            // side with two of the three replicas goes on; the other side decides nothing and stops.
            int[] minority = [hosting[0], live.Single(h => !hosting.Contains(h))];
            int[] majority = [.. live.Except(minority)];
            cluster.Network.Partition(minority);
            cluster.Log($"partitioned hosts {string.Join(",", minority)} (one replica) away from {string.Join(",", majority)} (two replicas)");
            view = cluster.WaitForView(majority.Select(h => members[h]), majority.Select(h => members[h]).ToList(), view, Liveness, "the majority installs a view without the minority");
            SendRound(majority);
            WaitDelivered(majority, "round 3 delivered on the majority side");
            foreach (int h in minority)
            {
                JsonObject shutdown = members[h].WaitFor("shutdown", Liveness);
                cluster.Log($"{members[h].Name}: {shutdown["reason"]}");
                Assert.True(members[h].WaitForExit(Liveness), $"{members[h].Name} exits after its shutdown");
                JsonObject last = members[h].Last("progress")!;
                Assert.All(majority, s => Assert.True(Delivered(last, s) <= sent[s] - Round, $"{members[h].Name} delivered round 3 while cut off: {last.ToJsonString()}"));
            }
            foreach (int h in majority) Assert.Null(members[h].Last("shutdown"));

            // 4. Healed; a new process on the founder's host (the first seed) joins the running
            // service rather than founding another, and so does one on a minority host.
            cluster.Network.Heal();
            MemberProcess again = cluster.StartMember(0, Hosts, "--expect-members", S(majority.Length + 2), "--joins-late");
            MemberProcess back = cluster.StartMember(minority[0], Hosts + 1, "--expect-members", S(majority.Length + 2), "--joins-late");
            Assert.False((bool)again.WaitFor("ready", Liveness)["founded"]!, "a restarted first seed must join the running service");
            members[Hosts] = again;
            members[Hosts + 1] = back;
            int[] final = [.. majority, Hosts, Hosts + 1];
            cluster.WaitForView(final.Select(h => members[h]), final.Select(h => members[h]).ToList(), view, Liveness, "the new processes join the running service");
            SendRound(final);
            WaitDelivered(final, "round 4 delivered everywhere");
        }
        catch (Exception e)
        {
            output.WriteLine($"FAILED: {e}\n{cluster.Describe()}");
            throw;
        }
    }
}
