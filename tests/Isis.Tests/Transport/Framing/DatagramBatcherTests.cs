using Isis.Core.Common;
using Isis.Transport.Framing;
using static Isis.Tests.Transport.Framing.FramingTestKit;

namespace Isis.Tests.Transport.Framing;

public sealed class DatagramBatcherTests
{
    [Fact]
    public void ManySmallPacketsShareFewDatagramsAndRoundTripInOrder()
    {
        var random = new DeterministicRandom(1);
        var packets = Enumerable.Range(0, 10_000).Select(_ => RandomBytes(random, 1 + random.Next(200))).ToList();
        long payload = packets.Sum(p => (long)p.Length + FrameFormat.WholeRecordHeaderSize);

        List<byte[]> datagrams = Batch(packets);

        // Each datagram but the last is nearly full: a record of at most 203 bytes did not fit.
        long minimum = (payload + FrameFormat.DefaultMaxDatagramSize - 1) / FrameFormat.DefaultMaxDatagramSize;
        Assert.InRange(datagrams.Count, minimum, minimum + 2);
        Assert.All(datagrams, d => Assert.InRange(d.Length, 1, FrameFormat.DefaultMaxDatagramSize));

        var (parser, _, counters) = NewParser();
        var visitor = new CollectingVisitor();
        foreach (byte[] d in datagrams) parser.Parse(Source, d, 0, visitor);

        Assert.Equal(packets.Count, visitor.Packets.Count);
        for (int i = 0; i < packets.Count; i++)
        {
            Assert.Equal(Source, visitor.Packets[i].Source);
            Assert.Equal(packets[i], visitor.Packets[i].Packet);
        }
        Assert.Equal(0, counters.TotalDrops);
        Assert.Equal(packets.Count, counters.PacketsDelivered);
    }

    [Fact]
    public void EmptyAndMaximalWholePacketsRoundTrip()
    {
        var ids = new FragmentIdCounter(0);
        var batcher = new DatagramBatcher(FrameFormat.DefaultMaxDatagramSize, ids);
        var packets = new[] { Array.Empty<byte>(), new byte[batcher.MaxWholePacketSize], new byte[batcher.MaxWholePacketSize + 1] };
        packets[2][^1] = 42;

        List<byte[]> datagrams = Batch(packets);
        var (parser, _, counters) = NewParser();
        var visitor = new CollectingVisitor();
        foreach (byte[] d in datagrams) parser.Parse(Source, d, 0, visitor);

        Assert.Equal(packets, visitor.Packets.Select(p => p.Packet));
        Assert.Equal(1, counters.PacketsReassembled);
    }

    [Fact]
    public void LargePacketFragmentsShareDatagramsWithSmallNeighbours()
    {
        var random = new DeterministicRandom(2);
        byte[] before = RandomBytes(random, 100);
        byte[] large = RandomBytes(random, 100_000);
        byte[] after = RandomBytes(random, 100);

        List<byte[]> datagrams = Batch([before, large, after]);

        // The first fragment fills the rest of the datagram that holds "before" (16,254 bytes),
        // five full fragments of 16,357 bytes follow, and "after" joins the last fragment
        // (1,961 bytes): 7 datagrams, none wasted.
        Assert.Equal(7, datagrams.Count);

        var (parser, _, _) = NewParser();
        var visitor = new CollectingVisitor();
        foreach (byte[] d in datagrams) parser.Parse(Source, d, 0, visitor);
        Assert.Equal([before, large, after], visitor.Packets.Select(p => p.Packet));
    }

    [Fact]
    public void SmallDatagramsStillCarryLargePackets()
    {
        var random = new DeterministicRandom(3);
        var packets = new[] { RandomBytes(random, 5), RandomBytes(random, 1000), RandomBytes(random, 30) };

        List<byte[]> datagrams = Batch(packets, maxDatagramSize: FrameFormat.MinDatagramSize);

        Assert.All(datagrams, d => Assert.True(d.Length <= FrameFormat.MinDatagramSize));
        var (parser, _, _) = NewParser();
        var visitor = new CollectingVisitor();
        foreach (byte[] d in datagrams) parser.Parse(Source, d, 0, visitor);
        Assert.Equal(packets, visitor.Packets.Select(p => p.Packet));
    }

    [Fact]
    public void RefusesPacketsOverTheMaximumSize()
    {
        var batcher = new DatagramBatcher(1024, new FragmentIdCounter(0), maxPacketSize: 4096);
        Assert.False(batcher.Add(new byte[4097]));
        Assert.True(batcher.IsEmpty);
        Assert.True(batcher.Add(new byte[4096]));
    }

    [Fact]
    public void RejectsDatagramSizesUdpCannotCarry()
    {
        Assert.Throws<ArgumentOutOfRangeException>(() => new DatagramBatcher(FrameFormat.MaxUdpPayload + 1, new FragmentIdCounter(0)));
        Assert.Throws<ArgumentOutOfRangeException>(() => new DatagramBatcher(FrameFormat.MinDatagramSize - 1, new FragmentIdCounter(0)));
    }

    [Fact]
    public void BuffersAreReusedAfterRelease()
    {
        var batcher = new DatagramBatcher(FrameFormat.DefaultMaxDatagramSize, new FragmentIdCounter(0));
        for (int round = 0; round < 3; round++)
        {
            batcher.Add(new byte[10]);
            batcher.Seal();
            Assert.Equal(1, batcher.CompletedCount);
            batcher.ReleaseCompleted();
            Assert.Equal(0, batcher.CompletedCount);
        }
        batcher.Seal(); // nothing open: no empty datagram is produced
        Assert.Equal(0, batcher.CompletedCount);
        batcher.Reset();
    }
}
