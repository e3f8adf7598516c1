using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Simulation.Checking;
using Xunit.Abstractions;

namespace Isis.Simulation.Tests.Scenarios;

/// <summary>
/// The zero-configuration membership service, embedded in the member processes, through the
/// simulator: the processes that host its replicas crash, exit gracefully and pause, one after
/// another, and the service moves its replicas (one configuration step at a time) while the group
/// goes on. The checker judges every run; each family must really have moved replicas and ended
/// with every process in one view.
/// </summary>
public sealed class EmbeddedServiceScenarioTests(ITestOutputHelper output)
{
    private const int Seeds = 60;

    public static IEnumerable<object[]> Families() => new[] { "host-crash", "host-exit", "host-pause", "host-partition" }.Select(f => new object[] { f });

    private sealed record Observed(SimulationRun Run, List<string> ShutdownReasons);

    private static Observed Execute(ulong seed, string family, Func<Scenario, Scenario>? adjust = null)
    {
        var reasons = new List<string>();
        Scenario scenario = Scenario.ForFamily(family, seed);
        if (adjust != null) scenario = adjust(scenario);
        // The shutdown reasons are what a user would read; the history records only that the process stopped.
        SimulationRun run = SimulationRun.Execute(seed, scenario, sim => sim.Observer = (_, e) => { if (e is NodeShutDown s) reasons.Add(s.Reason); });
        return new Observed(run, reasons);
    }

    [Theory]
    [MemberData(nameof(Families))]
    public void Replica_hosts_going_one_after_another_never_break_a_guarantee_and_the_service_moves(string family)
    {
        int configurations = 0, founderReplaced = 0, completeEnds = 0;
        var failures = new List<string>();
        for (ulong seed = 0; seed < Seeds; seed++)
        {
            SimulationRun run = Execute(seed, family).Run;
            output.WriteLine(run.Summary);
            if (!run.Passed) failures.Add(run.Report);
            IReadOnlyList<HistoryEvent> events = run.History.Events;
            configurations += events.Where(e => e.Kind == HistoryEventKind.Decide && e.Members != null).Select(e => e.LogIndex).Distinct().Count();
            NodeId founder = events.First(e => e.Kind == HistoryEventKind.Founded).Process;
            if (events.Any(e => e.Kind == HistoryEventKind.Decide && e.Members != null && !e.Members.Contains(founder))) founderReplaced++;
            if (events.LastOrDefault(e => e.Kind == HistoryEventKind.ViewInstall)?.Members?.Length == run.Simulator.Scenario.Processes) completeEnds++;
        }
        output.WriteLine($"{family}: {configurations} configurations decided; the founder's replica replaced in {founderReplaced} of {Seeds} runs; "
            + $"{completeEnds} runs end with every process in one view");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(founderReplaced >= Seeds / 2, $"{family}: the founder's replica moved in only {founderReplaced} of {Seeds} runs");
        Assert.Equal(Seeds, completeEnds);
    }

    [Fact]
    public void A_graceful_exit_hands_the_replica_over_so_no_process_is_isolated_or_expelled()
    {
        int exits = 0;
        for (ulong seed = 0; seed < 30; seed++)
        {
            Observed o = Execute(seed, "host-exit", s => s with { LeaveAndRejoin = false });
            Assert.True(o.Run.Passed, o.Run.Report);
            // Nobody waited for failure detection: no process was expelled, none gave up on the service.
            Assert.True(o.ShutdownReasons.Count == 0, $"seed {seed}: {string.Join("; ", o.ShutdownReasons)}");
            Assert.DoesNotContain(o.Run.History.Events, e => e.Kind == HistoryEventKind.Expel && !o.Run.History.Events.Any(c => c.Kind == HistoryEventKind.Crash && c.Process == e.Process));
            exits += o.Run.History.Events.Count(e => e.Kind == HistoryEventKind.Crash);
        }
        Assert.True(exits >= 30, $"only {exits} graceful exits over 30 runs");
    }

