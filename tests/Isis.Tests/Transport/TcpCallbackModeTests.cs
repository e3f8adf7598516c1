using System.Net;
using Isis.Transport;
using static Isis.Tests.Transport.TransportTestKit;

namespace Isis.Tests.Transport;

/// <summary>The TCP transport in callback mode (the membership replica's sockets): each packet reaches the callback, in order.</summary>
public sealed class TcpCallbackModeTests
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

    private sealed class Collect(List<int> into) : Isis.Core.Framing.IPacketVisitor
    {
        public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => into.Add(System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(packet));

        public void OnReassembledPacket(ulong source, byte[] packet) => into.Add(System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(packet));
    }
}
