using System.Buffers.Binary;
using Isis.Core.Common;
using Isis.Transport.Framing;

namespace Isis.Tests.Transport.Framing;

/// <summary>Builds batchers, parsers and hand-made datagrams for the framing tests.</summary>
internal static class FramingTestKit
{
    public const ulong Source = 0x7F00_0001_2710; // 127.0.0.1:10000

    public static List<byte[]> Batch(IEnumerable<byte[]> packets, int maxDatagramSize = FrameFormat.DefaultMaxDatagramSize)
    {
        var batcher = new DatagramBatcher(maxDatagramSize, new FragmentIdCounter(1000));
        foreach (byte[] p in packets) Assert.True(batcher.Add(p));
        batcher.Seal();
        var datagrams = new List<byte[]>();
        for (int i = 0; i < batcher.CompletedCount; i++) datagrams.Add(batcher.GetCompleted(i).ToArray());
        batcher.ReleaseCompleted();
        Assert.True(batcher.IsEmpty);
        return datagrams;
    }

    public static byte[] RandomBytes(DeterministicRandom random, int length)
    {
        var bytes = new byte[length];
        for (int i = 0; i < length; i++) bytes[i] = (byte)random.NextUInt64();
        return bytes;
    }

    public static (DatagramParser Parser, FragmentReassembler Reassembler, FramingCounters Counters) NewParser(ReassemblyLimits? limits = null)
    {
        var counters = new FramingCounters();
        var reassembler = new FragmentReassembler(limits ?? new ReassemblyLimits(), counters);
        return (new DatagramParser(reassembler, counters), reassembler, counters);
    }

    /// <summary>A datagram holding one hand-made fragment record.</summary>
    public static byte[] FragmentDatagram(ulong id, uint index, uint count, uint total, ReadOnlySpan<byte> bytes)
    {
        var d = new byte[FrameFormat.DatagramHeaderSize + FrameFormat.FragmentRecordHeaderSize + bytes.Length];
        d[0] = FrameFormat.Magic;
        d[1] = FrameFormat.Version;
        BinaryPrimitives.WriteUInt16LittleEndian(d.AsSpan(2), 1);
        Span<byte> r = d.AsSpan(FrameFormat.DatagramHeaderSize);
        r[0] = FrameFormat.FragmentRecord;
        BinaryPrimitives.WriteUInt64LittleEndian(r[1..], id);
        BinaryPrimitives.WriteUInt32LittleEndian(r[9..], index);
        BinaryPrimitives.WriteUInt32LittleEndian(r[13..], count);
        BinaryPrimitives.WriteUInt32LittleEndian(r[17..], total);
        BinaryPrimitives.WriteUInt16LittleEndian(r[21..], (ushort)bytes.Length);
        bytes.CopyTo(r[FrameFormat.FragmentRecordHeaderSize..]);
        return d;
    }
}

/// <summary>Copies every packet it is given, recording the source.</summary>
internal sealed class CollectingVisitor : IPacketVisitor
{
    public List<(ulong Source, byte[] Packet)> Packets { get; } = [];

    public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => Packets.Add((source, packet.ToArray()));

    public void OnReassembledPacket(ulong source, byte[] packet) => Packets.Add((source, packet));
}