    [Fact]
    public void With_a_system_key_exits_hand_over_and_the_key_rotates_in_rolling_restarts_without_breaking_a_guarantee()
    {
        // The family seals everything with a system key: a replica that dropped what the processes
        // sealed (an exit's HostRetiring once went in a bundle, which replicas do not open) would
        // turn every exit into a crash; and in most runs the operator rotates the key.
        int retired = 0, rotated = 0, withRotation = 0, restarts = 0;
        for (ulong seed = 0; seed < 30; seed++)
        {
            int handedOver = 0;
            SimulationRun run = SimulationRun.Execute(seed, Scenario.ForFamily("host-secured", seed), sim => sim.Observer = (_, e) => { if (e is HostRetired) handedOver++; });
            Assert.True(run.Passed, run.Report);
            retired += handedOver;
            if (!run.Simulator.Scenario.SystemKeyRotation) continue;
            withRotation++;
            restarts += run.Simulator.SystemKeyRestarts;
            if (run.Simulator.SystemKeyStep == 3) rotated++;
        }
        output.WriteLine($"host-secured: {retired} exits handed over; the key rotated fully in {rotated} of {withRotation} runs that rotated it ({restarts} rolling restarts)");
        Assert.True(retired >= 30, $"only {retired} exits handed their replica over in 30 runs");
        Assert.True(rotated >= withRotation * 2 / 3, $"the key rotated fully in only {rotated} of {withRotation} runs");
    }

    [Fact]
    public void Ignoring_the_accepted_system_keys_cuts_restarted_processes_off_and_is_caught()
    {
        int caught = 0, tried = 0;
        for (ulong seed = 0; seed < 20; seed++)
        {
            Scenario scenario = Scenario.ForFamily("host-secured", seed);
            if (!scenario.SystemKeyRotation) continue;
            tried++;
            SimulationRun run = SimulationRun.Execute(seed, scenario with { Protocol = scenario.Protocol with { Mutations = ProtocolMutations.AcceptedSystemKeysIgnored } });
            if (!run.Passed) caught++;
        }
        output.WriteLine($"caught in {caught} of {tried} seeds that rotate the system key");
        Assert.True(caught >= tried / 2, $"caught in only {caught} of {tried} seeds");
    }

    [Fact]
    public void A_replica_host_paused_past_its_expulsion_learns_it_was_replaced_and_stops()
    {
        int staleHosts = 0;
        for (ulong seed = 0; seed < Seeds; seed++)
        {
            Observed o = Execute(seed, "host-pause");
            Assert.True(o.Run.Passed, o.Run.Report);
            staleHosts += o.ShutdownReasons.Count(r => r.StartsWith("expelled", StringComparison.Ordinal));
        }
        // The checker above proves the stale replicas decided nothing (one log, majorities of the
        // configuration in force); here: the case happened, and those processes stopped, as expelled.
        Assert.True(staleHosts >= 5, $"only {staleHosts} paused hosts came back expelled over {Seeds} runs");
    }

