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

    /// <summary>
    /// Flush(k) at 3 members (digests to every member) and at 12 over TCP (the group relays along
    /// its tree, and only the tree tells stability): with one member crashed and not yet noticed,
    /// Flush(k) returns once k members hold the messages, and a Flush of every member waits for the
    /// view change that drops the crashed one.
    /// </summary>
    [Theory]
    [InlineData(3, false)]
    [InlineData(12, true)]
    public async Task Flush_k_returns_once_k_members_hold_the_messages_and_a_flush_of_all_waits_for_a_crashed_member(int n, bool tcp)
    {
        using var runtimes = new TestRuntimes();
        var members = new List<(IsisRuntime Runtime, Group Group)>();
        for (int i = 0; i < n; i++)
        {
            // Failure detection slow enough (200 missed heartbeats: 20 s) that the crash is not noticed while Flush(k) runs.
            IsisRuntime r = runtimes.Start(o =>
            {
                o.SuspicionCount = 200;
                if (tcp) o.Transport = IsisTransport.Tcp;
            });
            var g = new Group(r, "flush-k");
            g.Handlers[1] += (Action<int>)(_ => { });
            await g.JoinAsync();
            members.Add((r, g));
        }
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == n), $"a {n}-member view", 60);
        members[^1].Runtime.Crash(); // the youngest member (a leaf of the tree), without a word
        Group sender = members[0].Group;
        for (int m = 1; m <= 10; m++) sender.Send(1, m);
        await Task.Run(() => sender.Flush(n - 1)).WaitAsync(TimeSpan.FromSeconds(30)); // every live member holds them
        Task all = sender.FlushAsync();
        for (int m = 11; m <= 20; m++) sender.Send(1, m);
        await sender.FlushAsync(2).WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal(n, sender.GetView()!.Members.Length); // the crash is not noticed yet...
        Assert.False(all.IsCompleted); // ...so the crashed member cannot hold the messages: a Flush of all waits
        await all.WaitAsync(TimeSpan.FromSeconds(60)); // and returns once the view drops it
        Assert.Equal(n - 1, sender.GetView()!.Members.Length);
    }
}
