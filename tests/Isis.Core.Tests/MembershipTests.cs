using Isis.Core.Groups;
using Isis.Core.Node;

namespace Isis.Core.Tests;

public class MembershipTests
{
    [Fact]
    public void JoinersInstallTheSameViewsOrderedByJoinOrderWithConsecutiveIds()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        c.RunFor(50_000);

        GroupView final = c.CurrentView(0)!;
        Assert.Equal([c.Id(0), c.Id(1), c.Id(2)], final.Members);
        for (int i = 0; i < 3; i++)
        {
            List<GroupView> views = c.Views(i).ToList();
            // Consecutive ids from the view the process joined in.
            for (int k = 1; k < views.Count; k++) Assert.Equal(views[k - 1].Id + 1, views[k].Id);
            Assert.Equal(final.Id, views[^1].Id);
            Assert.Equal(final.Members, views[^1].Members);
            Assert.Equal(i + 1, views[0].Members.Length); // process i joined into a view of i + 1 members
            Assert.Equal(3, c[i].FindGroup(TestCluster.G)!.View!.Members.Length);
            Assert.Equal(i, c[i].FindGroup(TestCluster.G)!.MyRank);
        }
        // Same id, same member list, everywhere.
        var byId = Enumerable.Range(0, 3).SelectMany(c.Views).GroupBy(v => v.Id);
        foreach (var same in byId)
        {
            GroupView first = same.First();
            Assert.All(same, v => Assert.Equal(first.Members, v.Members));
        }
        Assert.Equal(c.Oracle.CommittedView(TestCluster.G)!.Value.ViewId, final.Id);
    }

    [Fact]
    public void SimultaneousJoinsAreBatchedIntoOneViewAgreedByAll()
    {
        var c = new TestCluster(3);
        for (int i = 0; i < 3; i++) c.Join(i);
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => c.CurrentView(i)?.Members.Length == 3));

        GroupView v = c.CurrentView(0)!;
        Assert.Equal([c.Id(0), c.Id(1), c.Id(2)], v.Members);
        Assert.All(Enumerable.Range(0, 3), i => Assert.Equal(v.Members, c.CurrentView(i)!.Members));
        Assert.All(Enumerable.Range(0, 3), i => Assert.Equal(v.Id, c.CurrentView(i)!.Id));
    }

    [Fact]
    public void CrashedProcessIsExpelledAfterSuspicionCountHeartbeatPeriods()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        c.RunFor(20_000);
        int viewBefore = c.CurrentView(0)!.Id;
        long heartbeat = c.Options.HeartbeatInterval;
        int k = c.Options.SuspicionCount;

        c.Stop(2);
        long crashedAt = c.Now;
        c.RunFor((k - 1) * heartbeat - 1_000);
        Assert.False(c.Oracle.IsExpelled(c.Id(2)), "expelled before SuspicionCount silent heartbeat periods");

        c.RunUntil(() => c.Oracle.IsExpelled(c.Id(2)), limit: 3 * heartbeat);
        Assert.True(c.Now - crashedAt <= (k + 1) * heartbeat, $"expelled only after {(c.Now - crashedAt) / 1000} ms");
        Assert.Contains(new IncarnationExpelled(c.Id(2)), c.OracleEvents);

        c.RunUntil(() => c.CurrentView(0)!.Members.Length == 2 && c.CurrentView(1)!.Members.Length == 2);
        for (int i = 0; i < 2; i++)
        {
            GroupView v = c.CurrentView(i)!;
            Assert.Equal(viewBefore + 1, v.Id);
            Assert.Equal([c.Id(0), c.Id(1)], v.Members);
            Assert.Equal([c.Id(2)], v.Leavers);
            Assert.Empty(v.Joiners);
        }
    }

    [Fact]
    public void CrashOfTheOldestMemberMovesTheCoordinatorRoleToTheNextSurvivor()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        c.Stop(0);
        c.RunUntil(() => c.CurrentView(1)!.Members.Length == 2 && c.CurrentView(2)!.Members.Length == 2);
        Assert.Equal([c.Id(1), c.Id(2)], c.CurrentView(1)!.Members);
        Assert.Equal(c.CurrentView(1)!.Id, c.CurrentView(2)!.Id);
        Assert.Equal(0, c[1].FindGroup(TestCluster.G)!.MyRank);
    }

    [Fact]
    public void LeaveCompletesWithGroupLeftAndAViewWithoutTheLeaver()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        int viewBefore = c.CurrentView(0)!.Id;

        c.Leave(1);
        c.RunUntil(() => c.Events[1].OfType<GroupLeft>().Any());
        c.RunFor(50_000);

        Assert.Single(c.Events[1].OfType<GroupLeft>());
        Assert.Null(c[1].FindGroup(TestCluster.G));
        Assert.False(c[1].IsShutDown);
        Assert.Equal(viewBefore, c.CurrentView(1)!.Id); // the leaver never installs the view without itself
        foreach (int i in new[] { 0, 2 })
        {
            GroupView v = c.CurrentView(i)!;
            Assert.Equal(viewBefore + 1, v.Id);
            Assert.Equal([c.Id(0), c.Id(2)], v.Members);
            Assert.Equal([c.Id(1)], v.Leavers);
        }
        // The leaver is still an alive process: leaving a group is not leaving the system.
        Assert.Contains(c.Id(1), c.Oracle.AliveProcesses);
    }

    [Fact]
    public void LeaverCanRejoinAsANewMember()
    {
        var c = new TestCluster(2);
        c.FormGroup(2);
        c.Leave(0);
        c.RunUntil(() => c.Events[0].OfType<GroupLeft>().Any());
        c.Join(0);
        c.RunUntil(() => c.CurrentView(1)!.Members.Length == 2);
        Assert.Equal([c.Id(1), c.Id(0)], c.CurrentView(1)!.Members);
        Assert.Equal(c.CurrentView(1)!.Id, c.CurrentView(0)!.Id);
    }
}
