using Isis.Core.Common;
using Isis.Transport.Framing;
using static Isis.Tests.Transport.Framing.FramingTestKit;

namespace Isis.Tests.Transport.Framing;

public sealed class FragmentReassemblyTests
{
    private const int FiveMegabytes = 5 * 1024 * 1024;

    [Fact]
    public void FiveMegabytePacketFragmentsAndReassembles()
    {
        byte[] packet = RandomBytes(new DeterministicRandom(10), FiveMegabytes);
        List<byte[]> datagrams = Batch([packet]);
        Assert.InRange(datagrams.Count, FiveMegabytes / FrameFormat.DefaultMaxDatagramSize, FiveMegabytes / 16_000 + 1);

        var (parser, reassembler, counters) = NewParser();
        var visitor = new CollectingVisitor();
        foreach (byte[] d in datagrams) parser.Parse(Source, d, 0, visitor);

        Assert.Equal(packet, Assert.Single(visitor.Packets).Packet);
        Assert.Equal(0, reassembler.InFlight);
        Assert.Equal(0, reassembler.BufferedBytes);
        Assert.Equal(0, counters.TotalDrops);
    }

    [Fact]
    public void ShuffledAndDuplicatedFragmentsReassembleOnce()
    {
        var random = new DeterministicRandom(11);
        byte[] packet = RandomBytes(random, FiveMegabytes);
        List<byte[]> datagrams = Batch([packet]);
        var wire = new List<byte[]>(datagrams);
        foreach (byte[] d in datagrams)
        {
            if (random.Chance(0.5)) wire.Add(d);
        }
        for (int i = wire.Count - 1; i > 0; i--)
        {
            int j = random.Next(i + 1);
            (wire[i], wire[j]) = (wire[j], wire[i]);
        }

        var (parser, reassembler, counters) = NewParser();
        var visitor = new CollectingVisitor();
        foreach (byte[] d in wire) parser.Parse(Source, d, 0, visitor);

        Assert.Equal(packet, Assert.Single(visitor.Packets).Packet);
        Assert.Equal(wire.Count - datagrams.Count, counters.DuplicateFragments);
        Assert.Equal(0, counters.TotalDrops);
        Assert.Equal(0, reassembler.InFlight);
        Assert.Equal(0, reassembler.BufferedBytes);
    }

    [Fact]
    public void SameFragmentIdFromDifferentSourcesDoesNotMix()
    {
        var (parser, _, _) = NewParser();
        var visitor = new CollectingVisitor();
        parser.Parse(1, FragmentDatagram(7, 0, 2, 4, [1, 1]), 0, visitor);
        parser.Parse(2, FragmentDatagram(7, 0, 2, 4, [2, 2]), 0, visitor);
        parser.Parse(2, FragmentDatagram(7, 1, 2, 4, [2, 2]), 0, visitor);
        parser.Parse(1, FragmentDatagram(7, 1, 2, 4, [1, 1]), 0, visitor);

        Assert.Equal([2UL, 1UL], visitor.Packets.Select(p => p.Source));
        Assert.Equal([new byte[] { 2, 2, 2, 2 }, [1, 1, 1, 1]], visitor.Packets.Select(p => p.Packet));
    }

    [Fact]
    public void IncompletePacketsAreEvictedByAge()
    {
        var limits = new ReassemblyLimits { TimeoutMicros = 1_000_000 };
        var (parser, reassembler, counters) = NewParser(limits);
        var visitor = new CollectingVisitor();

        parser.Parse(Source, FragmentDatagram(1, 0, 3, 30, new byte[10]), nowMicros: 0, visitor);
        parser.Parse(Source, FragmentDatagram(2, 0, 3, 30, new byte[10]), nowMicros: 600_000, visitor);
        Assert.Equal(2, reassembler.InFlight);

        reassembler.EvictExpired(1_000_000);
        Assert.Equal(1, reassembler.InFlight);
        Assert.Equal(1, counters.ReassembliesExpired);

        // Parsing sweeps on its own as time passes.
        parser.Parse(Source, FragmentDatagram(3, 0, 2, 20, new byte[10]), nowMicros: 1_700_000, visitor);
        Assert.Equal(2, counters.ReassembliesExpired);
        Assert.Equal(1, reassembler.InFlight);

        // The late rest of an expired packet cannot complete it.
        parser.Parse(Source, FragmentDatagram(1, 1, 3, 30, new byte[10]), nowMicros: 1_700_000, visitor);
        parser.Parse(Source, FragmentDatagram(1, 2, 3, 30, new byte[10]), nowMicros: 1_700_000, visitor);
        Assert.Empty(visitor.Packets);

        reassembler.EvictExpired(10_000_000);
        Assert.Equal(0, reassembler.InFlight);
        Assert.Equal(0, reassembler.BufferedBytes);
    }

