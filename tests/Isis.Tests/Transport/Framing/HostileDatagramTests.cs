using Isis.Core.Common;
using Isis.Transport.Framing;
using static Isis.Tests.Transport.Framing.FramingTestKit;

namespace Isis.Tests.Transport.Framing;

public sealed class HostileDatagramTests
{
    [Fact]
    public void RandomDatagramsNeverThrowAndAreCountedAsDrops()
    {
        var random = new DeterministicRandom(20);
        var limits = new ReassemblyLimits { MaxBufferedBytes = 1 << 20, MaxPacketSize = 1 << 20 };
        var (parser, reassembler, counters) = NewParser(limits);
        var visitor = new CollectingVisitor();
        int withValidHeader = 0;

        for (int i = 0; i < 20_000; i++)
        {
            byte[] d = RandomBytes(random, random.Next(2048));
            // Half get a valid header and plausible record types, so the fuzz reaches past the magic.
            if (i % 2 == 0 && d.Length >= FrameFormat.DatagramHeaderSize + 1)
            {
                d[0] = FrameFormat.Magic;
                d[1] = FrameFormat.Version;
                d[2] = (byte)random.Next(4);
                d[3] = 0;
                d[4] = (byte)(1 + random.Next(2));
                withValidHeader++;
            }
            long dropsBefore = counters.TotalDrops;
            parser.Parse((ulong)random.Next(8), d, i, visitor);
            Assert.Equal(dropsBefore + 1, counters.TotalDrops);
            Assert.True(reassembler.BufferedBytes <= limits.MaxBufferedBytes);
        }

        Assert.Empty(visitor.Packets);
        Assert.True(withValidHeader > 9_000);
        Assert.Equal(20_000, counters.TotalDrops);
    }

    [Fact]
    public void MutatedValidDatagramsNeverThrow()
    {
        var random = new DeterministicRandom(21);
        var packets = Enumerable.Range(0, 200).Select(i => RandomBytes(random, i % 7 == 0 ? 40_000 : 1 + random.Next(300))).ToList();
        List<byte[]> datagrams = Batch(packets, maxDatagramSize: 4096);
        var (parser, reassembler, counters) = NewParser();
        var visitor = new CollectingVisitor();

        for (int i = 0; i < 5_000; i++)
        {
            byte[] d = (byte[])datagrams[random.Next(datagrams.Count)].Clone();
            int flips = 1 + random.Next(4);
            for (int f = 0; f < flips; f++) d[random.Next(d.Length)] ^= (byte)(1 + random.Next(255));
            parser.Parse(Source, d, i, visitor);
        }

        reassembler.EvictExpired(long.MaxValue / 2);
        Assert.Equal(0, reassembler.InFlight);
        Assert.Equal(0, reassembler.BufferedBytes);
        Assert.True(counters.TotalDrops > 0);
    }

    [Fact]
    public void EveryTruncationOfAValidDatagramIsDroppedWhole()
    {
        var random = new DeterministicRandom(22);
        var small = Enumerable.Range(0, 50).Select(_ => RandomBytes(random, random.Next(40))).ToList();
        List<byte[]> datagrams = Batch(small, maxDatagramSize: 1024);
        datagrams.AddRange(Batch([RandomBytes(random, 3000)], maxDatagramSize: 1024));
        var (parser, _, counters) = NewParser();
        var visitor = new CollectingVisitor();
        int truncations = 0;

        foreach (byte[] d in datagrams)
        {
            for (int length = 0; length < d.Length; length++)
            {
                long dropsBefore = counters.TotalDrops;
                Assert.Equal(0, parser.Parse(Source, d.AsSpan(0, length), 0, visitor));
                Assert.Equal(dropsBefore + 1, counters.TotalDrops);
                truncations++;
            }
        }

        Assert.Empty(visitor.Packets);
        Assert.Equal(truncations, counters.MalformedDatagrams + counters.BadRecords);
    }

    [Fact]
    public void TrailingBytesAndWrongRecordCountsAreMalformed()
    {
        byte[] valid = Batch([[1, 2, 3]])[0];
        var (parser, _, counters) = NewParser();
        var visitor = new CollectingVisitor();

        parser.Parse(Source, [.. valid, 0], 0, visitor);
        byte[] wrongCount = (byte[])valid.Clone();
        wrongCount[2] = 2;
        parser.Parse(Source, wrongCount, 0, visitor);
        byte[] wrongVersion = (byte[])valid.Clone();
        wrongVersion[1] = 99;
        parser.Parse(Source, wrongVersion, 0, visitor);

        Assert.Empty(visitor.Packets);
        Assert.Equal(2, counters.MalformedDatagrams);
        Assert.Equal(1, counters.BadRecords); // the trailing 0 reads as a record of unknown type
        parser.Parse(Source, valid, 0, visitor);
        Assert.Single(visitor.Packets);
    }
}
