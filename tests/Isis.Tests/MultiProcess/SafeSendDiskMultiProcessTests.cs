using System.Text.Json.Nodes;
using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>SafeSend with disk durability across a SIGKILL of every member process.</summary>
[Collection(MultiProcessCollection.Name)]
public sealed class SafeSendDiskMultiProcessTests(ITestOutputHelper output)
{
    /// <summary>
    /// Every member SafeSends (with "safequery", every other one is a SafeQuery whose handler
    /// changes state and replies), all are SIGKILLed, and after the restart each replays the same
    /// order: SafeQueries are in the durable history, in their place among the SafeSends.
    /// </summary>
    [Theory]
    [InlineData("safe")]
    [InlineData("safequery")]
    public void Acknowledged_SafeSends_survive_SIGKILL_of_every_member_and_are_delivered_after_restart(string primitive)
    {
        const int Members = 3, Sends = 50;
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-safelog-mp-");
        try
        {
            using var cluster = new MultiProcessCluster(output, "ledger", suspicionCount: 20);
            string Log(int i) => Path.Combine(dir.FullName, $"log{i}");
            string Order(int i, string round) => Path.Combine(dir.FullName, $"member{i}.{round}.order");

            // Round 1: every SafeSend is awaited by its sender, i.e. acknowledged by every acceptor (phi = all).
            MemberProcess[] first = cluster.StartMany(Members, i =>
                ["--primitive", primitive, "--sends", $"{Sends}", "--expect-members", $"{Members}", "--expect-deliveries", $"{Members * Sends}",
                 "--safelog", Log(i), "--order-file", Order(i, "before")]);
            foreach (MemberProcess m in first) m.WaitFor("done", TimeSpan.FromSeconds(90));
            foreach (MemberProcess m in first) m.Command("dump");
            foreach (MemberProcess m in first) m.WaitFor("dumped", TimeSpan.FromSeconds(30));
            string[] before = File.ReadAllLines(Order(0, "before"));
            Assert.Equal(Members * Sends, before.Length);

            // The whole group dies at once: SIGKILL, no goodbyes.
            foreach (MemberProcess m in first) m.Kill();
            foreach (MemberProcess m in first) Assert.True(m.WaitForExit(TimeSpan.FromSeconds(10)));
            // Wait until the membership service has expelled them all: the group is gone (deleted once empty).
            var group = Isis.Core.Identity.GroupId.FromName("ledger");
            TestRuntimes.WaitUntil(() => cluster.Service.Loop?.Service is { } s && s.CommittedView(group) is null or { Members.Length: 0 }, "the service expels every killed member", 60);

            // Round 2: restart every member on its own log; the founder replays it to those that joined.
            MemberProcess[] second = cluster.StartMany(Members, i =>
                ["--primitive", primitive, "--sends", "0", "--expect-members", $"{Members}", "--expect-deliveries", $"{Members * Sends}",
                 "--safelog", Log(i), "--order-file", Order(i, "after")]);
            foreach (MemberProcess m in second) m.WaitFor("done", TimeSpan.FromSeconds(90));
            foreach (MemberProcess m in second) m.Command("dump");
            foreach (MemberProcess m in second) m.WaitFor("dumped", TimeSpan.FromSeconds(30));
            for (int i = 0; i < Members; i++) Assert.Equal(before, File.ReadAllLines(Order(i, "after")));
        }
        finally
        {
            try { dir.Delete(recursive: true); } catch (IOException) { }
        }
    }

    // ------------------------------------------------------------------------------------------
    // Members joining at different times, SIGKILL of all (with SafeSends in flight), restart in
    // each of the six orders.

    private const int Early = 20;    // SafeSends per founder (members 0 and 1) before member 2 joins
    private const int Later = 20;    // SafeSends per member once all three are in the group
    private const int InFlightBatch = 20, InFlightBatches = 10; // SafeSends per member issued just before the crash, in awaited batches
    private const int InFlight = InFlightBatch * InFlightBatches;
    private const int After = 5;     // new SafeSends per member after the restart

    private static readonly TimeSpan Live = TimeSpan.FromSeconds(90); // liveness bound, never a timing assertion
    private static readonly TimeSpan PauseBetweenRestarts = TimeSpan.FromMilliseconds(400);

