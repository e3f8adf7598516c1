using System.Diagnostics;
using System.Net;
using Isis.Transport.Framing;
using Isis.Transport;
using static Isis.Tests.Transport.TransportTestKit;

namespace Isis.Tests.Transport.Conformance;

/// <summary>
/// The same tests for every <see cref="IPacketTransport"/>, driven as the event loop drives it (the
/// owner waits with WaitReadable and reads with ReceivePending): a stream's order, batching,
/// fragmentation, both directions at once, hostile input, oversize packets, wake-ups, waits that
/// never return early, close and restart on the same port, and a burst larger than the receiver's
/// buffers. A transport joins by deriving a class that says how to make one and how a hostile peer
/// reaches it.
/// </summary>
public abstract class PacketTransportConformance
{
    /// <summary>A transport bound to 127.0.0.1 on <paramref name="port"/> (0: any free port), refusing packets over <paramref name="maxPacketSize"/> (null: its default).</summary>
    internal abstract IPacketTransport Create(int port = 0, int? maxPacketSize = null);

    /// <summary>Bytes from a peer that does not speak the protocol, as one datagram or frame, to <paramref name="target"/>.</summary>
    internal abstract void SendHostile(IPacketTransport target, byte[] bytes);

    private sealed class Collector : IPacketVisitor
    {
        public readonly List<(ulong Source, byte[] Packet)> Packets = [];

        public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => Packets.Add((source, packet.ToArray()));

        public void OnReassembledPacket(ulong source, byte[] packet) => Packets.Add((source, packet));
    }

    /// <summary>Reads as the event loop does until <paramref name="done"/> holds or the deadline passes; returns the reads done.</summary>
    private static int Pump(IPacketTransport owner, Collector into, Func<bool> done, int maxReads = 16)
    {
        int reads = 0;
        var watch = Stopwatch.StartNew();
        while (!done() && watch.Elapsed < Deadline)
        {
            if (owner.WaitReadable(50_000)) reads += owner.ReceivePending(into, maxReads, readable: true);
        }
        return reads;
    }

    [Fact]
    public void A_stream_of_small_packets_arrives_complete_in_order_and_in_far_fewer_reads()
    {
        using IPacketTransport a = Create(), b = Create();
        const int Count = 10_000;
        for (int i = 0; i < Count; i++)
        {
            a.Enqueue(b.LocalEndpoint, SequencedPacket(i, 8 + i % 100));
            if (i % 500 == 499) a.Flush();
        }
        a.Flush();
        var got = new Collector();
        int reads = Pump(b, got, () => got.Packets.Count >= Count);
        Assert.Equal(Count, got.Packets.Count);
        for (int i = 0; i < Count; i++)
        {
            Assert.Equal(a.LocalEndpoint, got.Packets[i].Source);
            Assert.Equal(SequencedPacket(i, 8 + i % 100), got.Packets[i].Packet);
        }
        Assert.InRange(reads, 1, Count / 20);
        Assert.Equal(Count, Interlocked.Read(ref a.Counters.PacketsEnqueued));
        Assert.Equal(Count, Interlocked.Read(ref b.Counters.PacketsReceived));
        Assert.Equal(0, b.Counters.ReceiveDrops);
    }

    [Fact]
    public void A_two_megabyte_packet_arrives_intact_between_small_ones()
    {
        using IPacketTransport a = Create(), b = Create();
        byte[] big = SequencedPacket(1, 2 * 1024 * 1024);
        a.Enqueue(b.LocalEndpoint, SequencedPacket(0, 40));
        a.Enqueue(b.LocalEndpoint, big);
        a.Enqueue(b.LocalEndpoint, SequencedPacket(2, 40));
        a.Flush();
        var got = new Collector();
        Pump(b, got, () => got.Packets.Count >= 3, maxReads: 64);
        Assert.Equal([0, 1, 2], got.Packets.Select(p => SequenceOf(p.Packet)));
        Assert.Equal(big, got.Packets[1].Packet);
    }

    [Fact]
    public void Packets_flow_both_ways_at_once()
    {
        using IPacketTransport a = Create(), b = Create();
        for (int i = 0; i < 2_000; i++)
        {
            a.Enqueue(b.LocalEndpoint, SequencedPacket(i, 50));
            b.Enqueue(a.LocalEndpoint, SequencedPacket(i, 60));
        }
        a.Flush();
        b.Flush();
        var atA = new Collector();
        var atB = new Collector();
        var watch = Stopwatch.StartNew();
        while ((atA.Packets.Count < 2_000 || atB.Packets.Count < 2_000) && watch.Elapsed < Deadline)
        {
            if (a.WaitReadable(1_000)) a.ReceivePending(atA, 16, readable: true);
            if (b.WaitReadable(1_000)) b.ReceivePending(atB, 16, readable: true);
        }
        Assert.Equal(Enumerable.Range(0, 2_000), atA.Packets.Select(p => SequenceOf(p.Packet)));
        Assert.Equal(Enumerable.Range(0, 2_000), atB.Packets.Select(p => SequenceOf(p.Packet)));
    }

