using Isis.Core.Bft;
using Isis.Simulation.Bft;
using static Isis.Simulation.Tests.Bft.BftRuns;

namespace Isis.Simulation.Tests.Bft;

/// <summary>
/// PBFT inside one service, under the simulator: loss, duplication, reordering and up to f faulty
/// replicas of every kind, the primary included (the view change replaces it).
/// </summary>
public sealed class BftSimulationTests
{

    private static Dictionary<int, ByzantineBehaviour> One(int replica, ByzantineBehaviour b) => new() { [replica] = b };

    [Fact]
    public void Without_faults_every_request_is_answered_in_one_order_over_a_lossy_network()
    {
        AllPass(new BftScenario(), seeds: 30);
        BftRunResult r = Run(new BftScenario(), 7);
        Assert.Equal(80, r.Accepted);
        Assert.All(r.ExecutedPerReplica, e => Assert.True(e >= 80, $"a replica executed only {e}"));
    }

    [Theory]
    [InlineData("Silent")]
    [InlineData("Crash")]
    [InlineData("WrongReplies")]
    [InlineData("ForgeSender")]
    [InlineData("Replay")]
    [InlineData("Slow")]
    public void One_faulty_backup_of_four_neither_stops_nor_misleads_the_service(string behaviour) =>
        AllPass(new BftScenario { Faulty = One(2, Enum.Parse<ByzantineBehaviour>(behaviour)) }, seeds: 20);

    [Theory]
    [InlineData("WrongReplies")]
    [InlineData("ForgeSender")]
    [InlineData("Replay")]
    [InlineData("Slow")]
    public void A_primary_that_misbehaves_but_still_orders_keeps_the_service_going(string behaviour) =>
        AllPass(new BftScenario { Faulty = One(0, Enum.Parse<ByzantineBehaviour>(behaviour)) }, seeds: 20);

    [Fact]
    public void Forged_tags_are_dropped_and_wrong_replies_never_accepted()
    {
        BftRunResult forged = Run(new BftScenario { Faulty = One(1, ByzantineBehaviour.ForgeSender) }, 3);
        Assert.True(forged.Ok, string.Join("; ", forged.Violations));
        Assert.True(forged.Dropped > 0, "the forged packets were not dropped");
        BftRunResult wrong = Run(new BftScenario { Faulty = One(3, ByzantineBehaviour.WrongReplies), Loss = 0 }, 3);
        Assert.True(wrong.Ok, string.Join("; ", wrong.Violations));
        Assert.True(wrong.DivergentReplies > 0, "the wrong replies were not seen");
    }

    [Theory]
    [InlineData("Silent")]
    [InlineData("Crash")]
    [InlineData("Equivocate")]
    public void A_primary_that_stops_ordering_or_equivocates_is_replaced_by_a_view_change_and_nothing_is_lost(string behaviour)
    {
        var scenario = new BftScenario { Faulty = One(0, Enum.Parse<ByzantineBehaviour>(behaviour)) };
        AllPass(scenario, seeds: 20);
        BftRunResult r = Run(scenario, 5);
        Assert.True(r.ViewChanges > 0 && r.FinalView > 0, $"no view change: {string.Join("\n", r.ReplicaStates)}");
        if (behaviour == "Equivocate") Assert.Contains(Enumerable.Range(0, 20), seed => Run(scenario, seed).Equivocations > 0);
    }

    [Fact]
    public void A_primary_with_a_wrong_clock_is_refused_and_replaced_and_the_agreed_clock_never_follows_it()
    {
        var scenario = new BftScenario { Faulty = One(0, ByzantineBehaviour.WrongClock) };
        AllPass(scenario, seeds: 10); // the checker holds every correct replica to one clock that only grows
        BftRunResult r = Run(scenario, 3);
        Assert.True(r.ClockRefusals > 0 && r.FinalView > 0, $"refusals {r.ClockRefusals}, view {r.FinalView}");
    }

