using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

/// <summary>The checker's Collections property on hand-built histories: what it accepts and what it catches.</summary>
public sealed class CollectionsPropertyTests
{
    private static readonly NodeId P = N(1), Q = N(2), R = N(3);
    private const long Lineage = 7;

    private long _time = 1_000;

    private static MessageId U(NodeId issuer, long seq) => new(issuer, G, 1, seq);

    /// <summary>The next time step of the hand-written events (after the builder's own).</summary>
    private long T() => _time += 10;

    /// <summary>P, Q and R in view 1 of one lineage, founded by P and loaded by the others.</summary>
    private HistoryBuilder ThreeMembers()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        b.History.RecordCollectionFounded(T(), P, G, Lineage);
        b.History.RecordCollectionLoaded(T(), Q, G, Lineage, 0, 0);
        b.History.RecordCollectionLoaded(T(), R, G, Lineage, 0, 0);
        return b;
    }

    private void Apply(HistoryBuilder b, NodeId at, int view, long position, MessageId update, ulong chain) =>
        b.History.RecordCollectionApplied(T(), at, G, view, Lineage, position, update, chain, repaired: false);

    private void Final(HistoryBuilder b, NodeId at, long length, ulong chain, int pending = 0) =>
        b.History.RecordCollectionFinal(T(), at, G, 1, Lineage, length, chain, pending);

    private HistoryBuilder End(HistoryBuilder b)
    {
        b.History.RecordEnd(T());
        return b;
    }

    [Fact]
    public void Members_that_hold_one_sequence_and_end_equal_pass()
    {
        HistoryBuilder b = ThreeMembers();
        b.History.RecordCollectionIssued(T(), P, G, 1, U(P, 1));
        b.History.RecordCollectionIssued(T(), Q, G, 1, U(Q, 1));
        foreach (NodeId m in new[] { P, Q, R })
        {
            Apply(b, m, 1, 0, U(P, 1), 11);
            Apply(b, m, 1, 1, U(Q, 1), 12);
        }
        foreach (NodeId m in new[] { P, Q, R }) Final(b, m, 2, 12);
        End(b).AssertPasses();
    }

    [Fact]
    public void Two_members_that_hold_different_updates_at_one_position_are_caught()
    {
        HistoryBuilder b = ThreeMembers();
        Apply(b, P, 1, 0, U(P, 1), 11);
        Apply(b, Q, 1, 0, U(Q, 1), 21);
        foreach (NodeId m in new[] { P, Q, R }) Final(b, m, 0, 0);
        End(b).AssertViolates(nameof(HistoryChecker.Collections));
    }

    [Fact]
    public void What_a_member_that_failed_in_the_view_applied_does_not_bind_the_survivors()
    {
        // The sequencer delivered its own list first and crashed before anyone else got it; the
        // survivors merged otherwise at the view change. Virtual synchrony allows that.
        HistoryBuilder b = ThreeMembers();
        Apply(b, P, 1, 0, U(P, 1), 11);
        b.History.RecordCrash(T(), P);
        b.History.RecordViewInstall(T(), Q, G, 2, [Q, R]);
        b.History.RecordViewInstall(T(), R, G, 2, [Q, R]);
        Apply(b, Q, 1, 0, U(Q, 1), 21);
        Apply(b, R, 1, 0, U(Q, 1), 21);
        Final(b, Q, 1, 21);
        Final(b, R, 1, 21);
        End(b).AssertPasses();
    }

    [Fact]
    public void Replicas_that_end_apart_are_caught()
    {
        HistoryBuilder b = ThreeMembers();
        foreach (NodeId m in new[] { P, Q }) Apply(b, m, 1, 0, U(P, 1), 11);
        foreach (NodeId m in new[] { P, Q }) Final(b, m, 1, 11);
        Final(b, R, 0, 0);
        End(b).AssertViolates(nameof(HistoryChecker.Collections));
    }

    [Fact]
    public void An_update_of_a_surviving_issuer_missing_from_the_final_history_is_caught()
    {
        HistoryBuilder b = ThreeMembers();
        b.History.RecordCollectionIssued(T(), Q, G, 1, U(Q, 1));
        foreach (NodeId m in new[] { P, Q, R }) Final(b, m, 0, 0);
        End(b).AssertViolates(nameof(HistoryChecker.Collections));
    }

    [Fact]
    public void A_loaded_checkpoint_that_ends_with_another_chain_is_caught()
    {
        HistoryBuilder b = ThreeMembers();
        foreach (NodeId m in new[] { P, Q, R }) Apply(b, m, 1, 0, U(P, 1), 11);
        NodeId s = N(4);
        foreach (NodeId m in new[] { P, Q, R }) b.History.RecordViewInstall(T(), m, G, 2, [P, Q, R, s]); // they came through view 1
        b.History.RecordCollectionLoaded(T(), s, G, Lineage, 1, 99);
        End(b).AssertViolates(nameof(HistoryChecker.Collections));
    }

    [Fact]
    public void An_issuer_whose_updates_stand_out_of_order_is_caught()
    {
        HistoryBuilder b = ThreeMembers();
        foreach (NodeId m in new[] { P, Q, R })
        {
            Apply(b, m, 1, 0, U(P, 2), 11);
            Apply(b, m, 1, 1, U(P, 1), 12);
        }
        foreach (NodeId m in new[] { P, Q, R }) Final(b, m, 2, 12);
        End(b).AssertViolates(nameof(HistoryChecker.Collections));
    }
}
