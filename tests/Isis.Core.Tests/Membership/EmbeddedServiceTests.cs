using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Core.Wire;
using Isis.Simulation.Driving;

namespace Isis.Core.Tests.Membership;

/// <summary>
/// The membership service embedded in member processes, step by step on a perfect network: it
/// grows one replica at a time, hands over when a host exits, replaces a crashed host's replica,
/// and refuses a configuration change of more than one replica.
/// </summary>
public sealed class EmbeddedServiceTests
{
    private const ulong Directory = 99;

    /// <summary>Process i on endpoint i + 1 with its replica on 100 + i; process 0 founds the service and holds the well-known endpoint.</summary>
    private sealed class Machine : MemoryDriver
    {
        private readonly Queue<(ulong From, ulong To, byte[] Bytes)> _network = new();
        private readonly ProtocolOptions _options;

        /// <param name="systemKey">Seals every process's and replica's traffic, as IsisOptions.SystemKey does.</param>
        public Machine(byte[]? systemKey = null) => _options = new ProtocolOptions { ServiceReplicaTarget = 3, SystemKey = systemKey };

        public long Now;
        public readonly List<ProcessNode?> Processes = new();
        public readonly List<MembershipReplica?> Replicas = new();
        public readonly List<(int Process, NodeEvent Event, long At)> Events = new();

        public int Start()
        {
            int i = Processes.Count;
            var self = new NodeId((ulong)i + 1, 1);
            var replica = new NodeId(100 + (ulong)i, 1);
            bool founder = i == 0;
            Replicas.Add(new MembershipReplica(replica, founder ? [replica] : [], _options, Now, host: self));
            Processes.Add(new ProcessNode(self, founder ? [replica.Endpoint] : [Directory], _options, Now, replica, discover: !founder));
            Drain();
            return i;
        }

        public void Crash(int i)
        {
            Processes[i] = null;
            Replicas[i] = null;
        }

        /// <summary>Processes cut off from everyone (their replicas too): every packet to or from them is lost.</summary>
        public readonly HashSet<int> Cut = new();

        private static int ProcessIndexOf(ulong endpoint) => endpoint == Directory ? 0 : endpoint >= 100 ? (int)(endpoint - 100) : (int)endpoint - 1;

        public MembershipReplica Leader => Replicas.Single(r => r != null && r.IsActiveLeader && !Cut.Contains(Replicas.IndexOf(r)))!;

        public int HostOf(MembershipReplica r) => Replicas.IndexOf(r);

        public void Run(long micros, Func<bool>? until = null)
        {
            long end = Now + micros;
            while (Now < end && !(until?.Invoke() ?? false))
            {
                Now += 1_000;
                foreach (MembershipReplica? r in Replicas) r?.Tick(Now);
                foreach (ProcessNode? p in Processes) p?.Tick(Now);
                Drain();
            }
        }

        private void Drain()
        {
            for (int round = 0; round < 1000; round++)
            {
                for (int i = 0; i < Processes.Count; i++)
                {
                    Collect(i, Replicas[i]);
                    Collect(i, Processes[i]);
                }
                if (_network.Count == 0) return;
                while (_network.TryDequeue(out var env))
                {
                    if (Cut.Contains(ProcessIndexOf(env.From)) || Cut.Contains(ProcessIndexOf(env.To))) continue;
                    if (env.To == Directory) Processes[0]?.Receive(env.From, env.Bytes, Now);
                    else if (env.To >= 100) Replicas[(int)(env.To - 100)]?.Receive(env.From, env.Bytes, Now);
                    else Processes[(int)env.To - 1]?.Receive(env.From, env.Bytes, Now);
                }
            }
        }

        private void Collect(int i, IProtocolNode? node)
        {
            if (node == null) return;
            _asked.Clear();
            Step(node);
            StateRequested[] asked = [.. _asked];
            foreach (StateRequested r in asked)
            {
                ((ProcessNode)node).SendStateChunk(r.Group, r.CutViewId, [], last: true, Now); // no checkpoint handlers: an empty checkpoint
                Collect(i, node);
            }
        }

        private readonly List<StateRequested> _asked = new();

        protected override void Transmit(ulong from, in OutboundPacket packet) => _network.Enqueue((from, packet.Destination, packet.Bytes.ToArray()));

        protected override void Handle(IProtocolNode node, NodeEvent e, long time)
        {
            Events.Add((ProcessIndexOf(node.Endpoint), e, Now));
            if (e is StateRequested r) _asked.Add(r);
        }
    }

