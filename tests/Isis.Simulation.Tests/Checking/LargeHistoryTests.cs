using Isis.Core.Identity;
using Isis.Simulation.Checking;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Checking;

public sealed class LargeHistoryTests(ITestOutputHelper output)
{
    /// <summary>
    /// A valid run of about <paramref name="targetEvents"/> events: 5 members multicasting
    /// round-robin, a view change (one member leaves, a new incarnation joins) every 20,000 events,
    /// and a healed ending where everybody converged.
    /// </summary>
    private static History ValidRun(int targetEvents)
    {
        GroupId g = GroupId.FromName("large");
        var h = new History(targetEvents + 1000);
        var members = new List<NodeId> { new(1, 1), new(2, 1), new(3, 1), new(4, 1), new(5, 1) };
        long t = 0;
        int view = 1;
        uint nextEndpoint = 6;
        var seq = new Dictionary<NodeId, long>();
        void InstallAll()
        {
            NodeId[] m = [.. members];
            foreach (NodeId p in m) h.RecordViewInstall(++t, p, g, view, m);
            seq.Clear();
        }
        InstallAll();
        h.RecordHeal(++t);
        int sender = 0;
        while (h.Count < targetEvents)
        {
            NodeId p = members[sender++ % members.Count];
            var id = new MessageId(p, g, view, seq[p] = seq.GetValueOrDefault(p) + 1);
            ulong hash = (ulong)id.Seq * 0x9E3779B97F4A7C15UL ^ p.Endpoint;
            h.RecordSend(++t, id, hash);
            h.RecordDeliver(++t, p, view, id, hash);
            foreach (NodeId q in members)
            {
                if (q != p) h.RecordDeliver(++t, q, view, id, hash);
            }
            if (h.Count / 20_000 != (h.Count - 2 - members.Count + 1) / 20_000)
            {
                // The oldest leaves, a fresh process joins: ranks shift, seqs restart at 1.
                NodeId leaving = members[0];
                members.RemoveAt(0);
                h.RecordLeaveCompleted(++t, leaving, g);
                var joiner = new NodeId(nextEndpoint++, 1);
                h.RecordJoinRequested(++t, joiner, g);
                members.Add(joiner);
                view++;
                InstallAll();
            }
        }
        h.RecordEnd(++t);
        return h;
    }

    [Fact]
    public void A_valid_history_of_a_million_events_passes_every_check()
    {
        History h = ValidRun(1_000_000);
        var watch = System.Diagnostics.Stopwatch.StartNew();
        CheckResult r = HistoryChecker.Check(h);
        output.WriteLine($"checked {h.Count} events in {watch.ElapsedMilliseconds} ms");  // informational only
        Assert.True(r.Passed, r.ToString());
        Assert.True(h.Count >= 1_000_000);
        Assert.True(h.Events.Count(e => e.Kind == HistoryEventKind.ViewInstall) > 200, "the run should change views often");
    }

    [Fact]
    public void One_lost_delivery_in_a_large_history_is_found_and_named()
    {
        History valid = ValidRun(300_000);
        // Drop a receiver's delivery in the middle of a view: its later deliveries from that sender
        // then skip a seq, and at the next view change it disagrees with the others on the set.
        int victim = Enumerable.Range(150_000, 1000).First(i =>
            valid[i].Kind == HistoryEventKind.Deliver && valid[i].Process != valid[i].Message.Sender);
        var broken = new History(valid.Count);
        for (int i = 0; i < valid.Count; i++)
        {
            if (i != victim) broken.Add(valid[i]);
        }
        CheckResult r = HistoryChecker.Check(broken);
        Assert.True(r.Violates(nameof(HistoryChecker.FifoPerSender)), r.ToString());
        Assert.True(r.Violates(nameof(HistoryChecker.VirtualSynchrony)), r.ToString());
        Assert.Contains(r.Violations, v => v.Description.Contains(valid[victim].Message.ToString(), StringComparison.Ordinal));
    }

    [Fact]
    public void A_large_history_round_trips_through_json_lines()
    {
        History h = ValidRun(200_000);
        var w = new StringWriter();
        h.WriteJsonLines(w);
        History back = History.ReadJsonLines(new StringReader(w.ToString()));
        Assert.Equal(h.Events, back.Events);
    }
}
