using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>
/// What the stores do when the disk fails (full, or an fsync that reports an I/O error), and the
/// membership replica's log across a restart of a single fixed replica.
/// </summary>
public sealed class StoreFailureTests
{
    [Fact]
    public void A_record_file_that_failed_to_write_is_poisoned_and_never_appends_a_record_twice()
    {
        var disk = new SimulatedDisk();
        const string path = "/sim/replica.log";
        var file = new DurableRecordFile(path, files: disk);
        file.Append(new byte[100]);
        file.Sync();
        disk.FreeBytes = 50; // the disk fills up in the middle of the next record
        IOException full = Assert.Throws<IOException>(() => file.Append(new byte[100]));
        Assert.Contains(path, full.Message);
        Assert.True(file.Poisoned);
        disk.FreeBytes = long.MaxValue; // space again: a retry must still not append
        Assert.Same(full, Assert.Throws<IOException>(() => file.Append(new byte[100])));
        Assert.Same(full, Assert.Throws<IOException>(file.Sync));
        file.Dispose();
        Assert.Equal(108 + 50, disk.Contents(path)!.Length); // one record, then the torn part of the one that failed, once
        DurableRecordFile.Contents contents = DurableRecordFile.Read(path, disk);
        Assert.Single(contents.Records);
        Assert.Equal(108, contents.IntactLength);
    }

    [Fact]
    public void A_record_file_whose_fsync_failed_is_poisoned()
    {
        var disk = new SimulatedDisk();
        var file = new DurableRecordFile("/sim/replica.log", files: disk);
        file.Append([1, 2, 3]);
        disk.FsyncFails = true;
        IOException failed = Assert.Throws<IOException>(file.Sync);
        Assert.Contains("/sim/replica.log could not be synced", failed.Message);
        disk.FsyncFails = false;
        // The kernel may have dropped the dirty pages: a later fsync that succeeds proves nothing.
        Assert.Same(failed, Assert.Throws<IOException>(file.Sync));
        Assert.Same(failed, Assert.Throws<IOException>(() => file.Append([4])));
        file.Dispose();
    }

    /// <summary>
    /// The replica's log fails to sync while a process joins a group: the replica stops (nothing
    /// of that step leaves, and nothing more is written to its log), and its process shuts down
    /// with a reason that names the file, instead of an exception escaping the event loop.
    /// </summary>
    [Fact]
    public void A_replica_whose_log_cannot_be_synced_stops_and_its_process_shuts_down_naming_the_file()
    {
        using var runtimes = new TestRuntimes();
        var disk = new SimulatedDisk();
        using var shutDown = new ManualResetEventSlim();
        string? reason = null;
        IsisRuntime service = runtimes.Start(o =>
        {
            o.MembershipService = MembershipServiceMode.Host;
            o.MembershipDataDirectory = "/sim/membership";
            o.StoreFiles = disk;
        });
        service.ShutDown += (_, e) =>
        {
            reason = e.Reason;
            shutDown.Set();
        };
        IsisRuntime member = runtimes.Start(o =>
        {
            o.MembershipService = MembershipServiceMode.Client;
            o.IsolationTimeout = TimeSpan.FromMilliseconds(600);
        });
        new Group(member, "before").Join();
        string log = $"/sim/membership/replica-127.0.0.1-{runtimes.ServicePort}.log";
        Assert.Contains($"fsync {log}", disk.Operations); // the replica logs what it decides

        disk.FsyncFails = true;
        Task join = new Group(member, "after").JoinAsync();
        Assert.True(shutDown.Wait(TimeSpan.FromSeconds(20)), "the service's process shuts down");
        Assert.Contains($"{log} could not be synced", reason);
        Assert.Contains("replica stops", reason);
        Assert.Null(service.HostedMembershipReplica);

        // The member loses the service (it never answers again) and gives up.
        TestRuntimes.WaitUntil(() => !member.IsRunning, "the member gives up on the stopped service");
        _ = join.ContinueWith(t => t.Exception, TaskScheduler.Default); // it fails with the member's shutdown: observed
        List<string> operations = [.. disk.Operations];
        Assert.Single(operations, o => o == $"fsync {log} FAILED");
        int failedAt = operations.IndexOf($"fsync {log} FAILED");
        Assert.DoesNotContain(operations.Skip(failedAt + 1), o => o.Contains(log, StringComparison.Ordinal));
    }