    [Fact]
    public void A_faulty_primary_after_a_view_change_is_replaced_again()
    {
        // Seven replicas (f = 2): view 0's primary and view 1's are both silent, so view 2's leads.
        var scenario = new BftScenario
        {
            F = 2,
            Faulty = new Dictionary<int, ByzantineBehaviour> { [0] = ByzantineBehaviour.Silent, [1] = ByzantineBehaviour.Silent },
            RequestsPerClient = 20,
        };
        AllPass(scenario, seeds: 8);
        Assert.True(Run(scenario, 2).FinalView >= 2);
    }

    [Theory]
    [InlineData(2)]
    [InlineData(3)]
    public void Larger_services_tolerate_f_faulty_replicas_of_mixed_kinds(int f)
    {
        var faulty = new Dictionary<int, ByzantineBehaviour>
        {
            [1] = ByzantineBehaviour.WrongReplies,
            [3 * f] = ByzantineBehaviour.Silent,
        };
        if (f == 3) faulty[4] = ByzantineBehaviour.ForgeSender;
        AllPass(new BftScenario { F = f, Faulty = faulty, RequestsPerClient = 20 }, seeds: 8);
    }

    [Fact]
    public void A_run_is_a_function_of_its_seed()
    {
        var scenario = new BftScenario { Faulty = One(1, ByzantineBehaviour.Replay) };
        Assert.Equal(Run(scenario, 11).Fingerprint, Run(scenario, 11).Fingerprint);
        Assert.NotEqual(Run(scenario, 11).Fingerprint, Run(scenario, 12).Fingerprint);
    }

    [Fact]
    public void Mutation_crash_fault_quorums_lets_an_equivocating_primary_split_the_service_and_the_checker_says_so()
    {
        var scenario = new BftScenario
        {
            Faulty = One(0, ByzantineBehaviour.Equivocate),
            ExpectProgress = false,
            Duration = 3_000_000,
            Options = new BftOptions { Mutations = BftMutations.CrashQuorums },
        };
        int caughtAt = Enumerable.Range(0, 200).FirstOrDefault(seed => !Run(scenario, seed).Ok, -1);
        Assert.True(caughtAt >= 0, "200 seeds and no violation");
        Assert.Contains(Run(scenario, caughtAt).Violations, v => v.Contains(": agreement", StringComparison.Ordinal));
    }

    [Fact]
    public void Mutation_a_new_view_that_drops_the_prepared_requests_loses_committed_ones_and_the_checker_says_so()
    {
        var scenario = new BftScenario
        {
            Faulty = One(0, ByzantineBehaviour.Crash),
            CrashAt = 20_000,
            Options = new BftOptions { Mutations = BftMutations.NewViewDropsPrepared },
        };
        int caughtAt = Enumerable.Range(0, 300).FirstOrDefault(seed => !Run(scenario, seed).Ok, -1);
        Assert.True(caughtAt >= 0, "300 seeds and no violation");
        Assert.Contains(Run(scenario, caughtAt).Violations, v => v.Contains(": agreement", StringComparison.Ordinal) || v.Contains(": invariant", StringComparison.Ordinal) || v.Contains(": replies", StringComparison.Ordinal));
    }

    [Fact]
    public void Mutation_a_backup_that_replays_early_messages_inside_the_catch_up_that_moved_its_window_is_caught()
    {
        var scenario = new BftScenario { Options = new BftOptions { Mutations = BftMutations.ReplayEarlyInPlace } };
        int caughtAt = Enumerable.Range(0, 100).FirstOrDefault(seed => !Run(scenario, seed).Ok, -1);
        Assert.True(caughtAt >= 0, "100 seeds and no violation");
        Assert.Contains(Run(scenario, caughtAt).Violations, v => v.Contains("caught up holds the certified history", StringComparison.Ordinal));
    }

