using System.Collections.Concurrent;
using Isis.Core.Identity;

namespace Isis.Tests.Runtime;

/// <summary>
/// Isis2's batch membership: many processes that join or leave at about the same time are folded
/// into one view change, a process joins several groups in one operation, and a group is deleted
/// when its application shuts down.
/// </summary>
public sealed class BatchMembershipTests
{
    private const int Update = 1;

    // Ten runtimes in one test process on a loaded two-core CI machine can stall past the default
    // 200 ms detector (50 ms x 4) while they start together; these tests are about batching, not
    // failure detection, so they use a detector of a second.
    private static void Tolerant(IsisOptions o)
    {
        o.MembershipBatchWindow = TimeSpan.FromMilliseconds(300);
        o.SuspicionCount = 20;
    }

    [Fact]
    public async Task Processes_joining_together_are_folded_into_a_few_view_changes()
    {
        using var runtimes = new TestRuntimes();
        // A batch window wide enough for this shared machine's worst scheduling delays (the default,
        // 10 ms, assumes joins that really arrive within milliseconds; the simulator checks that).
        IsisRuntime[] processes = Enumerable.Range(0, 10).Select(_ => runtimes.Start(Tolerant)).ToArray();
        Group[] groups = processes.Select(r => new Group(r, "crowd")).ToArray();
        await Task.WhenAll(groups.Select(g => g.JoinAsync())).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 10), "all ten in one view");
        // One at a time would take ten views; the service folds the joins that wait behind a view change.
        int views = groups[0].GetView()!.ViewId;
        Assert.True(views <= 3, $"ten joins arriving together took {views} view changes");
    }

    [Fact]
    public async Task Members_leaving_together_are_folded_into_one_view_change()
    {
        using var runtimes = new TestRuntimes();
        Group[] groups = Enumerable.Range(0, 6).Select(_ => new Group(runtimes.Start(Tolerant), "exodus")).ToArray();
        foreach (Group g in groups) g.Join();
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 6), "all six in one view");
        Group stay = groups[0];
        var seen = new ConcurrentQueue<View>();
        stay.ViewHandlers += (ViewHandler)(v => seen.Enqueue(v));
        int before = stay.GetView()!.ViewId;

        await Task.WhenAll(groups.Skip(2).Select(g => g.LeaveAsync())).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => stay.GetView()!.Members.Length == 2, "two members left");
        int changes = stay.GetView()!.ViewId - before;
        Assert.True(changes <= 2, $"four leaves issued together took {changes} view changes");
        // The group's view is public as it installs; its view handlers run on the delivery thread a moment later.
        TestRuntimes.WaitUntil(() => seen.Sum(v => v.Leavers.Length) >= 4, "the view handler sees the leavers");
        Assert.Equal(4, seen.Sum(v => v.Leavers.Length));
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task MultiJoin_joins_several_groups_in_one_operation(bool async)
    {
        using var runtimes = new TestRuntimes();
        IsisRuntime a = runtimes.Start(), b = runtimes.Start();
        string[] names = ["orders", "stock", "prices"];
        Group[] mine = names.Select(n => new Group(a, n)).ToArray();
        Group[] theirs = names.Select(n => new Group(b, n)).ToArray();
        var received = new ConcurrentQueue<string>();
        foreach (Group g in theirs) g.Handlers[Update] += (Action<string>)(s => received.Enqueue(s));
        if (async)
        {
            await Group.MultiJoinAsync(theirs).WaitAsync(TimeSpan.FromSeconds(30));
            await Group.MultiJoinAsync(mine).WaitAsync(TimeSpan.FromSeconds(30));
            Assert.All(mine.Concat(theirs), g => Assert.NotNull(g.GetView())); // joined when the task completes
        }
        else
        {
            Group.MultiJoin(theirs);
            Group.MultiJoin(mine);
        }
        TestRuntimes.WaitUntil(() => theirs.All(g => g.GetView()?.Members.Length == 2), "both processes in all three groups");
        foreach (Group g in mine) g.Send(Update, g.Name);
        TestRuntimes.WaitUntil(() => received.Count == 3, "one message per group delivered at the other process");
        Assert.Equal(["orders", "prices", "stock"], received.Order());

        Assert.Contains("different runtimes", Assert.Throws<ArgumentException>(() => Group.MultiJoin(new Group(a, "x"), new Group(b, "y"))).Message);
        Assert.Contains("already joined", Assert.Throws<IsisException>(() => Group.MultiJoin(mine[0])).Message);
        if (async) Assert.Contains("already joined", (await Assert.ThrowsAsync<IsisException>(() => Group.MultiJoinAsync([mine[1]]))).Message);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Terminate_deletes_the_group_for_every_member_and_the_name_can_start_again(bool async)
    {
        using var runtimes = new TestRuntimes();
        IsisRuntime[] processes = Enumerable.Range(0, 3).Select(_ => runtimes.Start()).ToArray();
        Group[] groups = processes.Select(r => new Group(r, "session")).ToArray();
        var finalViews = new ConcurrentQueue<View>();
        var delivered = new ConcurrentDictionary<int, int>();
        for (int i = 0; i < groups.Length; i++)
        {
            int me = i;
            groups[i].Handlers[Update] += (Action<int>)(_ => delivered.AddOrUpdate(me, 1, (_, n) => n + 1));
            groups[i].ViewHandlers += (ViewHandler)(v => { if (v.Members.Length == 0) finalViews.Enqueue(v); });
            groups[i].Join();
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "all three in one view");
        for (int n = 0; n < 50; n++) groups[1].Send(Update, n);

        if (async) await groups[0].TerminateAsync().WaitAsync(TimeSpan.FromSeconds(30));
        else groups[0].Terminate();

        // Every member saw the same final, empty view, after every message of the last real view.
        TestRuntimes.WaitUntil(() => finalViews.Count == 3, "every member sees the final view");
        Assert.Single(finalViews.Select(v => v.ViewId).Distinct());
        Assert.All(finalViews, v => Assert.Equal(3, v.Leavers.Length));
        Assert.All(Enumerable.Range(0, 3), i => Assert.Equal(50, delivered.GetValueOrDefault(i)));
        foreach (Group g in groups)
        {
            IsisException e = Assert.Throws<IsisException>(() => g.Send(Update, 1));
            Assert.Contains("Terminate()", e.Message);
        }

        // The membership service forgot it; the same name starts a new group, with later view ids.
        // (Every process hosts a replica of the embedded service here; each applies the deletion.)
        var replicas = processes.Where(r => r.HostsMembershipService).ToList();
        Assert.NotEmpty(replicas);
        TestRuntimes.WaitUntil(() => replicas.All(r => r.Loop?.Service?.CommittedView(GroupId.FromName("session")) is null), "the service deletes the group");
        var again = new Group(processes[2], "session");
        again.Join();
        Assert.Single(again.GetView()!.Members);
        Assert.True(again.GetView()!.ViewId > finalViews.First().ViewId, "view ids of a re-created group continue after the deleted one's");
    }
}