    private static readonly int[][] RestartOrders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

    /// <summary>
    /// Three members with disk durability: 0 and 1 found the group and SafeSend, 2 joins later (it
    /// gets the history by transfer), all three SafeSend; then each member issues more SafeSends,
    /// one member crashes itself part-way through their deliveries and the other two are SIGKILLed
    /// right after (while some are still in flight). The three restart one at a time, in each of the
    /// six orders. At every restarted member the history is replayed exactly once, in the original
    /// order, before anything else: it holds every SafeSend acknowledged before the crash
    /// (everything of the first two phases, and each in-flight batch whose sender saw it complete)
    /// and every SafeSend any member delivered before the crash, each once; the restarted members'
    /// new SafeSends come after it.
    /// </summary>
    /// <param name="phi">The SafeSend threshold (0: every member).</param>
    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(0)]
    public void Acknowledged_SafeSends_are_replayed_once_in_order_after_SIGKILL_of_every_member_in_every_restart_order(int phi)
    {
        var started = DateTime.UtcNow;
        foreach (int[] order in RestartOrders) RunRestartOrder(phi, order);
        output.WriteLine($"phi {PhiName(phi)}: {RestartOrders.Length} restart orders in {(DateTime.UtcNow - started).TotalSeconds:0.0} s");
    }

    private static string PhiName(int phi) => phi == 0 ? "all" : $"{phi}";

    private void RunRestartOrder(int phi, int[] order)
    {
        const int Members = 3;
        string what = $"phi {PhiName(phi)}, restart order {string.Join(",", order)}";
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-safelog-mp-");
        var cluster = new MultiProcessCluster(output, "ledger", suspicionCount: 20);
        bool passed = false;
        cluster.Log($"--- {what}: {dir.FullName}");
        string Log(int i) => Path.Combine(dir.FullName, $"log{i}");
        string OrderFile(int i, string round) => Path.Combine(dir.FullName, $"member{i}.{round}.order");
        string[] Args(int i, string round, int sends, int expectMembers, int seqFrom = 0) =>
            ["--primitive", "safe", "--phi", $"{phi}", "--sends", $"{sends}", "--seq-from", $"{seqFrom}",
             "--expect-members", $"{expectMembers}", "--expect-deliveries", "0",
             "--safelog", Log(i), "--order-file", OrderFile(i, round)];
        try
        {
            // Phase 1: members 0 and 1 found the group and SafeSend; "sent" = every one of them acknowledged.
            var first = new MemberProcess[Members];
            MemberProcess[] founders = cluster.StartMany(2, i => Args(i, "before", Early, 2));
            founders.CopyTo(first, 0);
            foreach (MemberProcess m in founders) m.WaitFor("sent", Live, l => (int)l["sent"]! == Early);

            // Phase 2: member 2 joins later (the history comes by transfer) while 0 and 1 go on sending; then it sends too.
            first[2] = cluster.Start(2, Args(2, "before", Later, Members));
            first[0].Command($"send {Later}");
            first[1].Command($"send {Later}");
            int[] acked = [Early + Later, Early + Later, Later]; // each sender's last acknowledged seq
            for (int i = 0; i < Members; i++) first[i].WaitFor("sent", Live, l => (int)l["sent"]! == acked[i]);
            foreach (MemberProcess m in first) m.WaitFor("progress", Live, l => Reached(l, acked));
            foreach (MemberProcess m in first) m.Command("dump");
            foreach (MemberProcess m in first) m.WaitFor("dumped", Live);
            List<(int Sender, int Seq)> before = ReadOrder(OrderFile(0, "before"));
            Assert.Equal(2 * Early + 3 * Later, before.Count);
            for (int i = 1; i < Members; i++) AssertSameOrder(before, ReadOrder(OrderFile(i, "before")), $"member{i} before the crash (member 2 by transfer) and member0");

            // Phase 3: more SafeSends in flight, each sender awaiting them in batches ("sent" after
            // each: those are acknowledged). The first member to restart crashes itself once it has
            // delivered a third of them (from its event loop, so its order file holds everything it
            // delivered), the others are SIGKILLed right after: no goodbyes.
            int crasher = order[0];
            first[crasher].Command($"crash-at {before.Count + Members * InFlight / 3}");
            for (int b = 0; b < InFlightBatches; b++)
            {
                foreach (MemberProcess m in first) m.Command($"send {InFlightBatch}");
            }
            Assert.True(first[crasher].WaitForExit(Live), $"member{crasher} did not crash itself after {before.Count + Members * InFlight / 3} deliveries");
            foreach (MemberProcess m in first) m.Kill();
            foreach (MemberProcess m in first) Assert.True(m.WaitForExit(TimeSpan.FromSeconds(10)));
            // Each sender's last acknowledged seq: its last "sent" line.
            int[] ackedInFlight = [.. first.Select(m => m.All("sent").Max(l => (int)l["sent"]!))];
            List<(int Sender, int Seq)>[] delivered = Enumerable.Range(0, Members).Select(i => ReadOrder(OrderFile(i, "before"))).ToArray();
            cluster.Log($"before the crash: delivered {string.Join(", ", delivered.Select((d, i) => $"member{i} {d.Count}"))}; " +
                $"acknowledged up to {string.Join(", ", ackedInFlight.Select((a, i) => $"member{i} {a}"))}");
            Assert.True(delivered[crasher].Count >= before.Count + Members * InFlight / 3);

            var group = Isis.Core.Identity.GroupId.FromName("ledger");
            TestRuntimes.WaitUntil(() => cluster.Service.Loop?.Service is { } s && s.CommittedView(group) is null or { Members.Length: 0 }, "the service expels every killed member", 60);

            // Restart one at a time in this order, each on its own log, each sending a few new SafeSends
            // (numbered after its earlier incarnation's) once its Join returned, i.e. after the replay.
            var second = new MemberProcess[Members];
            int[] seqFrom = [.. acked.Select(a => a + InFlight)];
            foreach (int i in order)
            {
                if (i != order[0]) Thread.Sleep(PauseBetweenRestarts);
                second[i] = cluster.Start(i, Args(i, "after", After, Members, seqFrom[i]));
            }
            int[] last = [.. seqFrom.Select(s => s + After)];
            for (int i = 0; i < Members; i++) second[i].WaitFor("sent", Live, l => (int)l["sent"]! == last[i]);
            foreach (MemberProcess m in second) m.WaitFor("progress", Live, l => Reached(l, last));
            foreach (MemberProcess m in second) m.Command("dump");
            foreach (MemberProcess m in second) m.WaitFor("dumped", Live);

            List<(int Sender, int Seq)>[] after = Enumerable.Range(0, Members).Select(i => ReadOrder(OrderFile(i, "after"))).ToArray();
            for (int i = 0; i < Members; i++)
            {
                CheckRecovered(after[i], $"member{i} after the restart", before, delivered, ackedInFlight, seqFrom);
            }
            for (int i = 1; i < Members; i++) AssertSameOrder(after[0], after[i], $"member{i} and member0 after the restart");
            int replayed = after[0].Count(e => e.Seq <= seqFrom[e.Sender]);
            cluster.Log($"{what}: every member replayed {replayed} SafeSends ({replayed - before.Count} of {Members * InFlight} in flight), then {Members * After} new ones");
            passed = true;
        }
        catch (Exception e)
        {
            throw new Xunit.Sdk.XunitException($"{what} (logs and order files kept in {dir.FullName}): {e.Message}\n{cluster.Describe()}", e);
        }
        finally
        {
            cluster.Dispose(); // the members first: they write to the directory
            if (passed)
            {
                try { dir.Delete(recursive: true); } catch (IOException) { }
            }
        }
    }

    /// <summary>
    /// One restarted member's delivery order: the recovered history (each sender's seqs 1..x, x at
    /// least its last acknowledged seq) and then the new SafeSends (seqFrom+1 .. seqFrom+After), every
    /// SafeSend once; the history starts with what every member delivered before the crash.
    /// </summary>
    private static void CheckRecovered(
        List<(int Sender, int Seq)> got, string who, List<(int Sender, int Seq)> before,
        List<(int Sender, int Seq)>[] delivered, int[] acked, int[] seqFrom)
    {
        var seen = new HashSet<(int, int)>();
        foreach ((int Sender, int Seq) e in got)
        {
            Assert.True(seen.Add(e), $"{who}: ({e.Sender} {e.Seq}) delivered twice");
            Assert.True(e.Sender is >= 0 and < 3, $"{who}: a delivery from unknown sender {e.Sender}");
        }
        AssertPrefix(before, got, $"{who}: the SafeSends acknowledged before member 2 joined and after");
        for (int i = 0; i < delivered.Length; i++) AssertPrefix(delivered[i], got, $"{who}: what member{i} delivered before the crash");
        int history = got.FindIndex(e => e.Seq > seqFrom[e.Sender]);
        if (history < 0) history = got.Count;
        int lateOld = got.FindLastIndex(e => e.Seq <= seqFrom[e.Sender]);
        Assert.True(lateOld < history, $"{who}: ({got[lateOld].Sender} {got[lateOld].Seq}) of the old history delivered at {lateOld}, after a new SafeSend at {history}");
        for (int s = 0; s < seqFrom.Length; s++)
        {
            int[] old = got.Take(history).Where(e => e.Sender == s).Select(e => e.Seq).ToArray();
            Assert.True(old.SequenceEqual(Enumerable.Range(1, old.Length)), $"{who}: sender {s}'s history is not 1..{old.Length} in order: {string.Join(",", old)}");
            Assert.True(old.Length >= acked[s], $"{who}: sender {s}'s history ends at {old.Length}, before its acknowledged {acked[s]}");
            int[] fresh = got.Skip(history).Where(e => e.Sender == s).Select(e => e.Seq).ToArray();
            Assert.True(fresh.SequenceEqual(Enumerable.Range(seqFrom[s] + 1, After)), $"{who}: sender {s}'s new SafeSends are not {seqFrom[s] + 1}..{seqFrom[s] + After}: {string.Join(",", fresh)}");
        }
    }

    private static void AssertPrefix(List<(int Sender, int Seq)> prefix, List<(int Sender, int Seq)> of, string what)
    {
        int n = Math.Min(prefix.Count, of.Count);
        int diff = Enumerable.Range(0, n).FirstOrDefault(k => prefix[k] != of[k], -1);
        if (diff >= 0)
        {
            Assert.Fail($"{what}: entry {diff} is ({of[diff].Sender} {of[diff].Seq}), expected ({prefix[diff].Sender} {prefix[diff].Seq})");
        }
        if (of.Count < prefix.Count)
        {
            Assert.Fail($"{what}: only {of.Count} of {prefix.Count} delivered; the first missing is ({prefix[of.Count].Sender} {prefix[of.Count].Seq})");
        }
    }

    private static void AssertSameOrder(List<(int Sender, int Seq)> expected, List<(int Sender, int Seq)> got, string what)
    {
        AssertPrefix(expected, got, what);
        if (got.Count > expected.Count) Assert.Fail($"{what}: {got.Count - expected.Count} more deliveries than {expected.Count}, the first ({got[expected.Count].Sender} {got[expected.Count].Seq})");
    }

    /// <summary>Whether a progress line shows every sender's deliveries up to <paramref name="seqs"/> (and no further).</summary>
    private static bool Reached(JsonObject progress, int[] seqs)
    {
        if (progress["perSender"] is not JsonObject perSender) return false;
        for (int s = 0; s < seqs.Length; s++)
        {
            if (perSender[$"{s}"] is not JsonNode n || (int)n != seqs[s]) return false;
        }
        return true;
    }

    /// <summary>An order file's "sender seq" lines (a line cut short by a SIGKILL is left out).</summary>
    private static List<(int Sender, int Seq)> ReadOrder(string path)
    {
        string text = File.ReadAllText(path);
        int end = text.LastIndexOf('\n') + 1;
        return text[..end].Split('\n', StringSplitOptions.RemoveEmptyEntries)
            .Select(l => l.Split(' '))
            .Select(w => (int.Parse(w[0], System.Globalization.CultureInfo.InvariantCulture), int.Parse(w[1], System.Globalization.CultureInfo.InvariantCulture)))
            .ToList();
    }
}
