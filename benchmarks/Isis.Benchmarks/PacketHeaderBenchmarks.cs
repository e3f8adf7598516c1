using BenchmarkDotNet.Attributes;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Benchmarks;

/// <summary>
/// The 44-byte packet header: writing it, building a whole Data packet with CRC-32C (what a Send
/// does once per message), and validating/parsing one on receive (CRC over the whole packet).
/// </summary>
public class PacketHeaderBenchmarks
{
    private readonly PacketHeader _header = new(PacketKind.Data, new NodeId(0x7F00_0001_1F90, 42), GroupId.FromName("inventory"), 3, 1234);
    private readonly byte[] _headerBuffer = new byte[PacketHeader.Size];
    private readonly PacketWriter _writer = new();
    private readonly byte[] _payload = new byte[100];
    private byte[] _packet = [];

    [GlobalSetup]
    public void Setup()
    {
        new Random(1).NextBytes(_payload);
        _packet = DataPacket();
    }

    private byte[] DataPacket() => _writer.Begin(_header).I32(0).Tail(_payload).Finish();

    [Benchmark]
    public int Header_Write()
    {
        _header.WriteTo(_headerBuffer, PacketHeader.Size);
        return _headerBuffer[3];
    }

    /// <summary>Header + origin rank + 100 B payload + CRC-32C, copied out to a new array (GroupMember.DataPacket).</summary>
    [Benchmark]
    public byte[] DataPacket_Build100B() => DataPacket();

    /// <summary>Magic, version, length, CRC-32C over 148 bytes, kind, fields: ProcessNode's first step per packet.</summary>
    [Benchmark]
    public long Header_Decode_DataPacket100B()
    {
        PacketDecoder.TryReadHeader(_packet, out PacketHeader h);
        return h.Number;
    }
}
