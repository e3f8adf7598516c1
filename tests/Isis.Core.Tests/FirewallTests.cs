using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

public class FirewallTests
{
    private const int Zombie = 2;

    /// <summary>Pauses process 2 until the survivors installed a view without it.</summary>
    private static int PauseUntilExpelled(TestCluster c)
    {
        c.FormGroup(3);
        int view = c.CurrentView(0)!.Id;
        c.Stop(Zombie);
        c.RunUntil(() => c.CurrentView(0)!.Id > view && c.CurrentView(1)!.Id > view);
        Assert.True(c.Oracle.IsExpelled(c.Id(Zombie)));
        c.Resume(Zombie);
        return view;
    }

    [Fact]
    public void AProcessWhoseLoopDidNotRunReportsItsLeaseAsOfNowNotAsOfItsLastTick()
    {
        // A driver's health check asks from another thread: a process starved of CPU (or stopped)
        // has not ticked, and its lease as of its last input still looks held.
        var c = new TestCluster(3);
        c.FormGroup(3);
        Assert.True(c[Zombie].LeaseHeldAt(c.Now));
        c.Stop(Zombie);
        c.RunFor(c[Zombie].LeaseDuration + c.Options.HeartbeatInterval);
        Assert.True(c[Zombie].LeaseHeld); // as of its last tick
        Assert.False(c[Zombie].LeaseHeldAt(c.Now));
    }

    [Fact]
    public void PacketsFromAnExpelledIncarnationAreDroppedAndTheZombieIsTold()
    {
        var c = new TestCluster(3);
        int oldView = PauseUntilExpelled(c);
        long firewalled = c[0].Counters.DroppedFirewall + c[1].Counters.DroppedFirewall;

        // The zombie still believes it is in the old view, but its membership lease ran out long
        // before the expulsion: a multicast waits instead of going out.
        c.Send(Zombie, "stale");
        Assert.DoesNotContain(c.Events[Zombie].OfType<MessageSent>(), m => System.Text.Encoding.UTF8.GetString(m.Payload.Span) == "stale");
        Assert.False(c[Zombie].LeaseHeld);
        var noticesToZombie = new List<Envelope>();
        c.DropWhere(e =>
        {
            if (e.To == c.Id(Zombie).Endpoint && e.Kind == PacketKind.Expelled && e.From != TestCluster.OracleEndpoint) noticesToZombie.Add(e);
            return false;
        });
        // Its next tick still sends digests to its old view: the survivors' firewalls drop them and tell it.
        c.RunFor(20_000);

        Assert.True(c[0].Counters.DroppedFirewall + c[1].Counters.DroppedFirewall >= firewalled + 2);
        Assert.True(c[0].Counters.DroppedFirewall > 0 && c[1].Counters.DroppedFirewall > 0);
        Assert.True(noticesToZombie.Count >= 2);
        Assert.DoesNotContain(c.Delivered(0), d => d.StartsWith("2:"));
        Assert.DoesNotContain(c.Delivered(1), d => d.StartsWith("2:"));
        Assert.True(c[Zombie].IsShutDown);
        Assert.Contains("expelled", c[Zombie].ShutdownReason!);
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public void AnExpulsionAMemberAskedForCarriesItsReasonToTheLogsAndToTheExpelledProcess(bool serviceTellsIt)
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        int view = c.CurrentView(0)!.Id;
        c.Stop(Zombie);
        long stoppedAt = c.Now;
        // A member's query timed out on it (QueryTimeoutAction.ExpelSlowMembers), long before missed heartbeats would tell.
        c[0].Suspect(c.Id(Zombie), Isis.Core.Membership.ExpelReason.SlowToReply);
        c.RunUntil(() => c.CurrentView(0)!.Id > view && c.CurrentView(1)!.Id > view);
        Assert.Contains(new IncarnationExpelled(c.Id(Zombie), false, Isis.Core.Membership.ExpelReason.SlowToReply), c.OracleEvents);
        Assert.True(c.Now - stoppedAt < c.Options.HeartbeatInterval * c.Options.SuspicionCount, "expelled on the member's word, before missed heartbeats would tell");
        if (!serviceTellsIt)
        {
            // Only the survivors' firewalls answer it: they learned the reason with the expulsion.
            c.DropWhere(e => e.To == c.Id(Zombie).Endpoint && e.From == TestCluster.OracleEndpoint);
        }
        c.Resume(Zombie);
        c.RunFor(20 * c.Options.HeartbeatInterval);
        NodeShutDown shutDown = Assert.Single(c.Events[Zombie].OfType<NodeShutDown>());
        Assert.StartsWith("expelled", shutDown.Reason);
        Assert.Contains("query timed out waiting for this process's reply", shutDown.Reason);
        Assert.DoesNotContain("stopped hearing", shutDown.Reason);
        if (!serviceTellsIt) Assert.Contains("reported by", shutDown.Reason);
    }

