using System.Diagnostics;
using System.Net;
using Isis.Transport.Framing;
using Isis.Transport;
using static Isis.Tests.Transport.TransportTestKit;

namespace Isis.Tests.Transport;

/// <summary>
/// IP multicast on the loopback interface (the interface pinned to 127.0.0.1, as DESIGN.md says):
/// one datagram per send reaches every transport that joined the group endpoint, carrying the
/// sender's own endpoint as its source; a transport that did not join gets nothing; the sender's
/// looped-back copy is skipped. Each test uses a group address and port of its own.
/// </summary>
public sealed class UdpMulticastTests
{
    private static int _nextGroup = Random.Shared.Next(1, 200);

    private sealed class Collector : IPacketVisitor
    {
        public readonly List<(ulong Source, byte[] Packet)> Packets = [];

        public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => Packets.Add((source, packet.ToArray()));

        public void OnReassembledPacket(ulong source, byte[] packet) => Packets.Add((source, packet));
    }

    /// <summary>A fresh group endpoint (239.255.77.N on a free port) and the options of a transport that receives on its port.</summary>
    private static (ulong Group, UdpTransportOptions Options) NewGroup()
    {
        int port = Runtime.TestRuntimes.FreeUdpPort();
        var address = new IPAddress([239, 255, 77, (byte)Interlocked.Increment(ref _nextGroup)]);
        return (EndpointConversions.FromIPEndPoint(new IPEndPoint(address, port)), new UdpTransportOptions { MulticastPort = port });
    }

    /// <summary>Reads as the event loop does until <paramref name="count"/> packets came or <paramref name="wait"/> passed.</summary>
    private static List<(ulong Source, byte[] Packet)> Pump(UdpTransport owner, int count, TimeSpan? wait = null)
    {
        var got = new Collector();
        var watch = Stopwatch.StartNew();
        while (got.Packets.Count < count && watch.Elapsed < (wait ?? Deadline))
        {
            if (owner.WaitReadable(20_000)) owner.ReceivePending(got, 16, readable: true);
        }
        return got.Packets;
    }

    [Fact]
    public void One_send_to_a_group_endpoint_reaches_every_member_that_joined_in_order_with_the_senders_endpoint_as_source()
    {
        (ulong group, UdpTransportOptions options) = NewGroup();
        using var sender = new UdpTransport(AnyLoopbackPort(), options);
        using var b = new UdpTransport(AnyLoopbackPort(), options);
        using var c = new UdpTransport(AnyLoopbackPort(), options);
        foreach (UdpTransport t in new[] { sender, b, c }) t.JoinMulticast(group);
        Assert.True(sender.SupportsMulticast);

        const int Count = 2_000;
        for (int i = 0; i < Count; i++)
        {
            sender.Enqueue(group, SequencedPacket(i, 40 + i % 60));
            if (i % 200 == 199) sender.Flush();
        }
        sender.Flush();

        foreach (UdpTransport receiver in new[] { b, c })
        {
            List<(ulong Source, byte[] Packet)> got = Pump(receiver, Count);
            Assert.Equal(Enumerable.Range(0, Count), got.Select(p => SequenceOf(p.Packet)));
            Assert.All(got, p => Assert.Equal(sender.LocalEndpoint, p.Source));
        }
        // The packets were batched into datagrams sent once each, not once per receiver.
        long datagrams = Interlocked.Read(ref sender.Counters.DatagramsSent);
        Assert.InRange(datagrams, 1, Count / 20);
        Assert.Equal(datagrams, Interlocked.Read(ref b.Counters.DatagramsReceived));
        Assert.Equal(datagrams, Interlocked.Read(ref b.Counters.MulticastDatagramsReceived));
        // The sender's own copy came back through the loopback and was skipped, not parsed.
        Assert.Empty(Pump(sender, 1, TimeSpan.FromMilliseconds(200)));
        Assert.Equal(datagrams, Interlocked.Read(ref sender.Counters.MulticastEchoes));
        Assert.Equal(0, Interlocked.Read(ref sender.Counters.PacketsReceived));
    }

