using System.Collections.Concurrent;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>
/// Persistent checkpoints on real runtimes: PersistCheckpoints / SaveCheckpoint write the
/// MakeChkpt handlers' parts to disk; after every member restarted, the group starts from one of
/// them (and, with disk durability, replays only the SafeSends after it).
/// </summary>
public sealed partial class PersistentCheckpointTests : IDisposable
{
    private const int Put = 1;
    private readonly string _root = Directory.CreateTempSubdirectory("isis-checkpoints-").FullName;

    public void Dispose() => Directory.Delete(_root, recursive: true);

    /// <summary>A replica of a list of numbers: updates by Send or SafeSend, state by checkpoint (one part per number).</summary>
    private sealed class Replica
    {
        public readonly IsisRuntime Runtime;
        public readonly Group Group;
        private readonly List<int> _state = new();
        public int Applied;      // updates applied by message (delivered or replayed)
        public int LoadedParts;  // numbers loaded from a checkpoint
        public int ViewsSeen;

        public Replica(IsisRuntime runtime, string name, string directory, TimeSpan? interval = null, bool disk = false, byte[]? key = null)
        {
            Runtime = runtime;
            Group = new Group(runtime, name);
            Group.Handlers[Put] += (Action<int>)(n => { lock (_state) _state.Add(n); Interlocked.Increment(ref Applied); });
            Group.ViewHandlers += (ViewHandler)(_ => ViewsSeen++);
            Group.MakeChkpt += (ChkptMaker)(_ =>
            {
                int[] all;
                lock (_state) all = [.. _state];
                foreach (int n in all) Group.SendChkpt(n);
            });
            Group.LoadChkpt += (Action<int>)(n => { lock (_state) _state.Add(n); LoadedParts++; });
            Group.PersistCheckpoints(directory, interval ?? Timeout.InfiniteTimeSpan);
            if (disk) Group.SetSafeSendDurability(SafeSendDurability.Disk, Path.Combine(directory, "log"));
            if (key != null) Group.SetKey(key);
        }

        public int[] State()
        {
            lock (_state) return [.. _state];
        }
    }

    private string Dir(int member) => Path.Combine(_root, "member" + member);

    private static List<Replica> JoinAll(IEnumerable<Replica> replicas)
    {
        List<Replica> all = replicas.ToList();
        Assert.True(Task.WaitAll(all.Select(r => r.Group.JoinAsync()).ToArray(), TimeSpan.FromSeconds(60)), "every member joined");
        TestRuntimes.WaitUntil(() => all.All(r => r.Group.GetView()?.Members.Length == all.Count), $"a {all.Count}-member view");
        return all;
    }

    [Fact]
    public async Task After_every_member_restarts_the_group_starts_from_one_members_checkpoint_and_the_others_receive_it_by_transfer()
    {
        using var runtimes = new TestRuntimes();
        List<Replica> before = JoinAll(Enumerable.Range(0, 3).Select(i => new Replica(runtimes.Start(), "counters", Dir(i))));
        // Each member saves at a different point, so their checkpoints differ: 10, 20 and 30 updates.
        for (int n = 1; n <= 30; n++)
        {
            before[0].Group.Send(Put, n);
            if (n % 10 == 0)
            {
                before[0].Group.Flush();
                TestRuntimes.WaitUntil(() => before.All(r => r.State().Length == n), $"{n} updates everywhere");
                if (n == 20) await before[1].Group.SaveCheckpointAsync().WaitAsync(TimeSpan.FromSeconds(30)); // the async twin: written when it completes
                else before[n / 10 - 1].Group.SaveCheckpoint();
            }
        }
        int[][] saved = [[.. Enumerable.Range(1, 10)], [.. Enumerable.Range(1, 20)], [.. Enumerable.Range(1, 30)]];
        foreach (Replica r in before) r.Runtime.Crash();

        List<Replica> after = JoinAll(Enumerable.Range(0, 3).Select(i => new Replica(runtimes.Start(), "counters", Dir(i))));
        TestRuntimes.WaitUntil(() => after.All(r => r.State().Length > 0), "every member has a state");
        int[] state = after[0].State();
        Assert.Contains(saved, s => s.SequenceEqual(state)); // one member's checkpoint, whole
        Assert.All(after, r => Assert.Equal(state, r.State())); // the same one everywhere
        Assert.All(after, r => Assert.Equal(state.Length, r.LoadedParts)); // loaded (from disk or by transfer), not rebuilt from messages

        // And it goes on from there.
        after[1].Group.Send(Put, 99);
        after[1].Group.Flush();
        TestRuntimes.WaitUntil(() => after.All(r => r.State().LastOrDefault() == 99), "the next update everywhere");
    }

