using System.Collections.Concurrent;
using System.Reflection;
using Isis.Tests.Tools;

namespace Isis.Tests.Runtime;

/// <summary>
/// A durable group whose last view had a member that never comes back (its disk is lost) waits
/// after a total crash; the operator recovers it by force, online (<see cref="Group.ForceSafeSendRecoveryAsync"/>)
/// or offline on a stopped member's directory (the isis-recover tool). Nothing acknowledged is lost
/// here (with phi = every member, each SafeSend is on every disk), and a given-up member that comes
/// back later copies the group's history and keeps its own log aside.
/// </summary>
public sealed class ForcedRecoveryTests
{
    private const int SafeSends = 30;

    private sealed class Member(IsisRuntime runtime, Group group, ConcurrentQueue<int> delivered, Task joined)
    {
        public IsisRuntime Runtime { get; } = runtime;
        public Group Group { get; } = group;
        public ConcurrentQueue<int> Delivered { get; } = delivered;
        public Task Joined { get; } = joined;
    }

    private static Member StartMember(TestRuntimes runtimes, string directory)
    {
        IsisRuntime r = runtimes.Start();
        var g = new Group(r, "ledger");
        var delivered = new ConcurrentQueue<int>();
        g.Handlers[1] += (Action<int>)(n => delivered.Enqueue(n));
        g.SetSafeSendDurability(SafeSendDurability.Disk, directory);
        return new Member(r, g, delivered, g.JoinAsync());
    }

