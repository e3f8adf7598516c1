using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Isis.Core.Framing;
using Isis.Transport;

namespace Isis.Tests.Transport;

/// <summary>
/// The event loop's own socket: no receive thread; the owner waits in <see cref="UdpTransport.WaitReadable"/>,
/// reads with <see cref="UdpTransport.ReceivePending"/>, and other threads wake it with <see cref="UdpTransport.Wake"/>.
/// </summary>
public sealed class OwnerDrivenReceiveTests
{
    private sealed class Collector : IPacketVisitor
    {
        public readonly List<(ulong Source, byte[] Packet)> Packets = [];

        public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => Packets.Add((source, packet.ToArray()));

        public void OnReassembledPacket(ulong source, byte[] packet) => Packets.Add((source, packet));
    }

    [Fact]
    public void Packets_sent_to_an_owner_driven_transport_are_read_by_its_owner_in_order_batched_and_fragmented()
    {
        using var sender = new Peer();
        using var owner = new UdpTransport(TransportTestKit.AnyLoopbackPort());
        Assert.True(owner.IsReceiving);
        var sent = new List<byte[]>();
        for (int i = 0; i < 40; i++) sent.Add(TransportTestKit.SequencedPacket(i, i == 7 ? 200_000 : 100)); // one is fragmented
        foreach (byte[] p in sent) sender.Transport.Enqueue(owner.LocalEndpoint, p);
        sender.Transport.Flush();

        var got = new Collector();
        var watch = Stopwatch.StartNew();
        while (got.Packets.Count < sent.Count && watch.Elapsed < TransportTestKit.Deadline)
        {
            if (owner.WaitReadable(100_000)) owner.ReceivePending(got, 16, readable: true);
        }
        Assert.Equal(sent.Count, got.Packets.Count);
        for (int i = 0; i < sent.Count; i++)
        {
            Assert.Equal(sender.Endpoint, got.Packets[i].Source);
            Assert.Equal(sent[i], got.Packets[i].Packet);
        }
        Assert.Equal(sent.Count, Interlocked.Read(ref owner.Counters.PacketsReceived));
    }

    [Fact]
    public async Task Wake_ends_a_wait_from_another_thread_and_is_not_counted_as_a_received_datagram()
    {
        using var owner = new UdpTransport(TransportTestKit.AnyLoopbackPort());
        var waiting = Task.Run(() => owner.WaitReadable(-1)); // no limit: only the wake ends it
        await Task.Delay(50);
        owner.Wake();
        Assert.Same(waiting, await Task.WhenAny(waiting, Task.Delay(TransportTestKit.Deadline)));
        Assert.True(await waiting);
        var got = new Collector();
        Assert.Equal(1, owner.ReceivePending(got, 16, readable: true));
        Assert.Empty(got.Packets);
        Assert.Equal(1, Interlocked.Read(ref owner.Counters.Wakes));
        Assert.Equal(0, Interlocked.Read(ref owner.Counters.DatagramsReceived));
        Assert.Equal(0, owner.ReceivePending(got, 16, readable: false)); // nothing left: no blocking, no spin
    }

    [Fact]
    public void An_empty_datagram_is_read_and_dropped_so_the_next_wait_does_not_return_at_once_forever()
    {
        using var owner = new UdpTransport(TransportTestKit.AnyLoopbackPort());
        using var raw = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        raw.SendTo([], owner.LocalIPEndPoint);
        Assert.True(owner.WaitReadable(5_000_000));
        var got = new Collector();
        Assert.Equal(1, owner.ReceivePending(got, 16, readable: true));
        Assert.Empty(got.Packets);
        Assert.Equal(1, Interlocked.Read(ref owner.Counters.DatagramsReceived));
        Assert.False(owner.WaitReadable(20_000), "the empty datagram is still waiting: the owner would spin");
    }

    [Fact]
    public void Hostile_datagrams_are_counted_as_drops_and_never_reach_the_owner()
    {
        using var owner = new UdpTransport(TransportTestKit.AnyLoopbackPort());
        using var raw = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        var random = new Random(7);
        for (int i = 0; i < 50; i++)
        {
            var junk = new byte[1 + random.Next(300)];
            random.NextBytes(junk);
            if (junk.Length == 1) junk[0] = 0x01; // not the wake byte
            raw.SendTo(junk, owner.LocalIPEndPoint);
        }
        var got = new Collector();
        int read = 0;
        var watch = Stopwatch.StartNew();
        while (read < 50 && watch.Elapsed < TransportTestKit.Deadline)
        {
            if (owner.WaitReadable(100_000)) read += owner.ReceivePending(got, 64, readable: true);
        }
        Assert.Equal(50, read);
        Assert.Empty(got.Packets);
        Assert.Equal(50, Interlocked.Read(ref owner.Counters.DatagramsReceived));
        Assert.True(owner.Counters.ReceiveDrops >= 50, $"drops counted: {owner.Counters.ReceiveDrops}");
    }

    [Fact]
    public void A_wait_with_a_limit_returns_false_after_about_that_long_and_never_early()
    {
        using var owner = new UdpTransport(TransportTestKit.AnyLoopbackPort());
        var watch = Stopwatch.StartNew();
        Assert.False(owner.WaitReadable(2_500)); // 2.5 ms rounds up to 3 ms: poll(2) has millisecond resolution
        Assert.True(watch.Elapsed >= TimeSpan.FromMilliseconds(2.5), $"returned after {watch.Elapsed.TotalMilliseconds} ms");
    }

    [Fact]
    public void After_dispose_the_owner_neither_waits_nor_reads()
    {
        var owner = new UdpTransport(TransportTestKit.AnyLoopbackPort());
        owner.Dispose();
        Assert.False(owner.IsReceiving);
        Assert.False(owner.WaitReadable(-1));
        Assert.Equal(0, owner.ReceivePending(new Collector(), 16, readable: true));
        owner.Wake(); // harmless
    }
}
