using System.Buffers.Binary;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

public class WireTests
{
    private static readonly PacketHeader SampleHeader =
        new(PacketKind.Data, new NodeId(0x0A00_0001_1F90, 7), GroupId.FromName("g"), 42, 123_456_789_012);

    private static byte[] SamplePacket() =>
        new PacketWriter().Begin(SampleHeader).I32(1).Tail("hello, group"u8).Finish();

    [Fact]
    public void HeaderRoundTripsThroughWriterAndDecoder()
    {
        byte[] packet = SamplePacket();

        Assert.Equal(HeaderVerdict.Ok, PacketDecoder.TryReadHeader(packet, out PacketHeader h));
        Assert.Equal(SampleHeader, h);
        Assert.Equal(PacketHeader.Size + 4 + "hello, group".Length, packet.Length);
        var r = new WireReader(PacketDecoder.Body(packet));
        Assert.Equal(1, r.I32());
        Assert.Equal("hello, group"u8.ToArray(), r.Tail());
        Assert.True(r.Complete);
    }

    [Fact]
    public void EveryBodyFieldRoundTrips()
    {
        NodeId[] nodes = [new NodeId(1, 2), new NodeId(ulong.MaxValue, uint.MaxValue)];
        byte[] packet = new PacketWriter().Begin(SampleHeader with { Kind = PacketKind.FlushReport })
            .U8(9).I32(-5).I64(long.MinValue).Node(nodes[0]).Nodes(nodes).Longs([3, 4, 5]).Bytes([1, 2, 3]).String("grüße").Finish();

        Assert.Equal(HeaderVerdict.Ok, PacketDecoder.TryReadHeader(packet, out _));
        var r = new WireReader(PacketDecoder.Body(packet));
        Assert.Equal(9, r.U8());
        Assert.Equal(-5, r.I32());
        Assert.Equal(long.MinValue, r.I64());
        Assert.Equal(nodes[0], r.Node());
        Assert.Equal(nodes, r.Nodes());
        Assert.Equal([3L, 4, 5], r.Longs());
        Assert.Equal([1, 2, 3], r.Bytes());
        Assert.Equal("grüße", r.String(100));
        Assert.True(r.Complete);
    }

    [Fact]
    public void Causal_timestamps_round_trip_small_counts_in_a_byte_and_refuse_what_no_writer_makes()
    {
        long[] stamp = [0, 1, 127, 128, 300, long.MaxValue];
        byte[] body = new PacketWriter().BeginRecord().VarLongs(stamp).I32(7).FinishRecord();
        var r = new WireReader(body);
        Assert.Equal(stamp, r.VarLongs());
        Assert.Equal(7, r.I32());
        Assert.True(r.Complete);
        // A ten-member view whose counts are below 128: a byte each, after a byte of count.
        Assert.Equal(11, new PacketWriter().BeginRecord().VarLongs(new long[10]).FinishRecord().Length);

        byte[] overlong = [1, .. Enumerable.Repeat((byte)0xFF, 10), 0x01]; // more than 63 bits
        var bad = new WireReader(overlong);
        Assert.Empty(bad.VarLongs());
        Assert.False(bad.Ok);
        byte[] cut = [2, 0x05, 0x80]; // the second value never ends
        var truncated = new WireReader(cut);
        Assert.Empty(truncated.VarLongs());
        Assert.False(truncated.Ok);
    }

    [Fact]
    public void EverySingleBitFlipIsRejected()
    {
        byte[] packet = SamplePacket();
        for (int bit = 0; bit < packet.Length * 8; bit++)
        {
            byte[] copy = (byte[])packet.Clone();
            copy[bit / 8] ^= (byte)(1 << (bit % 8));
            HeaderVerdict verdict = PacketDecoder.TryReadHeader(copy, out _);
            Assert.True(verdict != HeaderVerdict.Ok, $"flipping bit {bit} went unnoticed");
        }
    }

    [Fact]
    public void EveryTruncationIsRejected()
    {
        byte[] packet = SamplePacket();
        for (int length = 0; length < packet.Length; length++)
        {
            HeaderVerdict verdict = PacketDecoder.TryReadHeader(packet.AsSpan(0, length), out _);
            Assert.Equal(length < PacketHeader.Size ? HeaderVerdict.TooShort : HeaderVerdict.LengthMismatch, verdict);
        }
    }

