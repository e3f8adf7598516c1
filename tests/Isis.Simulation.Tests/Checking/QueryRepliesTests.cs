using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

public sealed class QueryRepliesTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void Replies_from_every_member_of_the_delivery_view_pass()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R).QueryIssued(P).QueryCompleted(P, 1, P, Q, R);
        b.End().AssertPasses();
    }

    [Fact]
    public void A_P2PQuery_is_owed_replies_by_the_members_it_was_addressed_to_only()
    {
        new HistoryBuilder().InstallAll(1, P, Q, R).QueryIssued(P).P2PQueryCompleted(P, 1, [Q], Q).End().AssertPasses();
        new HistoryBuilder().InstallAll(1, P, Q, R).QueryIssued(P).P2PQueryCompleted(P, 1, [Q, R], Q)
            .End().AssertViolates(nameof(HistoryChecker.QueryReplies));
        new HistoryBuilder().InstallAll(1, P, Q, R).QueryIssued(P).P2PQueryCompleted(P, 1, [Q], Q, R)
            .End().AssertViolates(nameof(HistoryChecker.QueryReplies));
    }

    [Fact]
    public void A_member_that_failed_is_not_waited_for()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R).QueryIssued(P).Crash(R);
        b.Install(P, 2, P, Q).Install(Q, 2, P, Q).QueryCompleted(P, 1, P, Q).End().AssertPasses();
    }

    [Fact]
    public void Completing_without_a_member_still_in_the_view_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R).QueryIssued(P).QueryCompleted(P, 1, P, Q);
        b.End().AssertViolates(nameof(HistoryChecker.QueryReplies));
    }

    [Fact]
    public void A_reply_from_outside_the_delivery_view_or_twice_from_one_member_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q).QueryIssued(P).QueryCompleted(P, 1, P, Q, R);
        b.End().AssertViolates(nameof(HistoryChecker.QueryReplies));
        var c = new HistoryBuilder().InstallAll(1, P, Q).QueryIssued(P).QueryCompleted(P, 1, P, Q, Q);
        c.End().AssertViolates(nameof(HistoryChecker.QueryReplies));
    }

    [Fact]
    public void A_query_that_never_completes_for_a_member_that_stays_is_caught_after_a_heal()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q).QueryIssued(P).Heal();
        b.End().AssertViolates(nameof(HistoryChecker.QueryReplies));
    }
}

public sealed class NoDeliveryAfterExpulsionTests
{
    private static readonly NodeId P = N(1), Q = N(2);

    [Fact]
    public void An_expelled_incarnation_that_still_delivers_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Send(Q);
        b.Expel(P).Deliver(P, m).End();
        b.AssertViolates(nameof(HistoryChecker.NoDeliveryAfterExpulsion));
    }

    [Fact]
    public void Deliveries_before_the_expulsion_are_fine()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Send(Q);
        b.Deliver(P, m).Expel(P).Crash(P).Install(Q, 2, Q).End().AssertPasses();
    }
}
