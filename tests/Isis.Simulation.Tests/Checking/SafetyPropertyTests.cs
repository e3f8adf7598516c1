using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

public sealed class ViewAgreementTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void Every_member_installs_the_same_views_with_the_same_members()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.Multicast(P, Q);
        b.JoinRequested(R).InstallAll(2, P, Q, R);
        b.Multicast(R, P, Q);
        b.Leave(Q).InstallAll(3, P, R);
        b.End().AssertPasses();
    }

    [Fact]
    public void Two_installs_of_one_view_id_with_different_members_are_caught()
    {
        new HistoryBuilder()
            .InstallAll(1, P, Q)
            .Install(P, 2, P, Q, R)
            .Install(Q, 2, P, Q)
            .End()
            .AssertViolates(nameof(HistoryChecker.ViewAgreement));
    }

    [Fact]
    public void Same_members_in_a_different_order_are_a_different_view()
    {
        // Rank (oldest first) decides the coordinator and SafeSend acceptors, so order matters.
        new HistoryBuilder()
            .Install(P, 1, P, Q)
            .Install(Q, 1, Q, P)
            .End()
            .AssertViolates(nameof(HistoryChecker.ViewAgreement));
    }

    [Fact]
    public void A_process_installing_a_view_id_no_higher_than_its_last_is_caught()
    {
        new HistoryBuilder()
            .InstallAll(2, P, Q)
            .Install(P, 2, P, Q)
            .End()
            .AssertViolates(nameof(HistoryChecker.ViewAgreement));
    }

    [Fact]
    public void A_process_installing_a_view_it_is_not_in_is_caught()
    {
        new HistoryBuilder()
            .Install(P, 1, P, Q)
            .Install(Q, 1, P, Q)
            .Install(R, 1, P, Q)
            .End()
            .AssertViolates(nameof(HistoryChecker.ViewAgreement));
    }
}

public sealed class VirtualSynchronyTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void Processes_moving_from_v_to_v_plus_1_together_delivered_the_same_messages_in_v()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId m1 = b.Send(P);
        MessageId m2 = b.Multicast(Q, P, R);
        b.Deliver(Q, m1).Deliver(R, m1);   // the flush would have done this if the network had not
        b.InstallAll(2, P, Q, R).End().AssertPasses();
        _ = m2;
    }

    [Fact]
    public void A_flush_that_skipped_the_unstable_message_exchange_is_caught()
    {
        // P delivered m1 (its own) in v1, Q never got it, yet both installed v2.
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.Send(P);
        b.InstallAll(2, P, Q).End();
        b.AssertViolates(nameof(HistoryChecker.VirtualSynchrony));
        Assert.Contains(b.Check().Violations, v => v.Description.Contains("seq 1", StringComparison.Ordinal)
            && v.Description.Contains("v1 to v2", StringComparison.Ordinal));
    }

    [Fact]
    public void A_message_delivered_only_by_a_member_that_crashed_may_vanish()
    {
        // Send is not durable: P crashed before anyone else got m1, so the survivors agree without it.
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        b.Send(P);
        b.Crash(P).InstallAll(2, Q, R).End().AssertPasses();
    }

    [Fact]
    public void The_set_comparison_is_exact_not_just_by_count()
    {
        // Same number of messages, different ones.
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId a = b.Send(R);
        MessageId c = b.Send(R);
        b.Deliver(P, a).Crash(R);
        b.Deliver(Q, a).Deliver(Q, c);
        b.Install(P, 2, P, Q).Install(Q, 2, P, Q).End();
        b.AssertViolates(nameof(HistoryChecker.VirtualSynchrony));
    }
}

public sealed class FifoPerSenderTests
{
    private static readonly NodeId P = N(1), Q = N(2);

    [Fact]
    public void Each_senders_messages_are_delivered_in_order_and_a_lost_suffix_is_allowed()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m1 = b.Send(P);
        b.Send(P);                      // m2 never reaches Q: P crashes, so the suffix may be lost
        b.Deliver(Q, m1).Crash(P).Install(Q, 2, Q).End().AssertPasses();
    }

    [Fact]
    public void Out_of_fifo_order_delivery_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m1 = b.Send(P);
        MessageId m2 = b.Send(P);
        b.Deliver(Q, m2).Deliver(Q, m1).End();
        b.AssertViolates(nameof(HistoryChecker.FifoPerSender));
    }

    [Fact]
    public void A_gap_in_a_senders_sequence_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m1 = b.Send(P);
        b.Send(P);
        MessageId m3 = b.Send(P);
        b.Deliver(Q, m1).Deliver(Q, m3).End();
        b.AssertViolates(nameof(HistoryChecker.FifoPerSender));
    }

    [Fact]
    public void Sequence_numbers_restart_at_1_in_each_view()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.Multicast(P, Q);
        b.Multicast(P, Q);
        b.InstallAll(2, P, Q);
        MessageId m = b.Multicast(P, Q);
        Assert.Equal(1, m.Seq);
        b.End().AssertPasses();
    }
}

