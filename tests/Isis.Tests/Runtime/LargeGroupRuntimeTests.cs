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

    /// <summary>The members' groups, runtimes, and what each delivered as (sender, n).</summary>
    private sealed record Formed(List<Group> Groups, List<IsisRuntime> Runtimes, List<ConcurrentQueue<(int Sender, int N)>> Received);

    /// <summary>Starts <see cref="Members"/> runtimes with 2 s failure detection and <paramref name="adjust"/>, and forms one group of all of them.</summary>
    private static Formed Form(TestRuntimes runtimes, string name, Action<int, IsisOptions> adjust)
    {
        var formed = new Formed([], [], []);
        for (int i = 0; i < Members; i++)
        {
            int index = i;
            IsisRuntime r = runtimes.Start(o =>
            {
                o.HeartbeatInterval = TimeSpan.FromMilliseconds(100);
                o.SuspicionCount = 20;
                adjust(index, o);
            });
            var q = new ConcurrentQueue<(int, int)>();
            var g = new Group(r, name);
            g.Handlers[Update] += (Action<int, int>)((sender, n) => q.Enqueue((sender, n)));
            g.Join();
            formed.Groups.Add(g);
            formed.Runtimes.Add(r);
            formed.Received.Add(q);
        }
        TestRuntimes.WaitUntil(() => formed.Groups.All(g => g.GetView()?.Members.Length == Members), $"all {Members} see one view", 60);
        return formed;
    }

    /// <summary>Every member delivered 1..<paramref name="count"/> of each sender once, in order, and every sender knows its messages stable.</summary>
    private static void AssertEverythingDeliveredAndStable(Formed f, int[] senders, int count)
    {
        TestRuntimes.WaitUntil(() => f.Received.All(q => q.Count >= senders.Length * count), "every member delivers every message", 60);
        foreach (ConcurrentQueue<(int Sender, int N)> q in f.Received)
        {
            foreach (int s in senders) Assert.Equal(Enumerable.Range(1, count), q.Where(m => m.Sender == s).Select(m => m.N));
        }
        Assert.True(f.Received.Sum(q => q.Count) == Members * senders.Length * count, "nothing delivered twice");
        TestRuntimes.WaitUntil(() => senders.All(s => f.Groups[s].UnstableForMetrics == 0), "every sender's messages known stable (from the tree)", 60);
    }

    [Fact]
    public async Task Seventeen_members_with_lossy_senders_deliver_everything_in_order_and_Flush_returns()
    {
        using var runtimes = new TestRuntimes();
        // A small flow-control window: a sender gets past 64 messages only as the stability tree
        // declares its earlier ones stable, so the sends below need the tree to work.
        Formed f = Form(runtimes, "large", (index, o) =>
        {
            o.MaxUnstableMessages = 64;
            if (index is 3 or 7) o.TransportFaults = new TransportFaultOptions { Seed = 11 + index, DropProbability = 0.2 };
        });

        // Three senders, two of them lossy; each message once, in each sender's order, everywhere.
        const int Count = 400;
        int[] senders = [0, 3, 7];
        for (int n = 1; n <= Count; n++)
        {
            foreach (int s in senders) f.Groups[s].Send(Update, s, n);
        }
        // Flush waits until the sender's messages are held by every member: in a large group that
        // comes from the stability tree and the digests the Flush asks for.
        foreach (int s in senders) await f.Groups[s].FlushAsync().WaitAsync(TimeSpan.FromSeconds(60));
        AssertEverythingDeliveredAndStable(f, senders, Count);
        Assert.True(f.Runtimes.Where((_, i) => i is not (3 or 7)).Sum(r => r.GetStatistics().NaksSent) > 0, "the members asked for what they missed");
    }

    [Fact]
    public void Over_the_TCP_overlay_a_large_groups_data_follows_the_tree_and_a_member_connects_to_a_few_others()
    {
        // The large-group rules from 4 members and a binary tree, so that the group uses the tree
        // from its fourth join on: a member's tree neighbours are its parent and two children.
        using var runtimes = new TestRuntimes();
        Formed f = Form(runtimes, "large-tcp", (_, o) =>
        {
            o.Transport = IsisTransport.Tcp;
            o.LargeGroupFromMembers = 4;
            o.StabilityTreeFanout = 2;
        });

        // Every member sends: over a full mesh each would connect to all 16 others.
        const int Count = 100;
        int[] senders = [.. Enumerable.Range(0, Members)];
        for (int n = 1; n <= Count; n++)
        {
            foreach (int s in senders) f.Groups[s].Send(Update, s, n);
        }
        AssertEverythingDeliveredAndStable(f, senders, Count);

        // A member keeps connections to its tree neighbours (3 at most), the view-change coordinator
        // and the membership service's replicas. Only those hubs (the coordinator, rank 0, and the
        // replica hosts, 3 at most) talk to everyone.
        int[] connections = [.. f.Runtimes.Select(r => ((TcpTransport)r.Loop!.Transport).OpenConnections)];
        output.WriteLine($"open connections per member: [{string.Join(", ", connections)}]");
        int hubs = connections.Count(c => c > 8);
        Assert.True(hubs <= 4, $"{hubs} members hold more than 8 connections: [{string.Join(", ", connections)}]");
        Assert.True(connections.Count(c => c <= 8) >= Members - 4, $"connections per member: [{string.Join(", ", connections)}]");
    }
}
