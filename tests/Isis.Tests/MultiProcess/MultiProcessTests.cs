using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.Json.Nodes;
using Isis.Transport.Framing;
using Isis.Core.Identity;
using Isis.Core.Wire;
using Isis.Serialization;
using Isis.Simulation;
using Isis.Simulation.Checking;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// Real processes on loopback: each member is a child process running tests/Isis.MemberHost; the
/// membership service runs in this test process. Waits are generous liveness bounds, never timings.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class MultiProcessTests
{
    private static readonly TimeSpan Long = TimeSpan.FromSeconds(90);
    private static readonly TimeSpan Detection = TimeSpan.FromSeconds(15); // ~2 s expected (20 x 100 ms); generous on a loaded 2-core machine

    private readonly ITestOutputHelper _output;

    public MultiProcessTests(ITestOutputHelper output) => _output = output;

    private static string S(int n) => n.ToString(CultureInfo.InvariantCulture);

    private void Run(MultiProcessCluster cluster, Action body)
    {
        try
        {
            body();
        }
        catch
        {
            cluster.LogLoopStalls();
            _output.WriteLine(cluster.Describe());
            throw;
        }
    }

    private static void AssertDone(MemberProcess m, JsonObject done, int senders, int perSender)
    {
        Assert.True((bool)done["fifoOk"]!, $"{m.Name}: FIFO violated: {done.ToJsonString()}");
        Assert.Equal((long)senders * perSender, (long)done["total"]!);
        var counts = (JsonObject)done["perSender"]!;
        for (int s = 0; s < senders; s++) Assert.Equal(perSender, (int)counts[S(s)]!);
    }

    private static int Delivered(JsonObject progress, int sender) =>
        ((JsonObject)progress["perSender"]!)[S(sender)] is { } n ? (int)n : 0;

    private static int LastViewId(MemberProcess m) => (int)m.Last("view")!["id"]!;

    // ---------------------------------------------------------------- (a) FIFO at scale + history check

    [Fact]
    public void Five_processes_each_send_10000_and_all_deliver_50000_in_fifo_order_and_the_merged_event_log_passes_the_checker()
    {
        const int Members = 5, Sends = 10_000;
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-multiprocess-");
        // What this test checks is FIFO at scale, not the detector: five processes streaming at full
        // rate on two cores stall each other's event loops (2.3 s in one CI run, where the default
        // 5 x 100 ms expelled a healthy joiner), so expulsion waits 30 heartbeats here.
        using var cluster = new MultiProcessCluster(_output, "fifo-five", suspicionCount: 30);
        Run(cluster, () =>
        {
            var clock = Stopwatch.StartNew();
            MemberProcess[] members = cluster.StartMany(Members, i =>
                ["--sends", S(Sends), "--expect-members", S(Members), "--event-log", Path.Combine(dir.FullName, $"member{i}.jsonl")]);
            cluster.Log("all members ready");
            foreach (MemberProcess m in members)
            {
                JsonObject done = m.WaitFor("done", Long);
                cluster.Log($"{m.Name} {done.ToJsonString()}");
                AssertDone(m, done, Members, Sends);
            }
            cluster.Log($"every member delivered {Members * Sends} messages in FIFO order ({clock.Elapsed.TotalSeconds:0.0} s since start)");
            foreach (MemberProcess m in members)
            {
                JsonObject stats = m.Stats();
                cluster.Log($"{m.Name} stats {stats.ToJsonString()}");
                Assert.Equal(0, (long)stats["handlerMismatches"]!);
                Assert.Equal(0, (long)stats["droppedFirewall"]!);
            }

            // Close every stdin at once: the members leave, flush their logs and exit.
            foreach (MemberProcess m in members)
            {
                try { m.Command("quit"); } catch (IOException) { }
            }
            foreach (MemberProcess m in members) Assert.True(m.WaitForExit(TimeSpan.FromSeconds(30)), $"{m.Name} did not exit after quit");
            cluster.Log("all members exited");

            var logs = members.Select(m => EventLogMerge.Read(Path.Combine(dir.FullName, $"{m.Name}.jsonl"))).ToList();
            EventLogMerge.Result merged = EventLogMerge.Merge(logs);
            cluster.Log($"merged {merged.History.Count} events; {merged.Reordered} deliveries held back behind their send (max shift {merged.MaxShiftMicros} us)");
            Assert.Equal(Members * Sends, merged.History.Events.Count(e => e.Kind == HistoryEventKind.Send));
            Assert.True(merged.History.Events.Count(e => e.Kind == HistoryEventKind.Deliver) >= Members * Members * Sends);

            CheckResult result = HistoryChecker.Check(merged.History);
            cluster.Log(result.ToString());
            // No Heal in a real run, so the checker's liveness part is off; every safety property must hold.
            Assert.True(result.Passed, result.ToString());
        });
        try { dir.Delete(recursive: true); } catch (IOException) { }
    }

    // ---------------------------------------------------------------- (b) SIGKILL

    // Known issue (runtime, not fixed here): right after a member that was streaming at full rate
    // is SIGKILLed or SIGSTOPped, the survivors' event loops stall for 0.3-0.7 s (once 2.9 s, in
    // two of three survivors), against < 60 ms in steady state; the member host's loop probe
    // reports it (see LogLoopStalls). With the default detector (5 x 100 ms) that is long enough
    // for the service to expel healthy survivors; these tests use 20 x 100 ms, and the 2.9 s stall
    // still failed this test once in about a dozen runs (two healthy survivors expelled).

    [Fact]
    public void A_sigkilled_member_is_removed_from_the_view_and_the_survivors_keep_delivering()
    {
        const int Members = 4, Sends = 2_000, More = 1_000;
        using var cluster = new MultiProcessCluster(_output, "sigkill");
        Run(cluster, () =>
        {
            MemberProcess[] members = cluster.StartMany(Members, i => ["--sends", S(Sends), "--expect-members", S(Members)]);
            foreach (MemberProcess m in members) AssertDone(m, m.WaitFor("done", Long), Members, Sends);
            int viewWithVictim = members.Max(LastViewId);
            MemberProcess victim = members[^1];
            MemberProcess[] survivors = members[..^1];

            // Kill it in the middle of a stream of sends.
            victim.Command("send 1000000");
            survivors[0].WaitFor("progress", Long, p => Delivered(p, Members - 1) >= Sends + 500);
            victim.Kill();
            cluster.Log($"SIGKILLed {victim.Name} (pid {victim.Pid})");
            Assert.True(victim.WaitForExit(TimeSpan.FromSeconds(10)));

            int view = cluster.WaitForView(survivors, survivors, viewWithVictim, Detection, "survivors installed a view without the killed member");

            // Virtual synchrony, seen by the application: the survivors delivered the same prefix of the victim's stream.
            var fromVictim = survivors.Select(m => Delivered(m.Status(), Members - 1)).ToArray();
            cluster.Log($"victim messages delivered by the survivors: {string.Join(", ", fromVictim)}");
            Assert.All(fromVictim, n => Assert.Equal(fromVictim[0], n));

            foreach (MemberProcess m in survivors) m.Command($"send {More}");
            foreach (MemberProcess m in survivors)
            {
                JsonObject p = m.WaitFor("progress", Long, p => survivors.Select((_, i) => Delivered(p, i)).All(n => n == Sends + More));
                Assert.True((bool)p["fifoOk"]!, p.ToJsonString());
                Assert.Equal(fromVictim[0], Delivered(p, Members - 1));
                Assert.Equal(view, LastViewId(m));
            }
            cluster.Log("the survivors delivered every message sent after the kill");
            cluster.LogLoopStalls();
        });
    }

    // ---------------------------------------------------------------- (c) SIGSTOP: firewall and self-shutdown

    [Fact]
    public void A_sigstopped_member_is_expelled_firewalled_after_sigcont_and_shuts_itself_down()
    {
        const int Members = 4, Sends = 1_000, More = 500;
        using var cluster = new MultiProcessCluster(_output, "sigstop");
        Run(cluster, () =>
        {
            MemberProcess[] members = cluster.StartMany(Members, i => ["--sends", S(Sends), "--expect-members", S(Members)]);
            foreach (MemberProcess m in members) AssertDone(m, m.WaitFor("done", Long), Members, Sends);
            int viewWithVictim = members.Max(LastViewId);
            MemberProcess victim = members[^1];
            MemberProcess[] survivors = members[..^1];

            long FirewallDrops() =>
                cluster.Service.GetStatistics().MembershipServiceDroppedFirewall
                + survivors.Sum(m => (long)m.Stats()["droppedFirewall"]!);
            long before = FirewallDrops();

            // Stop it while it is sending: it holds unsent messages when it wakes up.
            victim.Command("send 1000000");
            survivors[0].WaitFor("progress", Long, p => Delivered(p, Members - 1) >= Sends + 500);
            victim.Stop();
            cluster.Log($"SIGSTOPped {victim.Name} (pid {victim.Pid})");
            int view = cluster.WaitForView(survivors, survivors, viewWithVictim, Detection, "survivors installed a view without the stopped member");
            var fromVictim = survivors.Select(m => Delivered(m.Status(), Members - 1)).ToArray();
            Assert.All(fromVictim, n => Assert.Equal(fromVictim[0], n));

            victim.Continue();
            cluster.Log($"SIGCONTinued {victim.Name}");
            JsonObject shutdown = victim.WaitFor("shutdown", Detection);
            string reason = (string)shutdown["reason"]!;
            cluster.Log($"{victim.Name} shut down: {reason}");
            Assert.Contains("expelled", reason, StringComparison.OrdinalIgnoreCase);
            Assert.True(victim.WaitForExit(TimeSpan.FromSeconds(15)), $"{victim.Name} did not exit after its shutdown");

            // Its packets after the wake-up were dropped and counted by a firewall.
            long after = 0;
            TestWait(() => (after = FirewallDrops()) > before, Detection);
            cluster.Log($"firewall drops (service + survivors): {before} -> {after}");
            Assert.True(after > before);

            foreach (MemberProcess m in survivors) m.Command($"send {More}");
            foreach (MemberProcess m in survivors)
            {
                JsonObject p = m.WaitFor("progress", Long, p => survivors.Select((_, i) => Delivered(p, i)).All(n => n == Sends + More));
                Assert.True((bool)p["fifoOk"]!, p.ToJsonString());
                Assert.Equal(fromVictim[0], Delivered(p, Members - 1)); // nothing from the zombie got through
                Assert.Equal(view, LastViewId(m));
            }
            cluster.LogLoopStalls();
        });
    }

    [Fact]
    public void A_sigstopped_member_that_does_not_answer_a_query_in_time_is_expelled_for_that_and_told_why()
    {
        const int Members = 4;
        // Missed heartbeats would take 60 s (600 x 100 ms): the query's 1 s timeout must be what expels it.
        using var cluster = new MultiProcessCluster(_output, "expel-slow", suspicionCount: 600);
        Run(cluster, () =>
        {
            MemberProcess[] members = cluster.StartMany(Members, i => ["--sends", S(10), "--expect-members", S(Members)]);
            foreach (MemberProcess m in members) AssertDone(m, m.WaitFor("done", Long), Members, 10);
            int viewWithVictim = members.Max(LastViewId);
            MemberProcess victim = members[^1];
            MemberProcess[] survivors = members[..^1];

            victim.Stop();
            cluster.Log($"SIGSTOPped {victim.Name} (pid {victim.Pid}); querying with a 1 s timeout that expels slow members");
            survivors[0].Command("query-expel 1000");
            JsonObject done = survivors[0].WaitFor("queryDone", Detection);
            Assert.Equal(3, ((JsonArray)done["replies"]!).Count); // completed once the view dropped the stopped member
            cluster.WaitForView(survivors, survivors, viewWithVictim, Detection, "survivors installed a view without the stopped member");
            // The querier says whom it reported and why (on standard error: no logger was configured).
            TestWait(() => survivors[0].StandardError.Contains("ExpelSlowMembers", StringComparison.Ordinal), Detection);
            cluster.Log("querier: " + survivors[0].StandardError.Split('\n').First(l => l.Contains("ExpelSlowMembers", StringComparison.Ordinal)));

            victim.Continue();
            JsonObject shutdown = victim.WaitFor("shutdown", Detection);
            string reason = (string)shutdown["reason"]!;
            cluster.Log($"{victim.Name} shut down: {reason}");
            Assert.StartsWith("expelled", reason, StringComparison.Ordinal);
            Assert.Contains("query timed out waiting for this process's reply", reason, StringComparison.Ordinal);
            Assert.DoesNotContain("stopped hearing", reason, StringComparison.Ordinal);
            Assert.True(victim.WaitForExit(TimeSpan.FromSeconds(15)), $"{victim.Name} did not exit after its shutdown");
        });
    }

    // ---------------------------------------------------------------- (d) hostile datagrams

    [Fact]
    public void Hostile_datagrams_at_a_member_are_dropped_and_counted_and_the_group_keeps_delivering()
    {
        const int Members = 3, Sends = 500, More = 500;
        using var cluster = new MultiProcessCluster(_output, "hostile");
        Run(cluster, () =>
        {
            MemberProcess[] members = cluster.StartMany(Members, i => ["--sends", S(Sends), "--expect-members", S(Members)]);
            foreach (MemberProcess m in members) AssertDone(m, m.WaitFor("done", Long), Members, Sends);
            MemberProcess target = members[0];
            int viewId = LastViewId(target);
            JsonObject before = target.Stats();

            using var attacker = new UdpClient(new IPEndPoint(IPAddress.Loopback, 0));
            var targetEndPoint = new IPEndPoint(IPAddress.Loopback, target.Port);
            int attackerPort = ((IPEndPoint)attacker.Client.LocalEndPoint!).Port;
            var random = new Random(12345);
            int sent = 0;
            void Send(byte[] d)
            {
                attacker.Send(d, d.Length, targetEndPoint);
                if (++sent % 100 == 0) Thread.Sleep(5); // stay under the socket's receive buffer
            }

            // Random bytes of many sizes, including empty.
            for (int i = 0; i < 1_000; i++)
            {
                var d = new byte[random.Next(1_500)];
                random.NextBytes(d);
                Send(d);
            }
            Send([]);
            // Oversized: 60,000 random bytes (above the members' 16 KB datagram limit).
            var huge = new byte[60_000];
            random.NextBytes(huge);
            Send(huge);

            // Valid-looking packets built here: a Data packet of the group's current view from the
            // attacker's own endpoint (a non-member), and one whose header names a real member.
            GroupId group = GroupId.FromName(cluster.Group);
            var attackerNode = new NodeId(EndpointCodec.FromIPv4(0x7F00_0001, (ushort)attackerPort), 1);
            byte[] payload = ArgumentCodec.Encode(1, [99, 1]);
            byte[] fromStranger = Datagram(new PacketWriter().Begin(new PacketHeader(PacketKind.Data, attackerNode, group, viewId, 1)).I32(0).Tail(payload).Finish());
            var member1 = new NodeId(EndpointCodec.FromIPv4(0x7F00_0001, (ushort)members[1].Port), uint.Parse(members[1].Address[(members[1].Address.IndexOf('#') + 1)..], CultureInfo.InvariantCulture));
            byte[] forged = Datagram(new PacketWriter().Begin(new PacketHeader(PacketKind.Data, member1, group, viewId, Sends + 1)).I32(1).Tail(payload).Finish());

            // Every truncation of both.
            for (int length = 0; length < fromStranger.Length; length++) Send(fromStranger[..length]);
            for (int length = 0; length < forged.Length; length++) Send(forged[..length]);
            // Replayed: each sent several times.
            for (int i = 0; i < 5; i++)
            {
                Send(fromStranger);
                Send(forged);
            }
            // A corrupted copy (one flipped bit) of the valid one.
            for (int i = 0; i < 50; i++)
            {
                byte[] d = (byte[])fromStranger.Clone();
                d[random.Next(d.Length)] ^= (byte)(1 << random.Next(8));
                Send(d);
            }
            cluster.Log($"sent {sent} hostile datagrams to {target.Name}");

            JsonObject after = before;
            long Delta(string field) => (long)after[field]! - (long)before[field]!;
            TestWait(() =>
            {
                after = target.Stats();
                return Delta("droppedMalformed") > 1_000 && Delta("droppedMalformed") + Delta("droppedWrongView") + Delta("droppedFirewall") + Delta("droppedUnknownGroup") >= 1_000 + 10;
            }, TimeSpan.FromSeconds(30));
            cluster.Log($"{target.Name} stats before {before.ToJsonString()}\n after {after.ToJsonString()}");
            Assert.True(Delta("droppedMalformed") > 0);
            Assert.False(target.HasExited);

            // The group still works, and nothing the attacker sent was delivered anywhere.
            foreach (MemberProcess m in members) m.Command($"send {More}");
            foreach (MemberProcess m in members)
            {
                JsonObject p = m.WaitFor("progress", Long, p => Enumerable.Range(0, Members).All(i => Delivered(p, i) == Sends + More));
                Assert.True((bool)p["fifoOk"]!, p.ToJsonString());
                Assert.Equal(0, (long)p["undeliverable"]!);
                Assert.Equal(Members, ((JsonObject)p["perSender"]!).Count); // no sender 99
                Assert.Equal(viewId, LastViewId(m));
            }
            cluster.Log("the group kept delivering after the attack");
            cluster.LogLoopStalls();
        });
    }

    private static byte[] Datagram(byte[] packet)
    {
        var batcher = new DatagramBatcher(FrameFormat.DefaultMaxDatagramSize, new FragmentIdCounter(0));
        batcher.Add(packet);
        batcher.Seal();
        byte[] datagram = batcher.GetCompleted(0).ToArray();
        batcher.ReleaseCompleted();
        return datagram;
    }

    private static void TestWait(Func<bool> condition, TimeSpan timeout)
    {
        DateTime deadline = DateTime.UtcNow + timeout;
        while (!condition())
        {
            if (DateTime.UtcNow > deadline) throw new TimeoutException($"condition not met within {timeout.TotalSeconds:0} s");
            Thread.Sleep(50);
        }
    }
}