    /// <summary>
    /// A member's SafeSend log fails to sync: the member's process stops with a reason that names
    /// the log, the SafeSend it was logging is never acknowledged, and nothing more is written to
    /// the log; no exception escapes the event loop or the caller's SafeSend.
    /// </summary>
    [Fact]
    public async Task A_member_whose_safesend_log_cannot_be_synced_stops_naming_the_log()
    {
        using var runtimes = new TestRuntimes();
        var disk = new SimulatedDisk();
        IsisRuntime runtime = runtimes.Start(o => o.StoreFiles = disk);
        var group = new Group(runtime, "ledger");
        group.Handlers[1] += (Action<int>)(_ => { });
        group.SetSafeSendDurability(SafeSendDurability.Disk, "/sim/member");
        group.Join();
        await group.SafeSendAsync(1, 1);
        const string log = "/sim/member/ledger.safelog";
        Assert.Contains($"fsync {log}", disk.Operations);

        disk.FsyncFails = true;
        Task send = group.SafeSendAsync(1, 2);
        TestRuntimes.WaitUntil(() => runtime.ShutdownReason != null, "the member stops");
        Assert.Contains("the SafeSend history log could not be written", runtime.ShutdownReason);
        Assert.Contains($"{log} could not be synced", runtime.ShutdownReason);
        await Assert.ThrowsAnyAsync<Exception>(() => send.WaitAsync(TimeSpan.FromSeconds(20))); // never acknowledged
        List<string> operations = [.. disk.Operations];
        int failedAt = operations.IndexOf($"fsync {log} FAILED");
        Assert.True(failedAt >= 0);
        Assert.DoesNotContain(operations.Skip(failedAt + 1), o => o.Contains(log, StringComparison.Ordinal));
    }

    /// <summary>
    /// A single fixed replica is the whole service: restarted from its log, it keeps its term
    /// (it never goes back to one it voted in) and the groups and views it decided.
    /// </summary>
    [Fact]
    public void A_single_fixed_replica_restarted_from_its_log_still_knows_its_groups()
    {
        DirectoryInfo data = Directory.CreateTempSubdirectory("isis-single-replica-");
        try
        {
            using var runtimes = new TestRuntimes();
            void Host(IsisOptions o)
            {
                o.MembershipService = MembershipServiceMode.Host;
                o.MembershipDataDirectory = data.FullName;
            }
            var first = new IsisRuntime(runtimes.Options(Host));
            first.Start();
            IsisRuntime member = runtimes.Start(o => o.MembershipService = MembershipServiceMode.Client);
            new Group(member, "remembered").Join();
            var group = GroupId.FromName("remembered");
            MembershipReplica before = first.Loop!.Service!;
            TestRuntimes.WaitUntil(() => before.CommittedView(group) is { Members.Length: 1 }, "the service commits the group's view");
            long term = before.Term;
            long committed = before.CommitIndex;
            int viewId = before.CommittedView(group)!.Value.ViewId;
            first.Dispose();
            Assert.True(File.Exists(Path.Combine(data.FullName, $"replica-127.0.0.1-{runtimes.ServicePort}.log")));

            using var second = new IsisRuntime(runtimes.Options(Host));
            second.Start();
            MembershipReplica after = second.Loop!.Service!;
            TestRuntimes.WaitUntil(() => after.CommittedView(group) is not null, "the restarted replica knows the group from its log");
            Assert.True(after.Term > term, $"term {after.Term} after the restart, {term} before: a restarted replica never reuses a term");
            Assert.True(after.CommitIndex >= committed);
            (int ViewId, NodeId[] Members) view = after.CommittedView(group)!.Value;
            Assert.True(view.ViewId >= viewId);
            Assert.Contains(member.Loop!.Node.Self, view.Members.Concat(before.CommittedView(group)!.Value.Members));
        }
        finally
        {
            data.Delete(recursive: true);
        }
    }
}