    /// <summary>Drives a newcomer nobody answers by its own deadlines: when it gave up, how often it asked the directory, why, and when it said it was still looking.</summary>
    private static (long GaveUpAt, int Asked, string Reason, List<(long At, ServiceNotFoundYet Event)> StillLooking) LookForAbsentService(ProtocolOptions options)
    {
        var node = new ProcessNode(new NodeId(1, 1), [Directory], options, 0, new NodeId(100, 1), discover: true);
        int asked = 0;
        var stillLooking = new List<(long, ServiceNotFoundYet)>();
        void Drain(long at)
        {
            NodeOutputs step = node.TakeOutputs();
            asked += step.To(Directory).Count;
            stillLooking.AddRange(step.Events.OfType<ServiceNotFoundYet>().Select(e => (at, e)));
        }
        Drain(0);
        long now = 0;
        while (!node.IsShutDown)
        {
            now = node.NextDeadline;
            Assert.True(now < 60_000_000, "the newcomer never gives up");
            node.Tick(now);
            Drain(now);
        }
        return (now, asked, node.ShutdownReason!, stillLooking);
    }

    [Fact]
    public void A_newcomer_keeps_asking_for_the_service_until_the_discovery_timeout_not_the_isolation_timeout()
    {
        // A member that hears nothing for the isolation timeout must stop (it may have been expelled);
        // a newcomer has no membership to guard and waits out a founder that is slow to start.
        var options = new ProtocolOptions { DiscoveryTimeout = 4_000_000 };
        (long gaveUpAt, int asked, string reason, var stillLooking) = LookForAbsentService(options);
        Assert.InRange(gaveUpAt, options.DiscoveryTimeout, options.DiscoveryTimeout + 3 * options.HeartbeatInterval);
        Assert.True(asked >= options.DiscoveryTimeout / options.HeartbeatInterval, $"asked {asked} times in {gaveUpAt} us");
        Assert.Contains("no membership service answered within 4", reason);
        Assert.Contains("1 addresses asked", reason);
        // Where a member would have stopped, the newcomer says once that it is still looking.
        var (at, told) = Assert.Single(stillLooking);
        Assert.Equal(options.IsolationTimeout + 1, at);
        Assert.Equal(options.IsolationTimeout + 1, told.Waited);
        Assert.Equal(1, told.AddressesAsked);

        // Never shorter than the isolation timeout, and then nothing to announce before the shutdown.
        (gaveUpAt, _, _, stillLooking) = LookForAbsentService(new ProtocolOptions { DiscoveryTimeout = 1 });
        Assert.InRange(gaveUpAt, options.IsolationTimeout, options.IsolationTimeout + 3 * options.HeartbeatInterval);
        Assert.Empty(stillLooking);
    }

