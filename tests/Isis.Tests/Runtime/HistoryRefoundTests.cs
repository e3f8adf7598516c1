using System.Collections.Concurrent;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>
/// The "history founded twice" hazard of the zero-configuration default, tried as a user would:
/// every instance of a durable service stops (so the embedded membership service, which lives in
/// them, forgets the group), a new instance with an empty data directory starts first, then the
/// old instances come back with theirs. The machine's registry of durable groups tells the new
/// instance that a history exists: it waits, says why, and the group recovers the old history
/// once the old instances are back. Nothing is kept aside, nothing is lost.
/// </summary>
public sealed class HistoryRefoundTests
{
    private const string GroupName = "inventory";
    private const int Items = 20;

    private sealed record Member(IsisRuntime Runtime, Group Group, ConcurrentQueue<int> Delivered, Task Joined, StringWriter Errors);

    private static Member StartMember(TestRuntimes runtimes, string directory)
    {
        var errors = new StringWriter();
        IsisRuntime r = runtimes.Start(o => o.StandardError = TextWriter.Synchronized(errors));
        var g = new Group(r, GroupName);
        var delivered = new ConcurrentQueue<int>();
        g.Handlers[1] += (Action<int>)(n => delivered.Enqueue(n));
        g.SetSafeSendDurability(SafeSendDurability.Disk, directory);
        return new Member(r, g, delivered, g.JoinAsync(), errors);
    }

