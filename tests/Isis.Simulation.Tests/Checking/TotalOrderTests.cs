using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

public sealed class TotalOrderTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void Ordered_messages_delivered_in_one_order_everywhere_pass()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId a = b.SendOrdered(P), c = b.SendOrdered(Q);
        foreach (NodeId x in new[] { P, Q, R }) b.DeliverOrdered(x, c).DeliverOrdered(x, a);
        b.End().AssertPasses();
    }

    [Fact]
    public void Two_members_delivering_ordered_messages_in_different_orders_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId a = b.SendOrdered(P), c = b.SendOrdered(Q);
        b.DeliverOrdered(P, a).DeliverOrdered(P, c);
        b.DeliverOrdered(Q, c).DeliverOrdered(Q, a);
        b.End().AssertViolates(nameof(HistoryChecker.TotalOrder));
    }

    [Fact]
    public void A_later_Send_may_overtake_an_earlier_OrderedSend_of_the_same_sender()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId ordered = b.SendOrdered(P);
        MessageId plain = b.Send(P);               // delivered at once at the sender
        b.Deliver(Q, plain).DeliverOrdered(P, ordered).DeliverOrdered(Q, ordered);
        b.End().AssertPasses();
    }

    [Fact]
    public void Ordered_messages_of_one_sender_out_of_its_order_are_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId first = b.SendOrdered(P), second = b.SendOrdered(P);
        b.DeliverOrdered(P, first).DeliverOrdered(P, second);
        b.DeliverOrdered(Q, second).DeliverOrdered(Q, first);
        b.End().AssertViolates(nameof(HistoryChecker.FifoPerSender), nameof(HistoryChecker.TotalOrder));
    }
}