    [Fact]
    public void A_newcomer_told_of_a_dead_service_by_a_process_looks_again_and_may_found_only_after_the_founding_wait()
    {
        // The overlapping-restart livelock: a process that still held the configuration of a service
        // that had just died passed it on; the newcomer must not stay tied to replicas that never
        // answer, and, once it has asked everything for the founding wait, may found (the driver
        // adds the machine's part of the rule: the well-known port and the replica file).
        var options = new ProtocolOptions();
        var self = new NodeId(1, 1);
        var replica = new NodeId(100, 1);
        var node = new ProcessNode(self, [Directory], options, 0, replica, discover: true);
        node.TakeOutputs();
        Assert.Equal(node.FoundingWait, node.MayFoundServiceAt);
        Assert.False(EmbeddedFounding.MayFound(node, node.FoundingWait - 1, atStart: false, true, true, false, ProtocolMutations.None));

        // A process (endpoint 7, not a replica) answers with the configuration of a dead service.
        long now = 50_000;
        byte[] config = new Isis.Core.Wire.PacketWriter().Begin(new Isis.Core.Wire.PacketHeader(PacketKind.ServiceConfiguration, new NodeId(7, 3), default, 0, 57))
            .Nodes([new NodeId(200, 0), new NodeId(201, 0), new NodeId(202, 0)]).Finish();
        node.Receive(7, config, now);
        Assert.False(node.Discovering);
        Assert.Equal(long.MaxValue, node.MayFoundServiceAt);
        // It was never admitted: it passes that configuration on to nobody.
        node.TakeOutputs();
        node.Receive(8, new Isis.Core.Wire.PacketWriter().Begin(new Isis.Core.Wire.PacketHeader(PacketKind.Discover, new NodeId(8, 1), default, 0, 0)).Finish(), now);
        Assert.Empty(node.TakeOutputs().To(8));

        // Nobody of that service ever answers: it looks again after the founding wait, not stopping as "isolated".
        while (!node.Discovering)
        {
            now = node.NextDeadline;
            Assert.True(now <= 50_000 + node.FoundingWait + 1, "it stays tied to replicas that never answer");
            node.Tick(now);
            node.TakeOutputs();
        }
        Assert.False(node.IsShutDown);
        Assert.True(EmbeddedFounding.MayFound(node, now, atStart: false, holdsWellKnownPort: true, seedsAllow: true, replicaOnFileMayBeAlive: false, ProtocolMutations.None));
        Assert.False(EmbeddedFounding.MayFound(node, now, atStart: false, holdsWellKnownPort: false, seedsAllow: true, replicaOnFileMayBeAlive: false, ProtocolMutations.None));
        Assert.False(EmbeddedFounding.MayFound(node, now, atStart: false, holdsWellKnownPort: true, seedsAllow: false, replicaOnFileMayBeAlive: false, ProtocolMutations.None));
        Assert.False(EmbeddedFounding.MayFound(node, now, atStart: false, holdsWellKnownPort: true, seedsAllow: true, replicaOnFileMayBeAlive: true, ProtocolMutations.None));

        // It founds: its own replica, founding, answers it, and it takes part in the service.
        var founded = new MembershipReplica(replica, [replica], options, now, host: self);
        node.FoundService(now);
        Assert.False(node.Discovering);
        Assert.Equal([replica.Endpoint], node.ServiceReplicas);
        NodeOutputs founding = node.TakeOutputs();
        Assert.Contains(founding.Events, e => e is ServiceConfigurationChanged { Version: 0 });
        List<byte[]> heartbeats = founding.To(replica.Endpoint);
        Assert.NotEmpty(heartbeats);
        foreach (byte[] h in heartbeats) founded.Receive(self.Endpoint, h, now + 10);
        foreach (byte[] p in founded.TakeOutputs().To(self.Endpoint)) node.Receive(replica.Endpoint, p, now + 20);
        Assert.True(node.LeaseHeld);
    }

    [Fact]
    public void A_founder_whose_replica_is_slow_to_answer_first_waits_like_a_newcomer_not_like_an_isolated_member()
    {
        // "no membership replica answered within 2057 ms" right after founding, on a loaded machine:
        // a founder never admitted yet has no lease to guard.
        var options = new ProtocolOptions { DiscoveryTimeout = 4_000_000 };
        var replica = new NodeId(100, 1);
        var node = new ProcessNode(new NodeId(1, 1), [replica.Endpoint], options, 0, replica, directory: [Directory]);
        long now = 0;
        while (!node.IsShutDown)
        {
            now = node.NextDeadline;
            node.Tick(now);
            node.TakeOutputs();
        }
        Assert.InRange(now, options.DiscoveryTimeout, options.DiscoveryTimeout + 3 * options.HeartbeatInterval);
        Assert.Contains("no membership replica answered", node.ShutdownReason);
    }

    [Fact]
    public void The_service_grows_from_one_replica_to_three_in_one_step_and_every_process_learns_them()
    {
        var m = new Machine();
        for (int i = 0; i < 4; i++) m.Start();
        m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);

