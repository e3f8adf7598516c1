using System.Buffers.Binary;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using Isis.Transport;

namespace Isis.Tests.Transport;

/// <summary>Loopback-only helpers: every socket in these tests lives on 127.0.0.1.</summary>
internal static class TransportTestKit
{
    public static readonly TimeSpan Deadline = TimeSpan.FromSeconds(10);

    public static IPEndPoint AnyLoopbackPort() => new(IPAddress.Loopback, 0);

    /// <summary>Polls <paramref name="condition"/> until it holds or the deadline passes; returns the last result.</summary>
    public static bool WaitUntil(Func<bool> condition, TimeSpan? deadline = null)
    {
        var watch = Stopwatch.StartNew();
        TimeSpan limit = deadline ?? Deadline;
        while (!condition())
        {
            if (watch.Elapsed > limit) return condition();
            Thread.Sleep(1);
        }
        return true;
    }

    /// <summary>A packet carrying its sequence number first, then filler derived from it.</summary>
    public static byte[] SequencedPacket(int sequence, int length)
    {
        var p = new byte[Math.Max(4, length)];
        BinaryPrimitives.WriteInt32LittleEndian(p, sequence);
        for (int i = 4; i < p.Length; i++) p[i] = (byte)(sequence * 31 + i);
        return p;
    }

    public static int SequenceOf(ReadOnlyMemory<byte> packet) => BinaryPrimitives.ReadInt32LittleEndian(packet.Span);
}

/// <summary>Collects what a transport's receive thread hands over; the memory is kept as given.</summary>
internal sealed class PacketInbox
{
    private readonly ConcurrentQueue<(ulong Source, ReadOnlyMemory<byte> Packet)> _packets = new();

    public void OnPacket(ulong source, ReadOnlyMemory<byte> packet, ReceiveSlab? slab) => _packets.Enqueue((source, packet)); // kept, so never released

    public int Count => _packets.Count;

    public List<(ulong Source, ReadOnlyMemory<byte> Packet)> Snapshot() => [.. _packets];
}

/// <summary>A transport plus the inbox its callback fills.</summary>
internal sealed class Peer : IDisposable
{
    public Peer(UdpTransportOptions? options = null)
    {
        Transport = new UdpTransport(TransportTestKit.AnyLoopbackPort(), Inbox.OnPacket, options);
    }

    public PacketInbox Inbox { get; } = new();

    public UdpTransport Transport { get; }

    public ulong Endpoint => Transport.LocalEndpoint;

    public void Dispose() => Transport.Dispose();
}
