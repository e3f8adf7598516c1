using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

public class ViewChangeUnderTrafficTests
{
    /// <summary>Every process in the current view sends one message per millisecond for <paramref name="micros"/>.</summary>
    private static void Traffic(TestCluster c, long micros, ref int counter)
    {
        for (long t = 0; t < micros; t += 1_000)
        {
            for (int i = 0; i < c.Nodes.Count; i++)
            {
                if (!c.IsStopped(i) && !c[i].IsShutDown && c[i].FindGroup(TestCluster.G)?.View != null) c.Send(i, $"x{counter++}");
            }
            c.RunFor(1_000);
        }
    }

    [Fact]
    public void JoinLeaveAndCrashDuringTrafficKeepVirtualSynchrony()
    {
        var c = new TestCluster(5);
        c.FormGroup(3);
        int counter = 0;
        // Lose every fifth Data packet once: repairs and flushes both have work to do.
        int seen = 0;
        c.DropWhere(e => e.Kind == PacketKind.Data && ++seen % 5 == 0);

        Traffic(c, 30_000, ref counter);
        c.Join(3);
        Traffic(c, 30_000, ref counter);
        c.Leave(1);
        Traffic(c, 30_000, ref counter);
        c.Stop(0);                      // the coordinator of the next flush
        Traffic(c, 30_000, ref counter);
        c.Join(4);
        Traffic(c, 1_000_000, ref counter);
        c.ClearDrops();
        c.RunFor(200_000);

        Assert.Equal([c.Id(2), c.Id(3), c.Id(4)], c.CurrentView(2)!.Members);
        Assert.Equal(c.CurrentView(2)!.Id, c.CurrentView(3)!.Id);
        Assert.Equal(c.CurrentView(2)!.Id, c.CurrentView(4)!.Id);
        Assert.True(c[2].Counters.NaksSent > 0);
        ClusterChecks.AssertVirtualSynchronyAndFifo(c);
    }

    [Fact]
    public void CheckerCatchesTheSkipFlushExchangeMutation()
    {
        var c = new TestCluster(3, new ProtocolOptions { Mutations = ProtocolMutations.SkipFlushExchange });
        c.FormGroup(3);
        c.DropWhere(e => e.Kind == PacketKind.Data && e.To == c.Id(1).Endpoint);
        c.Send(2, "lost");
        c.DeliverAll();
        c.Stop(2);
        c.RunUntil(() => c.CurrentView(0)!.Members.Length == 2 && c.CurrentView(1)!.Members.Length == 2);
        Assert.ThrowsAny<Xunit.Sdk.XunitException>(() => ClusterChecks.AssertVirtualSynchronyAndFifo(c));
    }

    [Fact]
    public void MutationDeliverOutOfOrderBreaksFifo()
    {
        var c = new TestCluster(2, new ProtocolOptions { Mutations = ProtocolMutations.DeliverOutOfOrder });
        c.FormGroup(2);
        c.DropFirst(e => e.Kind == PacketKind.Data && e.Header.Number == 1);
        c.Send(0, "m1");
        c.Send(0, "m2");
        c.RunFor(50_000);
        Assert.Equal("0:2:m2", c.Delivered(1)[0]); // m2 before m1 (the mutated receiver does not even NAK the gap)
        Assert.ThrowsAny<Xunit.Sdk.XunitException>(() => ClusterChecks.AssertVirtualSynchronyAndFifo(c));
    }
}