        Assert.Equal(3, m.Leader.Configuration.Count);
        // Committed configurations, in log order, as the founder applied them: 1 -> 3, never a
        // configuration of two (which needs both replicas to decide).
        int[] sizes = m.Events.Where(e => e.Process == 0 && e.Event is ServiceConfigurationChanged).Select(e => ((ServiceConfigurationChanged)e.Event).Replicas.Length).ToArray();
        Assert.Equal([3], sizes.Distinct());
        m.Run(300_000);
        ulong[] replicas = m.Leader.Configuration.Select(r => r.Replica.Endpoint).Order().ToArray();
        Assert.All(m.Processes, p => Assert.Equal(replicas, p!.ServiceReplicas.Order().ToArray()));
        Assert.All(m.Processes, p => Assert.False(p!.Discovering));
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)] // with a system key: an exit's HostRetiring once went sealed in a bundle, which replicas do not open
    public void A_leader_whose_host_exits_hands_over_and_is_replaced_without_an_election_timeout(bool sealedTraffic)
    {
        var m = new Machine(sealedTraffic ? [.. Enumerable.Range(0, 32).Select(i => (byte)(7 * i))] : null);
        for (int i = 0; i < 4; i++) m.Start();
        m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);
        MembershipReplica old = m.Leader;
        int host = m.HostOf(old);

        long asked = m.Now;
        m.Processes[host]!.RetireFromService(m.Now);
        m.Run(1_000_000, () => m.Events.Any(e => e.Process == host && e.Event is HostRetired));

        var retired = m.Events.Single(e => e.Process == host && e.Event is HostRetired);
        // Leadership transfer plus two configuration changes on a perfect network: a few milliseconds,
        // far below the 300 ms election timeout a crash would cost.
        Assert.True(retired.At - asked < 50_000, $"the handover took {(retired.At - asked) / 1000} ms");
        Assert.NotSame(old, m.Leader);
        Assert.DoesNotContain(m.Leader.Configuration, r => r.Replica == old.Self);
        m.Run(500_000, () => m.Leader.Configuration.Count == 3);
        Assert.Equal(3, m.Leader.Configuration.Count);
        Assert.DoesNotContain(m.Events, e => e.Event is NodeShutDown);
        Assert.All(m.Replicas, r => Assert.Equal(0, r?.Counters.DroppedMalformed ?? 0));
    }

    [Fact]
    public void A_crashed_hosts_replica_is_replaced_once_the_host_is_expelled()
    {
        var m = new Machine();
        for (int i = 0; i < 4; i++) m.Start();
        m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);
        MembershipReplica leader = m.Leader;
        int victim = m.Replicas.FindIndex(r => r != null && r != leader && leader.Configuration.Any(c => c.Replica == r.Self));
        NodeId gone = m.Replicas[victim]!.Self;

        m.Crash(victim);
        m.Run(3_000_000, () => m.Leader.Configuration.Count == 3 && m.Leader.Configuration.All(r => r.Replica != gone));

        Assert.DoesNotContain(m.Leader.Configuration, r => r.Replica == gone);
        Assert.Equal(3, m.Leader.Configuration.Count);
        Assert.Equal(4, m.Leader.Configuration.Select(r => r.Host).Append(gone).Distinct().Count());
    }

    [Fact]
    public void When_every_process_exits_at_once_each_may_go_and_the_last_replicas_host_does_not_wait_for_a_successor()
    {
        var m = new Machine();
        for (int i = 0; i < 4; i++) m.Start();
        m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);

        for (int i = 0; i < 4; i++) m.Processes[i]!.RetireFromService(m.Now);
        m.Run(1_000_000, () => Enumerable.Range(0, 4).All(i => m.Events.Any(e => e.Process == i && e.Event is HostRetired)));

        // Nobody is left to take a replica: the other replicas are removed one step at a time, and
        // the leader's own host is released last instead of waiting for a process that will not come.
        Assert.All(Enumerable.Range(0, 4), i => Assert.Contains(m.Events, e => e.Process == i && e.Event is HostRetired));
        Assert.Single(m.Leader.Configuration);
        Assert.DoesNotContain(m.Events, e => e.Event is NodeShutDown);
    }

    [Fact]
    public void A_process_that_handed_over_and_went_silent_is_expelled_as_an_exit_and_a_crashed_one_as_a_failure()
    {
        var m = new Machine();
        for (int i = 0; i < 4; i++) m.Start();
        m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);
        int leaderHost = m.HostOf(m.Leader);
        int[] others = Enumerable.Range(0, 4).Where(i => i != leaderHost).ToArray();
        NodeId exiting = m.Processes[others[0]]!.Self, crashed = m.Processes[others[1]]!.Self;

        m.Processes[others[0]]!.RetireFromService(m.Now);
        m.Run(1_000_000, () => m.Events.Any(e => e.Process == others[0] && e.Event is HostRetired));
        m.Crash(others[0]); // it left (no groups here) and stopped: silent from now on, like a crash
        m.Crash(others[1]);
        m.Run(3_000_000, () => m.Leader.IsExpelled(exiting) && m.Leader.IsExpelled(crashed));

        var expulsions = m.Events.Where(e => e.Process == leaderHost && e.Event is IncarnationExpelled).Select(e => (IncarnationExpelled)e.Event).ToList();
        Assert.Contains(new IncarnationExpelled(exiting, AfterExit: true), expulsions);
        Assert.Contains(new IncarnationExpelled(crashed, AfterExit: false), expulsions);
    }

    [Fact]
    public void A_crashed_leaders_host_is_expelled_about_as_soon_as_any_crashed_process()
    {
        // Virtual time on a perfect network: from each crash to the expulsion the (new) leader decides.
        long ExpelledAfterCrash(bool leadersHost)
        {
            var m = new Machine();
            for (int i = 0; i < 5; i++) m.Start();
            m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);
            MembershipReplica leader = m.Leader;
            int victim = leadersHost ? m.HostOf(leader) : m.Replicas.FindIndex(r => r != null && leader.Configuration.All(c => c.Replica != r.Self));
            NodeId gone = m.Processes[victim]!.Self;
            long crashedAt = m.Now;
            m.Crash(victim);
            m.Run(5_000_000, () => m.Events.Any(e => e.Event is IncarnationExpelled x && x.Node == gone));
            return m.Events.First(e => e.Event is IncarnationExpelled x && x.Node == gone).At - crashedAt;
        }

        long plain = ExpelledAfterCrash(leadersHost: false), leaders = ExpelledAfterCrash(leadersHost: true);
        var options = new ProtocolOptions();
        // The election (at least one election timeout) overlaps the detection: the silence the new
        // leader observed counts, so only a heartbeat period or two is added, not a whole detection time.
        Assert.True(leaders <= plain + options.ReplicaElectionTimeout, $"a plain process was expelled {plain / 1000} ms after its crash, the leader's host {leaders / 1000} ms");
        Assert.True(leaders < options.ReplicaElectionTimeout * 2 + options.SuspicionCount * options.HeartbeatInterval,
            $"the leader's host was expelled {leaders / 1000} ms after its crash: the election and a full detection period added up");
    }

    [Fact]
    public void A_leader_whose_host_exits_while_another_replica_is_cut_off_hands_over_to_a_reachable_one_and_never_loses_its_majority()
    {
        var m = new Machine();
        for (int i = 0; i < 5; i++) m.Start();
        m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);
        MembershipReplica leader = m.Leader;
        int exiting = m.HostOf(leader);
        int cut = m.Replicas.FindIndex(r => r != null && r != leader && leader.Configuration.Any(c => c.Replica == r.Self));
        NodeId cutProcess = m.Processes[cut]!.Self;
        m.Cut.Add(cut);

        // Removing the exiting leader's replica first would leave {other, cut}: a configuration whose
        // majority needs the cut-off replica. The service must wait for the cut-off host's expulsion instead.
        m.Processes[exiting]!.RetireFromService(m.Now);
        m.Run(5_000_000, () => m.Events.Any(e => e.Process == exiting && e.Event is HostRetired));

        Assert.Contains(m.Events, e => e.Process == exiting && e.Event is HostRetired);
        MembershipReplica now = m.Leader;
        Assert.True(now.IsExpelled(cutProcess), "the cut-off host is expelled; events: " + string.Join("\n", m.Events.Where(e => e.Event is not DecisionApplied and not DecisionCommitted).Select(e => $"{e.At} p{e.Process} {(e.Event is ServiceConfigurationChanged c ? $"config {c.Version}: {string.Join(",", c.Replicas)}" : e.Event.ToString())}")) + $"\ncut {cut} exiting {exiting} leader now p{m.HostOf(now)} config {string.Join(",", now.Configuration)}");
        Assert.DoesNotContain(now.Configuration, r => r.Host == cutProcess || r.Host == m.Processes[exiting]!.Self);
        // Nobody but the cut-off process was expelled: the handover stalled no one's heartbeats into an expulsion.
        Assert.All(m.Events.Where(e => e.Event is IncarnationExpelled).Select(e => ((IncarnationExpelled)e.Event).Node), n => Assert.Equal(cutProcess, n));
        Assert.DoesNotContain(m.Events, e => e.Event is NodeShutDown && e.Process != cut);
        m.Run(1_000_000, () => now.Configuration.Count == 3);
        Assert.Equal(3, now.Configuration.Count);
    }

    [Fact]
    public void The_log_refuses_a_configuration_that_changes_two_replicas_at_once()
    {
        var m = new Machine();
        for (int i = 0; i < 4; i++) m.Start();
        m.Run(2_000_000, () => m.Leader.Configuration.Count == 3);
        Assert.True(ReplicatedLog.OneStepApart([new(1, 1), new(2, 1)], [new(1, 1), new(2, 1), new(3, 1)]));
        Assert.False(ReplicatedLog.OneStepApart([new(1, 1), new(2, 1), new(3, 1)], [new(1, 1), new(2, 1), new(4, 1)]));
        Assert.False(ReplicatedLog.OneStepApart([new(1, 1)], [new(1, 1), new(2, 1), new(3, 1)]));
    }
}
