using Isis.Core.Bft;
using Isis.Simulation.Bft;
using static Isis.Simulation.Tests.Bft.BftRuns;

namespace Isis.Simulation.Tests.Bft;

/// <summary>
/// Perpetual's replicated-to-replicated calls under the simulator: clients call "store", whose
/// replicas call "bank" for every request and answer with its result. Faults in either tier, up to
/// f each, leave every call answered with the bank's correct result; a compromised bank (more than
/// f faulty, answering different store replicas differently) leaves the store consistent.
/// </summary>
public sealed class PerpetualCallTests
{

    private static Dictionary<int, ByzantineBehaviour> Faults(string spec) =>
        spec.Length == 0 ? new() : spec.Split(',').Select(f => f.Split(':')).ToDictionary(f => int.Parse(f[0]), f => Enum.Parse<ByzantineBehaviour>(f[1]));

    [Fact]
    public void Every_call_of_a_replicated_store_to_a_replicated_bank_is_answered_with_the_banks_result()
    {
        AllPass(new BftScenario { Tiers = 2, RequestsPerClient = 25 }, seeds: 15);
        BftRunResult r = Run(new BftScenario { Tiers = 2, RequestsPerClient = 25 }, 4);
        Assert.Equal(50, r.Accepted);
        Assert.All(r.ExecutedPerReplica, e => Assert.True(e >= 50, $"a replica executed only {e}")); // store: requests and completions; bank: the calls
    }

    [Theory]
    [InlineData("1:WrongReplies", "")]
    [InlineData("0:Silent", "")]
    [InlineData("", "2:WrongReplies")]
    [InlineData("", "0:Crash")]
    [InlineData("", "0:Equivocate")]
    [InlineData("3:Replay", "1:ForgeSender")]
    [InlineData("0:Equivocate", "0:Silent")]
    public void Up_to_f_faulty_replicas_in_each_tier_change_no_outcome(string store, string bank) =>
        AllPass(new BftScenario { Tiers = 2, Faulty = Faults(store), TargetFaulty = Faults(bank), RequestsPerClient = 20 }, seeds: 10);

    [Fact]
    public void A_compromised_bank_that_answers_store_replicas_differently_leaves_the_store_consistent()
    {
        // Two of four bank replicas compromised (f = 1), the responder among them: every other store
        // replica gets a bundle with a valid certificate for another result (and, when it asks again,
        // direct replies that differ too), but the store orders one, so all its replicas agree.
        var scenario = new BftScenario { Tiers = 2, TargetFaulty = Faults("0:Compromised,2:Compromised"), RequestsPerClient = 20, Loss = 0 };
        AllPass(scenario, seeds: 10);
        Assert.Contains(Enumerable.Range(0, 10), seed => Run(scenario, seed).DivergentMessages > 0); // the fork was seen (and reported)
    }

    [Fact]
    public void Mutation_overdue_calls_sent_again_to_the_target_primary_only_stall_behind_a_silent_primary_and_the_checker_says_so()
    {
        // With the rule, a silent bank primary costs a retry and a view change (0:Silent passes above).
        var scenario = new BftScenario { Tiers = 2, TargetFaulty = Faults("0:Silent"), RequestsPerClient = 10, Options = new BftOptions { Mutations = BftMutations.CallRetryToPrimaryOnly } };
        int caughtAt = Enumerable.Range(0, 20).FirstOrDefault(seed => !Run(scenario, seed).Ok, -1);
        Assert.True(caughtAt >= 0, "20 seeds and no violation");
        Assert.Contains(Run(scenario, caughtAt).Violations, v => v.Contains(": progress", StringComparison.Ordinal));
    }

    [Fact]
    public void A_bank_that_does_not_answer_is_aborted_at_the_same_point_by_every_store_replica()
    {
        // Three of four bank replicas silent: no call can be ordered there. With a timeout, the
        // store's replicas agree to abort each call, and answer their clients anyway.
        var scenario = new BftScenario
        {
            Tiers = 2,
            TargetFaulty = Faults("0:Silent,1:Silent,2:Silent"),
            CallTimeout = 300_000,
            RequestsPerClient = 6,
        };
        AllPass(scenario, seeds: 6);
    }
}
