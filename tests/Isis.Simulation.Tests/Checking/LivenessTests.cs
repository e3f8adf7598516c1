using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

public sealed class LivenessTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3), S = N(4);

    [Fact]
    public void After_healing_all_live_members_share_a_final_view_of_exactly_them_and_deliver_its_messages()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        b.Crash(R).Heal().InstallAll(2, P, Q);
        b.Multicast(P, Q);
        b.Multicast(Q, P);
        b.JoinRequested(S).InstallAll(3, P, Q, S);
        b.Multicast(S, P, Q);
        b.End().AssertPasses();
    }

    [Fact]
    public void Without_a_heal_nothing_is_expected_to_converge()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        b.Install(P, 2, P, Q).Install(Q, 2, P, Q).JoinRequested(S).End().AssertPasses();
    }

    [Fact]
    public void A_live_member_stuck_in_an_old_view_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R).Heal();
        b.Install(P, 2, P, Q, R).Install(Q, 2, P, Q, R);   // R never installs v2
        b.End();
        b.AssertViolates(nameof(HistoryChecker.Liveness));
        Assert.Contains(b.Check().Violations, v => v.Description.Contains($"{R} is alive", StringComparison.Ordinal)
            && v.Description.Contains("stuck in view v1", StringComparison.Ordinal));
    }

    [Fact]
    public void A_final_view_still_listing_a_crashed_process_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R).Crash(R).Heal().End();
        b.AssertViolates(nameof(HistoryChecker.Liveness));
        Assert.Contains(b.Check().Violations, v => v.Description.Contains($"still lists {R}, which crashed", StringComparison.Ordinal));
    }

    [Fact]
    public void A_live_member_missing_from_the_final_view_is_caught()
    {
        // R was dropped from the view although it is alive and never left.
        var b = new HistoryBuilder().InstallAll(1, P, Q, R).Heal();
        b.Install(P, 2, P, Q).Install(Q, 2, P, Q).End();
        b.AssertViolates(nameof(HistoryChecker.Liveness));
    }

    [Fact]
    public void A_message_of_the_final_view_not_delivered_by_every_live_member_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q).Heal();
        b.Send(P);
        b.End();
        b.AssertViolates(nameof(HistoryChecker.Liveness));
    }

    [Fact]
    public void A_live_process_whose_join_request_never_installed_a_view_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q).Heal().JoinRequested(S).End();
        b.AssertViolates(nameof(HistoryChecker.Liveness));
    }

    [Fact]
    public void Members_that_left_or_crashed_are_not_expected_to_converge()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R, S).Heal();
        b.Leave(R).Crash(S).InstallAll(2, P, Q).End().AssertPasses();
    }
}
