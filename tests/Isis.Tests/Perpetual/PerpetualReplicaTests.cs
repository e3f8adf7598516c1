using System.Collections.Concurrent;
using Isis.Perpetual;

namespace Isis.Tests.Perpetual;

/// <summary>
/// The Perpetual programming model over real UDP on loopback: replicated services of four replicas
/// whose deterministic loops receive requests, call another replicated service, and answer, with
/// agreed time and random values; a client that accepts f+1 matching replies.
/// </summary>
public sealed class PerpetualReplicaTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    /// <summary>A bank: adds each amount to a total and answers the total with the agreed clock and random values of the moment.</summary>
    private static async Task Bank(PerpetualReplica r, ConcurrentDictionary<int, ConcurrentQueue<string>>? seen = null, int wrongAt = -1)
    {
        long total = 0;
        while (true)
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            long amount = request.Read<long>();
            if (amount < 0) continue; // never answered: the caller's timeout aborts it
            total += amount;
            long[] answer = [r.Index == wrongAt ? total + 1_000_003 : total, r.CurrentTime.UtcTicks, r.Random.NextInt64(), r.Timestamp().UtcTicks, r.Timestamp().UtcTicks];
            seen?.GetOrAdd(r.Index, _ => new()).Enqueue(string.Join(",", answer.Skip(1)) + " from " + request.From);
            r.SendReply(answer, request);
        }
    }

    /// <summary>A gateway: passes each amount to the bank synchronously and answers what the bank said, or [-1] if the call was aborted.</summary>
    private static async Task Gateway(PerpetualReplica r)
    {
        while (true)
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            PerpetualReply reply = await r.SendReceiveAsync("bank", request.Read<long>(), TimeSpan.FromMilliseconds(500));
            r.SendReply(reply.Aborted ? [-1L] : reply.Read<long[]>(), request);
        }
    }

    private static T Await<T>(Task<T> task) => task.WaitAsync(Patience).GetAwaiter().GetResult();

    [Fact]
    public void A_service_calls_a_service_and_every_replica_agrees_on_the_result_the_clock_and_the_random_values()
    {
        using var d = new PerpetualTestDeployment(("gateway", 4), ("bank", 4));
        var seen = new ConcurrentDictionary<int, ConcurrentQueue<string>>();
        d.Start("bank", r => Bank(r, seen));
        d.Start("gateway", Gateway);
        PerpetualClient client = d.Client("gateway");

        long expected = 0, lastTime = 0;
        var randoms = new HashSet<long>();
        for (int i = 1; i <= 10; i++)
        {
            long[] answer = Await(client.InvokeAsync<long, long[]>(i));
            expected += i;
            Assert.Equal(expected, answer[0]);
            Assert.True(answer[1] > lastTime, "the agreed clock goes forward");
            Assert.InRange(DateTimeOffset.UtcNow.UtcTicks - answer[1], 0, TimeSpan.FromMinutes(1).Ticks);
            Assert.True(answer[4] > answer[3] && answer[3] >= answer[1], "timestamps are unique and not before the clock");
            lastTime = answer[1];
            randoms.Add(answer[2]);
        }
        Assert.True(randoms.Count >= 9, "each request gets other random values");

        // Every bank replica computed the same clock, timestamps and random values, for the same caller.
        Assert.True(SpinWait.SpinUntil(() => seen.Count == 4 && seen.Values.All(q => q.Count == 10), Patience));
        string[] first = [.. seen[0]];
        Assert.All(seen.Values, q => Assert.Equal(first, q.ToArray()));
        Assert.All(first, line => Assert.EndsWith("from gateway", line));
        Assert.Equal(0, client.DivergentReplies);
        Assert.All(d.Replicas, r => Assert.True(r.Executed >= 10, $"{r.Service}[{r.Index}] executed {r.Executed} agreed inputs"));
    }

    [Fact]
    public void Hostile_packets_are_dropped_and_counted_and_the_service_goes_on()
    {
        using var d = new PerpetualTestDeployment(("bank", 4));
        IReadOnlyList<PerpetualReplica> bank = d.Start("bank", r => Bank(r));
        System.Net.IPEndPoint target = d.Deployment.ReplicasOf("bank")[1];
        var junk = new byte[64];
        new Random(5).NextBytes(junk);
        using (var raw = new System.Net.Sockets.UdpClient(new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, 0)))
        {
            for (int i = 0; i < 5; i++) raw.Send(junk, target); // not even framed as ours
        }
        using (var framed = Isis.Transport.TransportFactory.ForOwner(Isis.IsisTransport.Udp, PerpetualTestDeployment.Loopback(), new Isis.Transport.UdpTransportOptions()))
        {
            for (int i = 0; i < 16; i++)
            {
                junk[0] = 1;
                junk[1] = (byte)i; // every message kind, from a principal it names, with no valid authenticator
                framed.Enqueue(Isis.Transport.EndpointConversions.FromIPEndPoint(target), junk);
            }
            framed.Flush();
        }
        PerpetualClient client = d.Client("bank");
        Assert.Equal(7, Await(client.InvokeAsync<long, long[]>(7))[0]);
        Assert.True(SpinWait.SpinUntil(() => bank[1].DroppedPackets >= 21, Patience), $"dropped {bank[1].DroppedPackets}");
    }

    [Fact]
    public void Asynchronous_calls_complete_in_the_same_order_at_every_caller_replica()
    {
        using var d = new PerpetualTestDeployment(("gateway", 4), ("bank", 4));
        d.Start("bank", r => Bank(r));
        var orders = new ConcurrentDictionary<int, long[]>();
        IReadOnlyList<PerpetualReplica> gateways = d.Start("gateway", async r =>
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            int n = request.Read<int>();
            var calls = new List<PerpetualCall>();
            for (int i = 1; i <= n; i++) calls.Add(await r.SendAsync("bank", (long)i));
            // The last call by name first, then the others in whatever order they were agreed on.
            PerpetualReply last = await r.ReceiveReplyAsync(calls[^1]);
            var received = new List<long> { last.Call.Number };
            for (int i = 1; i < n; i++) received.Add((await r.ReceiveReplyAsync()).Call.Number);
            orders[r.Index] = [.. received];
            r.SendReply(received, request);
            Assert.Throws<InvalidOperationException>(() => r.ReceiveReplyAsync()); // nothing outstanding: it would wait for ever
        });
        PerpetualClient client = d.Client("gateway");

        List<long> order = Await(client.InvokeAsync<int, List<long>>(20));
        Assert.Equal(Enumerable.Range(1, 20).Select(i => (long)i).Order(), order.Order());
        Assert.Equal(20, order[0]);
        Assert.True(SpinWait.SpinUntil(() => orders.Count == 4, Patience));
        Assert.All(orders.Values, o => Assert.Equal(order, o));
        Assert.All(gateways, r => Assert.True(r.Completion.Wait(Patience) && r.Completion.IsCompletedSuccessfully)); // the loop returned
    }

    [Fact]
    public void A_call_nobody_answers_is_aborted_alike_at_every_caller_replica()
    {
        using var d = new PerpetualTestDeployment(("gateway", 4), ("bank", 4));
        d.Start("bank", r => Bank(r));
        var outcomes = new ConcurrentDictionary<int, string>();
        d.Start("gateway", async r =>
        {
            while (true)
            {
                PerpetualRequest request = await r.ReceiveRequestAsync();
                PerpetualReply reply = await r.SendReceiveAsync("bank", request.Read<long>(), TimeSpan.FromMilliseconds(300));
                if (!reply.Aborted)
                {
                    r.SendReply(reply.Read<long[]>()[0], request);
                    continue;
                }
                var e = Assert.Throws<PerpetualCallAbortedException>(() => reply.Read<long[]>());
                Assert.Same(reply.Call, e.Call);
                outcomes[r.Index] = $"{reply.Call.Target} {reply.Call.Number} aborted at {r.CurrentTime.UtcTicks}";
                r.SendReply(-1L, request);
            }
        });
        PerpetualClient client = d.Client("gateway");

        Assert.Equal(5, Await(client.InvokeAsync<long, long>(5)));
        Assert.Equal(-1, Await(client.InvokeAsync<long, long>(-7))); // the bank never answers a negative amount
        Assert.Equal(11, Await(client.InvokeAsync<long, long>(6))); // and goes on with the next
        Assert.True(SpinWait.SpinUntil(() => outcomes.Count == 4, Patience));
        Assert.Single(outcomes.Values.Distinct());
        Assert.StartsWith("bank 2 aborted", outcomes[0]);
    }

    [Fact]
    public void A_lying_target_replica_and_a_dead_caller_replica_change_no_result_and_the_lie_is_reported()
    {
        using var d = new PerpetualTestDeployment(("gateway", 4), ("bank", 4));
        IReadOnlyList<PerpetualReplica> banks = d.Start("bank", r => Bank(r, wrongAt: 3)); // bank replica 3 adds a million to every total it sends
        IReadOnlyList<PerpetualReplica> gateways = d.Start("gateway", Gateway);
        PerpetualClient client = d.Client("gateway");

        long expected = 0;
        for (int i = 1; i <= 12; i++)
        {
            if (i == 6) gateways[0].Dispose(); // the gateway's primary crashes: a view change
            expected += i;
            Assert.Equal(expected, Await(client.InvokeAsync<long, long[]>(i))[0]);
        }
        Assert.True(gateways.Skip(1).Max(g => g.View) >= 1, "the gateway changed views");
        // The bank's responder (its primary, which gathers the replies and passes f+1 matching ones on) reports the lie.
        Assert.True(SpinWait.SpinUntil(() => banks[0].DivergentMessages > 0, Patience), "the bank's responder saw replica 3's wrong replies");
    }

    [Fact]
    public void A_loop_that_awaits_outside_the_agreed_order_is_reported_and_one_that_throws_faults_its_completion()
    {
        using var d = new PerpetualTestDeployment(("svc", 1));
        var log = new StringWriter();
        PerpetualReplica replica = PerpetualReplica.Start(d.Deployment, "svc", 0, async r =>
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            await Task.Delay(5); // resumes on a timer's thread, not at an agreed input
            r.SendReply(request.Read<int>() * 2, request);
            throw new InvalidDataException("the application gave up");
        }, new PerpetualOptions { LoggerFactory = new Microsoft.Extensions.Logging.LoggerFactory([new CapturingProvider(log)]) });
        d.Replicas.Add(replica);
        PerpetualClient client = d.Client("svc");

        Assert.Equal(42, Await(client.InvokeAsync<int, int>(21)));
        var thrown = Assert.Throws<AggregateException>(() => replica.Completion.Wait(Patience));
        Assert.IsType<InvalidDataException>(thrown.InnerException);
        Assert.Equal(1, replica.ForeignResumptions);
        Assert.Contains("resumed from outside the agreed order", log.ToString());
        Assert.Contains("the application loop ended (it threw)", log.ToString());
    }

    [Fact]
    public void Operations_outside_the_loop_and_misuse_in_it_throw_with_what_to_do()
    {
        using var d = new PerpetualTestDeployment(("a", 1), ("b", 1));
        var problems = new ConcurrentQueue<string>();
        PerpetualReplica a = PerpetualReplica.Start(d.Deployment, "a", 0, async r =>
        {
            problems.Enqueue(Assert.Throws<ArgumentException>(() => r.SendAsync("a", 1)).Message);
            problems.Enqueue(Assert.Throws<ArgumentException>(() => r.SendAsync("nowhere", 1)).Message);
            problems.Enqueue(Assert.Throws<InvalidOperationException>(() => r.ReceiveReplyAsync()).Message);
            PerpetualRequest request = await r.ReceiveRequestAsync();
            r.SendReply(1, request);
            problems.Enqueue(Assert.Throws<InvalidOperationException>(() => r.SendReply(2, request)).Message);
            PerpetualCall call = await r.SendAsync("b", 1);
            ValueTask<PerpetualReply> outcome = r.ReceiveReplyAsync(call);
            problems.Enqueue(Assert.Throws<InvalidOperationException>(() => r.ReceiveReplyAsync(call)).Message);
            await outcome; // b never answers: this waits until the replica is disposed
        });
        d.Replicas.Add(a);
        d.Start("b", async r => { while (true) await r.ReceiveRequestAsync(); });
        Assert.Equal(1, Await(d.Client("a").InvokeAsync<int, int>(0)));

        Assert.Contains("run on its loop only", Assert.Throws<InvalidOperationException>(() => a.ReceiveRequestAsync()).Message);
        Assert.Throws<InvalidOperationException>(() => a.CurrentTime);
        Assert.True(SpinWait.SpinUntil(() => problems.Count == 5, Patience));
        Assert.Contains(problems, p => p.Contains("calls itself"));
        Assert.Contains(problems, p => p.Contains("not declared"));
        Assert.Contains(problems, p => p.Contains("send a call first"));
        Assert.Contains(problems, p => p.Contains("answer each request once"));
        Assert.Contains(problems, p => p.Contains("awaited already"));
    }

    [Fact]
    public void A_deployment_refuses_what_cannot_work_and_says_why()
    {
        Assert.Contains("32 bytes", Assert.Throws<ArgumentException>(() => new PerpetualDeployment(new byte[16])).Message);
        var deployment = new PerpetualDeployment(new byte[32]);
        var e = PerpetualTestDeployment.Loopback();
        Assert.Contains("3f+1", Assert.Throws<ArgumentException>(() => deployment.AddService("s", e, e)).Message);
        Assert.Contains("declared twice", Assert.Throws<ArgumentException>(() => deployment.AddService("s", e).AddClient("c", e)).Message);
        Assert.Contains("declared twice", Assert.Throws<ArgumentException>(() => deployment.AddClient("s", PerpetualTestDeployment.Loopback())).Message);
        Assert.Equal(0, deployment.FaultsTolerated("s"));
        Assert.Equal([e], deployment.ReplicasOf("s"));
        Assert.Contains("not declared", Assert.Throws<ArgumentException>(() => deployment.ReplicasOf("t")).Message);
        deployment.AddClient("c", PerpetualTestDeployment.Loopback());
        Assert.Contains("not declared", Assert.Throws<ArgumentException>(() => new PerpetualClient(deployment, "nobody", "s")).Message);
        Assert.Throws<ArgumentOutOfRangeException>(() => PerpetualReplica.Start(deployment, "s", 1, _ => Task.CompletedTask));
        Assert.Contains("must be positive", Assert.Throws<ArgumentException>(() => PerpetualReplica.Start(deployment, "s", 0, _ => Task.CompletedTask,
            new PerpetualOptions { RetryInterval = TimeSpan.Zero, MaxClockSkew = TimeSpan.FromSeconds(1), MaxOutstandingCalls = 4 })).Message);
        using (PerpetualReplica.Start(deployment, "s", 0, _ => Task.CompletedTask)) { }
        var disposed = new PerpetualClient(deployment, "c", "s");
        disposed.Dispose();
        Assert.Throws<ObjectDisposedException>(() => { _ = disposed.InvokeAsync<int, int>(1); }); // at the call, not in the task
        Assert.Contains("started already", Assert.Throws<InvalidOperationException>(() => deployment.AddService("t", PerpetualTestDeployment.Loopback())).Message);
    }

    [Fact]
    public void With_an_explicit_key_set_each_process_holds_only_its_own_keys_and_the_services_work()
    {
        // The provisioner declares the deployment with its key and issues every process its keys.
        var endpoints = new Dictionary<string, System.Net.IPEndPoint[]>
        {
            ["gateway"] = [.. Enumerable.Range(0, 4).Select(_ => PerpetualTestDeployment.Loopback())],
            ["bank"] = [.. Enumerable.Range(0, 4).Select(_ => PerpetualTestDeployment.Loopback())],
        };
        var front = PerpetualTestDeployment.Loopback();
        PerpetualDeployment Declare(PerpetualDeployment d) => d.AddService("gateway", endpoints["gateway"]).AddService("bank", endpoints["bank"]).AddClient("front", front);
        PerpetualDeployment provisioner = Declare(new PerpetualDeployment(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32)));
        // Each host gets its keys as bytes (a file in production) and declares the deployment with them instead of the key.
        byte[] Issued(string service, int i) => provisioner.IssueKeys(service, i).ToBytes();
        var replicas = new List<PerpetualReplica>();
        try
        {
            foreach (string service in (string[])["bank", "gateway"])
            {
                for (int i = 0; i < 4; i++)
                {
                    PerpetualKeys keys = PerpetualKeys.FromBytes(Issued(service, i));
                    Assert.Equal((service, (int?)i), (keys.Name, keys.ReplicaIndex));
                    Assert.Equal($"keys of {service}[{i}]", keys.ToString());
                    replicas.Add(PerpetualReplica.Start(Declare(new PerpetualDeployment(keys)), service, i, service == "bank" ? r => Bank(r) : Gateway, PerpetualTestDeployment.Options));
                }
            }
            PerpetualKeys frontKeys = PerpetualKeys.FromBytes(provisioner.IssueKeys("front").ToBytes());
            Assert.Null(frontKeys.ReplicaIndex);
            using var client = new PerpetualClient(Declare(new PerpetualDeployment(frontKeys)), "front", "gateway", PerpetualTestDeployment.Options);
            Assert.Equal(5, Await(client.InvokeAsync<long, long[]>(5))[0]);
            Assert.Equal(12, Await(client.InvokeAsync<long, long[]>(7))[0]);

            // Misuse says what to do.
            Assert.Contains("not those of bank[0]", Assert.Throws<ArgumentException>(() => PerpetualReplica.Start(Declare(new PerpetualDeployment(frontKeys)), "bank", 0, _ => Task.CompletedTask)).Message);
            Assert.Contains("cannot issue keys", Assert.Throws<InvalidOperationException>(() => Declare(new PerpetualDeployment(frontKeys)).IssueKeys("front")).Message);
            var elsewhere = new PerpetualDeployment(frontKeys).AddService("gateway", endpoints["gateway"]).AddService("bank", endpoints["bank"]).AddClient("front", PerpetualTestDeployment.Loopback());
            Assert.Contains("another deployment", Assert.Throws<ArgumentException>(() => new PerpetualClient(elsewhere, "front", "gateway")).Message);
            Assert.Throws<FormatException>(() => PerpetualKeys.FromBytes(Issued("bank", 2)[..^3]));
            Assert.Throws<ArgumentOutOfRangeException>(() => provisioner.IssueKeys("bank", 4));

            // A host's keys are its own: with the client's keys nobody passes for bank replica 0, nor signs
            // a view change; with bank replica 1's, nobody signs as replica 0.
            Isis.Core.Bft.BftKeys KeysOf(PerpetualKeys k) => Isis.Core.Bft.BftKeys.Import(k.Secret)!;
            Isis.Core.Bft.BftKeys client0 = KeysOf(frontKeys), bank0 = KeysOf(provisioner.IssueKeys("bank", 0)), bank1 = KeysOf(provisioner.IssueKeys("bank", 1));
            byte[] forged = Isis.Core.Bft.BftWire.Seal(client0, Isis.Core.Bft.BftKind.Prepare, [0], [bank1.Self]);
            System.Buffers.Binary.BinaryPrimitives.WriteInt32LittleEndian(forged.AsSpan(2), bank0.Self);
            Assert.False(Isis.Core.Bft.BftWire.TryOpen(bank1, forged, out _, out _, out _));
            Assert.True(Isis.Core.Bft.BftWire.TryOpen(bank1, Isis.Core.Bft.BftWire.Seal(bank0, Isis.Core.Bft.BftKind.Prepare, [0], [bank1.Self]), out _, out int from, out _) && from == bank0.Self);
            Assert.Throws<InvalidOperationException>(() => client0.Sign([1, 2, 3]));
            Assert.True(bank1.VerifySignature(bank0.Self, [1, 2, 3], bank0.Sign([1, 2, 3])));
            Assert.False(bank0.VerifySignature(bank0.Self, [1, 2, 3], bank1.Sign([1, 2, 3])));
        }
        finally
        {
            foreach (PerpetualReplica r in replicas) r.Dispose();
        }
    }

    private sealed class CapturingProvider(StringWriter output) : Microsoft.Extensions.Logging.ILoggerProvider
    {
        public Microsoft.Extensions.Logging.ILogger CreateLogger(string categoryName) => new Diagnostics.StandardErrorLogger(output);

        public void Dispose()
        {
        }
    }
}
