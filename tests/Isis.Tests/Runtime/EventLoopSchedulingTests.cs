using System.Collections.Concurrent;
using System.Diagnostics;

namespace Isis.Tests.Runtime;

/// <summary>
/// How the event loop schedules itself: it sleeps until the core's next deadline instead of
/// ticking every millisecond, and a Send issued while it sleeps runs on the caller's thread
/// (one hand-off to the delivery thread) without breaking the order of what was posted before it.
/// </summary>
public sealed class EventLoopSchedulingTests
{
    private const int Update = 1;

    [Fact]
    public void An_idle_member_ticks_at_its_timers_not_every_millisecond_and_still_keeps_its_membership()
    {
        using var runtimes = new TestRuntimes();
        // 100 ms heartbeats: an idle process has a few timers per period, not a hundred ticks.
        var members = Enumerable.Range(0, 3).Select(_ => runtimes.Start(o => { o.HeartbeatInterval = TimeSpan.FromMilliseconds(100); o.SuspicionCount = 10; })).ToList();
        var groups = members.Select(r => { var g = new Group(r, "idle"); g.Join(); return g; }).ToList();
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "all three see a 3-member view");
        Thread.Sleep(500); // the joins' digests and acknowledgements settle

        long[] before = members.Select(r => r.Loop!.Ticks).ToArray();
        var watch = Stopwatch.StartNew();
        Thread.Sleep(2000);
        double seconds = watch.Elapsed.TotalSeconds;
        for (int i = 0; i < members.Count; i++)
        {
            double perSecond = (members[i].Loop!.Ticks - before[i]) / seconds;
            // Ticking every millisecond would be 1,000 a second; the heartbeat, the idle digests
            // and their backoff make about 10-40.
            Assert.True(perSecond < 200, $"member {i} ticked {perSecond:F0} times a second while idle");
        }
        Assert.All(groups, g => Assert.Equal(3, g.GetView()!.Members.Length)); // nobody was suspected meanwhile
    }

    [Fact]
    public void Sends_issued_while_the_loop_sleeps_run_inline_and_keep_fifo_order_with_queued_commands()
    {
        using var runtimes = new TestRuntimes();
        var received = new ConcurrentDictionary<int, ConcurrentQueue<int>>();
        var groups = new List<Group>();
        var members = new List<IsisRuntime>();
        for (int i = 0; i < 3; i++)
        {
            var r = runtimes.Start();
            members.Add(r);
            var g = new Group(r, "sparse");
            int me = i;
            received[me] = new ConcurrentQueue<int>();
            g.Handlers[Update] += (Action<int>)(n => received[me].Enqueue(n));
            g.Join();
            groups.Add(g);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "all three see a 3-member view");
        Group g0 = groups[0];
        long inlineBefore = members[0].Loop!.InlineCommands;

        // Sparse Sends (the loop sleeps between them: inline), then a burst (queued for the loop),
        // then sparse again: every member delivers all of them, in the order sent.
        int n = 0;
        for (int i = 0; i < 20; i++)
        {
            g0.Send(Update, ++n);
            Thread.Sleep(5);
        }
        for (int i = 0; i < 500; i++) g0.Send(Update, ++n);
        for (int i = 0; i < 20; i++)
        {
            Thread.Sleep(5);
            g0.Send(Update, ++n);
        }
        TestRuntimes.WaitUntil(() => received.Values.All(q => q.Count == n), "every member delivers every message");
        foreach (var q in received.Values) Assert.Equal(Enumerable.Range(1, n), q);
        Assert.True(members[0].Loop!.InlineCommands - inlineBefore > 0, "no Send ran on the caller's thread although the loop slept between them");
    }
}