    [Fact]
    public void Hostile_input_is_dropped_and_counted_and_the_transport_keeps_working()
    {
        using IPacketTransport target = Create(), friend = Create();
        var random = new Random(7);
        for (int i = 0; i < 50; i++)
        {
            var junk = new byte[2 + random.Next(300)];
            random.NextBytes(junk);
            SendHostile(target, junk);
        }
        var got = new Collector();
        Pump(target, got, () => target.Counters.ReceiveDrops >= 50);
        Assert.Empty(got.Packets);
        Assert.True(target.Counters.ReceiveDrops >= 50, $"drops counted: {target.Counters.ReceiveDrops}");

        friend.Enqueue(target.LocalEndpoint, SequencedPacket(9, 30));
        friend.Flush();
        Pump(target, got, () => got.Packets.Count > 0);
        Assert.Equal(SequencedPacket(9, 30), Assert.Single(got.Packets).Packet);
    }

    [Fact]
    public void An_empty_message_from_a_hostile_peer_is_consumed_so_the_owner_does_not_spin()
    {
        using IPacketTransport target = Create();
        SendHostile(target, []);
        Assert.True(target.WaitReadable(5_000_000));
        var got = new Collector();
        Assert.Equal(1, target.ReceivePending(got, 16, readable: true));
        Assert.Empty(got.Packets);
        Assert.False(target.WaitReadable(20_000), "the empty message is still waiting: the loop would spin");
    }

    [Fact]
    public void Oversize_packets_are_refused_and_counted_never_thrown()
    {
        using IPacketTransport a = Create(maxPacketSize: 100_000), b = Create();
        a.Enqueue(b.LocalEndpoint, new byte[100_001]);
        a.Enqueue(b.LocalEndpoint, SequencedPacket(1, 100_000)); // at the limit: accepted
        a.Flush();
        Assert.Equal(1, Interlocked.Read(ref a.Counters.OversizePacketsRefused));
        Assert.Equal(1, Interlocked.Read(ref a.Counters.PacketsEnqueued));
        var got = new Collector();
        Pump(b, got, () => got.Packets.Count > 0);
        Assert.Equal(SequencedPacket(1, 100_000), Assert.Single(got.Packets).Packet);
    }

    [Fact]
    public async Task Wake_ends_a_wait_from_another_thread_and_is_not_counted_as_received()
    {
        using IPacketTransport owner = Create();
        var waiting = Task.Run(() => owner.WaitReadable(-1)); // no limit: only the wake ends it
        await Task.Delay(50);
        owner.Wake();
        Assert.Same(waiting, await Task.WhenAny(waiting, Task.Delay(Deadline)));
        Assert.True(await waiting);
        var got = new Collector();
        Assert.Equal(1, owner.ReceivePending(got, 16, readable: true));
        Assert.Empty(got.Packets);
        Assert.Equal(1, Interlocked.Read(ref owner.Counters.Wakes));
        Assert.Equal(0, Interlocked.Read(ref owner.Counters.PacketsReceived));
        Assert.Equal(0, owner.ReceivePending(got, 16, readable: false)); // nothing left: no blocking
    }

    [Fact]
    public void A_wait_with_a_limit_never_returns_early()
    {
        using IPacketTransport owner = Create();
        var watch = Stopwatch.StartNew();
        Assert.False(owner.WaitReadable(2_500));
        Assert.True(watch.Elapsed >= TimeSpan.FromMilliseconds(2.5), $"returned after {watch.Elapsed.TotalMilliseconds} ms");
    }

