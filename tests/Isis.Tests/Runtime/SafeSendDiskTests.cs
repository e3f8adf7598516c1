using System.Collections.Concurrent;

namespace Isis.Tests.Runtime;

public sealed class SafeSendDiskTests
{
    [Fact]
    public void Acknowledged_SafeSends_survive_a_crash_of_the_whole_group_and_are_delivered_after_restart()
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
            for (int n = 1; n <= 40; n++) before.Groups[n % 3].SafeSend(1, n); // each returns once delivered: acknowledged by all acceptors
            foreach (IsisRuntime r in before.Runtimes.AsEnumerable().Reverse()) r.Crash(); // every member at once, no goodbyes

            var after = Start();
            TestRuntimes.WaitUntil(() => after.Delivered.All(d => d.Count >= 40), "the restarted group delivers the logged SafeSends");
            int[] replayed = after.Delivered[0].ToArray();
            Assert.Equal(Enumerable.Range(1, 40), replayed.Order());
            Assert.Equal(before.Delivered[0].ToArray(), replayed); // in the original order
            Assert.All(after.Delivered, d => Assert.Equal(replayed, d.ToArray()));
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }
}