    /// <summary>Three members deliver <see cref="SafeSends"/> SafeSends, then every one crashes at once.</summary>
    private static List<Member> RunAndCrash(TestRuntimes runtimes, string root)
    {
        var members = Enumerable.Range(0, 3).Select(i => StartMember(runtimes, Path.Combine(root, "member" + i))).ToList();
        Assert.True(Task.WaitAll([.. members.Select(m => m.Joined)], TimeSpan.FromSeconds(60)), "the group formed");
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 3), "a 3-member view");
        for (int n = 1; n <= SafeSends; n++) members[n % 3].Group.SafeSend(1, n);
        foreach (Member m in members.AsEnumerable().Reverse()) m.Runtime.Crash();
        return members;
    }

    [Fact]
    public async Task A_group_that_lost_a_members_disk_waits_until_the_operator_forces_the_recovery_and_then_loses_nothing_acknowledged()
    {
        string root = Directory.CreateTempSubdirectory("isis-forced-").FullName;
        try
        {
            using var runtimes = new TestRuntimes();
            List<Member> before = RunAndCrash(runtimes, root);
            Address lost = before[2].Runtime.Address!;
            Directory.Delete(Path.Combine(root, "member2"), recursive: true); // its disk is gone

            // The two that kept their disks, and a replacement with an empty one.
            var after = new[] { 0, 1, 2 }.Select(i => StartMember(runtimes, Path.Combine(root, "member" + i))).ToList();
            Task all = Task.WhenAll(after.Select(m => m.Joined));
            Assert.NotSame(all, await Task.WhenAny(all, Task.Delay(TimeSpan.FromSeconds(3)))); // it waits for the lost member, and would for ever
            Assert.All(after, m => Assert.Empty(m.Delivered));

            SafeSendRecovery report = await after[1].Group.ForceSafeSendRecoveryAsync().WaitAsync(TimeSpan.FromSeconds(60));
            Assert.True(report.Forced);
            Assert.Equal([lost], report.GivenUp);
            Assert.Equal(SafeSends, report.Entries);
            Assert.Contains(lost.ToString(), report.Description, StringComparison.Ordinal);

            await all.WaitAsync(TimeSpan.FromSeconds(60));
            int[] original = before[0].Delivered.ToArray();
            TestRuntimes.WaitUntil(() => after.All(m => m.Delivered.Count >= SafeSends), "every member replays the history");
            Assert.All(after, m => Assert.Equal(original, m.Delivered.ToArray())); // all of it, in the original order, the replacement too

            // The group goes on.
            await after[2].Group.SafeSendAsync(1, 1000).WaitAsync(TimeSpan.FromSeconds(30));
            TestRuntimes.WaitUntil(() => after.All(m => m.Delivered.Contains(1000)), "a SafeSend after the recovery is delivered everywhere");

            // Misuse says what to do.
            var memory = new Group(after[0].Runtime, "no-disk");
            Assert.Contains("SetSafeSendDurability", Assert.Throws<InvalidOperationException>(() => { _ = memory.ForceSafeSendRecoveryAsync(); }).Message, StringComparison.Ordinal);
            Assert.Contains("joined", Assert.Throws<InvalidOperationException>(() => { _ = after[0].Group.ForceSafeSendRecoveryAsync(); }).Message, StringComparison.Ordinal);
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    [Fact]
    public async Task The_recover_tool_inspects_stopped_members_logs_and_allows_a_forced_recovery_and_the_given_up_member_keeps_its_log_aside_when_it_returns()
    {
        string dll = typeof(ForcedRecoveryTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "IsisRecoverDll").Value!;
        Assert.True(File.Exists(dll), $"tools/Isis.Recover was not built: {dll} is missing");
        string root = Directory.CreateTempSubdirectory("isis-forced-tool-").FullName;
        try
        {
            using var runtimes = new TestRuntimes();
            List<Member> before = RunAndCrash(runtimes, root);
            Address away = before[2].Runtime.Address!;
            string[] dirs = [.. Enumerable.Range(0, 3).Select(i => Path.Combine(root, "member" + i))];
            string awayDir = Path.Combine(root, "away");
            Directory.Move(dirs[2], awayDir); // its disk is unreachable for now

            (int code, string log) = await DotnetTool.RunToExit([dll, "inspect", "--group", "ledger", dirs[0], dirs[1]], TimeSpan.FromSeconds(60));
            Assert.True(code == 0, log);
            Assert.Contains($"entries       {SafeSends} ", log, StringComparison.Ordinal);
            Assert.Contains($"waits for {away}", log, StringComparison.Ordinal);

            // Given every directory that can come back, the permission names exactly the member that cannot.
            (code, log) = await DotnetTool.RunToExit([dll, "force", "--group", "ledger", dirs[0], dirs[1]], TimeSpan.FromSeconds(60));
            Assert.True(code == 0, log);
            Assert.Contains($"without {away}", log, StringComparison.Ordinal);
            Assert.True(SafeSendHistory.Inspect(dirs[0], "ledger").ForcedRecoveryAllowed);
            Assert.False(SafeSendHistory.Inspect(dirs[1], "ledger").ForcedRecoveryAllowed);

            // The two members start; the one the operator allowed lets the group recover without the third.
            var after = new[] { 0, 1 }.Select(i => StartMember(runtimes, dirs[i])).ToList();
            await Task.WhenAll(after.Select(m => m.Joined)).WaitAsync(TimeSpan.FromSeconds(60));
            int[] original = before[0].Delivered.ToArray();
            TestRuntimes.WaitUntil(() => after.All(m => m.Delivered.Count >= SafeSends), "the two replay the history");
            Assert.All(after, m => Assert.Equal(original, m.Delivered.ToArray()));
            SafeSendLogInfo recovered = SafeSendHistory.Inspect(dirs[0], "ledger");
            Assert.False(recovered.ForcedRecoveryAllowed); // spent: it holds the history again
            Assert.Equal([away], recovered.GivenUp);

            // The given-up member comes back with its old disk: it copies the group's history, and its own log is kept aside.
            Directory.Move(awayDir, dirs[2]);
            Member returned = StartMember(runtimes, dirs[2]);
            await returned.Joined.WaitAsync(TimeSpan.FromSeconds(60));
            TestRuntimes.WaitUntil(() => returned.Delivered.Count >= SafeSends, "the returning member replays the group's history");
            Assert.Equal(original, returned.Delivered.ToArray());
            Assert.Single(Directory.GetFiles(dirs[2], "ledger.safelog.orphan-*"));
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }
}
