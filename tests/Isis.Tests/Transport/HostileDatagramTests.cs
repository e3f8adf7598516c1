using System.Net;
using System.Net.Sockets;
using Isis.Transport.Framing;
using Isis.Transport;
using Isis.Tests.Transport.Framing;
using static Isis.Tests.Transport.TransportTestKit;

namespace Isis.Tests.Transport;

public sealed class HostileDatagramTests
{
    [Fact]
    public void HostileDatagramsAreDroppedAndCountedAndTheTransportKeepsWorking()
    {
        using var target = new Peer();
        using var friend = new Peer();
        using var attacker = new UdpClient(new IPEndPoint(IPAddress.Loopback, 0));
        IPEndPoint targetAddress = target.Transport.LocalIPEndPoint;
        var random = new Random(7);
        int sent = 0;

        void Send(byte[] datagram)
        {
            attacker.Send(datagram, datagram.Length, targetAddress);
            sent++;
            // Let the receiver keep up so the kernel never drops; bounded by the deadline.
            if (sent % 200 == 0) Assert.True(WaitUntil(() => target.Transport.Counters.DatagramsReceived >= sent));
        }

        // Random bytes of every size class, including empty and near the UDP maximum.
        for (int i = 0; i < 2_000; i++)
        {
            var d = new byte[random.Next(1_500)];
            random.NextBytes(d);
            Send(d);
        }
        var huge = new byte[FrameFormat.MaxUdpPayload];
        random.NextBytes(huge);
        Send(huge);
        Send([]);

        // Every truncation of a valid datagram holding many packets.
        byte[] valid = ValidDatagram(Enumerable.Range(0, 40).Select(i => new byte[i]));
        for (int length = 0; length < valid.Length; length++) Send(valid[..length]);

        // Well-formed fragments that lie: a 1 GiB packet, and an index past the count.
        Send(FramingTestKit.FragmentDatagram(id: 1, index: 0, count: 2, total: 1 << 30, new byte[100]));
        Send(FramingTestKit.FragmentDatagram(id: 2, index: 5, count: 2, total: 200, new byte[100]));

        Assert.True(WaitUntil(() => target.Transport.Counters.DatagramsReceived == sent),
            $"received {target.Transport.Counters.DatagramsReceived} of {sent}");
        TransportCounters c = target.Transport.Counters;
        Assert.Equal(0, target.Inbox.Count);
        Assert.Equal(sent, c.ReceiveDrops);
        Assert.True(c.Framing.MalformedDatagrams > 0);
        Assert.True(c.Framing.BadRecords > 0);
        Assert.Equal(1, c.Framing.OversizePackets);
        Assert.Equal(1, c.Framing.FragmentsOutOfBounds);

        // Still works.
        friend.Transport.Enqueue(target.Endpoint, [1, 2, 3]);
        friend.Transport.Flush();
        Assert.True(WaitUntil(() => target.Inbox.Count == 1));
        Assert.Equal(friend.Endpoint, target.Inbox.Snapshot()[0].Source);
        Assert.True(target.Transport.IsReceiving);
    }

    private static byte[] ValidDatagram(IEnumerable<byte[]> packets)
    {
        var batcher = new DatagramBatcher(FrameFormat.DefaultMaxDatagramSize, new FragmentIdCounter(0));
        foreach (byte[] p in packets) batcher.Add(p);
        batcher.Seal();
        byte[] datagram = batcher.GetCompleted(0).ToArray();
        batcher.ReleaseCompleted();
        return datagram;
    }
}