    [Fact]
    public void Every_process_restarting_while_others_still_start_founds_the_service_again_one_at_a_time_and_the_group_reforms()
    {
        // The soak's stop (issue 25): every process of the embedded service restarted, the new ones
        // starting while older ones (without a service, holding the well-known port) still ran.
        // Founding was decided only at a process's start, so nobody founded and everyone gave up.
        // Some runs stall the whole machine instead (every process paused, the port's holder killed
        // and restarted): the new holder must then wait for the paused service, not found a twin.
        int runs = 0, refounded = 0, later = 0;
        var failures = new List<string>();
        for (ulong seed = 0; seed < Seeds; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "host-restart");
            if (!run.Passed) failures.Add(run.Report);
            later += run.Simulator.LaterFoundings;
            if (run.Simulator.WholeSystemRestarts == 0) continue;
            runs++;
            if (run.Simulator.Foundings >= 2) refounded++;
        }
        output.WriteLine($"host-restart: {refounded} of the {runs} runs that restarted every process founded the service again; {later} foundings by a process after its start");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(runs >= Seeds / 2, $"only {runs} of {Seeds} runs restarted every process");
        Assert.Equal(runs, refounded);
        Assert.True(later >= Seeds / 4, $"only {later} foundings after a process's start in {runs} runs: the overlapping case is not exercised");
    }

    [Fact]
    public void Founding_beside_a_live_service_is_caught()
    {
        // The rule's mutation: the holder of the well-known port founds as soon as it has found no
        // service, without asking for a while and without checking the replicas on the machine's file.
        // Caught where it matters: a machine stalled (the service paused, alive) while a new process
        // holds the well-known port; once the machine runs again, two services run at once.
        int caught = 0;
        for (ulong seed = 0; seed < 60; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "host-restart", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.FoundBesideLiveService } });
            if (run.Result.Violates("OneServiceAtATime")) caught++;
        }
        output.WriteLine($"caught in {caught} of 60 seeds");
        Assert.True(caught >= 8, $"founding beside a live service was caught in only {caught} of 60 seeds");
    }

    [Fact]
    public void Losing_a_majority_of_the_replica_hosts_at_once_wedges_the_group_and_never_splits_it()
    {
        int losses = 0, refounded = 0;
        for (ulong seed = 0; seed < 30; seed++)
        {
            Observed o = Execute(seed, "host-quorum-loss");
            long lostAt = o.Run.Simulator.QuorumLostAt;
            if (lostAt == 0) continue;
            losses++;
            // Everything but liveness holds: nobody of the old service can decide any more.
            Assert.True(o.Run.Result.Violations.All(v => v.Property == "Liveness"), o.Run.Report);
            // No view of an incarnation that ran before the loss, after it (within the failover time
            // a view already decided may still arrive): the survivors wedge and stop, isolated.
            var before = o.Run.History.Events.Where(e => e.Time <= lostAt && !e.Process.IsNone).Select(e => e.Process).ToHashSet();
            Assert.DoesNotContain(o.Run.History.Events, e => e.Kind == HistoryEventKind.ViewInstall && e.Time > lostAt + 100_000 && before.Contains(e.Process));
            Assert.Contains(o.ShutdownReasons, r => r.StartsWith("isolated", StringComparison.Ordinal));
            // Restarted, they found a new service only once every replica of the old one is gone
            // (the crashed hosts never come back): OneServiceAtATime above holds.
            if (o.Run.Simulator.Foundings > 1) refounded++;
        }
        Assert.True(losses >= 20, $"the majority of the hosts was crashed in only {losses} of 30 runs");
        output.WriteLine($"{losses} quorum losses; {refounded} runs founded a new service after every old replica was gone");
    }

    [Fact]
    public void Chaos_among_the_replica_hosts_with_partitions_and_crashes_never_breaks_a_safety_property()
    {
        // Every host fault at once with partitions, flapping links, random crashes and leaves: two
        // replica hosts can be cut off or lost together, and then nobody can decide until the heal
        // (or ever, if they crashed). So liveness may fail here, but only where it must: whenever a
        // majority of the service's latest configuration was still up when the faults stopped, the
        // service must go on and the run must be live. Nothing else may fail, on any seed.
        // More seeds than the other families: the rarest interleavings live here (seeds 135 and 168
        // found a deadline defect that seeds 0-59 never showed). About 6 s.
        const int ChaosSeeds = 200;
        int wedged = 0;
        var failures = new List<string>();
        for (ulong seed = 0; seed < ChaosSeeds; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "host-chaos");
            Assert.NotNull(run.Simulator.ServiceMajorityUpAtHeal);
            if (run.Result.Violations.Any(v => v.Property != "Liveness")) failures.Add(run.Report);
            else if (!run.Passed && run.Simulator.ServiceMajorityUpAtHeal == true) failures.Add("a majority of the replicas was up at the heal, yet: " + run.Report);
            else if (!run.Passed) wedged++;
        }
        output.WriteLine($"host-chaos: {wedged} of {ChaosSeeds} runs ended wedged, each with a majority of the replicas lost");
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
        Assert.True(wedged <= ChaosSeeds / 4, $"{wedged} of {ChaosSeeds} chaos runs ended wedged: more than double faults explain");
    }

    [Fact]
    public void Growing_from_the_founding_replica_adds_two_at_once_so_losing_either_leaves_the_service_live()
    {
        // The host of a replica that the first growth adds stops until the heal, as soon as the
        // growth is appended: the founder and the other new replica are a majority of three, so the
        // service replaces the stopped one, stays the one service founded at the start, and every
        // run is live.
        const int Seeds = 30;
        var failures = new List<string>();
        for (ulong seed = 0; seed < Seeds; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "host-growth");
            if (!run.Passed || run.Simulator.Foundings != 1) failures.Add($"{run.Simulator.Foundings} foundings: {run.Report}");
        }
        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
    }

    [Fact]
    public void Growing_one_replica_at_a_time_is_caught_losing_the_service_when_the_second_replica_is_lost()
    {
        // Growing one replica at a time, the service runs on two for a few round trips; losing the
        // second there leaves nobody able to decide. Every process isolates itself and, restarted,
        // they found a new service (the state of the old one is gone), or the run ends wedged.
        int caught = 0;
        for (ulong seed = 0; seed < 30; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "host-growth", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.GrowOneReplicaAtATime } });
            if (!run.Passed || run.Simulator.Foundings > 1) caught++;
        }
        output.WriteLine($"caught in {caught} of 30 seeds");
        Assert.True(caught >= 20, $"growing one replica at a time lost the service in only {caught} of 30 seeds");
    }

    /// <summary>
    /// Seeds where the leader's configuration shrank to itself alone: that step committed at once
    /// and allowed the next (adding a learner) at once, which the leader took only at a later tick,
    /// 45 ms after the deadline it had reported (TimersWithinDeadline). Both fail without the fix.
    /// </summary>
    [Theory]
    [InlineData(135ul)]
    [InlineData(168ul)]
    public void A_reconfiguration_step_that_commits_at_once_is_followed_by_the_next_in_the_same_step(ulong seed)
    {
        SimulationRun run = SimulationRun.Execute(seed, "host-chaos");
        output.WriteLine(run.Summary);
        Assert.DoesNotContain(run.Result.Violations, v => v.Property != "Liveness");
    }

    [Fact]
    public void A_process_lease_that_outlives_the_leader_that_granted_it_is_caught()
    {
        // A leader's host cut off from everyone keeps its own leader's answers until that leader's
        // lease ends; the next leader counts the old leader's silence towards the host's expulsion.
        // If process leases ignored the leader's lease, the host would still send after it.
        int caught = 0;
        for (ulong seed = 0; seed < 100; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "host-partition", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.LeaseOutlivesLeader } });
            if (run.Result.Violates("FirewallAfterExpulsion") || run.Result.Violates("NoDeliveryAfterExpulsion")) caught++;
        }
        output.WriteLine($"caught in {caught} of 100 seeds");
        Assert.True(caught >= 10, $"the lease that outlives its leader was caught in only {caught} of 100 seeds");
    }

    [Fact]
    public void Changing_two_replicas_in_one_step_is_caught()
    {
        // Swapping a failed replica for a new one (or growing by two) in one configuration entry,
        // without joint consensus: the old and new majorities need not intersect.
        int caught = 0;
        for (ulong seed = 0; seed < 100; seed++)
        {
            SimulationRun run = SimulationRun.Execute(seed, "host-crash", s => s with { Protocol = s.Protocol with { Mutations = ProtocolMutations.ReconfigureSeveralAtOnce } });
            if (run.Result.Violates("ServiceQuorums")) caught++;
        }
        output.WriteLine($"caught in {caught} of 100 seeds");
        Assert.True(caught >= 50, $"the broken reconfiguration was caught in only {caught} of 100 seeds");
    }
}
