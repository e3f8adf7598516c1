using System.Collections.Concurrent;
using System.Net;
using Isis.Transport;

namespace Isis.Tests.Runtime;

/// <summary>
/// Runtimes with <see cref="IsisOptions.Multicast"/> on loopback: the membership service gives a
/// group of three an address, every member joins it as the view installs, a Send leaves as one
/// datagram, and multicasts the network loses are repaired by unicast. Each test has a multicast
/// port and address range of its own.
/// </summary>
public sealed class MulticastRuntimeTests
{
    private const int Update = 1;
    private static int _nextRange = Random.Shared.Next(0, 60);

    private static Action<IsisOptions> WithMulticast(int port, string range, TransportFaultOptions? faults = null, int timeToLive = 1) => o =>
    {
        o.Multicast = new MulticastOptions { Port = port, AddressRange = range, TimeToLive = timeToLive };
        o.TransportFaults = faults;
    };

    private static string FreshRange() => $"239.192.{100 + Interlocked.Increment(ref _nextRange) % 100}.0/30";

    private static (List<Group> Groups, List<ConcurrentQueue<int>> Received, List<IsisRuntime> Runtimes) Form(TestRuntimes runtimes, string name, params Action<IsisOptions>[] options)
    {
        var groups = new List<Group>();
        var received = new List<ConcurrentQueue<int>>();
        var started = new List<IsisRuntime>();
        foreach (Action<IsisOptions> o in options)
        {
            IsisRuntime r = runtimes.Start(o);
            var q = new ConcurrentQueue<int>();
            var g = new Group(r, name);
            g.Handlers[Update] += (Action<int>)q.Enqueue;
            g.Join();
            groups.Add(g);
            received.Add(q);
            started.Add(r);
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == options.Length), $"all {options.Length} see one view");
        return (groups, received, started);
    }

    private static UdpTransport TransportOf(IsisRuntime r) => (UdpTransport)r.Loop!.Transport;

    [Fact]
    public void A_group_of_three_gets_an_address_and_each_send_leaves_as_one_datagram_to_it()
    {
        using var runtimes = new TestRuntimes();
        int port = TestRuntimes.FreeUdpPort();
        string range = FreshRange();
        var o = WithMulticast(port, range);
        (List<Group> groups, List<ConcurrentQueue<int>> received, List<IsisRuntime> members) = Form(runtimes, "mc-three", o, o, o);

        ulong[] joined = [.. members.Select(r => TransportOf(r).JoinedMulticast.Single())];
        Assert.All(joined, a => Assert.Equal(joined[0], a)); // one address, joined by every member
        IPEndPoint address = EndpointConversions.ToIPEndPoint(joined[0]);
        Assert.Equal(port, address.Port);
        Assert.StartsWith(range[..range.LastIndexOf('.')], address.Address.ToString(), StringComparison.Ordinal);

        // One sender, one message at a time: each Send is a datagram of its own, so datagrams count messages.
        UdpTransport senderTransport = TransportOf(members[0]);
        long before = Interlocked.Read(ref senderTransport.Counters.DatagramsSent);
        const int Count = 200;
        for (int n = 1; n <= Count; n++)
        {
            groups[0].Send(Update, n);
            int expected = n;
            TestRuntimes.WaitUntil(() => received.All(q => q.Count >= expected), $"message {n} delivered");
        }
        foreach (ConcurrentQueue<int> q in received) Assert.Equal(Enumerable.Range(1, Count), q);
        long datagrams = Interlocked.Read(ref senderTransport.Counters.DatagramsSent) - before;
        long echoes = Interlocked.Read(ref senderTransport.Counters.MulticastEchoes);
        // Each Send left as one multicast datagram, which the loopback also handed back to the
        // sender (skipped there). The rest are unicast digests, about one per receiver per message
        // at this pace: by unicast the data alone would add two datagrams per message.
        Assert.InRange(echoes, Count * 9 / 10, Count + 20);
        Assert.True(datagrams - echoes < 3 * Count, $"{datagrams} datagrams for {Count} Sends to two receivers ({echoes} of them multicast)");
    }

    [Fact]
    public void Multicasts_the_network_loses_are_repaired_by_unicast_and_delivered_once_in_order()
    {
        using var runtimes = new TestRuntimes();
        int port = TestRuntimes.FreeUdpPort();
        string range = FreshRange();
        // The sender loses 20 % of its datagrams: multicasts and everything else.
        var lossy = WithMulticast(port, range, new TransportFaultOptions { Seed = 7, DropProbability = 0.2 });
        var clean = WithMulticast(port, range);
        (List<Group> groups, List<ConcurrentQueue<int>> received, List<IsisRuntime> members) = Form(runtimes, "mc-lossy", clean, lossy, clean, clean);
        Assert.NotEmpty(TransportOf(members[1]).JoinedMulticast);

        const int Count = 5_000;
        for (int n = 1; n <= Count; n++) groups[1].Send(Update, n);
        TestRuntimes.WaitUntil(() => received.All(q => q.Count >= Count), "every member delivers every message", 60);
        foreach (ConcurrentQueue<int> q in received) Assert.Equal(Enumerable.Range(1, Count), q);
        Assert.True(Interlocked.Read(ref TransportOf(members[1]).Counters.InjectedDrops) > 0, "the fault layer dropped datagrams");
        Assert.True(members.Where((_, i) => i != 1).Sum(r => r.GetStatistics().NaksSent) > 0, "the receivers asked for what they missed");
    }

    [Fact]
    public void Multicast_over_tcp_is_refused_with_what_to_do()
    {
        var options = new IsisOptions { Transport = IsisTransport.Tcp, Multicast = new MulticastOptions() };
        var e = Assert.Throws<ArgumentException>(() => new IsisRuntime(options).Start());
        Assert.Contains("IsisTransport.Udp", e.Message);
        var bad = new IsisOptions { Multicast = new MulticastOptions { AddressRange = "10.0.0.0/24" } };
        Assert.Contains("224.0.0.0/4", Assert.Throws<ArgumentException>(() => new IsisRuntime(bad).Start()).Message);
    }

    [Fact]
    public void The_multicast_time_to_live_reaches_the_socket_and_a_group_with_it_delivers()
    {
        using var runtimes = new TestRuntimes();
        var o = WithMulticast(TestRuntimes.FreeUdpPort(), FreshRange(), timeToLive: 4);
        (List<Group> groups, List<ConcurrentQueue<int>> received, List<IsisRuntime> members) = Form(runtimes, "mc-ttl", o, o, o);
        TestRuntimes.WaitUntil(() => members.All(r => TransportOf(r).JoinedMulticast.Count > 0), "both joined the group's address");
        Assert.All(members, r => Assert.Equal(4, TransportOf(r).MulticastHopLimit)); // the kernel holds it: datagrams cross 3 routers
        groups[0].Send(Update, 7);
        TestRuntimes.WaitUntil(() => received.All(q => q.Contains(7)), "the message delivered over multicast");
        var bad = new IsisOptions { Multicast = new MulticastOptions { Port = 40_000, TimeToLive = 256 } };
        Assert.Contains("TimeToLive must be 0-255", Assert.ThrowsAny<Exception>(() => new IsisRuntime(bad).Start()).Message);
    }
}