    [Fact]
    public void Closed_then_restarted_on_the_same_port_a_transport_receives_again_and_nothing_throws_meanwhile()
    {
        using IPacketTransport a = Create();
        IPacketTransport b = Create();
        int port = b.LocalIPEndPoint.Port;
        ulong bEndpoint = b.LocalEndpoint;
        a.Enqueue(bEndpoint, SequencedPacket(0, 20));
        a.Flush();
        var got = new Collector();
        Pump(b, got, () => got.Packets.Count > 0);
        b.Dispose();
        Assert.False(b.IsReceiving);
        Assert.False(b.WaitReadable(-1));
        Assert.Equal(0, b.ReceivePending(new Collector(), 16, readable: true));
        b.Wake(); // harmless
        a.Enqueue(bEndpoint, SequencedPacket(1, 20)); // to nobody: lost or counted, never thrown
        a.Flush();

        // Like the protocol, the sender sends on until packets get through: what a transport loses
        // across the restart (UDP: nothing; TCP: what went into the broken connection) is a prefix,
        // and what arrives comes in order, once.
        using IPacketTransport restarted = Create(port);
        Assert.Equal(bEndpoint, restarted.LocalEndpoint);
        var after = new Collector();
        int next = 2, lastBatchStart = 0;
        var watch = Stopwatch.StartNew();
        while (after.Packets.Count < 50 && watch.Elapsed < Deadline)
        {
            lastBatchStart = next;
            for (int i = 0; i < 10; i++) a.Enqueue(bEndpoint, SequencedPacket(next++, 20));
            a.Flush();
            for (int wait = 0; wait < 4; wait++) if (restarted.WaitReadable(5_000)) restarted.ReceivePending(after, 16, readable: true); // pacing, as a protocol's retry period
        }
        Pump(restarted, after, () => after.Packets.Count > 0 && SequenceOf(after.Packets[^1].Packet) == next - 1);
        int[] seqs = [.. after.Packets.Select(p => SequenceOf(p.Packet))];
        Assert.True(seqs.Length >= 50, $"only {seqs.Length} packets got through after the restart");
        Assert.Equal(Enumerable.Range(seqs[0], seqs.Length), seqs); // a lost prefix at most, then everything in order
        Assert.Equal(next - 1, seqs[^1]);
    }

    [Fact]
    public void A_port_another_transport_holds_cannot_be_bound_again()
    {
        // The membership service relies on it: whoever binds a replica's address runs that replica.
        using IPacketTransport first = Create();
        Assert.ThrowsAny<System.Net.Sockets.SocketException>(() => Create(first.LocalIPEndPoint.Port).Dispose());
    }

    [Fact]
    public void A_burst_larger_than_the_receivers_buffers_is_sent_without_blocking_and_arrives_in_order_without_duplicates()
    {
        using IPacketTransport a = Create(), b = Create();
        const int Count = 60_000; // about 6 MB: more than a socket buffer holds
        for (int i = 0; i < Count; i++) a.Enqueue(b.LocalEndpoint, SequencedPacket(i, 100));
        Assert.True(Interlocked.Read(ref a.Counters.DatagramsSent) > 0, "nothing left before Flush: enqueueing must send early rather than pile up");
        a.Flush();
        var got = new Collector();
        Pump(b, got, () => got.Packets.Count >= Count || (got.Packets.Count > 0 && !b.WaitReadable(200_000)), maxReads: 64);
        Assert.NotEmpty(got.Packets);
        int previous = -1;
        foreach (var (_, packet) in got.Packets)
        {
            int seq = SequenceOf(packet);
            Assert.True(seq > previous, $"packet {seq} after {previous}: reordered or duplicated");
            previous = seq;
        }
    }
}

/// <summary>UDP: one socket, datagrams batched and fragmented; a hostile peer is any socket that sends it datagrams.</summary>
public sealed class UdpTransportConformance : PacketTransportConformance
{
    internal override IPacketTransport Create(int port = 0, int? maxPacketSize = null) =>
        new UdpTransport(new IPEndPoint(IPAddress.Loopback, port), maxPacketSize is int max ? new UdpTransportOptions { MaxPacketSize = max } : null);

    internal override void SendHostile(IPacketTransport target, byte[] bytes)
    {
        using var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Dgram, System.Net.Sockets.ProtocolType.Udp);
        socket.SendTo(bytes, target.LocalIPEndPoint);
    }
}

/// <summary>TCP: length-prefixed frames over one connection per destination; a hostile peer connects, says hello and sends frames.</summary>
public sealed class TcpTransportConformance : PacketTransportConformance
{
    internal override IPacketTransport Create(int port = 0, int? maxPacketSize = null) =>
        new TcpTransport(new IPEndPoint(IPAddress.Loopback, port), maxPacketSize ?? Isis.Transport.Framing.FrameFormat.DefaultMaxPacketSize);

    internal override void SendHostile(IPacketTransport target, byte[] bytes)
    {
        using var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Tcp);
        socket.Connect(target.LocalIPEndPoint);
        var hello = new byte[12 + 4 + bytes.Length];
        System.Buffers.Binary.BinaryPrimitives.WriteUInt32LittleEndian(hello, 0x54534953);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64LittleEndian(hello.AsSpan(4), Isis.Transport.EndpointConversions.FromIPEndPoint(new IPEndPoint(IPAddress.Loopback, 1)));
        System.Buffers.Binary.BinaryPrimitives.WriteInt32LittleEndian(hello.AsSpan(12), bytes.Length);
        bytes.CopyTo(hello, 16);
        socket.Send(hello);
        socket.Shutdown(System.Net.Sockets.SocketShutdown.Send);
    }
}
