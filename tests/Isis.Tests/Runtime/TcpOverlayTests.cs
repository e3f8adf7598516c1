using System.Collections.Concurrent;

namespace Isis.Tests.Runtime;

/// <summary>
/// Runtimes whose packets travel over the TCP overlay (<see cref="IsisOptions.Transport"/> = Tcp):
/// the membership service, the groups and every primitive work as over UDP.
/// </summary>
public sealed class TcpOverlayTests
{
    private const int Update = 1;
    private const int Ask = 2;

    [Fact]
    public async Task Three_runtimes_over_tcp_form_a_group_deliver_in_fifo_and_total_order_answer_queries_and_see_a_member_leave()
    {
        using var runtimes = new TestRuntimes();
        var received = new ConcurrentDictionary<int, ConcurrentQueue<(string From, int N)>>();
        var members = new List<IsisRuntime>();
        var groups = new List<Group>();
        for (int i = 0; i < 3; i++)
        {
            IsisRuntime r = runtimes.Start(o => o.Transport = IsisTransport.Tcp);
            members.Add(r);
            var g = new Group(r, "over-tcp");
            int me = i;
            received[me] = new ConcurrentQueue<(string, int)>();
            g.Handlers[Update] += (Action<string, int>)((from, n) => received[me].Enqueue((from, n)));
            g.Handlers[Ask] += (Action<int>)(x => g.Reply(x * 10 + me));
            g.Join();
            groups.Add(g);
        }
        Assert.All(members, r => Assert.IsType<Isis.Transport.TcpTransport>(r.Loop!.Transport));
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "all three see a 3-member view");

        const int PerSender = 300;
        Parallel.For(0, 3, i =>
        {
            for (int n = 1; n <= PerSender; n++)
            {
                if (n % 2 == 0) groups[i].OrderedSend(Update, "m" + i, n);
                else groups[i].Send(Update, "m" + i, n);
            }
        });
        TestRuntimes.WaitUntil(() => received.Values.All(q => q.Count == 3 * PerSender), "every member delivers every message");
        foreach (var q in received.Values)
        {
            foreach (string sender in new[] { "m0", "m1", "m2" })
            {
                // FIFO per sender and primitive (an OrderedSend waits for its place in the total order, so it may follow later Sends).
                Assert.Equal(Enumerable.Range(1, PerSender).Where(n => n % 2 == 1), q.Where(x => x.From == sender && x.N % 2 == 1).Select(x => x.N));
                Assert.Equal(Enumerable.Range(1, PerSender).Where(n => n % 2 == 0), q.Where(x => x.From == sender && x.N % 2 == 0).Select(x => x.N));
            }
        }
        // Ordered messages: one order at every member.
        var orders = received.Values.Select(q => q.Where(x => x.N % 2 == 0).ToList()).ToList();
        Assert.Equal(orders[0], orders[1]);
        Assert.Equal(orders[0], orders[2]);

        IReadOnlyList<int> replies = await groups[0].QueryAsync<int>(Group.ALL, Ask, 7);
        Assert.Equal([70, 71, 72], replies.Order());

        groups[2].Leave();
        TestRuntimes.WaitUntil(() => groups.Take(2).All(g => g.GetView()?.Members.Length == 2), "the other two see the member leave");
        Assert.True(members[0].Loop!.Transport.Counters.DatagramsReceived > 0);
    }
    [Fact]
    public void Connections_broken_again_and_again_mid_stream_lose_and_duplicate_no_delivery()
    {
        using var runtimes = new TestRuntimes();
        // Generous expulsion time: a broken connection costs a heartbeat or two, never a member.
        void Tcp(IsisOptions o)
        {
            o.Transport = IsisTransport.Tcp;
            o.SuspicionCount = 40;
        }
        IsisRuntime host = runtimes.Start(Tcp), sender = runtimes.Start(Tcp);
        var delivered = new ConcurrentQueue<int>();
        var atHost = new Group(host, "broken-links");
        atHost.Handlers[Update] += (Action<string, int>)((_, n) => delivered.Enqueue(n));
        atHost.Join();
        var atSender = new Group(sender, "broken-links");
        atSender.Handlers[Update] += (Action<string, int>)((_, _) => { });
        atSender.Join();
        TestRuntimes.WaitUntil(() => atHost.GetView()?.Members.Length == 2 && atSender.GetView()?.Members.Length == 2, "both see a 2-member view");

        var hostTransport = (Isis.Transport.TcpTransport)host.Loop!.Transport;
        var senderTransport = (Isis.Transport.TcpTransport)sender.Loop!.Transport;
        long dialsBefore = hostTransport.Dials + senderTransport.Dials;
        // The sender streams, paced so the stream spans every break, until the breaks are over
        // (bounded by MaxCount whatever the machine's speed).
        const int MaxCount = 500_000;
        int sent = 0;
        var breaksOver = new ManualResetEventSlim(false);
        var sending = new Thread(() =>
        {
            for (int n = 1; n <= MaxCount && !breaksOver.IsSet; n++)
            {
                atSender.Send(Update, "s", n);
                Volatile.Write(ref sent, n);
                if (n % 100 == 0) Thread.Sleep(1);
            }
        });
        sending.Start();
        // Ten breaks, alternating ends, 100 ms apart.
        var deliveredAtBreak = new List<int>();
        for (int i = 0; i < 10; i++)
        {
            Thread.Sleep(100);
            (i % 2 == 0 ? senderTransport : hostTransport).BreakConnections();
            deliveredAtBreak.Add(delivered.Count);
        }
        breaksOver.Set();
        Assert.True(sending.Join(TimeSpan.FromSeconds(60)), "the sender finished");
        int count = Volatile.Read(ref sent);
        TestRuntimes.WaitUntil(() => delivered.Count >= count, $"the host delivers all {count} (now {delivered.Count})", 60);

        Assert.True(deliveredAtBreak[0] > 0 && deliveredAtBreak[^1] > deliveredAtBreak[0], $"the stream flowed across the breaks (delivered {string.Join(", ", deliveredAtBreak)} of {count})");
        Assert.Equal(Enumerable.Range(1, count), delivered); // each exactly once, in the order sent
        Assert.True(hostTransport.Dials + senderTransport.Dials - dialsBefore >= 5, $"the broken connections were dialled again ({hostTransport.Dials + senderTransport.Dials - dialsBefore} dials)");
        Assert.True(atHost.GetView()!.Members.Length == 2, "nobody was expelled");
    }
}
