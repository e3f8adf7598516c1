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

        // A member keeps connections to its tree neighbours (3 at most), the members of the group
        // while it was small, and the membership service's replicas. Only the replica hosts (3 at
        // most; here the first members) talk to everyone: the service's leader hears every process.
        int[] connections = [.. f.Runtimes.Select(r => ((TcpTransport)r.Loop!.Transport).OpenConnections)];
        output.WriteLine($"open connections per member: [{string.Join(", ", connections)}]");
        int hubs = connections.Count(c => c > 8);
        Assert.True(hubs <= 4, $"{hubs} members hold more than 8 connections: [{string.Join(", ", connections)}]");
        Assert.True(connections.Count(c => c <= 8) >= Members - 4, $"connections per member: [{string.Join(", ", connections)}]");
    }

    [Fact]
    public async Task Fifty_members_over_TCP_query_and_flush_through_the_tree_and_none_connects_to_everyone()
    {
        // Default large-group rules (from 10 members, fan-out 8), as a user deploying over TCP gets them.
        // Three processes host the membership service and join no group, so that the members' own
        // connections are what is measured: the service's leader talks to every process (heartbeats,
        // views), one connection per process whatever the groups.
        const int Fifty = 50, Ask = 2;
        using var runtimes = new TestRuntimes();
        void Adjust(IsisOptions o)
        {
            o.Transport = IsisTransport.Tcp;
            o.HeartbeatInterval = TimeSpan.FromMilliseconds(200);
            o.SuspicionCount = 25; // 5 s: 53 runtimes share two cores
        }
        IsisRuntime[] hosts = [.. Enumerable.Range(0, 3).Select(_ => runtimes.Start(Adjust))];
        TestRuntimes.WaitUntil(() => hosts.All(h => h.HostsMembershipService), "the service runs on the three hosts", 60);

        var members = new List<(IsisRuntime Runtime, Group Group, ConcurrentQueue<(int Sender, int N)> Received)>();
        for (int i = 0; i < Fifty; i++)
        {
            IsisRuntime r = runtimes.Start(Adjust);
            var q = new ConcurrentQueue<(int, int)>();
            var g = new Group(r, "fifty");
            int me = i;
            g.Handlers[Update] += (Action<int, int>)((sender, n) => q.Enqueue((sender, n)));
            g.Handlers[Ask] += (Action)(() => g.Reply(me));
            g.Join();
            members.Add((r, g, q));
        }
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == Fifty), $"all {Fifty} see one view", 120);
        Address[] ranks = members[0].Group.GetView()!.Members;
        int IndexOfRank(int rank) => members.FindIndex(m => m.Runtime.Address == ranks[rank]);

        // Every member sends; everyone delivers everything (data along the tree, as before).
        for (int n = 1; n <= 5; n++)
        {
            foreach (var m in members) m.Group.Send(Update, members.IndexOf(m), n);
        }
        TestRuntimes.WaitUntil(() => members.All(m => m.Received.Count == Fifty * 5), "every member delivers every message", 120);

        // Queries that every member answers, from the root (the view change coordinator) and from a leaf.
        int root = IndexOfRank(0), leaf = IndexOfRank(Fifty - 1);
        foreach (int asker in new[] { root, leaf })
        {
            IReadOnlyList<int> replies = await members[asker].Group.QueryAsync<int>(Group.ALL, Ask).WaitAsync(TimeSpan.FromSeconds(60));
            Assert.Equal(Enumerable.Range(0, Fifty), replies.Order());
        }

        // Rank 1 fails: its eight children (ranks 9 to 16) hang below it in the view's tree, so the
        // flush reaches them through the survivors' tree, or not at all.
        int failed = IndexOfRank(1);
        members[failed].Runtime.Crash();
        var survivors = members.Where((_, i) => i != failed).ToList();
        TestRuntimes.WaitUntil(() => survivors.All(m => m.Group.GetView()?.Members.Length == Fifty - 1), "the survivors install the view without rank 1", 120);
        IReadOnlyList<int> after = await members[leaf].Group.QueryAsync<int>(Group.ALL, Ask).WaitAsync(TimeSpan.FromSeconds(60));
        Assert.Equal(Enumerable.Range(0, Fifty).Where(i => i != failed), after.Order());

        int[] connections = [.. survivors.Select(m => ((TcpTransport)m.Runtime.Loop!.Transport).OpenConnections)];
        int[] hostConnections = [.. hosts.Select(h => ((TcpTransport)h.Loop!.Transport).OpenConnections)];
        output.WriteLine($"open connections per member, by rank in the first view: [{string.Join(", ", Enumerable.Range(0, Fifty).Where(r => r != 1).Select(r => ((TcpTransport)members[IndexOfRank(r)].Runtime.Loop!.Transport).OpenConnections))}]");
        output.WriteLine($"open connections at the membership service's hosts: [{string.Join(", ", hostConnections)}]");
        output.WriteLine($"query requester (leaf) {((TcpTransport)members[leaf].Runtime.Loop!.Transport).OpenConnections}, coordinator (root) {((TcpTransport)members[root].Runtime.Loop!.Transport).OpenConnections}");
        Assert.All(survivors, m => Assert.False(m.Runtime.HostsMembershipService, "a member took over a replica: the measurement would mix the service in"));
        // A member's peers: the members of the group while it was small (under 10 members, everyone
        // talks to everyone: 9), its neighbours in the trees of the views before and after rank 1
        // failed (the ranks above it moved down by one: 9 each at fan-out 8; the flush's survivors'
        // tree is the second one), and the service's hosts (3): 30 at the very most. Direct replies,
        // state transfers and flush packets would give the requester and the coordinator (rank 0, also
        // the maker of every joiner's state) 49 each.
        Assert.True(connections.Max() <= 30, $"connections per member: [{string.Join(", ", connections)}]");
        Assert.True(((TcpTransport)members[root].Runtime.Loop!.Transport).OpenConnections <= 9 + 8 + 3, "the coordinator is connected to more than its tree neighbours, the first members and the service");
        Assert.True(((TcpTransport)members[leaf].Runtime.Loop!.Transport).OpenConnections <= 8, "the leaf that asked is connected to more than its parents and the service");
    }
}
