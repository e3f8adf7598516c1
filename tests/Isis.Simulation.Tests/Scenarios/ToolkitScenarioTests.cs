using Isis.Core.Node;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// The Isis2 toolkit's primitives through the simulator (issue 29): CausalSend and CausalQuery, with
/// members answering causal messages causally so chains cross members, and deferred query replies,
/// under reordering, loss, crashes, partitions and leaves. Every run must pass the checker, whose
/// CausalOrder property wants each causal message delivered after everything its sender had
/// delivered causally before sending it; the mutation tests show it notices each rule broken.
/// The client families add non-member clients whose requests members relay (ClientRequests: each
/// runs at most once per member, however many relays issued it, and every answered one ran).
/// </summary>
public sealed class ToolkitScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 60;

    public static IEnumerable<object[]> Families() => Scenario.ToolkitFamilies.Select(f => new object[] { f });

    [Theory]
    [MemberData(nameof(Families))]
    public void Toolkit_primitives_under_faults_keep_every_guarantee(string family)
    {
        int deferred = 0, answers = 0, subsets = 0;
        long locks = 0, clientAnswers = 0, failovers = 0;
        SeedSweep.AllPass(output, SeedSweep.Range(0, Seeds), seed => SimulationRun.Execute(seed, family), run =>
        {
            deferred += run.Simulator.DeferredReplies;
            answers += run.Simulator.CausalAnswers;
            subsets += run.Simulator.SubsetSends;
            locks += run.Simulator.LocksAcquired;
            clientAnswers += run.Simulator.ClientTotals.Answered;
            failovers += run.Simulator.ClientTotals.FailedOver;
        });
        output.WriteLine($"{deferred} deferred replies, {answers} causal answers, {subsets} subset sends, {locks} locks acquired, {clientAnswers} client requests answered ({failovers} moved to another relay) in {Seeds} runs");
        // The runs did what they are for: members answered late, and causal chains crossed members
        // (the causal families), messages went to some members only (the subset families), or
        // holders took turns on the locks (the lock families).
        // Or clients' requests went through relays, some of which failed mid-request (the client families).
        if (family.StartsWith("clients", StringComparison.Ordinal))
        {
            Assert.True(clientAnswers >= 50 * Seeds, $"only {clientAnswers} client requests answered in {Seeds} runs");
            Assert.True(failovers >= Seeds, $"only {failovers} requests moved to another relay in {Seeds} runs");
            return;
        }
        if (family.StartsWith("locks", StringComparison.Ordinal))
        {
            Assert.True(locks >= 20 * Seeds, $"only {locks} locks acquired in {Seeds} runs");
            return;
        }
        Assert.True(deferred >= Seeds, $"only {deferred} deferred replies in {Seeds} runs");
        if (family.StartsWith("causal", StringComparison.Ordinal)) Assert.True(answers >= 10 * Seeds, $"only {answers} causal answers in {Seeds} runs");
        else Assert.True(subsets >= 10 * Seeds, $"only {subsets} subset sends in {Seeds} runs");
    }

    [Fact]
    public void Members_that_deliver_causal_messages_on_arrival_are_caught()
    {
        var runs = Enumerable.Range(0, 5)
            .Select(seed => SimulationRun.Execute((ulong)seed, "causal", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.CausalDeliversOnArrival } }))
            .ToList();
        Assert.All(runs, r => Assert.True(r.Result.Violates("CausalOrder"), r.Summary));
    }

    [Theory]
    [InlineData("subset")]
    [InlineData("subset-chaos")]
    public void Members_that_deliver_subset_messages_not_addressed_to_them_are_caught(string family)
    {
        var runs = Enumerable.Range(0, 5)
            .Select(seed => SimulationRun.Execute((ulong)seed, family, s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.SubsetDeliveredEverywhere } }))
            .ToList();
        Assert.All(runs, r => Assert.True(r.Result.Violates("SubsetDelivery"), r.Summary));
    }

    [Theory]
    [InlineData(nameof(ProtocolMutations.LockViewReleasesEveryone))]
    [InlineData(nameof(ProtocolMutations.LockTokenPerView))]
    public void Lock_tables_that_free_live_holders_or_restart_tokens_at_a_view_change_are_caught(string name)
    {
        var mutation = Enum.Parse<ProtocolMutations>(name);
        var runs = Enumerable.Range(0, 20)
            .Select(seed => SimulationRun.Execute((ulong)seed, "locks", s => s with { Protocol = s.Protocol with { Mutations = mutation } }))
            .ToList();
        int caught = runs.Count(r => r.Result.Violates("LockSafety"));
        output.WriteLine($"{mutation}: caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count / 2, $"caught in only {caught} of {runs.Count} seeds");
    }

    [Theory]
    [InlineData("clients")]
    [InlineData("clients-chaos")]
    public void Members_that_keep_no_client_sessions_run_retried_requests_twice_and_are_caught(string family)
    {
        var runs = Enumerable.Range(0, 20)
            .Select(seed => SimulationRun.Execute((ulong)seed, family, s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.ClientRetriesRunTwice } }))
            .ToList();
        int caught = runs.Count(r => r.Result.Violates("ClientRequests"));
        output.WriteLine($"caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count / 2, $"caught in only {caught} of {runs.Count} seeds");
    }

    [Fact]
    public void Requesters_that_ignore_replies_from_a_later_view_are_caught()
    {
        var runs = Enumerable.Range(0, 20)
            .Select(seed => SimulationRun.Execute((ulong)seed, "causal-chaos", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.LateRepliesDropped } }))
            .ToList();
        int caught = runs.Count(r => r.Result.Violates("QueryReplies"));
        output.WriteLine($"caught in {caught} of {runs.Count} seeds");
        Assert.True(caught >= runs.Count / 4, $"caught in only {caught} of {runs.Count} seeds");
    }

    [Fact]
    public void A_flush_that_does_not_wait_for_causal_predecessors_loses_flushed_causal_messages()
    {
        // Lossy three-member runs where a process that flushed crashes at once together with the
        // sender of the last causal message it delivered: if that message had not reached the third
        // member, the flushed messages that depend on it cannot be delivered there.
        Scenario Lossy(Scenario s, ProtocolMutations mutations) => s with
        {
            Processes = 3, Partitions = false, Pauses = false, CoordinatorCrashes = false, LeaveAndRejoin = false,
            Protocol = s.Protocol with { Mutations = mutations }, Faults = s.Faults with { LossRate = 0.3 }, FlushChance = 0.3, CrashAfterFlushChance = 0.3,
        };
        var broken = Enumerable.Range(0, 100).Select(seed => SimulationRun.Execute((ulong)seed, "causal-chaos", s => Lossy(s, ProtocolMutations.FlushIgnoresCausalPredecessors))).ToList();
        int caught = broken.Count(r => r.Result.Violates("FlushDurability"));
        output.WriteLine($"caught in {caught} of {broken.Count} seeds");
        Assert.True(caught >= 2, $"caught in only {caught} of {broken.Count} seeds");
        // The same runs with the real Flush keep every flushed message.
        SeedSweep.AllPass(output, SeedSweep.Range(0, 100), seed => SimulationRun.Execute(seed, "causal-chaos", s => Lossy(s, ProtocolMutations.None)));
    }
}
