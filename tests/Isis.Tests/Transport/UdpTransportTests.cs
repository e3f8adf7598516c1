using System.Net;
using Isis.Core.Identity;
using Isis.Transport;
using static Isis.Tests.Transport.TransportTestKit;

namespace Isis.Tests.Transport;

public sealed class UdpTransportTests
{
    [Fact]
    public void BindsAnEphemeralLoopbackPort()
    {
        using var peer = new Peer();
        Assert.Equal(IPAddress.Loopback, peer.Transport.LocalIPEndPoint.Address);
        Assert.NotEqual(0, peer.Transport.LocalIPEndPoint.Port);
        Assert.Equal($"127.0.0.1:{peer.Transport.LocalIPEndPoint.Port}", EndpointCodec.Format(peer.Endpoint));
    }

    [Fact]
    public void TenThousandSmallPacketsArriveInOrderInFarFewerDatagrams()
    {
        using var a = new Peer();
        using var b = new Peer();
        const int Count = 10_000;

        for (int i = 0; i < Count; i++)
        {
            a.Transport.Enqueue(b.Endpoint, SequencedPacket(i, 8 + i % 100));
            if (i % 2_500 == 2_499) a.Transport.Flush();
        }
        a.Transport.Flush();

        Assert.True(WaitUntil(() => b.Inbox.Count >= Count), $"received {b.Inbox.Count} of {Count}");
        var received = b.Inbox.Snapshot();
        Assert.Equal(Count, received.Count);
        for (int i = 0; i < Count; i++)
        {
            Assert.Equal(a.Endpoint, received[i].Source);
            Assert.Equal(SequencedPacket(i, 8 + i % 100), received[i].Packet.ToArray());
        }
        TransportCounters sent = a.Transport.Counters;
        Assert.Equal(Count, sent.PacketsEnqueued);
        Assert.InRange(sent.DatagramsSent, 1, Count / 100);
        Assert.Equal(0, sent.SendErrors);
        Assert.True(WaitUntil(() => b.Transport.Counters.PacketsReceived == Count));
        Assert.Equal(sent.DatagramsSent, b.Transport.Counters.DatagramsReceived);
        Assert.Equal(0, b.Transport.Counters.ReceiveDrops);
    }

    [Fact]
    public void PacketsFlowBothWaysAtOnce()
    {
        using var a = new Peer();
        using var b = new Peer();
        for (int i = 0; i < 1_000; i++)
        {
            a.Transport.Enqueue(b.Endpoint, SequencedPacket(i, 50));
            b.Transport.Enqueue(a.Endpoint, SequencedPacket(i, 60));
        }
        a.Transport.Flush();
        b.Transport.Flush();

        Assert.True(WaitUntil(() => a.Inbox.Count == 1_000 && b.Inbox.Count == 1_000));
        Assert.Equal(Enumerable.Range(0, 1_000), a.Inbox.Snapshot().Select(p => SequenceOf(p.Packet)));
        Assert.All(a.Inbox.Snapshot(), p => Assert.Equal(b.Endpoint, p.Source));
    }

    [Fact]
    public void TwoMegabytePacketArrivesIntactAmongSmallOnes()
    {
        using var a = new Peer();
        using var b = new Peer();
        byte[] large = SequencedPacket(1, 2 * 1024 * 1024);

        a.Transport.Enqueue(b.Endpoint, SequencedPacket(0, 10));
        a.Transport.Enqueue(b.Endpoint, large);
        a.Transport.Enqueue(b.Endpoint, SequencedPacket(2, 10));
        a.Transport.Flush();

        Assert.True(WaitUntil(() => b.Inbox.Count == 3), $"received {b.Inbox.Count} packets, drops {b.Transport.Counters.ReceiveDrops}");
        var received = b.Inbox.Snapshot();
        Assert.Equal([0, 1, 2], received.Select(p => SequenceOf(p.Packet)));
        Assert.Equal(large, received[1].Packet.ToArray());
        Assert.Equal(1, b.Transport.Counters.Framing.PacketsReassembled);
        Assert.InRange(a.Transport.Counters.DatagramsSent, 2 * 1024 * 1024 / a.Transport.Options.MaxDatagramSize, 200);
    }

    [Fact]
    public void ReceivedMemoryStaysValidAfterTheCallback()
    {
        using var a = new Peer();
        using var b = new Peer();
        // Far more bytes than one slab, so slabs are replaced while earlier packets are kept.
        for (int round = 0; round < 4; round++)
        {
            for (int i = 0; i < 1_000; i++) a.Transport.Enqueue(b.Endpoint, SequencedPacket(round * 1_000 + i, 200));
            a.Transport.Flush();
            Assert.True(WaitUntil(() => b.Inbox.Count == (round + 1) * 1_000));
        }

        var received = b.Inbox.Snapshot();
        for (int i = 0; i < received.Count; i++) Assert.Equal(SequencedPacket(i, 200), received[i].Packet.ToArray());
    }

    [Fact]
    public void OversizePacketsAreRefusedAndCounted()
    {
        using var a = new Peer(new UdpTransportOptions { MaxPacketSize = 1024, MaxReassemblyBytes = 1 << 20 });
        a.Transport.Enqueue(a.Endpoint, new byte[1025]);
        Assert.Equal(1, a.Transport.Counters.OversizePacketsRefused);
        Assert.Equal(0, a.Transport.Counters.PacketsEnqueued);
    }

    [Fact]
    public void SendErrorsAreCountedNotThrown()
    {
        using var a = new Peer();
        // Port 0 is not a valid destination: the kernel refuses the send.
        a.Transport.Enqueue(EndpointCodec.FromIPv4(0x7F00_0001, 0), [1, 2, 3]);
        a.Transport.Flush();
        Assert.Equal(1, a.Transport.Counters.SendErrors);
        Assert.Equal(0, a.Transport.Counters.DatagramsSent);
        Assert.NotEqual(0, a.Transport.Counters.LastSocketError);
    }

    [Fact]
    public void DisposeStopsTheReceiveThreadAndRefusesFurtherUse()
    {
        var peer = new Peer();
        Assert.True(peer.Transport.IsReceiving);
        peer.Dispose();
        Assert.False(peer.Transport.IsReceiving);
        Assert.Throws<ObjectDisposedException>(() => peer.Transport.Enqueue(1, [1]));
        Assert.Throws<ObjectDisposedException>(peer.Transport.Flush);
        peer.Dispose(); // idempotent
    }

    [Fact]
    public void SelfSendWorks()
    {
        using var a = new Peer();
        a.Transport.Enqueue(a.Endpoint, [42]);
        a.Transport.Flush();
        Assert.True(WaitUntil(() => a.Inbox.Count == 1));
        Assert.Equal(a.Endpoint, a.Inbox.Snapshot()[0].Source);
    }
}
