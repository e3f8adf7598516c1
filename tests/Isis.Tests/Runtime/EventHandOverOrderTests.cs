using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Runtime;
using Isis.Serialization;
using Isis.Transport;

namespace Isis.Tests.Runtime;

/// <summary>
/// The order in which one iteration of the event loop hands its events over, when the process
/// also hosts a membership replica: by the time of the step that produced each event, whichever
/// node produced it. The event logs of real runs stamp every event with its step's time, but never
/// let a process's times go back; so an event handed over after a later one is logged at the later
/// time.
/// </summary>
public sealed class EventHandOverOrderTests
{
    private const int Update = 1;

    /// <summary>
    /// The multi-process test that stops a replica-leader host (SIGSTOP) failed this way once: the
    /// loop took a burst of Sends (its lease held), was stopped before it drained, and, continued
    /// 8 s later, fed its replica the new leader's queued append in the same iteration. The drain
    /// handed the replica's decision (after the pause) over before the Sends (before it), the log
    /// stamped the Sends with the decision's time, after the service had expelled the process, and
    /// the checker's FirewallAfterExpulsion reported Sends after the expulsion. Here one command
    /// plays that iteration: a Send the core takes at one time, then a decision the replica takes
    /// later (an expulsion, which a lone leader decides at once).
    /// </summary>
    [Fact]
    public void A_batch_hands_the_process_events_and_its_replica_events_over_in_step_time_order()
    {
        using var runtimes = new TestRuntimes();
        IsisRuntime runtime = runtimes.Start();
        Assert.True(runtime.HostsMembershipService, "the only process founds the embedded service: its replica leads");
        var group = new Group(runtime, "hand-over");
        group.Handlers[Update] += (Action<int>)(_ => { });
        group.Join();
        TestRuntimes.WaitUntil(() => group.GetView()?.Members.Length == 1, "the member installs its first view");

        EventLoop loop = runtime.Loop!;
        NodeId self = runtime.Address!.Node;
        NodeId replica = loop.Service!.Self;
        var stranger = new NodeId(EndpointConversions.FromIPEndPoint(new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, 9)), 7);
        var handedOver = new List<(NodeId Who, string Kind, long At)>();
        runtime.CoreEvent += (who, e, at) =>
        {
            lock (handedOver) handedOver.Add((who, e is IncarnationExpelled x ? $"Expelled {x.Node}" : e.GetType().Name, at));
        };

        long sentAt = 0, decidedAt = 0;
        using var ran = new ManualResetEventSlim();
        byte[] payload = ArgumentCodec.Encode(Update, [42]);
        loop.Post(() =>
        {
            // Before the pause: the core takes a Send (the lease holds).
            sentAt = loop.Now;
            loop.Node.Send(group.Id, payload, sentAt);
            // After it: the replica decides something (the loop clock has moved on).
            while ((decidedAt = loop.Now) <= sentAt) Thread.SpinWait(20);
            loop.Service!.Tick(decidedAt);
            loop.Service.Expel(stranger);
            ran.Set();
        });
        Assert.True(ran.Wait(TimeSpan.FromSeconds(20)), "the command ran");
        string expelled = $"Expelled {stranger}";
        TestRuntimes.WaitUntil(() => { lock (handedOver) return handedOver.Any(h => h.Kind == expelled); }, "the replica's decision is handed over");

        List<(NodeId Who, string Kind, long At)> seen;
        lock (handedOver) seen = handedOver.ToList();
        int send = seen.FindIndex(h => h.Who == self && h.Kind == nameof(MessageSent) && h.At == sentAt);
        int decision = seen.FindIndex(h => h.Who == replica && h.Kind == expelled && h.At == decidedAt);
        Assert.True(send >= 0, "the Send is handed over with its step's time");
        Assert.True(decision >= 0, "the replica's decision is handed over with its step's time");
        Assert.True(send < decision,
            $"the Send (step time {sentAt}) was handed over after the replica's later decision (step time {decidedAt}): " +
            "an event log that never goes back in time would stamp it with the decision's time. Handed over: " +
            string.Join(", ", seen.Select(h => $"{(h.Who == replica ? "replica" : "process")} {h.Kind} at {h.At}")));
    }
}
