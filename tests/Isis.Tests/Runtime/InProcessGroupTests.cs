using System.Collections.Concurrent;

namespace Isis.Tests.Runtime;

public sealed class InProcessGroupTests
{
    private const int Update = 1;

    [Fact]
    public void Three_runtimes_join_one_group_and_deliver_every_send_in_fifo_order()
    {
        using var runtimes = new TestRuntimes();
        var received = new ConcurrentDictionary<int, ConcurrentQueue<(string From, int N)>>();
        var groups = new List<Group>();
        for (int i = 0; i < 3; i++)
        {
            var r = runtimes.Start();
            var g = new Group(r, "inventory");
            int me = i;
            received[me] = new ConcurrentQueue<(string, int)>();
            g.Handlers[Update] += (Action<string, int>)((from, n) => received[me].Enqueue((from, n)));
            g.Join();
            groups.Add(g);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "all three see a 3-member view");
        Assert.Equal(groups[0].GetView()!.Members, groups[2].GetView()!.Members);

        const int perSender = 500;
        Parallel.For(0, 3, i =>
        {
            for (int n = 1; n <= perSender; n++) groups[i].Send(Update, "m" + i, n);
        });
        TestRuntimes.WaitUntil(() => received.Values.All(q => q.Count == 3 * perSender), "every member delivers every message");
        foreach (var q in received.Values)
        {
            foreach (var bySender in q.GroupBy(x => x.From))
            {
                Assert.Equal(Enumerable.Range(1, perSender), bySender.Select(x => x.N));
            }
        }
    }

    [Fact]
    public void A_handler_for_string_int_receiving_int_is_reported_not_crashed()
    {
        using var runtimes = new TestRuntimes();
        var r = runtimes.Start();
        var g = new Group(r, "typed");
        var reasons = new ConcurrentQueue<string>();
        int good = 0;
        g.Handlers[Update] += (Action<string, int>)((s, n) => Interlocked.Increment(ref good));
        g.Undeliverable += (_, e) => reasons.Enqueue(e.Reason);
        g.Join();
        g.Send(Update, 42);
        g.Send(Update, "ok", 1);
        TestRuntimes.WaitUntil(() => reasons.Count == 1 && Volatile.Read(ref good) == 1, "the bad message is reported and the good one delivered");
        Assert.Contains("(int)", reasons.Single());
        Assert.Contains("(string, int)", reasons.Single());
        Assert.Equal(1, r.GetStatistics().HandlerMismatches);
    }
}

public sealed class OrderedSendTests
{
    [Fact]
    public void Three_senders_ordered_messages_arrive_in_one_order_at_every_member()
    {
        using var runtimes = new TestRuntimes();
        var orders = new ConcurrentDictionary<int, ConcurrentQueue<string>>();
        var groups = new List<Group>();
        for (int i = 0; i < 3; i++)
        {
            var g = new Group(runtimes.Start(), "ordered");
            int me = i;
            orders[me] = new ConcurrentQueue<string>();
            g.Handlers[1] += (Action<string, int>)((from, n) => orders[me].Enqueue($"{from}:{n}"));
            g.Join();
            groups.Add(g);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");
        const int perSender = 300;
        Parallel.For(0, 3, i =>
        {
            for (int n = 1; n <= perSender; n++) groups[i].OrderedSend(1, "s" + i, n);
        });
        TestRuntimes.WaitUntil(() => orders.Values.All(q => q.Count == 3 * perSender), "every member delivers every ordered message");
        string[] reference = orders[0].ToArray();
        Assert.Equal(reference, orders[1].ToArray());
        Assert.Equal(reference, orders[2].ToArray());
        foreach (var bySender in reference.GroupBy(x => x.Split(':')[0]))
        {
            Assert.Equal(Enumerable.Range(1, perSender), bySender.Select(x => int.Parse(x.Split(':')[1])));
        }
    }
}
