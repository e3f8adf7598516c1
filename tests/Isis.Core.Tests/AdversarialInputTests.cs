using Isis.Core.Groups;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

/// <summary>
/// Well-formed packets (right checksum, sender endpoint matching the source, a real member's
/// identity) whose contents lie. The checksum guards against corruption, not forgery, so these
/// come from a buggy peer or a spoofed datagram; DESIGN.md section 3 still asks for no crash and no hang.
/// </summary>
public class AdversarialInputTests
{
    private static PacketWriter From(TestCluster c, int sender, PacketKind kind, int view, long number) =>
        new PacketWriter().Begin(new PacketHeader(kind, c.Id(sender), TestCluster.G, view, number));

    [Fact]
    public void NakForARangeEndingAtLongMaxValueIsAnsweredAndReturns()
    {
        var c = new TestCluster(2);
        c.FormGroup(2);
        int view = c.CurrentView(0)!.Id;
        c.Send(0, "m1");

        c.Inject(0, c.Id(1).Endpoint, From(c, 1, PacketKind.Nak, view, 0).I32(0).I64(long.MaxValue - 511).I64(long.MaxValue).Finish());

        c.RunFor(20_000);
        Assert.Equal(["0:1:m1"], c.Delivered(1));
    }

    [Fact]
    public void NakForAHugeRangeIsCappedAtMaxNakRange()
    {
        var c = new TestCluster(2);
        c.FormGroup(2);
        int view = c.CurrentView(0)!.Id;
        for (int s = 1; s <= 3; s++) c.Send(0, $"m{s}");
        c.RunFor(20_000);
        int inFlight = c.InFlight;

        c.Inject(0, c.Id(1).Endpoint, From(c, 1, PacketKind.Nak, view, 0).I32(0).I64(1).I64(long.MaxValue - 1).Finish());
        c.Inject(0, c.Id(1).Endpoint, From(c, 1, PacketKind.Nak, view, 0).I32(0).I64(long.MaxValue - 100).I64(long.MaxValue - 1).Finish());

        // Stable messages were garbage-collected: nothing to resend, and above all no hang.
        Assert.Equal(inFlight, c.InFlight);
    }

    [Fact]
    public void ForgedWedgeWithAHighAttemptBlocksEveryLaterFlush()
    {
        var c = new TestCluster(3);
        c.FormGroup(2);
        int view = c.CurrentView(0)!.Id;

        c.Inject(0, c.Id(1).Endpoint, From(c, 1, PacketKind.Wedge, view, 1_000_000).Finish());
        c.Join(2);

        c.RunUntil(() => Enumerable.Range(0, 3).All(i => c.CurrentView(i)?.Members.Length == 3), limit: 3_000_000);
    }

    [Fact]
    public void LyingFlushReportIsDroppedNotFatal()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        int view = c.CurrentView(0)!.Id;
        c.DropWhere(e => e.Kind == PacketKind.FlushReport && e.From == c.Id(1).Endpoint);
        c.Stop(2);
        c.RunUntil(() => c[0].FindGroup(TestCluster.G)!.Coordinator != null);
        FlushCoordinator coordinator = c[0].FindGroup(TestCluster.G)!.Coordinator!;

        PacketWriter w = From(c, 1, PacketKind.FlushReport, view, coordinator.Attempt).Longs([0, 0, 1000]);
        HeldMessage.WriteList(w, []);
        c.Inject(0, c.Id(1).Endpoint, w.Finish());

        c.ClearDrops();
        c.RunUntil(() => c.CurrentView(0)!.Members.Length == 2 && c.CurrentView(1)!.Members.Length == 2);
    }
}
