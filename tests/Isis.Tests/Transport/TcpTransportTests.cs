using System.Net;
using Isis.Transport;
using static Isis.Tests.Transport.TransportTestKit;

namespace Isis.Tests.Transport;

/// <summary>What only the TCP transport has: its callback mode (the membership replica's sockets) and its reconnect backoff.</summary>
public sealed class TcpTransportTests
{
    [Fact]
    public void Packets_reach_the_callback_in_order_and_the_callback_side_can_answer()
    {
        var inbox = new PacketInbox();
        using var server = new TcpTransport(new IPEndPoint(IPAddress.Loopback, 0), onPacket: inbox.OnPacket);
        using var client = new TcpTransport(new IPEndPoint(IPAddress.Loopback, 0));
        for (int i = 0; i < 1_000; i++) client.Enqueue(server.LocalEndpoint, SequencedPacket(i, 40));
        client.Flush();
        Assert.True(WaitUntil(() => inbox.Count >= 1_000), $"received {inbox.Count} of 1000");
        Assert.Equal(Enumerable.Range(0, 1_000), inbox.Snapshot().Select(p => SequenceOf(p.Packet)));
        Assert.All(inbox.Snapshot(), p => Assert.Equal(client.LocalEndpoint, p.Source));

        server.Enqueue(client.LocalEndpoint, SequencedPacket(5, 40));
        server.Flush();
        Assert.True(client.WaitReadable(5_000_000));
        var got = new List<int>();
        client.ReceivePending(new Collect(got), 16, readable: true);
        Assert.Equal([5], got);
    }

    [Fact]
    public void A_peer_that_refuses_is_dialled_at_most_once_per_backoff_and_what_is_sent_meanwhile_is_counted()
    {
        using var client = new TcpTransport(new IPEndPoint(IPAddress.Loopback, 0));
        ulong nobody;
        using (var gone = new TcpTransport(new IPEndPoint(IPAddress.Loopback, 0))) nobody = gone.LocalEndpoint; // closed: connections are refused
        var watch = System.Diagnostics.Stopwatch.StartNew();
        const int Flushes = 100;
        for (int i = 0; i < Flushes; i++)
        {
            client.Enqueue(nobody, SequencedPacket(i, 30));
            client.Flush();
            Thread.Sleep(1);
        }
        // One dial per backoff period at most, however long the loop took on this machine: not one per flush.
        long allowed = 1 + watch.ElapsedMilliseconds * 1000 / TcpTransport.ReconnectBackoff;
        Assert.InRange(client.Dials, 1, allowed);
        Assert.True(client.Dials < Flushes, $"{client.Dials} dials for {Flushes} flushes");
        int flushes = Flushes;
        Assert.True(WaitUntil(() => Interlocked.Read(ref client.Counters.SendErrors) >= flushes - client.Dials), $"send errors {client.Counters.SendErrors} of {flushes} flushes");
    }

    private sealed class Collect(List<int> into) : Isis.Core.Framing.IPacketVisitor
    {
        public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => into.Add(System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(packet));

        public void OnReassembledPacket(ulong source, byte[] packet) => into.Add(System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(packet));
    }
}
