using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

/// <summary>The checker's CausalOrder property on hand-built histories: what it must accept and what it must catch.</summary>
public sealed class CausalOrderTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);

    [Fact]
    public void A_chain_delivered_in_causal_order_everywhere_passes()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId question = b.SendCausal(P);
        b.DeliverCausal(Q, question);
        MessageId answer = b.SendCausal(Q);
        b.DeliverCausal(R, question).DeliverCausal(R, answer).DeliverCausal(P, answer);
        b.End().AssertPasses();
    }

    [Fact]
    public void An_answer_delivered_before_its_question_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId question = b.SendCausal(P);
        b.DeliverCausal(Q, question);
        MessageId answer = b.SendCausal(Q);
        b.DeliverCausal(P, answer);
        b.DeliverCausal(R, answer).DeliverCausal(R, question); // R: the answer first
        b.End().AssertViolates(nameof(HistoryChecker.CausalOrder));
    }

    [Fact]
    public void Concurrent_causal_messages_may_arrive_in_any_order()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId fromP = b.SendCausal(P), fromQ = b.SendCausal(Q);
        b.DeliverCausal(Q, fromP).DeliverCausal(P, fromQ);
        b.DeliverCausal(R, fromQ).DeliverCausal(R, fromP);
        b.End().AssertPasses();
    }

    [Fact]
    public void A_dependency_carried_through_a_third_member_is_checked_transitively()
    {
        // P -> Q -> R: R's message depends on P's through Q's, so P itself must deliver Q's before R's,
        // and Q must have P's first; here P delivers R's message before Q's.
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId first = b.SendCausal(P);
        b.DeliverCausal(Q, first);
        MessageId second = b.SendCausal(Q);
        b.DeliverCausal(R, first).DeliverCausal(R, second);
        MessageId third = b.SendCausal(R);
        b.DeliverCausal(Q, third);
        b.DeliverCausal(P, third).DeliverCausal(P, second);
        b.End().AssertViolates(nameof(HistoryChecker.CausalOrder));
    }

    [Fact]
    public void A_plain_Send_does_not_order_causal_messages()
    {
        // Q delivered P's Send before its CausalSend: causal order binds causal messages only.
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        MessageId plain = b.Send(P);
        b.Deliver(Q, plain);
        MessageId causal = b.SendCausal(Q);
        b.DeliverCausal(R, causal).Deliver(R, plain).DeliverCausal(P, causal);
        b.End().AssertPasses();
    }
}