    [Fact]
    public void A_transport_that_did_not_join_the_address_receives_nothing_sent_to_it_while_unicast_still_flows()
    {
        (ulong group, UdpTransportOptions options) = NewGroup();
        ulong other = EndpointConversions.FromIPEndPoint(new IPEndPoint(new IPAddress([239, 255, 78, (byte)Interlocked.Increment(ref _nextGroup)]), options.MulticastPort));
        using var sender = new UdpTransport(AnyLoopbackPort(), options);
        using var member = new UdpTransport(AnyLoopbackPort(), options);
        using var outsider = new UdpTransport(AnyLoopbackPort(), options); // same host and port, another address
        member.JoinMulticast(group);
        outsider.JoinMulticast(other);

        for (int i = 0; i < 50; i++) sender.Enqueue(group, SequencedPacket(i, 30));
        sender.Enqueue(outsider.LocalEndpoint, SequencedPacket(1_000, 30));
        sender.Flush();

        Assert.Equal(50, Pump(member, 50).Count);
        List<(ulong Source, byte[] Packet)> atOutsider = Pump(outsider, 2, TimeSpan.FromMilliseconds(300));
        Assert.Equal([1_000], atOutsider.Select(p => SequenceOf(p.Packet))); // its unicast, none of the group's
    }

    [Fact]
    public void Joins_nest_and_the_last_leave_stops_reception()
    {
        (ulong group, UdpTransportOptions options) = NewGroup();
        using var sender = new UdpTransport(AnyLoopbackPort(), options);
        using var receiver = new UdpTransport(AnyLoopbackPort(), options);
        receiver.JoinMulticast(group);
        receiver.JoinMulticast(group); // two groups of this process share the address
        receiver.LeaveMulticast(group);
        Assert.Equal([group], receiver.JoinedMulticast);

        sender.Enqueue(group, SequencedPacket(1, 30));
        sender.Flush();
        Assert.Single(Pump(receiver, 1));

        receiver.LeaveMulticast(group);
        Assert.Empty(receiver.JoinedMulticast);
        sender.Enqueue(group, SequencedPacket(2, 30));
        sender.Flush();
        Assert.Empty(Pump(receiver, 1, TimeSpan.FromMilliseconds(300)));
        Assert.Throws<InvalidOperationException>(() => receiver.LeaveMulticast(group));
    }

    [Fact]
    public void A_two_megabyte_packet_sent_to_the_group_arrives_intact_at_every_member()
    {
        (ulong group, UdpTransportOptions options) = NewGroup();
        using var sender = new UdpTransport(AnyLoopbackPort(), options);
        using var b = new UdpTransport(AnyLoopbackPort(), options with { ReceiveBufferSize = 16 * 1024 * 1024 });
        b.JoinMulticast(group);
        byte[] big = SequencedPacket(7, 2 * 1024 * 1024);
        sender.Enqueue(group, big);
        sender.Flush();
        List<(ulong Source, byte[] Packet)> got = Pump(b, 1);
        Assert.Single(got);
        Assert.Equal(big, got[0].Packet);
    }

    [Fact]
    public void Misuse_says_what_to_do()
    {
        (ulong group, UdpTransportOptions options) = NewGroup();
        using var plain = new UdpTransport(AnyLoopbackPort());
        Assert.False(plain.SupportsMulticast);
        Assert.Contains("MulticastPort", Assert.Throws<InvalidOperationException>(() => plain.JoinMulticast(group)).Message);

        using var t = new UdpTransport(AnyLoopbackPort(), options);
        ulong unicast = EndpointConversions.FromIPEndPoint(new IPEndPoint(IPAddress.Loopback, options.MulticastPort));
        Assert.Contains("not an IPv4 multicast address", Assert.Throws<ArgumentException>(() => t.JoinMulticast(unicast)).Message);
        ulong wrongPort = EndpointConversions.FromIPEndPoint(new IPEndPoint(EndpointConversions.ToIPEndPoint(group).Address, options.MulticastPort == 65_535 ? 1 : options.MulticastPort + 1));
        Assert.Contains("multicast port", Assert.Throws<ArgumentException>(() => t.JoinMulticast(wrongPort)).Message);
        Assert.Throws<ArgumentException>(() => new UdpTransport(AnyLoopbackPort(), (_, _, _) => { }, options)); // a receive thread does not read the multicast socket

        // An interface address this machine does not have: a clear error at start, not a silent unicast fallback.
        var elsewhere = options with { MulticastInterface = IPAddress.Parse("10.255.255.254") };
        Assert.Contains("IsisOptions.Multicast.Interface", Assert.Throws<ArgumentException>(() => new UdpTransport(AnyLoopbackPort(), elsewhere)).Message);

        using var tcp = new TcpTransport(AnyLoopbackPort());
        Assert.False(tcp.SupportsMulticast);
        Assert.Throws<InvalidOperationException>(() => tcp.JoinMulticast(group));
    }
}