    [Fact]
    public void ASourceOverItsQuotaLosesOnlyItsOwnOldest()
    {
        var limits = new ReassemblyLimits { MaxInFlightPerSource = 4, MaxInFlight = 16 };
        var (parser, reassembler, counters) = NewParser(limits);
        var visitor = new CollectingVisitor();

        parser.Parse(2, FragmentDatagram(100, 0, 2, 2, [9]), 0, visitor);
        for (ulong id = 0; id < 10; id++) parser.Parse(1, FragmentDatagram(id, 0, 2, 2, [1]), (long)id + 1, visitor);

        Assert.Equal(5, reassembler.InFlight);
        Assert.Equal(6, counters.ReassembliesEvicted);
        parser.Parse(2, FragmentDatagram(100, 1, 2, 2, [9]), 20, visitor);
        Assert.Equal(new byte[] { 9, 9 }, Assert.Single(visitor.Packets).Packet);
    }

    [Fact]
    public void MemoryBoundEvictsTheOldestIncompletePacket()
    {
        var limits = new ReassemblyLimits { MaxPacketSize = 10_000, MaxBufferedBytes = 25_000 };
        var (parser, reassembler, counters) = NewParser(limits);
        var visitor = new CollectingVisitor();

        for (ulong id = 0; id < 5; id++)
        {
            parser.Parse((ulong)id, FragmentDatagram(id, 0, 2, 10_000, new byte[5_000]), (long)id, visitor);
            Assert.True(reassembler.BufferedBytes <= limits.MaxBufferedBytes);
        }

        Assert.Equal(4, reassembler.InFlight);
        Assert.Equal(1, counters.ReassembliesEvicted);
        // Source 0 was the oldest and is gone; source 4 can still complete.
        parser.Parse(0, FragmentDatagram(0, 1, 2, 10_000, new byte[5_000]), 10, visitor);
        parser.Parse(4, FragmentDatagram(4, 1, 2, 10_000, new byte[5_000]), 10, visitor);
        Assert.Equal(4UL, Assert.Single(visitor.Packets).Source);
    }

    [Fact]
    public void OversizeAndContradictoryFragmentsAreCounted()
    {
        var limits = new ReassemblyLimits { MaxPacketSize = 1000, MaxBufferedBytes = 10_000, MaxFragmentsPerPacket = 10 };
        var (parser, reassembler, counters) = NewParser(limits);
        var visitor = new CollectingVisitor();

        parser.Parse(Source, FragmentDatagram(1, 0, 2, 1001, [1]), 0, visitor);
        Assert.Equal(1, counters.OversizePackets);

        parser.Parse(Source, FragmentDatagram(2, 2, 2, 10, [1]), 0, visitor);   // index past count
        parser.Parse(Source, FragmentDatagram(3, 0, 0, 10, [1]), 0, visitor);   // no fragments
        parser.Parse(Source, FragmentDatagram(4, 0, 11, 100, [1]), 0, visitor); // too many fragments
        parser.Parse(Source, FragmentDatagram(5, 0, 5, 4, [1]), 0, visitor);    // more fragments than bytes
        parser.Parse(Source, FragmentDatagram(6, 0, 2, 2, [1, 2, 3]), 0, visitor); // more bytes than the total
        parser.Parse(Source, FragmentDatagram(7, 0, 2, 10, []), 0, visitor);    // empty fragment
        Assert.Equal(6, counters.FragmentsOutOfBounds);

        parser.Parse(Source, FragmentDatagram(8, 0, 3, 10, [1, 2]), 0, visitor);
        parser.Parse(Source, FragmentDatagram(8, 1, 4, 10, [1, 2]), 0, visitor); // count disagrees
        parser.Parse(Source, FragmentDatagram(8, 1, 3, 11, [1, 2]), 0, visitor); // total disagrees
        parser.Parse(Source, FragmentDatagram(8, 1, 3, 10, new byte[8]), 0, visitor); // leaves nothing for fragment 2
        parser.Parse(Source, FragmentDatagram(8, 1, 3, 10, [1]), 0, visitor);
        parser.Parse(Source, FragmentDatagram(8, 2, 3, 10, [1]), 0, visitor); // all in, but 4 bytes of 10
        Assert.Equal(10, counters.FragmentsOutOfBounds);
        Assert.Empty(visitor.Packets);
        Assert.Equal(0, reassembler.InFlight);
        Assert.Equal(0, reassembler.BufferedBytes);
    }

    [Fact]
    public void LateDuplicatesOfACompletedPacketAreIgnored()
    {
        var (parser, reassembler, counters) = NewParser();
        var visitor = new CollectingVisitor();
        byte[] first = FragmentDatagram(1, 0, 2, 2, [1]);
        parser.Parse(Source, first, 0, visitor);
        parser.Parse(Source, FragmentDatagram(1, 1, 2, 2, [2]), 0, visitor);
        parser.Parse(Source, first, 0, visitor);

        Assert.Single(visitor.Packets);
        Assert.Equal(0, reassembler.InFlight);
        Assert.Equal(1, counters.DuplicateFragments);
    }
}
