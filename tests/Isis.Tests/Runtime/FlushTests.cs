using System.Collections.Concurrent;
using Isis.Transport;

namespace Isis.Tests.Runtime;

public sealed class FlushTests
{
    [Fact]
    public void After_Flush_returns_the_messages_survive_the_senders_crash_even_on_a_lossy_network()
    {
        using var runtimes = new TestRuntimes();
        var delivered = new ConcurrentDictionary<int, ConcurrentDictionary<int, bool>>();
        var groups = new List<Group>();
        var members = new List<IsisRuntime>();
        for (int i = 0; i < 3; i++)
        {
            // The sender loses 40% of its datagrams: without repair, many messages would reach nobody.
            IsisRuntime r = runtimes.Start(i == 2 ? o => o.TransportFaults = new TransportFaultOptions { Seed = 7, DropProbability = 0.4 } : null);
            var g = new Group(r, "flushed");
            int me = i;
            delivered[me] = new ConcurrentDictionary<int, bool>();
            g.Handlers[1] += (Action<int>)(n => delivered[me][n] = true);
            g.Join();
            groups.Add(g);
            members.Add(r);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");

        const int count = 500;
        for (int n = 1; n <= count; n++) groups[2].Send(1, n);
        groups[2].Flush();
        members[2].Crash(); // right after Flush returns: the answer to a client could be out already

        TestRuntimes.WaitUntil(() => groups[0].GetView()?.Members.Length == 2 && groups[1].GetView()?.Members.Length == 2, "the survivors drop the crashed sender");
        Assert.Equal(count, delivered[0].Count);
        Assert.Equal(count, delivered[1].Count);
    }

    [Fact]
    public async Task FlushAsync_completes_and_Flush_after_Leave_says_what_to_do()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "g");
        g.Handlers[1] += (Action<int>)(_ => { });
        g.Join();
        g.Send(1, 1);
        await g.FlushAsync().WaitAsync(TimeSpan.FromSeconds(20));
        g.Leave();
        var e = Assert.Throws<IsisException>(() => g.Flush());
        Assert.Contains("Join()", e.Message);
        Assert.Throws<ArgumentOutOfRangeException>(() => { _ = g.FlushAsync(-1); });
    }
}
