using Isis.Transport;

namespace Isis.Tests.Transport;

public sealed class ReceiveSlabTests
{
    private readonly List<(ReadOnlyMemory<byte> Packet, ReceiveSlab? Slab)> _received = [];

    private ReceivedPacketHandoff NewHandoff() => new((_, packet, slab) => _received.Add((packet, slab)));

    [Fact]
    public void Small_packets_share_a_slab_that_is_reused_only_after_every_packet_and_the_filler_released_it()
    {
        var handoff = NewHandoff();
        var packet = new byte[40_000];
        packet.AsSpan().Fill(1);
        handoff.OnPacket(1, packet.AsSpan(0, 3_000));
        handoff.OnPacket(1, packet.AsSpan(0, 3_000));
        ReceiveSlab first = _received[0].Slab!;
        Assert.Same(first, _received[1].Slab);

        // Fill past the slab: the handoff moves on (releasing its own reference), but the first
        // slab's packets are still held, so the next slab is a different one.
        for (int i = 0; i < 25; i++) handoff.OnPacket(1, packet.AsSpan(0, 3_000));
        ReceiveSlab second = _received[^1].Slab!;
        Assert.NotSame(first, second);
        Assert.All(_received.Where(r => r.Slab == first), r => Assert.True(r.Packet.Span.IndexOfAnyExcept((byte)1) < 0));

        // Release the first slab's packets: it goes back to the pool and is the next one taken.
        foreach (var r in _received.Where(r => r.Slab == first).ToList()) r.Slab!.Release();
        for (int i = 0; i < 25; i++) handoff.OnPacket(1, packet.AsSpan(0, 3_000));
        Assert.Same(first, _received[^1].Slab);
    }

    [Fact]
    public void Large_and_empty_packets_come_without_a_slab()
    {
        var handoff = NewHandoff();
        handoff.OnPacket(1, new byte[8_000]);
        handoff.OnPacket(1, ReadOnlySpan<byte>.Empty);
        Assert.All(_received, r => Assert.Null(r.Slab));
    }

    [Fact]
    public void Releasing_more_often_than_referenced_is_a_loud_bug()
    {
        var handoff = NewHandoff();
        handoff.OnPacket(1, new byte[10]);
        ReceiveSlab slab = _received[0].Slab!;
        slab.Release(); // the packet's reference; the filler still holds one
        slab.Release(); // the filler's: now free
        Assert.Throws<InvalidOperationException>(slab.Release);
    }
}