public sealed class NoDuplicatesTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void Every_member_delivers_each_message_once()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        b.Multicast(P, Q, R);
        b.Multicast(Q, R, P);
        b.End().AssertPasses();
    }

    [Fact]
    public void A_process_delivering_a_message_twice_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Multicast(P, Q);
        b.Deliver(Q, m).End();
        // A repeat is also a FIFO violation (seq 1 after seq 1); the duplicate must be named as such.
        b.AssertViolates(nameof(HistoryChecker.NoDuplicates), nameof(HistoryChecker.FifoPerSender));
    }
}

public sealed class NoCreationTests
{
    private static readonly NodeId P = N(1), Q = N(2);

    [Fact]
    public void Every_delivered_message_was_sent_with_the_same_payload()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.Multicast(Q, P);
        b.End().AssertPasses();
    }

    [Fact]
    public void Delivery_of_a_never_sent_message_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.Deliver(Q, new MessageId(P, G, 1, 1)).End();
        b.AssertViolates(nameof(HistoryChecker.NoCreation));
    }

    [Fact]
    public void Delivery_with_a_different_payload_hash_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Send(P);
        b.Deliver(Q, m, hash: 42).End();
        b.AssertViolates(nameof(HistoryChecker.NoCreation));
    }

    [Fact]
    public void Delivery_before_the_send_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        var m = new MessageId(P, G, 1, 1);
        b.Deliver(Q, m);
        b.Send(P);
        b.End().AssertViolates(nameof(HistoryChecker.NoCreation));
    }
}

public sealed class DeliveredInSendingViewTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void A_message_is_delivered_in_the_view_it_was_sent_in()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.Multicast(P, Q);
        b.InstallAll(2, P, Q, R);
        b.Multicast(Q, P, R);
        b.End().AssertPasses();
    }

    [Fact]
    public void Delivery_of_an_old_views_message_after_installing_the_next_view_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Send(P);
        b.InstallAll(2, P, Q);
        b.Deliver(Q, m).End();
        // Q also delivered something P did not have in v1 -> nothing; but P had m in v1 and Q did not.
        b.AssertViolates(nameof(HistoryChecker.DeliveredInSendingView), nameof(HistoryChecker.VirtualSynchrony));
    }

    [Fact]
    public void Delivery_without_an_installed_view_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Send(P);
        b.Deliver(R, m).End();
        b.AssertViolates(nameof(HistoryChecker.DeliveredInSendingView));
    }

    [Fact]
    public void Delivery_after_leaving_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Send(P);
        b.Leave(Q).Deliver(Q, m).End();
        b.AssertViolates(nameof(HistoryChecker.DeliveredInSendingView));
    }
}

public sealed class SenderDeliversOwnTests
{
    private static readonly NodeId P = N(1), Q = N(2);

    [Fact]
    public void The_sender_delivers_its_own_message_at_once()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId m = b.Send(P);
        // Other processes' events may interleave; only P's own next event matters.
        b.Deliver(Q, m).End().AssertPasses();
    }

    [Fact]
    public void An_expel_recorded_between_a_send_and_its_local_delivery_is_not_the_senders_own_event()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        var m = new MessageId(P, G, 1, 1);
        b.History.RecordSend(100, m, HashOf(m));
        b.History.RecordExpel(100, P);
        b.History.RecordDeliver(100, P, 1, m, HashOf(m));
        b.History.RecordCrash(110, P);
        b.History.RecordViewInstall(120, Q, G, 2, [Q]);
        b.History.RecordEnd(130);
        b.AssertPasses();
    }

    [Fact]
    public void A_send_never_delivered_by_its_sender_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        var m = new MessageId(P, G, 1, 1);
        b.History.RecordSend(100, m, HashOf(m));
        b.History.RecordDeliver(110, Q, 1, m, HashOf(m));
        b.History.RecordEnd(120);
        b.AssertViolates(nameof(HistoryChecker.SenderDeliversOwn));
    }

    [Fact]
    public void A_sender_doing_something_else_before_delivering_its_own_message_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        MessageId fromQ = b.Send(Q);
        var m = new MessageId(P, G, 1, 1);
        b.History.RecordSend(100, m, HashOf(m));
        b.History.RecordDeliver(110, P, 1, fromQ, HashOf(fromQ));
        b.History.RecordDeliver(120, P, 1, m, HashOf(m));
        b.History.RecordEnd(130);
        b.AssertViolates(nameof(HistoryChecker.SenderDeliversOwn));
    }
}

public sealed class FirewallAfterExpulsionTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void Messages_sent_before_the_expulsion_may_still_be_delivered_by_the_flush()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId before = b.Send(R);
        b.Expel(R);
        b.Deliver(P, before).Deliver(Q, before);     // sent before the Expel: the flush may deliver it
        b.InstallAll(2, P, Q).Crash(R).End().AssertPasses();
    }

    [Fact]
    public void An_expelled_incarnation_that_still_sends_is_caught_even_if_nobody_delivers_it()
    {
        // Its membership lease is shorter than the expulsion time, so it must have stopped sending.
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        b.Expel(R);
        b.Send(R);
        b.InstallAll(2, P, Q).Crash(R).End();
        b.AssertViolates(nameof(HistoryChecker.FirewallAfterExpulsion));
    }

    [Fact]
    public void Delivery_from_an_expelled_sender_after_expulsion_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        b.Expel(R);
        MessageId after = b.Send(R);
        b.Deliver(P, after).End();
        b.AssertViolates(nameof(HistoryChecker.FirewallAfterExpulsion));
        Assert.Contains(b.Check().Violations, v => v.Description.Contains(R.ToString(), StringComparison.Ordinal)
            && v.Description.Contains(P.ToString(), StringComparison.Ordinal));
    }
}

