using Isis.Core.Node;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// The checker earns trust by failing: run deliberately broken variants of the protocol through
/// the same scenarios and require the checker to name the guarantee each one breaks.
/// </summary>
public sealed class BrokenProtocolTests
{
    private static List<SimulationRun> RunBroken(ProtocolMutations mutation, string family, int seeds) =>
        Enumerable.Range(0, seeds)
            .Select(seed => SimulationRun.Execute((ulong)seed, family, s => s with { Protocol = s.Protocol with { Mutations = mutation } }))
            .ToList();

    [Fact]
    public void A_flush_that_skips_the_unstable_message_exchange_breaks_virtual_synchrony()
    {
        var runs = RunBroken(ProtocolMutations.SkipFlushExchange, "crash", 20);
        Assert.Contains(runs, r => r.Result.Violates("VirtualSynchrony"));
    }

    [Fact]
    public void A_member_that_delivers_as_messages_arrive_breaks_fifo_order()
    {
        var runs = RunBroken(ProtocolMutations.DeliverOutOfOrder, "reordering", 5);
        Assert.All(runs, r => Assert.True(r.Result.Violates("FifoPerSender"), r.Summary));
    }

    [Fact]
    public void Members_that_deliver_ordered_messages_on_arrival_break_total_order()
    {
        var runs = RunBroken(ProtocolMutations.DeliverOrderedOnArrival, "reordering", 5);
        Assert.All(runs, r => Assert.True(r.Result.Violates("TotalOrder"), r.Summary));
    }

    [Fact]
    public void A_flush_that_returns_at_once_loses_flushed_messages_when_the_sender_crashes()
    {
        // Lossy three-member runs where a sender sometimes crashes right after its Flush returns:
        // if nobody else got its last messages yet, a Flush that did not wait loses them.
        var runs = Enumerable.Range(0, 40)
            .Select(seed => SimulationRun.Execute((ulong)seed, "crash", s => s with
            {
                Processes = 3,
                Protocol = s.Protocol with { Mutations = ProtocolMutations.FlushReturnsAtOnce },
                Faults = s.Faults with { LossRate = 0.3 },
                FlushChance = 0.1,
                CrashAfterFlushChance = 0.3,
            }))
            .ToList();
        Assert.Contains(runs, r => r.Result.Violates("FlushDurability"));
        // The same runs with the real Flush keep every flushed message.
        Assert.All(Enumerable.Range(0, 40).Select(seed => SimulationRun.Execute((ulong)seed, "crash", s => s with
        {
            Processes = 3,
            Faults = s.Faults with { LossRate = 0.3 },
            FlushChance = 0.1,
            CrashAfterFlushChance = 0.3,
        })), r => Assert.True(r.Passed, r.Report));
    }

    [Fact]
    public void A_query_that_stops_waiting_after_the_first_reply_is_caught()
    {
        var runs = RunBroken(ProtocolMutations.QueryCompletesOnFirstReply, "steady", 5);
        Assert.All(runs, r => Assert.True(r.Result.Violates("QueryReplies"), r.Summary));
    }

    [Fact]
    public void A_SafeSend_delivered_when_all_but_one_acceptor_hold_it_is_caught()
    {
        var runs = RunBroken(ProtocolMutations.SafeDeliversOneAcceptorShort, "lossy", 5);
        Assert.All(runs, r => Assert.True(r.Result.Violates("SafeThreshold"), r.Summary));
    }

    [Fact]
    public void A_membership_service_that_lets_a_minority_of_its_replicas_decide_is_caught()
    {
        // Partitions that split the replicas: with a quorum of one, each side elects its own
        // leader and both decide the next views, so the service splits into two histories.
        var runs = RunBroken(ProtocolMutations.MinorityCommits, "replica-partition", 20);
        Assert.Contains(runs, r => r.Result.Violates("PrimaryViewSequence"));
        Assert.All(Enumerable.Range(0, 20).Select(seed => SimulationRun.Execute((ulong)seed, "replica-partition")), r => Assert.True(r.Passed, r.Report));
    }

    [Fact]
    public void A_member_whose_next_deadline_leaves_out_its_NAK_timers_is_caught()
    {
        // The runtime sleeps until the reported deadline: one that forgets the NAK timers would
        // repair a lost message only at the next digest. Under loss a NAK fires before it.
        var runs = RunBroken(ProtocolMutations.DeadlineOmitsNaks, "lossy", 5);
        Assert.All(runs, r => Assert.True(r.Result.Violates("TimersWithinDeadline"), r.Summary));
        Assert.All(Enumerable.Range(0, 5).Select(seed => SimulationRun.Execute((ulong)seed, "lossy")), r => Assert.True(r.Passed, r.Report));
    }

    [Fact]
    public void The_correct_protocol_passes_the_same_seeds()
    {
        var runs = Enumerable.Range(0, 20).Select(seed => SimulationRun.Execute((ulong)seed, "crash")).ToList();
        Assert.All(runs, r => Assert.True(r.Passed, r.Report));
    }
}
