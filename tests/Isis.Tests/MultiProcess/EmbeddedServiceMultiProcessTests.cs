using System.Globalization;
using System.Text.Json.Nodes;
using Isis.Simulation;
using Isis.Simulation.Checking;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// The zero-configuration default with real processes: nothing runs in the test process; the
/// members run the membership service among themselves, on the processes that started first. The
/// first three processes go one after another, each a replica host when it goes and each in
/// another way (SIGKILL of the founder, a graceful exit, SIGSTOP past the expulsion time), while
/// the others keep sending; a newcomer then joins.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class EmbeddedServiceMultiProcessTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Long = TimeSpan.FromSeconds(90);
    private const int Round = 300;

    private static string S(int n) => n.ToString(CultureInfo.InvariantCulture);

    /// <param name="systemKey">Hex of a system key every member seals with, or null.</param>
    private sealed class Members(MultiProcessCluster cluster, string logDir, string? systemKey)
    {
        public readonly Dictionary<int, MemberProcess> ByIndex = new();
        public readonly Dictionary<int, int> Sent = new();
        public readonly HashSet<int> Live = new();

        public MemberProcess Start(int index, int expectMembers, bool joinsLate = false)
        {
            string[] args = ["--expect-members", S(expectMembers), "--event-log", Path.Combine(logDir, $"member{index}.jsonl"), .. systemKey is null ? [] : (string[])["--system-key", systemKey]];
            MemberProcess m = cluster.Start(index, joinsLate ? [.. args, "--joins-late"] : args);
            ByIndex[index] = m;
            Sent[index] = 0;
            Live.Add(index);
            return m;
        }

        public IEnumerable<MemberProcess> LiveProcesses => Live.Select(i => ByIndex[i]);

        public int WaitForView(int afterViewId, string what) =>
            cluster.WaitForView(LiveProcesses, LiveProcesses.ToList(), afterViewId, Long, what);

        /// <summary>Every live member sends <paramref name="count"/> more messages (on its own sender thread; this does not wait).</summary>
        public void SendRound(int count = Round)
        {
            foreach (int i in Live)
            {
                ByIndex[i].Command("send " + S(count));
                Sent[i] += count;
            }
        }

        /// <summary>Waits until every live member delivered everything every live member sent, in FIFO order.</summary>
        public void WaitForDeliveries(string what)
        {
            foreach (MemberProcess m in LiveProcesses)
            {
                DateTime deadline = DateTime.UtcNow + Long;
                while (true)
                {
                    JsonObject p = m.Status();
                    Assert.True((bool)p["fifoOk"]!, $"{m.Name}: FIFO violated: {p.ToJsonString()}");
                    if (Live.All(s => Delivered(p, s) >= Sent[s])) break;
                    if (DateTime.UtcNow > deadline) throw new TimeoutException($"{m.Name} did not deliver every message ({what}): {p.ToJsonString()}");
                    Thread.Sleep(100);
                }
            }
            cluster.Log(what);
        }

        /// <summary>How many messages of <paramref name="sender"/> the live members delivered; virtual synchrony says they all agree.</summary>
        public void AssertSameCountFrom(int sender)
        {
            int[] counts = LiveProcesses.Select(m => Delivered(m.Status(), sender)).Distinct().ToArray();
            Assert.True(counts.Length == 1, $"the survivors delivered different numbers of member{sender}'s messages: {string.Join(", ", counts)}");
            cluster.Log($"every survivor delivered the same {counts[0]} of the {Sent[sender]} messages member{sender} sent");
        }

        public List<MemberProcess> Hosts() => LiveProcesses.Where(m => (bool)m.Stats()["hostsMembershipService"]!).ToList();

        /// <summary>Waits until the service runs <paramref name="count"/> replicas on live processes; returns those processes.</summary>
        public List<MemberProcess> WaitForHosts(int count)
        {
            DateTime deadline = DateTime.UtcNow + Long;
            List<MemberProcess> hosts;
            while ((hosts = Hosts()).Count != count)
            {
                if (DateTime.UtcNow > deadline) throw new TimeoutException($"the service never ran {count} replicas on live processes (now on: {string.Join(", ", hosts.Select(h => h.Name))})");
                Thread.Sleep(100);
            }
            cluster.Log($"replicas on {string.Join(", ", hosts.Select(h => h.Name))}");
            return hosts;
        }

        public int IndexOf(MemberProcess m) => ByIndex.Single(e => e.Value == m).Key;
    }

    private static int Delivered(JsonObject progress, int sender) =>
        ((JsonObject)progress["perSender"]!)[S(sender)] is { } n ? (int)n : 0;

    /// <summary>
    /// The soak's stop (issue 25), with real processes: every process of the zero-configuration
    /// default goes, and new ones start while the last old ones still run. The three replica hosts
    /// are SIGKILLed at once (the service is gone) and three new processes start at once, while the
    /// two other old processes still hold the well-known port (and tell the newcomers where the
    /// dead service was); those two then stop, isolated, and are restarted as they exit. Founding
    /// was decided only at a process's start, so nobody founded and every process gave up. Now the
    /// process that takes the port over founds once nobody answers, and the five re-form the group.
    /// </summary>
    [Fact]
    public void All_five_processes_replaced_with_new_ones_starting_while_old_ones_run_found_the_service_again_and_deliver()
    {
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-embedded-restart-");
        // 20 x 100 ms: healthy members on a loaded 2-core machine are not expelled (see MultiProcessCluster).
        using var cluster = MultiProcessCluster.Embedded(output, "embedded-restart", suspicionCount: 20);
        var m = new Members(cluster, dir.FullName, systemKey: null);
        try
        {
            MemberProcess founder = m.Start(0, 5);
            Assert.True((bool)founder.WaitFor("ready", Long)["founded"]!, "the first process founds the embedded service");
            for (int i = 1; i < 5; i++) m.Start(i, 5);
            int view = m.WaitForView(0, "five members in one view");
            List<MemberProcess> hosts = m.WaitForHosts(3);
            m.SendRound();
            m.WaitForDeliveries("round 1 delivered everywhere");

            // 1. The service dies with its three hosts; three newcomers start at once.
            List<int> old = m.Live.ToList();
            List<int> survivors = old.Where(i => !hosts.Contains(m.ByIndex[i])).ToList();
            // Each SIGKILLs itself from its event loop ("crash"): its event log then holds every Send it
            // made. A SIGKILL from outside right after the round (a CI run: 34 ms after it) could land
            // before the log's 100 ms flush, and the checker saw deliveries of Sends never logged.
            foreach (MemberProcess h in hosts) h.Command("crash");
            foreach (MemberProcess h in hosts)
            {
                Assert.True(h.WaitForExit(Long), $"{h.Name} dies on SIGKILL");
                m.Live.Remove(m.IndexOf(h));
            }
            cluster.Log($"the three replica hosts SIGKILLed; {string.Join(", ", survivors.Select(i => m.ByIndex[i].Name))} still run");
            var fresh = new List<MemberProcess> { m.Start(5, 5), m.Start(6, 5), m.Start(7, 5) };

            // 2. The two old ones stop (isolated: their service is gone), and are restarted as each exits.
            int next = 8;
            foreach (int i in survivors)
            {
                MemberProcess s = m.ByIndex[i];
                JsonObject shutdown = s.WaitFor("shutdown", Long);
                cluster.Log($"{s.Name} stopped: {shutdown["reason"]}");
                Assert.True(s.WaitForExit(Long), $"{s.Name} exits after its shutdown");
                m.Live.Remove(i);
                fresh.Add(m.Start(next++, 5));
            }

            // 3. One service again, founded by one new process; the five re-form the group and deliver.
            view = m.WaitForView(0, "the five new processes in one view");
            m.SendRound();
            m.WaitForDeliveries("the new group delivers everything");
            List<MemberProcess> founders = fresh.Where(p => (bool)p.Stats()["foundedService"]!).ToList();
            Assert.Single(founders);
            Assert.False((bool)founders[0].WaitFor("ready", Long)["founded"]!, "the new service was founded after its founder's start (it took the well-known port over)");
            m.WaitForHosts(3);
            foreach (MemberProcess p in m.LiveProcesses) Assert.Null(p.Last("shutdown"));
            foreach (MemberProcess p in m.LiveProcesses) p.Command("quit");
            foreach (MemberProcess p in m.LiveProcesses) Assert.True(p.WaitForExit(Long), $"{p.Name} exits after quit");

            var logs = m.ByIndex.Values.Select(p => EventLogMerge.Read(Path.Combine(dir.FullName, $"{p.Name}.jsonl"))).ToList();
            EventLogMerge.Result merged = EventLogMerge.Merge(logs);
            cluster.Log($"merged {merged.History.Count} events");
            Assert.Equal(2, merged.History.Events.Count(e => e.Kind == HistoryEventKind.Founded));
            CheckResult result = HistoryChecker.Check(merged.History);
            cluster.Log(result.ToString());
            Assert.True(result.Passed, result.ToString());
        }
        catch
        {
            cluster.LogLoopStalls();
            output.WriteLine(cluster.Describe());
            throw;
        }
        try { dir.Delete(recursive: true); } catch (IOException) { }
    }

    /// <param name="transport">UDP (the default), and the TCP overlay: connections to killed, exited and stopped processes break, and newcomers dial the survivors.</param>
    /// <param name="sealedTraffic">Every process seals with a system key (the service's traffic, exits and discovery included).</param>
    [Theory]
    [InlineData("udp", false)]
    [InlineData("tcp", false)]
    [InlineData("udp", true)]
    public void Five_members_survive_losing_the_first_three_processes_each_a_replica_host_by_sigkill_graceful_exit_and_sigstop(string transport, bool sealedTraffic)
    {
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-embedded-");
        // 20 x 100 ms: healthy members on a loaded 2-core machine are not expelled (see MultiProcessCluster).
        using var cluster = MultiProcessCluster.Embedded(output, "embedded-five", suspicionCount: 20, transport);
        var m = new Members(cluster, dir.FullName, sealedTraffic ? Convert.ToHexString(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32)) : null);
        try
        {
            // The first process founds the service; four more join, and it grows to three replicas.
            MemberProcess founder = m.Start(0, 5);
            Assert.True((bool)founder.WaitFor("ready", Long)["founded"]!, "the first process founds the embedded service");
            for (int i = 1; i < 5; i++) m.Start(i, 5);
            int view = m.WaitForView(0, "five members in one view");
            List<MemberProcess> hosts = m.WaitForHosts(3);
            Assert.Contains(founder, hosts);
            m.SendRound();
            m.WaitForDeliveries("round 1 delivered everywhere");

            // 1. The founder (first replica, well-known port), SIGKILLed while everyone sends.
            m.SendRound();
            founder.Command("crash");
            Assert.True(founder.WaitForExit(Long), "the founder SIGKILLs itself");
            m.Live.Remove(0);
            cluster.Log("member0 (the founder) SIGKILLed");
            view = m.WaitForView(view, "the survivors install a view without the founder");
            m.SendRound();
            m.WaitForDeliveries("the survivors keep delivering");
            m.AssertSameCountFrom(0);
            hosts = m.WaitForHosts(3);

            // 2. A graceful exit of the second process, a replica host, while everyone sends.
            MemberProcess leaving = m.ByIndex[1];
            Assert.Contains(leaving, hosts);
            int leavingIndex = 1;
            bool leaderLeaves = (bool)leaving.Stats()["membershipReplicaIsLeader"]!;
            m.SendRound();
            leaving.Command("quit");
            Assert.True(leaving.WaitForExit(Long), $"{leaving.Name} exits after quit");
            m.Live.Remove(leavingIndex);
            cluster.Log($"{leaving.Name} (a replica host{(leaderLeaves ? ", the leader's" : "")}) exited gracefully");
            Assert.DoesNotContain("did not move", leaving.StandardError);
            view = m.WaitForView(view, $"the survivors install a view without {leaving.Name}");
            m.SendRound();
            m.WaitForDeliveries("the survivors keep delivering");
            m.AssertSameCountFrom(leavingIndex);
            hosts = m.WaitForHosts(3);

            // 3. The third process, a replica host, stopped with SIGSTOP well past its expulsion, then continued.
            MemberProcess paused = m.ByIndex[2];
            Assert.Contains(paused, hosts);
            int pausedIndex = 2;
            m.SendRound();
            paused.Stop();
            m.Live.Remove(pausedIndex);
            cluster.Log($"{paused.Name} SIGSTOPped");
            view = m.WaitForView(view, $"the survivors install a view without {paused.Name}");
            Thread.Sleep(TimeSpan.FromMilliseconds(3 * MultiProcessCluster.HeartbeatMs * cluster.Suspicion)); // well past its expulsion and isolation times
            paused.Continue();
            JsonObject shutdown = paused.WaitFor("shutdown", Long);
            cluster.Log($"{paused.Name} continued and stopped: {shutdown["reason"]}");
            Assert.StartsWith("expelled", (string)shutdown["reason"]!);
            Assert.True(paused.WaitForExit(Long), $"{paused.Name} exits after learning it was expelled");
            m.SendRound();
            m.WaitForDeliveries("the two survivors keep delivering");
            m.AssertSameCountFrom(pausedIndex);

            // 4. A newcomer finds the service, although the processes it started on are gone.
            MemberProcess late = m.Start(5, 3, joinsLate: true);
            Assert.False((bool)late.WaitFor("ready", Long)["founded"]!, "a newcomer must join the running service, not found another");
            view = m.WaitForView(view, "a newcomer joins");
            m.SendRound();
            m.WaitForDeliveries("the three members deliver everything");

            // Nobody else stopped, nobody saw an isolation timeout.
            foreach (MemberProcess p in m.LiveProcesses) Assert.Null(p.Last("shutdown"));
            foreach (MemberProcess p in m.LiveProcesses) p.Command("quit");
            foreach (MemberProcess p in m.LiveProcesses) Assert.True(p.WaitForExit(Long), $"{p.Name} exits after quit");

            var logs = m.ByIndex.Values.Select(p => EventLogMerge.Read(Path.Combine(dir.FullName, $"{p.Name}.jsonl"))).ToList();
            EventLogMerge.Result merged = EventLogMerge.Merge(logs);
            cluster.Log($"merged {merged.History.Count} events");
            Assert.Single(merged.History.Events, e => e.Kind == HistoryEventKind.Founded);
            Assert.True(merged.History.Events.Count(e => e.Kind == HistoryEventKind.Decide && e.Members != null) >= 6, "the service reconfigured as its hosts went");
            CheckResult result = HistoryChecker.Check(merged.History);
            cluster.Log(result.ToString());
            Assert.True(result.Passed, result.ToString());
        }
        catch
        {
            cluster.LogLoopStalls();
            output.WriteLine(cluster.Describe());
            throw;
        }
        try { dir.Delete(recursive: true); } catch (IOException) { }
    }
}