    [Fact]
    public void With_disk_durability_a_restart_loads_the_checkpoint_and_replays_only_the_SafeSends_after_it()
    {
        using var runtimes = new TestRuntimes();
        List<Replica> before = JoinAll(Enumerable.Range(0, 3).Select(i => new Replica(runtimes.Start(), "ledger", Dir(i), disk: true)));
        for (int n = 1; n <= 25; n++) before[n % 3].Group.SafeSend(Put, n);
        TestRuntimes.WaitUntil(() => before.All(r => r.State().Length == 25), "25 SafeSends everywhere");
        foreach (Replica r in before) r.Group.SaveCheckpoint(); // each at 25 SafeSends
        for (int n = 26; n <= 40; n++) before[n % 3].Group.SafeSend(Put, n);
        TestRuntimes.WaitUntil(() => before.All(r => r.State().Length == 40), "40 SafeSends everywhere");
        int[] expected = before[0].State();
        foreach (Replica r in before) r.Runtime.Crash();
        // Each records the digest of the 25 SafeSends it holds: one history, so one digest (the core restores it only where the history agrees).
        var digests = Enumerable.Range(0, 3).Select(i =>
        {
            using CheckpointFile.Checked c = OpenChecked(CheckpointFile.NewestPath(Dir(i), "ledger"), "ledger");
            Assert.Equal(25, c.Position!.Value.Index);
            return c.Position.Value.Digest;
        }).ToList();
        Assert.NotEqual(Isis.Core.Durability.HistoryDigest.Unknown, digests[0]);
        Assert.All(digests, d => Assert.Equal(digests[0], d));

        List<Replica> after = JoinAll(Enumerable.Range(0, 3).Select(i => new Replica(runtimes.Start(), "ledger", Dir(i), disk: true)));
        TestRuntimes.WaitUntil(() => after.All(r => r.State().Length == 40), "the restarted group holds all 40 SafeSends");
        Assert.All(after, r =>
        {
            Assert.Equal(expected, r.State());  // in the original order
            Assert.Equal(25, r.LoadedParts);    // the checkpoint ...
            Assert.Equal(15, r.Applied);        // ... and only the SafeSends after it
        });
    }

    /// <summary>The history position the log at <paramref name="directory"/> starts after (its trim point), read from the file.</summary>
    private static long TrimPointOfLog(string directory, string group)
    {
        (List<byte[]> records, _) = HistoryLogFile.Inspect(Path.Combine(directory, "log", group + ".safelog"));
        return Isis.Core.Durability.HistoryLog.Read(records).Trimmed;
    }

    [Fact]
    public void With_disk_durability_the_log_is_trimmed_behind_two_checkpoints_a_new_member_copies_one_and_a_restart_of_all_loses_nothing()
    {
        using var runtimes = new TestRuntimes();
        List<Replica> before = JoinAll(Enumerable.Range(0, 3).Select(i => new Replica(runtimes.Start(), "ledger", Dir(i), disk: true)));
        for (int n = 1; n <= 30; n++) before[n % 3].Group.SafeSend(Put, n);
        TestRuntimes.WaitUntil(() => before.All(r => r.State().Length == 30), "30 SafeSends everywhere");
        foreach (Replica r in before) r.Group.SaveCheckpoint(); // each at 30 SafeSends
        for (int n = 31; n <= 60; n++) before[n % 3].Group.SafeSend(Put, n);
        TestRuntimes.WaitUntil(() => before.All(r => r.State().Length == 60), "60 SafeSends everywhere");
        Assert.All(Enumerable.Range(0, 3), i => Assert.Equal(0, TrimPointOfLog(Dir(i), "ledger"))); // one checkpoint: nothing goes yet
        foreach (Replica r in before) r.Group.SaveCheckpoint(); // each at 60: the log goes up to the older one, 30
        TestRuntimes.WaitUntil(() => Enumerable.Range(0, 3).All(i => TrimPointOfLog(Dir(i), "ledger") == 30), "every log trimmed to entry 30");

        // A new member, with nothing on disk: the source's log starts after 30, so it copies a checkpoint (60) and the entries after it (none).
        var joiner = new Replica(runtimes.Start(), "ledger", Dir(3), disk: true);
        // Join completes once it holds the history: the copied checkpoint loaded, the entries after it replayed.
        Task joined = joiner.Group.JoinAsync();
        TestRuntimes.WaitUntil(() => joined.IsCompleted, "the new member joined", 60);
        Assert.True(joined.IsCompletedSuccessfully);
        Assert.Equal(60, joiner.LoadedParts);
        Assert.Equal(0, joiner.Applied);
        before.Add(joiner);
        for (int n = 61; n <= 70; n++) before[n % 4].Group.SafeSend(Put, n);
        TestRuntimes.WaitUntil(() => before.All(r => r.State().Length == 70), "70 SafeSends everywhere");
        int[] expected = before[0].State();
        Assert.All(before, r => Assert.Equal(expected, r.State()));
        Assert.True(File.Exists(Path.Combine(Dir(3), "ledger.checkpoint")), "the copied checkpoint is the new member's own");

        // Every member crashes; the restarted group recovers from checkpoints plus the trimmed logs.
        foreach (Replica r in before) r.Runtime.Crash();
        List<Replica> after = JoinAll(Enumerable.Range(0, 4).Select(i => new Replica(runtimes.Start(), "ledger", Dir(i), disk: true)));
        TestRuntimes.WaitUntil(() => after.All(r => r.State().Length == 70), "the restarted group holds all 70 SafeSends");
        Assert.All(after, r =>
        {
            Assert.Equal(expected, r.State()); // once each, in the original order
            Assert.Equal(70, r.LoadedParts + r.Applied);
        });
    }