    [Fact]
    public void ExtendedPacketIsRejectedAsLengthMismatch()
    {
        byte[] packet = [.. SamplePacket(), 0];
        Assert.Equal(HeaderVerdict.LengthMismatch, PacketDecoder.TryReadHeader(packet, out _));
    }

    /// <summary>Rewrites one header field and, optionally, recomputes the checksum so only that field is wrong.</summary>
    private static byte[] Tampered(Action<byte[]> edit, bool fixChecksum = true)
    {
        byte[] packet = SamplePacket();
        edit(packet);
        if (fixChecksum)
        {
            BinaryPrimitives.WriteUInt32LittleEndian(packet.AsSpan(PacketHeader.ChecksumOffset), 0);
            BinaryPrimitives.WriteUInt32LittleEndian(packet.AsSpan(PacketHeader.ChecksumOffset), Crc32C.Compute(packet));
        }
        return packet;
    }

    [Fact]
    public void WrongMagicIsRejectedAsBadMagic() =>
        Assert.Equal(HeaderVerdict.BadMagic, PacketDecoder.TryReadHeader(Tampered(p => p[0] ^= 0xFF), out _));

    [Fact]
    public void WrongVersionIsRejectedAsUnsupportedVersion() =>
        Assert.Equal(HeaderVerdict.UnsupportedVersion, PacketDecoder.TryReadHeader(Tampered(p => p[2] = 3), out _)); // 1 is clear, 2 sealed

    [Fact]
    public void WrongLengthFieldIsRejectedAsLengthMismatch()
    {
        Assert.Equal(HeaderVerdict.LengthMismatch,
            PacketDecoder.TryReadHeader(Tampered(p => BinaryPrimitives.WriteInt32LittleEndian(p.AsSpan(4), p.Length + 1)), out _));
        Assert.Equal(HeaderVerdict.LengthMismatch,
            PacketDecoder.TryReadHeader(Tampered(p => BinaryPrimitives.WriteInt32LittleEndian(p.AsSpan(4), -1)), out _));
    }

    [Fact]
    public void UndefinedKindIsRejectedAsUnknownKind()
    {
        foreach (byte kind in new byte[] { 0, 52, 53, 255 })
        {
            Assert.Equal(HeaderVerdict.UnknownKind, PacketDecoder.TryReadHeader(Tampered(p => p[3] = kind), out _));
        }
    }

    [Fact]
    public void ChangedFieldWithStaleChecksumIsRejectedAsBadChecksum()
    {
        Assert.Equal(HeaderVerdict.BadChecksum, PacketDecoder.TryReadHeader(Tampered(p => p[28] ^= 1, fixChecksum: false), out _));
        Assert.Equal(HeaderVerdict.BadChecksum, PacketDecoder.TryReadHeader(Tampered(p => p[^1] ^= 1, fixChecksum: false), out _));
    }

    [Fact]
    public void WireReaderFailureIsSticky()
    {
        var r = new WireReader([1, 2, 3]);
        Assert.Equal(0, r.I32());
        Assert.False(r.Ok);
        Assert.Equal(0, r.U8()); // bytes remain, but the reader stays failed
        Assert.False(r.Complete);
    }

    [Fact]
    public void WireReaderRejectsCountsLargerThanTheRemainingBytes()
    {
        byte[] body = new byte[12];
        BinaryPrimitives.WriteInt32LittleEndian(body, int.MaxValue);
        var r = new WireReader(body);
        Assert.Empty(r.Longs());
        Assert.False(r.Ok);

        BinaryPrimitives.WriteInt32LittleEndian(body, -1);
        r = new WireReader(body);
        Assert.Empty(r.Bytes());
        Assert.False(r.Ok);
    }

    [Fact]
    public void WireReaderRejectsInvalidUtf8AndOverlongStrings()
    {
        byte[] bad = new PacketWriter().Begin(SampleHeader).Bytes([0xC3, 0x28]).Finish();
        var r = new WireReader(PacketDecoder.Body(bad));
        Assert.Equal(string.Empty, r.String(100));
        Assert.False(r.Ok);

        byte[] longName = new PacketWriter().Begin(SampleHeader).String(new string('x', 101)).Finish();
        r = new WireReader(PacketDecoder.Body(longName));
        Assert.Equal(string.Empty, r.String(100));
        Assert.False(r.Ok);
    }
}
