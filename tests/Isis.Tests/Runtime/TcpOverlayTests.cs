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
}
