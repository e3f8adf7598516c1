using System.Collections.Concurrent;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>
/// The zero-configuration membership service, as runtimes in one process use it (the
/// multi-process tests do the same with real processes and signals): it replicates itself among
/// the member processes, and no process, the first one included, is essential.
/// </summary>
public sealed class EmbeddedServiceTests
{
    private sealed class Cluster : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<IsisRuntime> Processes = new();
        public readonly List<Group> Groups = new();
        public readonly ConcurrentDictionary<(int Receiver, int Sender), int> LastDelivered = new();
        public volatile bool FifoBroken;
        public readonly CapturingLoggerFactory Log = new();

        public IsisRuntime Add(int replicas = 3)
        {
            IsisRuntime r = Runtimes.Start(o =>
            {
                o.LoggerFactory = Log;
                o.EmbeddedServiceReplicas = replicas;
            });
            int index = Processes.Count;
            var g = new Group(r, "embedded");
            g.Handlers[1] += (Action<int, int>)((sender, n) =>
            {
                // A member that joined late starts wherever each sender was; from then on, one by one.
                if (LastDelivered.TryGetValue((index, sender), out int last) && n != last + 1) FifoBroken = true;
                LastDelivered[(index, sender)] = n;
            });
            g.Join();
            Processes.Add(r);
            Groups.Add(g);
            return r;
        }

        public IEnumerable<int> Live => Enumerable.Range(0, Processes.Count).Where(i => Processes[i].IsRunning);

        public void WaitForView(int size) =>
            TestRuntimes.WaitUntil(() => Live.All(i => Groups[i].GetView()?.Members.Length == size), $"every live member installs a view of {size}");

        public void WaitForReplicas(int count) =>
            TestRuntimes.WaitUntil(() => Live.Count(i => Processes[i].HostsMembershipService) == count, $"the service runs {count} replicas on live processes");

        private readonly ConcurrentDictionary<int, int> _sent = new();

        /// <summary>Each live member sends <paramref name="count"/> more; waits until every live member delivered all of them.</summary>
        public void SendRound(int count)
        {
            int[] live = Live.ToArray();
            foreach (int i in live)
            {
                for (int k = 0; k < count; k++) Groups[i].Send(1, i, _sent.AddOrUpdate(i, 1, (_, n) => n + 1));
            }
            TestRuntimes.WaitUntil(() => live.All(r => live.All(s => LastDelivered.GetValueOrDefault((r, s)) == _sent[s])), "every live member delivers the round");
            Assert.False(FifoBroken, "a member delivered out of FIFO order");
        }