public sealed class WellFormedTests
{
    private static readonly NodeId P = N(1), Q = N(2);

    [Fact]
    public void Time_never_goes_back()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.History.RecordEnd(0);
        b.AssertViolates(nameof(HistoryChecker.WellFormed));
    }

    [Fact]
    public void A_crashed_incarnation_records_nothing_more()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q).Crash(P);
        b.Send(P);
        b.End().AssertViolates(nameof(HistoryChecker.WellFormed));
    }

    [Fact]
    public void The_membership_service_may_expel_an_incarnation_after_it_crashed()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        b.Multicast(P, Q);
        b.Crash(P).Expel(P).Install(Q, 2, Q).End().AssertPasses();
    }

    [Fact]
    public void Violations_are_capped_per_property_with_a_count_of_the_rest()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q);
        for (int i = 1; i <= 100; i++) b.Deliver(Q, new MessageId(P, G, 1, i));
        CheckResult r = HistoryChecker.Check(b.End().History, maxViolationsPerProperty: 5);
        Violation[] noCreation = r.Violations.Where(v => v.Property == nameof(HistoryChecker.NoCreation)).ToArray();
        Assert.Equal(6, noCreation.Length);
        Assert.Contains("95 more", noCreation[^1].Description, StringComparison.Ordinal);
    }
}

/// <summary>
/// The membership service's own history: one founding, configurations one replica apart, commits
/// held by a majority of the configuration in force, and one decision per log position (a
/// committed decision is never replaced).
/// </summary>
public sealed class MembershipServiceHistoryTests
{
    private static readonly NodeId A = N(101), B = N(102), C = N(103), D = N(104), E = N(105);

    /// <summary>A service founded by A that grows to A, B, C and moves C's replica to D, one step at a time.</summary>
    private static HistoryBuilder Reconfigured() => new HistoryBuilder()
        .Founded(A, A)
        .Decide(A, 1, 11, [A, B]).Commit(A, 1, [A, B], [A, B], 1)
        .Decide(B, 1, 11, [A, B])
        .Decide(A, 2, 12, [A, B, C]).Commit(A, 2, [A, C], [A, B, C], 2)
        .Decide(A, 3, 13).Commit(A, 3, [A, B], [A, B, C], 2)
        .Decide(A, 4, 14, [A, B]).Commit(A, 4, [A, B], [A, B], 4)
        .Decide(A, 5, 15, [A, B, D]).Commit(A, 5, [A, B, D], [A, B, D], 5)
        .Decide(D, 5, 15, [A, B, D]);

    [Fact]
    public void A_service_that_grows_and_moves_a_replica_one_step_at_a_time_passes()
    {
        Reconfigured().End().AssertPasses();
    }

    [Fact]
    public void A_second_founding_while_the_first_service_still_decides_is_two_services_and_is_caught()
    {
        // A service founded again (every process of the embedded service restarted) is a new era;
        // the old one must be gone by then: its replica deciding and committing after it is two
        // services at once.
        Reconfigured().Founded(E, E).Decide(A, 6, 16).Commit(A, 6, [A, B], [A, B, D], 5).End().AssertViolates("OneServiceAtATime");
        // Founded again after the old service stopped: two eras one after the other, which is allowed.
        Reconfigured().Founded(E, E).End().AssertPasses();
    }

    [Fact]
    public void A_configuration_that_swaps_a_replica_in_one_step_is_caught()
    {
        // [A, B, C] -> [A, B, D]: a majority of the old ({A, C}) and one of the new ({B, D}) share no replica.
        new HistoryBuilder()
            .Founded(A, A)
            .Decide(A, 1, 11, [A, B]).Decide(A, 2, 12, [A, B, C]).Decide(A, 3, 13, [A, B, D])
            .End().AssertViolates(nameof(HistoryChecker.ServiceQuorums));
    }

    [Fact]
    public void A_commit_held_by_a_minority_of_the_configuration_is_caught()
    {
        Reconfigured().Decide(A, 6, 16).Commit(A, 6, [A], [A, B, D], 5).End().AssertViolates(nameof(HistoryChecker.ServiceQuorums));
    }

    [Fact]
    public void A_committed_decision_replaced_after_a_reconfiguration_is_caught()
    {
        // Position 3 was committed (and applied by A) with one decision; a replica added later applies another there.
        Reconfigured().Decide(D, 3, 99).End().AssertViolates(nameof(HistoryChecker.PrimaryViewSequence));
    }
}
