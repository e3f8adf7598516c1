using BenchmarkDotNet.Attributes;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Security;
using Isis.Core.Wire;

namespace Isis.Benchmarks;

/// <summary>
/// What a group key costs per packet (issue 14): sealing a Data packet of <see cref="PayloadBytes"/>
/// bytes of payload with AES-256-GCM and opening it again, against the CRC-32C every packet pays anyway.
/// </summary>
public class SealBenchmarks
{
    private PacketSealer _sender = null!;
    private PacketSealer _receiver = null!;
    private byte[] _packet = [];
    private readonly Outbox _outbox = new(new Isis.Core.Common.BufferPool());
    private PacketHeader _header;

    /// <summary>Bytes of the message the packet carries.</summary>
    [Params(100, 1024)]
    public int PayloadBytes { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        var from = new NodeId(1, 1);
        byte[] key = new byte[32];
        new Random(1).NextBytes(key);
        GroupId g = GroupId.FromName("bench");
        _sender = new PacketSealer(from, 7, null);
        _sender.SetGroupKey(g, key);
        _receiver = new PacketSealer(new NodeId(2, 1), 9, null);
        _receiver.SetGroupKey(g, key);
        _packet = new PacketWriter().Begin(new PacketHeader(PacketKind.Data, from, g, 1, 1)).I32(0).U8(1).I32(0).Tail(new byte[PayloadBytes]).Finish();
        PacketDecoder.TryReadHeader(_packet, out _header);
    }

    /// <summary>The checksum every packet gets, keyed or not.</summary>
    [Benchmark(Baseline = true)]
    public uint Crc() => Crc32C.Compute(_packet);

    [Benchmark]
    public int Seal()
    {
        int n = _sender.Seal(_packet, _outbox).Length;
        _outbox.Clear();
        return n;
    }

    /// <summary>Seal, then open at the receiver (each packet a new counter, as on the wire).</summary>
    [Benchmark]
    public int SealAndOpen()
    {
        ReadOnlyMemory<byte> onWire = _sender.Seal(_packet, _outbox);
        int verdict = (int)_receiver.Open(_header, onWire.Span, out ReadOnlySpan<byte> plain) + plain.Length;
        _outbox.Clear();
        return verdict;
    }
}