    [Fact]
    public void With_disk_durability_a_checkpoint_is_saved_when_the_log_grows_by_a_sixteenth_of_its_bound_so_it_stays_far_below_it()
    {
        using var runtimes = new TestRuntimes();
        const long Bound = 4 << 20; // a checkpoint every 256 KiB of log
        var replicas = Enumerable.Range(0, 2).Select(i =>
        {
            var r = new Replica(runtimes.Start(), "blobs", Dir(i));
            r.Group.SetSafeSendDurability(SafeSendDurability.Disk, Path.Combine(Dir(i), "log"), Bound);
            r.Group.Handlers[2] += (Action<int, byte[]>)((_, _) => { }); // blobs fill the log; the state is the numbers
            return r;
        }).ToList();
        JoinAll(replicas);
        var blob = new byte[4096];
        long largest = 0;
        string log = Path.Combine(Dir(0), "log", "blobs.safelog");
        for (int n = 1; n <= 2500; n++)
        {
            // 10 MiB in all, two and a half times the bound: never refused.
            if (n % 10 == 0) replicas[n % 2].Group.SafeSend(Put, n);
            else replicas[n % 2].Group.SafeSend(2, n, blob);
            if (n % 100 == 0) largest = Math.Max(largest, HistoryLogFile.BytesOnDisk(log));
        }
        TestRuntimes.WaitUntil(() => TrimPointOfLog(Dir(0), "blobs") > 0, "the log was trimmed");
        Assert.True(File.Exists(Path.Combine(Dir(0), "blobs.checkpoint")), "a checkpoint was saved without being asked for");
        Assert.True(largest < Bound / 2, $"the log reached {largest} bytes; its bound is {Bound}");
        TestRuntimes.WaitUntil(() => replicas.All(r => r.State().Length == 250), "every number applied at both members");
    }

    [Fact]
    public void A_damaged_newest_checkpoint_is_reported_and_the_previous_one_is_loaded_and_with_both_damaged_the_member_starts_empty()
    {
        using var runtimes = new TestRuntimes();
        var logger = new CapturingLoggerFactory();
        var first = JoinAll([new Replica(runtimes.Start(o => o.LoggerFactory = logger), "solo", Dir(0))])[0];
        for (int n = 1; n <= 5; n++) first.Group.Send(Put, n);
        TestRuntimes.WaitUntil(() => first.State().Length == 5, "5 updates");
        first.Group.SaveCheckpoint();
        for (int n = 6; n <= 9; n++) first.Group.Send(Put, n);
        TestRuntimes.WaitUntil(() => first.State().Length == 9, "9 updates");
        first.Group.SaveCheckpoint();
        first.Runtime.Crash();

        // One byte of the newest changes on disk: its hash no longer matches.
        string newest = CheckpointFile.NewestPath(Dir(0), "solo");
        byte[] bytes = File.ReadAllBytes(newest);
        bytes[bytes.Length / 2] ^= 0x40;
        File.WriteAllBytes(newest, bytes);
        var second = JoinAll([new Replica(runtimes.Start(o => o.LoggerFactory = logger), "solo", Dir(0))])[0];
        Assert.Equal([1, 2, 3, 4, 5], second.State());
        Assert.Contains(logger.Lines, l => l.Contains("SHA-256 does not match") && l.Contains(newest));
        second.Runtime.Crash();

        // Both cut short (a full disk): each is reported, and the member does not load part of one.
        // This machine's registry of durable groups says the group's state was kept, so it does not
        // start it empty either, until the operator says the state is lost for good (by deleting
        // the registry's entry, as the refusal says).
        string previous = CheckpointFile.PreviousPath(Dir(0), "solo");
        foreach (string path in new[] { newest, previous })
        {
            using var f = new FileStream(path, FileMode.Open);
            f.SetLength(f.Length - 40);
        }
        var refusing = new Replica(runtimes.Start(o => o.LoggerFactory = logger), "solo", Dir(0));
        IsisException refused = Assert.Throws<IsisException>(() => refusing.Group.Join());
        Assert.Contains("missing or damaged", refused.Message, StringComparison.Ordinal);
        string entry = DurableGroupRegistry.Read(runtimes.Options().DurableGroupRegistryFolder, "solo")!.Path;
        Assert.Contains($"delete {entry}", refused.Message, StringComparison.Ordinal);
        File.Delete(entry);
        var third = JoinAll([new Replica(runtimes.Start(o => o.LoggerFactory = logger), "solo", Dir(0))])[0];
        Assert.Empty(third.State());
        Assert.Equal(0, third.LoadedParts);
        Assert.Contains(logger.Lines, l => l.Contains(previous) && l.Contains("damaged"));
    }