    [Fact]
    public void Under_load_the_primary_orders_many_requests_per_sequence_number()
    {
        // Four clients with eight requests outstanding each: while two batches are in agreement, what
        // arrives waits for the next. One input per batch (MaxBatch 1) takes a sequence number each.
        var loaded = new BftScenario { Clients = 4, Outstanding = 8, RequestsPerClient = 40, Loss = 0 };
        AllPass(loaded, seeds: 10);
        BftRunResult batched = Run(loaded, 1);
        BftRunResult single = Run(loaded with { Options = new BftOptions { MaxBatch = 1 } }, 1);
        Assert.True(single.Ok && batched.Ok, string.Join("; ", single.Violations.Concat(batched.Violations)));
        Assert.Equal(160, single.SequenceNumbersPerReplica.Max());
        Assert.All(batched.ExecutedPerReplica, e => Assert.Equal(160, e));
        Assert.True(batched.SequenceNumbersPerReplica.Max() <= 160 / 3, $"{batched.SequenceNumbersPerReplica.Max()} sequence numbers for 160 requests");
    }

    [Fact]
    public void A_primary_that_slips_an_unsent_request_into_its_batches_is_refused_and_replaced()
    {
        var scenario = new BftScenario { Faulty = One(0, ByzantineBehaviour.SlipInput), Clients = 3, Outstanding = 4 };
        AllPass(scenario, seeds: 20); // validity: no correct replica hands over the request no client sent
        BftRunResult r = Run(scenario, 2);
        Assert.True(r.FinalView > 0 && r.Dropped > 0, $"view {r.FinalView}, dropped {r.Dropped}");
    }

    [Fact]
    public void Mutation_a_backup_that_checks_only_the_first_input_of_a_batch_executes_a_slipped_request_and_the_checker_says_so()
    {
        var scenario = new BftScenario
        {
            Faulty = One(0, ByzantineBehaviour.SlipInput),
            Clients = 3,
            Outstanding = 4,
            Options = new BftOptions { Mutations = BftMutations.BatchChecksFirstOnly },
        };
        int caughtAt = Enumerable.Range(0, 100).FirstOrDefault(seed => !Run(scenario, seed).Ok, -1);
        Assert.True(caughtAt >= 0, "100 seeds and no violation");
        Assert.Contains(Run(scenario, caughtAt).Violations, v => v.Contains(": validity", StringComparison.Ordinal));
    }

    /// <summary>Seven replicas: view 0's primary crashes, view 1's never starts its view and lies in its view changes.</summary>
    private static BftScenario Liar(BftMutations mutations = BftMutations.None) => new()
    {
        F = 2,
        Faulty = new Dictionary<int, ByzantineBehaviour> { [0] = ByzantineBehaviour.Crash, [1] = ByzantineBehaviour.LyingViewChange },
        CrashAt = 15_000,
        RequestsPerClient = 20,
        Options = new BftOptions { Mutations = mutations },
    };

    [Fact]
    public void A_replica_that_lies_in_its_view_changes_cannot_replace_what_committed()
    {
        AllPass(Liar(), seeds: 10);
        BftRunResult r = Run(Liar(), 1);
        Assert.True(r.FinalView >= 2, $"view {r.FinalView}: the liar's view was not passed");
    }

    [Fact]
    public void Mutation_a_new_view_without_the_pre_prepare_quorum_follows_a_liar_and_the_checker_says_so()
    {
        BftScenario scenario = Liar(BftMutations.NewViewWithoutPrePrepareQuorum);
        int caughtAt = Enumerable.Range(0, 100).FirstOrDefault(seed => !Run(scenario, seed).Ok, -1);
        Assert.True(caughtAt >= 0, "100 seeds and no violation");
    }

    [Fact]
    public void Mutation_reply_on_f_matches_accepts_a_lone_faulty_replicas_answer_and_the_checker_says_so()
    {
        var scenario = new BftScenario
        {
            Faulty = One(1, ByzantineBehaviour.WrongReplies),
            Options = new BftOptions { Mutations = BftMutations.ReplyOnFMatches },
        };
        int caughtAt = Enumerable.Range(0, 200).FirstOrDefault(seed => !Run(scenario, seed).Ok, -1);
        Assert.True(caughtAt >= 0, "200 seeds and no violation");
        Assert.Contains(Run(scenario, caughtAt).Violations, v => v.Contains(": replies", StringComparison.Ordinal));
    }
}
