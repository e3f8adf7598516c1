using System.Collections.Concurrent;
using Isis.Transport;

namespace Isis.Tests.Runtime;

/// <summary>
/// A group past the size where the large-group rules start (10 members by default: digests
/// gossiped to a few random members, stability through the tree of the view), on real runtimes
/// over loopback UDP, with two members losing a fifth of what they send.
/// </summary>
/// <remarks>
/// Seventeen runtimes load both cores: the test runs alone (the multi-process collection), so that
/// it starves no other test's runtimes into expulsion, and its own failure detection allows 2 s.
/// </remarks>
[Collection(MultiProcess.MultiProcessCollection.Name)]
public sealed class LargeGroupRuntimeTests(Xunit.Abstractions.ITestOutputHelper output)
{
    private const int Update = 1;
    private const int Members = 17;

    [Fact]
    public async Task Seventeen_members_with_lossy_senders_deliver_everything_in_order_and_Flush_returns()
    {
        using var runtimes = new TestRuntimes();
        var groups = new List<Group>();
        var members = new List<IsisRuntime>();
        var received = new List<ConcurrentQueue<(int Sender, int N)>>();
        for (int i = 0; i < Members; i++)
        {
            // A small flow-control window: a sender gets past 64 messages only as the stability
            // tree declares its earlier ones stable, so the sends below need the tree to work.
            int index = i;
            IsisRuntime r = runtimes.Start(o =>
            {
                o.MaxUnstableMessages = 64;
                o.HeartbeatInterval = TimeSpan.FromMilliseconds(100);
                o.SuspicionCount = 20;
                if (index is 3 or 7) o.TransportFaults = new TransportFaultOptions { Seed = 11 + index, DropProbability = 0.2 };
            });
            var q = new ConcurrentQueue<(int, int)>();
            var g = new Group(r, "large");
            g.Handlers[Update] += (Action<int, int>)((sender, n) => q.Enqueue((sender, n)));
            g.Join();
            groups.Add(g);
            members.Add(r);
            received.Add(q);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == Members), $"all {Members} see one view", 60);

        // Three senders, two of them lossy; each message once, in each sender's order, everywhere.
        const int Count = 400;
        int[] senders = [0, 3, 7];
        for (int n = 1; n <= Count; n++)
        {
            foreach (int s in senders) groups[s].Send(Update, s, n);
        }
        // Flush waits until the sender's messages are held by every member: in a large group that
        // comes from the stability tree and the digests the Flush asks for.
        foreach (int s in senders) await groups[s].FlushAsync().WaitAsync(TimeSpan.FromSeconds(60));
        TestRuntimes.WaitUntil(() => received.All(q => q.Count >= senders.Length * Count), "every member delivers every message", 60);
        foreach (ConcurrentQueue<(int Sender, int N)> q in received)
        {
            foreach (int s in senders) Assert.Equal(Enumerable.Range(1, Count), q.Where(m => m.Sender == s).Select(m => m.N));
        }
        Assert.True(received.Sum(q => q.Count) == Members * senders.Length * Count, "nothing delivered twice");
        TestRuntimes.WaitUntil(() => senders.All(s => groups[s].UnstableForMetrics == 0), "every sender's messages known stable (from the tree)", 60);
        Assert.True(members.Where((_, i) => i is not (3 or 7)).Sum(r => r.GetStatistics().NaksSent) > 0, "the members asked for what they missed");
    }

    [Fact]
    public void Over_the_TCP_overlay_a_large_groups_data_follows_the_tree_and_a_member_connects_to_a_few_others()
    {
        // The large-group rules from 4 members and a binary tree, so that the group uses the tree
        // from its fourth join on: a member's tree neighbours are its parent and two children.
        using var runtimes = new TestRuntimes();
        var groups = new List<Group>();
        var members = new List<IsisRuntime>();
        var received = new List<ConcurrentQueue<(int Sender, int N)>>();
        for (int i = 0; i < Members; i++)
        {
            IsisRuntime r = runtimes.Start(o =>
            {
                o.Transport = IsisTransport.Tcp;
                o.LargeGroupFromMembers = 4;
                o.StabilityTreeFanout = 2;
                o.HeartbeatInterval = TimeSpan.FromMilliseconds(100);
                o.SuspicionCount = 20;
            });
            var q = new ConcurrentQueue<(int, int)>();
            var g = new Group(r, "large-tcp");
            g.Handlers[Update] += (Action<int, int>)((sender, n) => q.Enqueue((sender, n)));
            g.Join();
            groups.Add(g);
            members.Add(r);
            received.Add(q);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == Members), $"all {Members} see one view", 60);

        // Every member sends: over a full mesh each would connect to all 16 others.
        const int Count = 100;
        for (int n = 1; n <= Count; n++)
        {
            for (int s = 0; s < Members; s++) groups[s].Send(Update, s, n);
        }
        TestRuntimes.WaitUntil(() => received.All(q => q.Count >= Members * Count), "every member delivers every message", 60);
        foreach (ConcurrentQueue<(int Sender, int N)> q in received)
        {
            for (int s = 0; s < Members; s++) Assert.Equal(Enumerable.Range(1, Count), q.Where(m => m.Sender == s).Select(m => m.N));
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.UnstableForMetrics == 0), "every member's messages known stable", 60);

        // A member keeps connections to its tree neighbours (3 at most), the view-change coordinator
        // and the membership service's replicas. Only those hubs (the coordinator, rank 0, and the
        // replica hosts, 3 at most) talk to everyone.
        int[] connections = [.. members.Select(r => ((TcpTransport)r.Loop!.Transport).OpenConnections)];
        output.WriteLine($"open connections per member: [{string.Join(", ", connections)}]");
        int hubs = connections.Count(c => c > 8);
        Assert.True(hubs <= 4, $"{hubs} members hold more than 8 connections: [{string.Join(", ", connections)}]");
        Assert.True(connections.Count(c => c <= 8) >= Members - 4, $"connections per member: [{string.Join(", ", connections)}]");
    }
}