    [Fact]
    public void A_clean_leave_and_the_schedule_save_the_checkpoint_which_only_this_account_can_read()
    {
        using var runtimes = new TestRuntimes();
        var scheduled = JoinAll([new Replica(runtimes.Start(), "scheduled", Dir(0), interval: TimeSpan.FromMilliseconds(200))])[0];
        scheduled.Group.Send(Put, 7);
        string path = CheckpointFile.NewestPath(Dir(0), "scheduled");
        TestRuntimes.WaitUntil(() => CheckpointParts(path, "scheduled") == 1, "a scheduled save holds the update");
        if (!OperatingSystem.IsWindows()) Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(path));

        var leaving = JoinAll([new Replica(runtimes.Start(), "leaving", Dir(1))])[0];
        for (int n = 1; n <= 3; n++) leaving.Group.Send(Put, n);
        TestRuntimes.WaitUntil(() => leaving.State().Length == 3, "3 updates");
        Assert.False(File.Exists(CheckpointFile.NewestPath(Dir(1), "leaving")));
        leaving.Group.Leave();
        Assert.Equal(3, CheckpointParts(CheckpointFile.NewestPath(Dir(1), "leaving"), "leaving"));
    }

    [Fact]
    public void The_group_key_is_kept_in_the_checkpoint_so_a_restarted_member_joins_with_it_without_being_given_it()
    {
        using var runtimes = new TestRuntimes();
        byte[] key = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
        var keeper = JoinAll([new Replica(runtimes.Start(), "vault", Dir(0), key: key)])[0];
        keeper.Group.Send(Put, 1);
        TestRuntimes.WaitUntil(() => keeper.State().Length == 1, "1 update");
        keeper.Group.SaveCheckpoint();
        keeper.Runtime.Crash();

        // Restarted from its directory alone: it founds the group again with the key from the file ...
        var restarted = JoinAll([new Replica(runtimes.Start(), "vault", Dir(0))])[0];
        Assert.Equal([1], restarted.State());
        // ... so a process holding the key joins it, and one with another key is refused.
        var peer = new Replica(runtimes.Start(), "vault", Dir(1), key: key);
        peer.Group.Join();
        TestRuntimes.WaitUntil(() => restarted.Group.GetView()?.Members.Length == 2, "a 2-member view");
        Assert.Equal([1], peer.State());
        var stranger = new Replica(runtimes.Start(), "vault", Dir(2), key: System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));
        var refused = Assert.ThrowsAny<Exception>(() => stranger.Group.JoinAsync().Wait(TimeSpan.FromSeconds(60)));
        Assert.Contains("key", (refused.InnerException ?? refused).Message, StringComparison.OrdinalIgnoreCase);
    }

    [Fact]
    public void Misuse_gets_an_exception_that_says_what_to_do()
    {
        using var runtimes = new TestRuntimes();
        IsisRuntime runtime = runtimes.Start();
        var plain = new Group(runtime, "plain");
        Assert.Throws<ArgumentException>(() => plain.PersistCheckpoints(" "));
        Assert.Throws<ArgumentOutOfRangeException>(() => plain.PersistCheckpoints(Dir(0), TimeSpan.FromMilliseconds(10)));
        plain.Join();
        var notPersisted = Assert.Throws<InvalidOperationException>(() => plain.SaveCheckpoint());
        Assert.Contains("PersistCheckpoints(directory)", notPersisted.Message);
        var late = Assert.Throws<InvalidOperationException>(() => plain.PersistCheckpoints(Dir(0)));
        Assert.Contains("before Join", late.Message);
        var notJoined = new Replica(runtime, "later", Dir(1));
        Assert.Throws<IsisException>(() => notJoined.Group.SaveCheckpoint());
    }

    private static long CheckpointParts(string path, string group)
    {
        using CheckpointFile.Checked? c = CheckpointFile.Open(path, group, out _);
        return c?.Parts ?? -1;
    }
}
