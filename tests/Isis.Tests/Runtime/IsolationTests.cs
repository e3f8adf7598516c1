using System.Collections.Concurrent;
using System.Net;
using Isis.Core.Identity;
using Isis.Core.Wire;
using Isis.Transport;
using Microsoft.Extensions.Logging;

namespace Isis.Tests.Runtime;

/// <summary>
/// A process that loses the membership service wedges, says why, and stops; traffic of an
/// expelled incarnation is dropped, counted and logged.
/// </summary>
public sealed class IsolationTests
{
    private const int Update = 1;

    [Fact]
    public async Task A_process_cut_off_from_the_membership_service_shuts_down_and_every_call_says_it_was_isolated()
    {
        using var runtimes = new TestRuntimes();
        IsisRuntime service = runtimes.Start(o => o.MembershipService = MembershipServiceMode.Host);
        IsisRuntime member = runtimes.Start(o => { o.MembershipService = MembershipServiceMode.Client; o.IsolationTimeout = TimeSpan.FromMilliseconds(600); });
        var shutDown = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        member.ShutDown += (_, e) => shutDown.TrySetResult(e.Reason);
        var g = new Group(member, "cut");
        g.Handlers[Update] += (Action<int>)(_ => { });
        g.Join();

        service.Crash(); // the whole service is gone: this process can no longer reach a majority of it

        // Bounded by the options: the isolation timeout (600 ms) plus two heartbeats of grace; generous here.
        string reason = await shutDown.Task.WaitAsync(TimeSpan.FromSeconds(20));
        Assert.StartsWith("isolated: no answer from the membership service", reason);
        Assert.Contains("isolated", member.ShutdownReason);
        Assert.False(member.IsRunning);
        Assert.Contains("isolated", Assert.Throws<IsisShutdownException>(() => g.Send(Update, 1)).Message);
        Assert.Contains("isolated", Assert.Throws<IsisShutdownException>(() => g.Flush()).Message);
        Assert.Contains("isolated", Assert.Throws<IsisShutdownException>(() => new Group(member, "other").Join()).Message);
    }

    [Fact]
    public void Traffic_of_an_expelled_incarnation_is_dropped_counted_and_logged()
    {
        using var runtimes = new TestRuntimes();
        var log = new CapturingLoggerFactory();
        IsisRuntime service = runtimes.Start(o => o.MembershipService = MembershipServiceMode.Host);
        IsisRuntime member = runtimes.Start(o => { o.MembershipService = MembershipServiceMode.Client; o.LoggerFactory = log; });
        IsisRuntime zombie = runtimes.Start(o => o.MembershipService = MembershipServiceMode.Client);
        var groups = new[] { new Group(member, "walls"), new Group(zombie, "walls") };
        foreach (Group g in groups) g.Join();
        TestRuntimes.WaitUntil(() => groups[0].GetView()?.Members.Length == 2, "both in one view");
        NodeId old = zombie.Address!.Node;
        int viewId = groups[0].GetView()!.ViewId;

        zombie.Crash();
        TestRuntimes.WaitUntil(() => groups[0].GetView()!.Members.Length == 1, "the crashed incarnation is expelled");

        // The old incarnation "wakes up": datagrams from its address and with its identity.
        using var ghost = new UdpTransport(new IPEndPoint(IPAddress.Loopback, (int)EndpointCodec.PortOf(old.Endpoint)), (_, _, _) => { });
        ulong to = member.Address!.Node.Endpoint;
        long before = member.GetStatistics().DroppedFirewall;
        for (int i = 0; i < 5; i++)
        {
            ghost.Enqueue(to, new PacketWriter().Begin(new PacketHeader(PacketKind.Digest, old, GroupId.FromName("walls"), viewId, 0)).Finish());
            ghost.Flush();
        }
        TestRuntimes.WaitUntil(() => member.GetStatistics().DroppedFirewall >= before + 5, "every packet of the old incarnation is dropped");
        TestRuntimes.WaitUntil(() => log.Lines.Any(l => l.Contains("expelled incarnation " + old)), "the drop is logged, naming the incarnation");
        Assert.Single(groups[0].GetView()!.Members);
    }
}