    [Fact]
    public void ZombieThatResumesTickingShutsDownBecauseItWasExpelled()
    {
        var c = new TestCluster(3);
        PauseUntilExpelled(c);
        long oracleFirewalled = c.Oracle.Counters.DroppedFirewall;

        c.RunFor(2 * c.Options.HeartbeatInterval);

        NodeShutDown shutDown = Assert.Single(c.Events[Zombie].OfType<NodeShutDown>());
        Assert.Contains("expelled", shutDown.Reason);
        Assert.True(c[Zombie].IsShutDown);
        Assert.True(c.Oracle.Counters.DroppedFirewall > oracleFirewalled, "the oracle firewalls the zombie's heartbeat");
        // Its groups are wedged: it delivers nothing more and survivors are unaffected.
        int survivorsView = c.CurrentView(0)!.Id;
        c.Send(0, "after");
        c.RunFor(20_000);
        Assert.Equal(survivorsView, c.CurrentView(1)!.Id);
        Assert.DoesNotContain(c.Delivered(Zombie), d => d.EndsWith("after"));
        Assert.Contains(c.Delivered(1), d => d.EndsWith("after"));
    }

    [Fact]
    public void ShutDownNodeIgnoresAllInputAndCountsIt()
    {
        var c = new TestCluster(3);
        PauseUntilExpelled(c);
        c.RunFor(2 * c.Options.HeartbeatInterval);
        Assert.True(c[Zombie].IsShutDown);
        long before = c[Zombie].Counters.DroppedAfterShutdown;

        c.Inject(Zombie, TestCluster.OracleEndpoint, new byte[10]);
        Assert.Equal(before + 1, c[Zombie].Counters.DroppedAfterShutdown);
        Assert.Equal(0, c.InFlight);
    }

    [Fact]
    public void RestartedProcessRejoinsAsANewIncarnationOnTheSameEndpoint()
    {
        var c = new TestCluster(3);
        PauseUntilExpelled(c);
        c.RunFor(2 * c.Options.HeartbeatInterval);
        Assert.True(c[Zombie].IsShutDown);
        var oldIncarnation = c.Id(Zombie);

        // The firewall expels incarnations, not endpoints: the new one is welcome.
        c.Restart(Zombie);
        Assert.NotEqual(oldIncarnation, c.Id(Zombie));
        c.Join(Zombie);
        c.RunUntil(() => c[Zombie].FindGroup(TestCluster.G)?.View != null && c.CurrentView(0)!.Members.Length == 3);
        Assert.Equal([c.Id(0), c.Id(1), c.Id(Zombie)], c.CurrentView(0)!.Members);
        c.Send(Zombie, "hello");
        c.RunFor(20_000);
        Assert.Contains($"{Zombie}:1:hello", c.Delivered(0));
        Assert.Contains($"{Zombie}:1:hello", c.Delivered(1));
        Assert.False(c[Zombie].IsShutDown);
    }
}
