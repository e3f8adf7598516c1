using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

/// <summary>The checker's SubsetDelivery property on hand-built histories.</summary>
public sealed class SubsetDeliveryTests
{
    private static readonly Isis.Core.Identity.NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void A_subset_message_delivered_by_its_destinations_only_passes()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId toQ = b.SendSubset(P, Q);
        MessageId toAll = b.Send(P);
        b.DeliverSubset(Q, toQ).Deliver(Q, toAll).Deliver(R, toAll);
        b.InstallAll(2, P, Q, R).End().AssertPasses();
    }

    [Fact]
    public void A_member_it_was_not_addressed_to_delivering_it_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId toQ = b.SendSubset(P, Q);
        b.DeliverSubset(Q, toQ).DeliverSubset(R, toQ);
        b.End().AssertViolates(nameof(HistoryChecker.SubsetDelivery));
    }

    [Fact]
    public void A_surviving_destination_that_missed_what_another_delivered_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId toQR = b.SendSubset(P, Q, R);
        b.DeliverSubset(Q, toQR);
        b.Crash(P).InstallAll(2, Q, R).End().AssertViolates(nameof(HistoryChecker.SubsetDelivery));
    }

    [Fact]
    public void A_destination_skipping_one_of_its_messages_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId first = b.SendSubset(P, Q), second = b.SendSubset(P, Q);
        _ = first;
        b.DeliverSubset(Q, second);
        b.End().AssertViolates(nameof(HistoryChecker.SubsetDelivery), nameof(HistoryChecker.Liveness));
    }
}