    /// <summary>Two instances hold <see cref="Items"/> SafeSends, then both stop (gracefully, one after the other).</summary>
    private static (string[] Dirs, int[] Delivered) RunAndStopEverything(TestRuntimes runtimes, string root)
    {
        string[] dirs = [Path.Combine(root, "a"), Path.Combine(root, "b")];
        var members = dirs.Select(d => StartMember(runtimes, d)).ToList();
        Assert.True(Task.WaitAll([.. members.Select(m => m.Joined)], TimeSpan.FromSeconds(60)), "the group formed");
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 2), "a 2-member view");
        for (int n = 1; n <= Items; n++) members[n % 2].Group.SafeSend(1, n);
        TestRuntimes.WaitUntil(() => members.All(m => m.Delivered.Count == Items), "both deliver every SafeSend");
        int[] delivered = members[0].Delivered.ToArray();
        Assert.Equal(delivered, members[1].Delivered.ToArray());
        Assert.Equal(Enumerable.Range(1, Items), delivered.Order());
        foreach (Member m in members) m.Runtime.Dispose();
        return (dirs, delivered);
    }

    [Fact]
    public async Task A_new_instance_started_first_after_every_instance_stopped_waits_for_the_old_logs_and_the_group_keeps_its_history()
    {
        string root = Directory.CreateTempSubdirectory("isis-refound-").FullName;
        try
        {
            using var runtimes = new TestRuntimes();
            (string[] dirs, int[] original) = RunAndStopEverything(runtimes, root);

            DurableGroupRegistry.Entry? entry = DurableGroupRegistry.Read(runtimes.Options().DurableGroupRegistryFolder, GroupName);
            Assert.NotNull(entry);
            Assert.NotEqual("?", entry.Lineage);
            Assert.Equal(dirs.Select(Path.GetFullPath).Order(), entry.Directories.Order());

            // The new instance comes first, with an empty directory: it does not found a history.
            Member newcomer = StartMember(runtimes, Path.Combine(root, "new"));
            Assert.NotSame(newcomer.Joined, await Task.WhenAny(newcomer.Joined, Task.Delay(TimeSpan.FromSeconds(3))));
            Assert.Empty(newcomer.Delivered);
            TestRuntimes.WaitUntil(() => newcomer.Errors.ToString().Contains("registry of durable groups", StringComparison.Ordinal), "the new instance says why it waits");
            string said = newcomer.Errors.ToString();
            Assert.Contains(dirs[0], said, StringComparison.Ordinal); // and where the history is
            Assert.Contains(dirs[1], said, StringComparison.Ordinal);

            // The old instances come back: the group recovers their history, the new instance too.
            var old = dirs.Select(d => StartMember(runtimes, d)).ToList();
            await Task.WhenAll(old.Select(m => m.Joined).Append(newcomer.Joined)).WaitAsync(TimeSpan.FromSeconds(60));
            foreach (Member m in old.Append(newcomer))
            {
                TestRuntimes.WaitUntil(() => m.Delivered.Count >= Items, "every instance replays the history");
                Assert.Equal(original, m.Delivered.ToArray());
            }
            Assert.Empty(dirs.SelectMany(d => Directory.GetFiles(d, "*orphan*"))); // nothing kept aside

            // And goes on.
            await newcomer.Group.SafeSendAsync(1, 1000).WaitAsync(TimeSpan.FromSeconds(30));
            TestRuntimes.WaitUntil(() => old.Append(newcomer).All(m => m.Delivered.Contains(1000)), "a SafeSend after the recovery is delivered everywhere");
            Assert.Equal(3, DurableGroupRegistry.Read(runtimes.Options().DurableGroupRegistryFolder, GroupName)!.Directories.Count);
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    [Fact]
    public async Task When_the_old_logs_are_gone_for_good_the_operator_founds_a_new_history_by_force_and_the_registry_names_it()
    {
        string root = Directory.CreateTempSubdirectory("isis-refound-force-").FullName;
        try
        {
            using var runtimes = new TestRuntimes();
            (string[] dirs, _) = RunAndStopEverything(runtimes, root);
            string folder = runtimes.Options().DurableGroupRegistryFolder;
            string oldLineage = DurableGroupRegistry.Read(folder, GroupName)!.Lineage;
            foreach (string d in dirs) Directory.Delete(d, recursive: true); // the disks are lost

            Member only = StartMember(runtimes, Path.Combine(root, "new"));
            Assert.NotSame(only.Joined, await Task.WhenAny(only.Joined, Task.Delay(TimeSpan.FromSeconds(2))));
            SafeSendRecovery report = await only.Group.ForceSafeSendRecoveryAsync().WaitAsync(TimeSpan.FromSeconds(60));
            Assert.True(report.Forced);
            Assert.Equal(0, report.Entries);
            await only.Joined.WaitAsync(TimeSpan.FromSeconds(30));

            DurableGroupRegistry.Entry entry = DurableGroupRegistry.Read(folder, GroupName)!;
            Assert.NotEqual(oldLineage, entry.Lineage);
            Assert.Equal([Path.GetFullPath(Path.Combine(root, "new"))], entry.Directories);
            await only.Group.SafeSendAsync(1, 7).WaitAsync(TimeSpan.FromSeconds(30));
            TestRuntimes.WaitUntil(() => !only.Delivered.IsEmpty, "the new history's first SafeSend is delivered");
            Assert.Equal([7], only.Delivered.ToArray()); // nothing of the old history
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    [Fact]
    public void The_registry_records_a_group_once_per_lineage_and_directory_and_reads_a_damaged_file_as_a_history_of_unknown_lineage()
    {
        string folder = Directory.CreateTempSubdirectory("isis-registry-").FullName;
        try
        {
            var at = new DateTime(2026, 11, 27, 12, 0, 0, DateTimeKind.Utc);
            Assert.Null(DurableGroupRegistry.Read(folder, "g/1"));
            Assert.Null(DurableGroupRegistry.Record(folder, "g/1", "x@v1", "/data/a", at));
            Assert.Null(DurableGroupRegistry.Record(folder, "g/1", "x@v1", "/data/b", at.AddMinutes(1)));
            string path = DurableGroupRegistry.PathFor(folder, "g/1");
            DateTime written = File.GetLastWriteTimeUtc(path);
            Assert.Null(DurableGroupRegistry.Record(folder, "g/1", "x@v1", "/data/b", at.AddMinutes(2))); // unchanged: not rewritten
            Assert.Equal(written, File.GetLastWriteTimeUtc(path));
            DurableGroupRegistry.Entry e = DurableGroupRegistry.Read(folder, "g/1")!;
            Assert.Equal(("x@v1", at.AddMinutes(1)), (e.Lineage, e.HeldUtc));
            Assert.Equal(["/data/b", "/data/a"], e.Directories);

            // A new lineage replaces the old one and its directories.
            Assert.Null(DurableGroupRegistry.Record(folder, "g/1", "y@v1", "/data/c", at));
            Assert.Equal(["/data/c"], DurableGroupRegistry.Read(folder, "g/1")!.Directories);
            Assert.Null(DurableGroupRegistry.Read(folder, "g/2")); // another group is another file

            File.WriteAllText(path, "not a registry file");
            Assert.Equal("?", DurableGroupRegistry.Read(folder, "g/1")!.Lineage); // a history may exist: it counts
            Assert.True(DurableGroupRegistry.Forget(folder, "g/1"));
            Assert.Null(DurableGroupRegistry.Read(folder, "g/1"));
        }
        finally
        {
            Directory.Delete(folder, recursive: true);
        }
    }
}
