using System.Diagnostics;
using System.Globalization;
using System.Text.Json.Nodes;
using Isis.Core.Groups;
using Isis.Simulation;
using Isis.Simulation.Checking;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// SafeSend, OrderedSend and Query across real processes (tests/Isis.MemberHost children, the
/// membership service in this test process). Waits are generous liveness bounds, never timings.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class SafeSendMultiProcessTests
{
    private static readonly TimeSpan Long = TimeSpan.FromSeconds(90);
    private static readonly TimeSpan Detection = TimeSpan.FromSeconds(20); // ~2 s expected; generous on a loaded 2-core machine

    // Expulsion after 20 missed heartbeats (2 s) rather than the default 5: these tests keep
    // several processes busy at once, and with other work on this 2-core machine (load averages of
    // 15-18 were seen) healthy members' event loops stalled up to 0.7-1 s and they were isolated or
    // expelled with 5 (a member missing from a Query(ALL)'s replies, a join that never completed).
    private const int Suspicion = 20;

    private readonly ITestOutputHelper _output;

    public SafeSendMultiProcessTests(ITestOutputHelper output) => _output = output;

    private static string S(int n) => n.ToString(CultureInfo.InvariantCulture);

    private void Run(MultiProcessCluster cluster, DirectoryInfo? dir, Action body)
    {
        try
        {
            body();
        }
        catch
        {
            cluster.LogLoopStalls();
            _output.WriteLine(cluster.Describe());
            if (dir != null) _output.WriteLine($"logs kept in {dir.FullName}");
            throw;
        }
        if (dir != null)
        {
            try { dir.Delete(recursive: true); } catch (IOException) { }
        }
    }

    private static int Delivered(JsonObject progress, int sender) =>
        ((JsonObject)progress["perSender"]!)[S(sender)] is { } n ? (int)n : 0;

    /// <summary>The members of the 5-member view, by rank (oldest first), with their sender index.</summary>
    private static (MemberProcess Member, int Index)[] ByRank(MemberProcess[] members, JsonObject view) =>
        ((JsonArray)view["members"]!).Select(a => (string)a!)
            .Select(a => Array.FindIndex(members, m => m.Address == a))
            .Select(i => (members[i], i)).ToArray();

    private static List<(int Sender, int Seq)> ReadOrder(string path) =>
        File.ReadAllLines(path).Where(l => l.Length > 0).Select(l =>
        {
            string[] w = l.Split(' ');
            return (int.Parse(w[0], CultureInfo.InvariantCulture), int.Parse(w[1], CultureInfo.InvariantCulture));
        }).ToList();

    private static JsonObject Order(MemberProcess m)
    {
        int from = m.LineCount;
        m.Command("order");
        return m.WaitFor("order", TimeSpan.FromSeconds(15), from: from);
    }

    private static void Dump(MemberProcess m)
    {
        int from = m.LineCount;
        m.Command("dump");
        m.WaitFor("dumped", TimeSpan.FromSeconds(15), from: from);
    }

    private static void QuitAll(IEnumerable<MemberProcess> members)
    {
        var list = members.ToList();
        foreach (MemberProcess m in list) m.Command("quit");
        foreach (MemberProcess m in list) Assert.True(m.WaitForExit(TimeSpan.FromSeconds(30)), $"{m.Name} did not exit after quit");
    }

    /// <summary>Merges the members' event logs and requires every safety property of the history checker.</summary>
    private static History CheckLogs(MultiProcessCluster cluster, DirectoryInfo dir, IEnumerable<MemberProcess> members)
    {
        var logs = members.Select(m => EventLogMerge.Read(Path.Combine(dir.FullName, $"{m.Name}.jsonl"))).ToList();
        EventLogMerge.Result merged = EventLogMerge.Merge(logs);
        cluster.Log($"merged {merged.History.Count} events; {merged.Reordered} held back behind their send or acceptances (max shift {merged.MaxShiftMicros} us)");
        CheckResult result = HistoryChecker.Check(merged.History);
        cluster.Log(result.ToString());
        // No Heal in a real run, so the checker's liveness part is off; every safety property must hold.
        Assert.True(result.Passed, result.ToString());
        return merged.History;
    }

    // ---------------------------------------------------------------- (a) SafeSend durability under SIGKILL

    [Theory]
    [InlineData(1)]
    [InlineData(3)]
    [InlineData(0)] // every member is an acceptor
    public void SafeSend_delivered_anywhere_is_delivered_by_every_survivor_in_one_order_when_the_sender_and_a_member_are_sigkilled_mid_stream(int phi)
    {
        const int Members = 5, Sends = 300;
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-safesend-");
        string OrderFile(int i) => Path.Combine(dir.FullName, $"member{i}.order");
        using var cluster = new MultiProcessCluster(_output, $"safe-phi{phi}", Suspicion);
        Run(cluster, dir, () =>
        {
            var clock = Stopwatch.StartNew();
            MemberProcess[] members = cluster.StartMany(Members, i =>
            [
                "--primitive", "safe", "--phi", S(phi), "--expect-members", S(Members),
                "--event-log", Path.Combine(dir.FullName, $"member{i}.jsonl"), "--order-file", OrderFile(i),
            ]);
            int full = cluster.WaitForView(members, members, -1, Long, "all five members in one view");
            var ranked = ByRank(members, members[0].WaitFor("view", Long, v => (int)v["id"]! == full));

            // The sender of highest rank, and an acceptor (rank 1) - or, with phi = 1, whose only
            // acceptor is rank 0 (killing it would void the guarantee), a non-acceptor (rank 2).
            (MemberProcess sender, int senderIndex) = ranked[Members - 1];
            (MemberProcess other, int otherIndex) = ranked[phi == 1 ? 2 : 1];
            var victims = new[] { (sender, senderIndex), (other, otherIndex) };
            var survivors = ranked.Where(r => r.Member != sender && r.Member != other).ToArray();
            cluster.Log($"phi {phi}: ranks {string.Join(", ", ranked.Select(r => r.Member.Name))}; killing the sender {sender.Name} (rank {Members - 1}) and {other.Name} (rank {(phi == 1 ? 2 : 1)})");

            // Each victim SIGKILLs itself once it has delivered a third (resp. 40 %) of the stream:
            // mid-stream, with SafeSends in flight from everyone.
            sender.Command($"crash-at {Members * Sends / 3}");
            other.Command($"crash-at {Members * Sends * 2 / 5}");
            foreach (MemberProcess m in members) m.Command($"send {Sends}");

            foreach ((MemberProcess v, _) in victims)
            {
                JsonObject crashing = v.WaitFor("crashing", Long);
                Assert.True(v.WaitForExit(TimeSpan.FromSeconds(15)), $"{v.Name} did not die");
                cluster.Log($"{v.Name} SIGKILLed itself after delivering {crashing["delivered"]}");
            }
            MemberProcess[] alive = survivors.Select(s => s.Member).ToArray();
            cluster.WaitForView(alive, alive, full, Detection, "the survivors installed a view without both victims");

            // The survivors' own streams complete (their pending SafeSends are resent in the new view).
            foreach (MemberProcess m in alive)
            {
                JsonObject p = m.WaitFor("progress", Long, p => survivors.All(s => Delivered(p, s.Index) == Sends));
                Assert.True((bool)p["fifoOk"]!, $"{m.Name}: FIFO violated: {p.ToJsonString()}");
                m.WaitFor("sent", Long, s => (int)s["sent"]! == Sends);
            }

            // One order at every survivor.
            JsonObject[] digests = alive.Select(Order).ToArray();
            cluster.Log("survivor digests: " + string.Join("; ", digests.Select((d, i) => $"{alive[i].Name} {d["count"]} {d["sha256"]}")));
            Assert.All(digests, d => Assert.Equal((string)digests[0]["sha256"]!, (string)d["sha256"]!));

            foreach (MemberProcess m in alive) Dump(m);
            var survivorOrder = ReadOrder(OrderFile(survivors[0].Index));
            Assert.Equal((long)digests[0]["count"]!, survivorOrder.Count);
            foreach ((_, int index) in survivors.Skip(1)) Assert.Equal(survivorOrder, ReadOrder(OrderFile(index)));

            // Every SafeSend a victim delivered was delivered by the survivors, in the same order
            // (SafeSend's order is uniform: a member that crashed delivered a prefix of it).
            var held = survivorOrder.ToHashSet();
            foreach ((MemberProcess v, int index) in victims)
            {
                var theirs = ReadOrder(OrderFile(index));
                var missing = theirs.Where(x => !held.Contains(x)).ToList();
                Assert.True(missing.Count == 0,
                    $"{v.Name} delivered {missing.Count} SafeSends the survivors never delivered, first {missing.FirstOrDefault()}; it delivered {theirs.Count}, the survivors {survivorOrder.Count}");
                int prefix = theirs.Zip(survivorOrder).TakeWhile(p => p.First == p.Second).Count();
                Assert.True(prefix == theirs.Count,
                    $"{v.Name}'s delivery order leaves the survivors' at position {prefix}: it delivered {theirs[Math.Min(prefix, theirs.Count - 1)]}, the survivors {(prefix < survivorOrder.Count ? survivorOrder[prefix] : default)}");
                cluster.Log($"{v.Name} delivered {theirs.Count} SafeSends, a prefix of the survivors' {survivorOrder.Count}");
            }
            foreach ((_, int index) in victims)
            {
                var fromVictim = survivorOrder.Where(x => x.Sender == index).Select(x => x.Seq).ToList();
                Assert.Equal(Enumerable.Range(1, fromVictim.Count), fromVictim);
                cluster.Log($"the survivors delivered {fromVictim.Count} of member{index}'s SafeSends");
            }

            QuitAll(alive);
            History history = CheckLogs(cluster, dir, members);
            Assert.True(history.Events.Count(e => e.Kind == HistoryEventKind.Send && e.Primitive == MessageKind.Safe) >= Members * Sends * 3 / 5);
            Assert.Contains(history.Events, e => e.Kind == HistoryEventKind.SafeAccepted);
            Assert.DoesNotContain(history.Events, e => e.Kind == HistoryEventKind.Send && (e.Primitive != MessageKind.Safe || e.Phi != phi));
            int atViewEnd = history.Events.Count(e => e.Kind == HistoryEventKind.Deliver && e.AtViewEnd);
            cluster.Log($"{atViewEnd} SafeSend deliveries made by a view change's flush; done in {clock.Elapsed.TotalSeconds:0.0} s");
        });
    }

    // ---------------------------------------------------------------- (b) OrderedSend total order

    [Fact]
    public void Five_processes_each_OrderedSend_2000_and_every_member_delivers_the_same_sequence()
    {
        const int Members = 5, Sends = 2_000;
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-ordered-");
        using var cluster = new MultiProcessCluster(_output, "ordered-five", Suspicion);
        Run(cluster, dir, () =>
        {
            var clock = Stopwatch.StartNew();
            MemberProcess[] members = cluster.StartMany(Members, i =>
                ["--primitive", "ordered", "--sends", S(Sends), "--expect-members", S(Members), "--event-log", Path.Combine(dir.FullName, $"member{i}.jsonl")]);
            foreach (MemberProcess m in members)
            {
                JsonObject done = m.WaitFor("done", Long);
                Assert.True((bool)done["fifoOk"]!, $"{m.Name}: FIFO violated: {done.ToJsonString()}");
                Assert.Equal((long)Members * Sends, (long)done["total"]!);
            }
            JsonObject[] digests = members.Select(Order).ToArray();
            cluster.Log("digests: " + string.Join("; ", digests.Select((d, i) => $"{members[i].Name} {d["count"]} {d["sha256"]}")));
            Assert.All(digests, d => Assert.Equal((long)Members * Sends, (long)d["count"]!));
            Assert.All(digests, d => Assert.Equal((string)digests[0]["sha256"]!, (string)d["sha256"]!));
            cluster.Log($"{Members * Sends} OrderedSends in one order everywhere ({clock.Elapsed.TotalSeconds:0.0} s since start)");

            QuitAll(members);
            History history = CheckLogs(cluster, dir, members);
            Assert.Equal(Members * Sends, history.Events.Count(e => e.Kind == HistoryEventKind.Send && e.Primitive == MessageKind.Ordered));
        });
    }

    // ---------------------------------------------------------------- (c) Query(ALL) across processes

    [Fact]
    public void Query_ALL_gets_one_reply_per_member_and_completes_with_the_survivors_when_a_slow_member_is_sigkilled()
    {
        const int Members = 4;
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-query-");
        using var cluster = new MultiProcessCluster(_output, "query-all", Suspicion);
        Run(cluster, dir, () =>
        {
            MemberProcess[] members = cluster.StartMany(Members, i =>
            {
                var args = new List<string> { "--expect-members", S(Members), "--event-log", Path.Combine(dir.FullName, $"member{i}.jsonl") };
                if (i == Members - 1) args.Add("--slow-replies"); // answers 3 s after the request
                return [.. args];
            });
            int full = cluster.WaitForView(members, members, -1, Long, "all members in one view");
            MemberProcess requester = members[0];
            MemberProcess slow = members[^1];

            // Every member answers, the slow one too.
            int from = requester.LineCount;
            requester.Command("query");
            JsonObject done = requester.WaitFor("queryDone", Long, from: from);
            cluster.Log($"{requester.Name}: {done.ToJsonString()}");
            Assert.Equal(Enumerable.Range(0, Members), ((JsonArray)done["replies"]!).Select(r => (int)r!));

            // The slow member dies while it holds the request: the query ends with the survivors' replies.
            from = requester.LineCount;
            int slowFrom = slow.LineCount;
            requester.Command("query");
            slow.WaitFor("queryReceived", Long, from: slowFrom);
            slow.Kill();
            cluster.Log($"SIGKILLed {slow.Name} while its reply was outstanding");
            Assert.True(slow.WaitForExit(TimeSpan.FromSeconds(10)));
            JsonObject after = requester.WaitFor("queryDone", Long, from: from);
            cluster.Log($"{requester.Name}: {after.ToJsonString()}");
            Assert.Null(requester.All("queryFailed").FirstOrDefault());
            Assert.Equal(Enumerable.Range(0, Members - 1), ((JsonArray)after["replies"]!).Select(r => (int)r!));
            MemberProcess[] alive = members[..^1];
            cluster.WaitForView(alive, alive, full, Detection, "the survivors installed a view without the killed member");

            QuitAll(alive);
            History history = CheckLogs(cluster, dir, members);
            Assert.Equal(2, history.Events.Count(e => e.Kind == HistoryEventKind.QueryCompleted));
        });
    }
}
