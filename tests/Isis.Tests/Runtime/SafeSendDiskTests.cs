using System.Collections.Concurrent;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

public sealed class SafeSendDiskTests
{
    /// <summary>
    /// With <paramref name="withSafeQueries"/>, every even number goes as a SafeQuery whose handler
    /// records it and replies: it is durable like a SafeSend, replayed in its place, and the
    /// replayed handler's Reply goes nowhere without an error.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void Acknowledged_SafeSends_survive_a_crash_of_the_whole_group_and_are_delivered_after_restart(bool withSafeQueries)
    {
        string root = Directory.CreateTempSubdirectory("isis-safelog-").FullName;
        try
        {
            using var runtimes = new TestRuntimes();
            (List<IsisRuntime> Runtimes, List<Group> Groups, List<ConcurrentQueue<int>> Delivered) Start()
            {
                var rs = new List<IsisRuntime>();
                var gs = new List<Group>();
                var ds = new List<ConcurrentQueue<int>>();
                var joins = new List<Task>();
                for (int i = 0; i < 3; i++)
                {
                    IsisRuntime r = runtimes.Start();
                    var g = new Group(r, "ledger");
                    var log = new ConcurrentQueue<int>();
                    g.Handlers[1] += (Action<int>)(n => log.Enqueue(n));
                    g.Handlers[2] += (Action<int>)(n =>
                    {
                        log.Enqueue(n);
                        g.Reply(n);
                    });
                    g.SetSafeSendDurability(SafeSendDurability.Disk, Path.Combine(root, "member" + i));
                    // After a crash of every member, a join completes only once the members of the
                    // last view are back and the history is recovered: join them all together.
                    joins.Add(g.JoinAsync());
                    rs.Add(r);
                    gs.Add(g);
                    ds.Add(log);
                }
                Assert.True(Task.WaitAll([.. joins], TimeSpan.FromSeconds(60)), "every member joined and holds the history");
                TestRuntimes.WaitUntil(() => gs.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");
                return (rs, gs, ds);
            }

            var before = Start();
            for (int n = 1; n <= 40; n++)
            {
                // Each returns once delivered: acknowledged by all acceptors.
                if (withSafeQueries && n % 2 == 0)
                {
                    var replies = new List<int>();
                    Assert.Equal(3, before.Groups[n % 3].SafeQuery(Group.ALL, 2, n, new EOLMarker(), replies));
                    Assert.Equal([n, n, n], replies);
                }
                else
                {
                    before.Groups[n % 3].SafeSend(1, n);
                }
            }
            foreach (IsisRuntime r in before.Runtimes.AsEnumerable().Reverse()) r.Crash(); // every member at once, no goodbyes

            var after = Start();
            TestRuntimes.WaitUntil(() => after.Delivered.All(d => d.Count >= 40), "the restarted group delivers the logged SafeSends");
            int[] replayed = after.Delivered[0].ToArray();
            Assert.Equal(Enumerable.Range(1, 40), replayed.Order());
            // In the original order: each member's deliveries before the crash are a prefix of it (a
            // member may not have delivered the last SafeSend yet when its sender's call returned).
            Assert.All(before.Delivered, d => Assert.Equal(d.ToArray(), replayed.Take(d.Count)));
            Assert.Equal(before.Delivered.MaxBy(d => d.Count)!.ToArray(), replayed);
            Assert.All(after.Delivered, d => Assert.Equal(replayed, d.ToArray()));
            Assert.All(after.Runtimes, r => Assert.Equal(0, r.GetStatistics().HandlerExceptions));
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    /// <summary>
    /// A member that recovers a history of over a MiB has its runtime compact the heap once
    /// afterwards (the memory the recovery's burst of allocations took goes back); founding a
    /// history, or recovering a short one, does not.
    /// </summary>
    [Fact]
    public async Task Recovering_a_long_history_has_the_runtime_compact_the_heap_once_and_a_short_one_does_not()
    {
        string root = Directory.CreateTempSubdirectory("isis-safelog-compact-").FullName;
        try
        {
            using var runtimes = new TestRuntimes();
            (IsisRuntime Runtime, Group Group, ConcurrentQueue<int> Delivered) Start(string name)
            {
                IsisRuntime r = runtimes.Start();
                var g = new Group(r, name);
                var delivered = new ConcurrentQueue<int>();
                g.Handlers[1] += (Action<int, byte[]>)((n, _) => delivered.Enqueue(n));
                g.SetSafeSendDurability(SafeSendDurability.Disk, Path.Combine(root, name));
                g.Join();
                return (r, g, delivered);
            }

            var (first, group, _) = Start("long");
            byte[] kilobyte = new byte[1024];
            var sends = Enumerable.Range(1, 1200).Select(n => group.SafeSendAsync(1, n, kilobyte)).ToArray();
            await Task.WhenAll(sends).WaitAsync(TimeSpan.FromSeconds(60)); // acknowledged, so durable
            Assert.Equal(0, first.RecoveryCompactions); // founding recovered nothing
            first.Crash();

            var (again, _, replayed) = Start("long");
            TestRuntimes.WaitUntil(() => replayed.Count == 1200, "the restarted member replays its log");
            Assert.Equal(1, again.RecoveryCompactions);

            var (small, smallGroup, _) = Start("short");
            smallGroup.SafeSend(1, 1, kilobyte);
            small.Crash();
            var (smallAgain, _, smallReplayed) = Start("short");
            TestRuntimes.WaitUntil(() => smallReplayed.Count == 1, "the short history is replayed");
            Assert.Equal(0, smallAgain.RecoveryCompactions);
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    [Fact]
    public void A_SafeSend_that_would_take_the_log_past_its_bound_is_refused_with_the_bound_named_and_everything_sent_before_survives()
    {
        const long Bound = 8192;
        string root = Directory.CreateTempSubdirectory("isis-safelog-bound-").FullName;
        try
        {
            using var runtimes = new TestRuntimes();
            var groups = new List<Group>();
            var delivered = new List<ConcurrentQueue<string>>();
            for (int i = 0; i < 2; i++)
            {
                var g = new Group(runtimes.Start(), "bounded");
                var log = new ConcurrentQueue<string>();
                g.Handlers[1] += (Action<string>)(s => log.Enqueue(s));
                g.SetSafeSendDurability(SafeSendDurability.Disk, Path.Combine(root, "member" + i), maxLogBytes: Bound);
                g.Join();
                groups.Add(g);
                delivered.Add(log);
            }
            TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 2), "a 2-member view");

            // 200-byte messages from both members, alternately, until one is refused (bounded: 8 KB
            // holds at most 40 of them, so 100 tries must end in a refusal).
            string payload = new('x', 200);
            IsisException? refused = null;
            int sent = 0;
            for (int n = 0; n < 100 && refused == null; n++)
            {
                try
                {
                    groups[n % 2].SafeSend(1, payload + n);
                    sent++;
                }
                catch (IsisException e)
                {
                    refused = e;
                }
            }

            Assert.NotNull(refused);
            Assert.Contains("past its bound of 8,192 bytes", refused!.Message);
            Assert.Contains("maxLogBytes", refused.Message);
            Assert.InRange(sent, 20, 40);
            // One log per member (a joiner's copy of the history is a new generation of its log: bounded.safelog.1-0).
            string[] logs = [.. Enumerable.Range(0, 2).Select(i => Path.Combine(root, "member" + i, "bounded.safelog")).Where(l => HistoryLogFile.Exists(l))];
            Assert.Equal(2, logs.Length);
            Assert.All(logs, l => Assert.InRange(HistoryLogFile.BytesOnDisk(l), Bound / 2, Bound));
            // Nothing acknowledged was lost to the refusal: both members delivered every sent message, in one order.
            TestRuntimes.WaitUntil(() => delivered.All(d => d.Count == sent), "both members deliver every acknowledged SafeSend");
            Assert.Equal(delivered[0].ToArray(), delivered[1].ToArray());
            // Every member logs the same messages, so the other member's log is about as long (its
            // view and incarnation records differ by some tens of bytes): it refuses a larger message too.
            Assert.Throws<IsisException>(() => groups[sent % 2 == 0 ? 1 : 0].SafeSend(1, new string('y', 1000)));
            // Small messages that still fit are accepted.
            groups[0].SafeSend(1, "ok");
            TestRuntimes.WaitUntil(() => delivered.All(d => d.Count == sent + 1), "a message within the bound is still delivered");
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    [Fact]
    public void A_log_bound_below_4096_bytes_is_refused_before_join()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "tiny");
        var e = Assert.Throws<ArgumentOutOfRangeException>(() => g.SetSafeSendDurability(SafeSendDurability.Disk, Path.GetTempPath(), maxLogBytes: 100));
        Assert.Contains("at least 4096", e.Message);
    }
}