        public void Dispose() => Runtimes.Dispose();
    }

    [Fact]
    public void The_service_grows_to_three_replicas_on_distinct_processes_and_the_first_one_founds_it()
    {
        using var c = new Cluster();
        IsisRuntime first = c.Add();
        Assert.True(first.HostsMembershipService, "the first process founds the service");
        for (int i = 1; i < 5; i++) c.Add();
        c.WaitForView(5);
        c.WaitForReplicas(3);
        var endpoints = c.Processes.Where(p => p.HostsMembershipService).Select(p => p.HostedMembershipReplica!).ToList();
        Assert.Equal(3, endpoints.Distinct().Count());
        // Every process knows the same replicas, and so does the machine's directory file.
        TestRuntimes.WaitUntil(() => c.Processes.All(p => p.Loop!.Node.ServiceReplicas.Count == 3), "every process learns the three replicas");
        (long version, var onFile) = ServiceDirectoryFile.Read(c.Processes[0].Options.EmbeddedDirectoryPath);
        Assert.True(version > 0);
        Assert.Equal(endpoints.OrderBy(e => e.Port), onFile.OrderBy(e => e.Port));
        c.SendRound(100);
    }

    [Fact]
    public void Five_replicas_survive_two_replica_hosts_crashing_at_once()
    {
        using var c = new Cluster();
        for (int i = 0; i < 7; i++) c.Add(replicas: 5);
        c.WaitForView(7);
        c.WaitForReplicas(5);
        c.SendRound(50);

        // Two of the five at once, the founder among them: three of five are still a majority.
        IsisRuntime[] hosts = [.. c.Processes.Where(p => p.HostsMembershipService).Take(2)];
        Assert.Contains(c.Processes[0], hosts);
        foreach (IsisRuntime host in hosts) host.Crash();
        c.WaitForView(5);
        Assert.All(c.Live, i => Assert.Null(c.Processes[i].ShutdownReason));
        c.SendRound(50);
        c.WaitForReplicas(5); // back to five, on the two processes that hosted none
        c.Add(replicas: 5);
        c.WaitForView(6);
        c.SendRound(50);
    }

    [Fact]
    public void The_group_survives_a_crash_of_the_first_process_and_a_newcomer_still_finds_the_service()
    {
        using var c = new Cluster();
        for (int i = 0; i < 4; i++) c.Add();
        c.WaitForView(4);
        c.WaitForReplicas(3);
        c.SendRound(200);

        c.Processes[0].Crash(); // the founder: it held the well-known port and the first replica
        c.WaitForView(3);
        Assert.All(c.Live, i => Assert.Null(c.Processes[i].ShutdownReason));
        c.SendRound(200);
        // Its replica moves to the remaining process that hosted none.
        c.WaitForReplicas(3);

        // Somebody took the well-known port over, and a new process finds the service through it.
        TestRuntimes.WaitUntil(() => c.Live.Any(i => c.Processes[i].Loop!.HoldsWellKnownPort), "a live process holds the well-known port");
        IsisRuntime late = c.Add();
        Assert.False(late.Loop!.Founded, "a newcomer must join the running service, not found another");
        c.WaitForView(4);
        c.SendRound(100);
    }

    [Fact]
    public void A_graceful_exit_of_the_leaders_host_moves_its_replica_first_and_nobody_waits_for_failure_detection()
    {
        using var c = new Cluster();
        for (int i = 0; i < 4; i++) c.Add();
        c.WaitForView(4);
        c.WaitForReplicas(3);
        int leader = c.Live.Single(i => c.Processes[i].GetStatistics().MembershipReplicaIsLeader);
        var shutdowns = new ConcurrentQueue<string>();
        foreach (IsisRuntime p in c.Processes) p.ShutDown += (_, e) => shutdowns.Enqueue(e.Reason);

        IsisRuntime leaver = c.Processes[leader];
        var replicaOfLeaver = leaver.HostedMembershipReplica!;
        leaver.Shutdown();
        Assert.False(leaver.HostsMembershipService);
        // Before it went, the service's configuration (as every survivor knows it) no longer listed its replica.
        ulong gone = Isis.Transport.EndpointConversions.FromIPEndPoint(replicaOfLeaver);
        Assert.All(c.Live, i => Assert.DoesNotContain(gone, c.Processes[i].Loop!.Node.ServiceReplicas));
        c.WaitForView(3);
        // The leaver is out of the view by a leave: every survivor saw it leave, and nobody was expelled.
        Assert.All(c.Live, i => Assert.Contains(c.Processes[leader].Address!, c.Groups[i].GetView()!.Leavers));
        c.WaitForReplicas(3);
        c.SendRound(100);
        Assert.Empty(shutdowns);
        Assert.DoesNotContain(c.Log.Lines, l => l.Contains("did not move") || l.Contains("isolated") || l.Contains("expelled"));
    }

    [Fact]
    public void When_every_process_is_gone_the_next_one_founds_a_fresh_service()
    {
        using var c = new Cluster();
        for (int i = 0; i < 3; i++) c.Add();
        c.WaitForView(3);
        c.WaitForReplicas(3);
        foreach (IsisRuntime p in c.Processes) p.Crash();

        // The directory file still lists the dead replicas, but their ports are free: nobody can answer.
        IsisRuntime next = c.Runtimes.Start();
        Assert.True(next.Loop!.Founded);
        var g = new Group(next, "embedded");
        g.Join();
        Assert.Single(g.GetView()!.Members);
    }

    [Fact]
    public void Across_machines_the_seeds_find_the_service_and_a_restarted_first_seed_does_not_found_another()
    {
        // Two "machines" on loopback, told apart by their well-known ports; the seeds list both, A first.
        using var runtimes = new TestRuntimes();
        int portA = TestRuntimes.FreeUdpPort(), portB = TestRuntimes.FreeUdpPort();
        System.Net.IPEndPoint[] seeds = [new(System.Net.IPAddress.Loopback, portA), new(System.Net.IPAddress.Loopback, portB)];
        IsisRuntime Start(int port) => runtimes.Start(o => { o.MembershipServicePort = port; foreach (var s in seeds) o.MembershipSeeds.Add(s); });

        IsisRuntime a = Start(portA);
        Assert.True(a.Loop!.Founded, "the first seed's machine founds the service");
        IsisRuntime b1 = Start(portB), b2 = Start(portB);
        Assert.False(b1.Loop!.Founded || b2.Loop!.Founded, "another machine never founds while seeds are listed");
        var groups = new[] { a, b1, b2 }.Select(r => { var g = new Group(r, "seeded"); g.Join(); return g; }).ToList();
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "three members on two machines");
        TestRuntimes.WaitUntil(() => new[] { a, b1, b2 }.All(r => r.HostsMembershipService), "a replica on each process");

        // Machine A's process dies; a new one there holds A's well-known port again, but A's replica
        // file names live replicas, so it looks for the running service instead of founding one.
        a.Crash();
        TestRuntimes.WaitUntil(() => groups.Skip(1).All(g => g.GetView()?.Members.Length == 2), "the survivors on machine B go on");
        IsisRuntime a2 = Start(portA);
        Assert.False(a2.Loop!.Founded, "a restarted first seed must join the running service");
        var g2 = new Group(a2, "seeded");
        g2.Join();
        TestRuntimes.WaitUntil(() => groups.Skip(1).Append(g2).All(g => g.GetView()?.Members.Length == 3), "the restarted process joins");
    }

    [Fact]
    public void A_process_that_finds_no_service_and_may_not_found_one_stops_and_says_where_it_looked()
    {
        using var runtimes = new TestRuntimes();
        int elsewhere = TestRuntimes.FreeUdpPort();
        var stderr = new StringWriter();
        IsisRuntime lone = runtimes.Start(o =>
        {
            o.MembershipSeeds.Add(new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, elsewhere));
            o.DiscoveryTimeout = TimeSpan.FromSeconds(3);
            o.StandardError = TextWriter.Synchronized(stderr); // no logger configured: warnings go there
        });
        Assert.False(lone.Loop!.Founded);
        // Past the isolation timeout (1 s here) it still looks, a newcomer has nothing to guard, and says so.
        Thread.Sleep(1_500);
        Assert.Null(lone.ShutdownReason);
        TestRuntimes.WaitUntil(() => stderr.ToString().Contains("still asking for up to 3000 ms"), "the wait is visible without a logger");
        Assert.Contains("isis: warn:", stderr.ToString());
        TestRuntimes.WaitUntil(() => lone.ShutdownReason != null, "the lone process gives up");
        Assert.Contains("no membership service answered", lone.ShutdownReason);
        Assert.Contains("seeds", lone.ShutdownReason);
    }

    [Fact]
    public void A_stale_replica_file_naming_the_port_this_process_now_holds_does_not_stop_it_founding()
    {
        // An earlier run's replica had an ephemeral port that this run took as its well-known port
        // (CI saw it: a free port drawn for a test, its file left by a run killed hours before).
        // The port is in use, by this very process, which must not wait for itself.
        using var runtimes = new TestRuntimes();
        IsisOptions options = runtimes.Options();
        Assert.Null(ServiceDirectoryFile.Write(options.EmbeddedDirectoryPath, 4, [options.WellKnownEndPoint], force: true));

        IsisRuntime first = runtimes.Start();
        Assert.True(first.Loop!.Founded, "the well-known port's holder founds");
        Assert.Null(first.Loop.FoundingDeferredBecause);
        var g = new Group(first, "afresh");
        g.Join();
        Assert.Single(g.GetView()!.Members);
    }

    [Fact]
    public void A_replica_file_naming_ports_that_other_programs_hold_now_is_named_in_the_error_and_deleting_it_lets_a_process_found()
    {
        // Every process of an earlier run was killed, and another program took one of its replicas'
        // ports since: the first process cannot tell that program from a live replica.
        using var runtimes = new TestRuntimes();
        using var stranger = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Dgram, System.Net.Sockets.ProtocolType.Udp);
        stranger.Bind(new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, 0));
        string file = runtimes.Options().EmbeddedDirectoryPath;
        Assert.Null(Isis.Runtime.ServiceDirectoryFile.Write(file, 4, [(System.Net.IPEndPoint)stranger.LocalEndPoint!], force: true));

        IsisRuntime first = runtimes.Start(o => o.DiscoveryTimeout = TimeSpan.FromSeconds(2));
        Assert.False(first.Loop!.Founded);
        TestRuntimes.WaitUntil(() => first.ShutdownReason != null, "the process gives up");
        Assert.Contains("no membership service answered", first.ShutdownReason);
        Assert.Contains(file, first.ShutdownReason);
        Assert.Contains(stranger.LocalEndPoint!.ToString()!, first.ShutdownReason);
        Assert.Contains("delete that file", first.ShutdownReason);

        first.Dispose(); // the stopped process exits, as a user's would, releasing the well-known port
        File.Delete(file);
        IsisRuntime next = runtimes.Start();
        Assert.True(next.Loop!.Founded);
        var g = new Group(next, "afresh");
        g.Join();
        Assert.Single(g.GetView()!.Members);
    }

    [Fact]
    public async Task With_a_system_key_exits_hand_their_replicas_over_and_a_process_started_right_after_finds_the_service()
    {
        // Regression: the process sealed its HostRetiring and Discover packets into bundles, which
        // only processes open; the replicas dropped them as malformed, so no exit handed over, and a
        // process that took the well-known port from the one that had just exited found nobody.
        using var runtimes = new TestRuntimes();
        byte[] key = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
        var stderr = new StringWriter();
        TextWriter shared = TextWriter.Synchronized(stderr);
        (IsisRuntime Runtime, Group Group) Start()
        {
            IsisRuntime r = runtimes.Start(o => { o.SystemKey = key; o.StandardError = shared; });
            return (r, new Group(r, "sealed-service"));
        }
        var members = Enumerable.Range(0, 3).Select(_ => Start()).ToList();
        foreach (var m in members) await m.Group.JoinAsync();
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 3) && members.All(m => m.Runtime.HostsMembershipService), "three members, a replica on each");

        for (int i = 0; i < 3; i++) // the first one, which holds the well-known port, included
        {
            members[i].Runtime.Shutdown();
            members[i] = Start();
            await members[i].Group.JoinAsync().WaitAsync(TimeSpan.FromSeconds(30));
            TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 3), $"restart {i}: three members again");
        }
        Assert.DoesNotContain("did not move this process's replica", stderr.ToString());
        Assert.DoesNotContain("Dropped", stderr.ToString()); // nothing of ours read as hostile input
    }

    [Fact]
    public async Task A_machine_started_before_the_first_seed_waits_for_it_and_joins_the_service_it_founds()
    {
        // Two "machines" on loopback, told apart by their well-known ports; B comes up first and may
        // not found the service (A is the first seed), so it keeps asking until A is up.
        using var runtimes = new TestRuntimes();
        int portA = TestRuntimes.FreeUdpPort(), portB = TestRuntimes.FreeUdpPort();
        System.Net.IPEndPoint[] seeds = [new(System.Net.IPAddress.Loopback, portA), new(System.Net.IPAddress.Loopback, portB)];
        IsisRuntime Start(int port) => runtimes.Start(o => { o.MembershipServicePort = port; foreach (var s in seeds) o.MembershipSeeds.Add(s); });

        IsisRuntime b = Start(portB);
        var gb = new Group(b, "late-seed");
        Task joinB = gb.JoinAsync();
        await Task.Delay(2_000); // twice the isolation timeout of these runtimes
        Assert.Null(b.ShutdownReason);
        Assert.False(joinB.IsCompleted);

        IsisRuntime a = Start(portA);
        Assert.True(a.Loop!.Founded);
        var ga = new Group(a, "late-seed");
        ga.Join();
        await joinB.WaitAsync(TimeSpan.FromSeconds(20)); // B joins once A founded the service
        TestRuntimes.WaitUntil(() => ga.GetView()?.Members.Length == 2 && gb.GetView()?.Members.Length == 2, "one view of both machines");
    }

    [Fact]
    public void The_last_process_stops_without_waiting_for_a_handover()
    {
        using var runtimes = new TestRuntimes();
        var log = new CapturingLoggerFactory();
        IsisRuntime only = runtimes.Start(o => o.LoggerFactory = log);
        var g = new Group(only, "alone");
        g.Join();
        only.Shutdown();
        Assert.DoesNotContain(log.Lines, l => l.Contains("did not move"));
        Assert.Contains(log.Lines, l => l.Contains("stopped"));
    }
}
