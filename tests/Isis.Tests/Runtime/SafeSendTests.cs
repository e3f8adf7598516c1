using System.Collections.Concurrent;

namespace Isis.Tests.Runtime;

public sealed class SafeSendTests
{
    private sealed class Members : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<IsisRuntime> Runtime = new();
        public readonly List<Group> Groups = new();
        public readonly List<ConcurrentQueue<string>> Delivered = new();

        public Members(int n, int phi = 0)
        {
            for (int i = 0; i < n; i++)
            {
                IsisRuntime r = Runtimes.Start();
                var g = new Group(r, "safe");
                var log = new ConcurrentQueue<string>();
                g.Handlers[1] += (Action<string, int>)((from, k) => log.Enqueue($"{from}:{k}"));
                g.Join();
                Runtime.Add(r);
                Groups.Add(g);
                Delivered.Add(log);
            }
            TestRuntimes.WaitUntil(() => Groups.All(g => g.GetView()?.Members.Length == n), $"a {n}-member view");
            if (phi > 0) foreach (Group g in Groups) g.SetSafeSendThreshold(phi);
        }

        public void Dispose() => Runtimes.Dispose();
    }

    [Fact]
    public async Task SafeSends_from_several_members_are_delivered_in_one_order_and_complete_at_local_delivery()
    {
        using var m = new Members(3);
        var sends = Enumerable.Range(0, 3).SelectMany(i => Enumerable.Range(1, 50).Select(k => (i, k))).ToList();
        await Task.WhenAll(Enumerable.Range(0, 3).Select(i => Task.Run(async () =>
        {
            for (int k = 1; k <= 50; k++) await m.Groups[i].SafeSendAsync(1, "s" + i, k);
        }))).WaitAsync(TimeSpan.FromSeconds(60));
        TestRuntimes.WaitUntil(() => m.Delivered.All(d => d.Count == 150), "every member delivers all 150");
        Assert.Equal(m.Delivered[0].ToArray(), m.Delivered[1].ToArray());
        Assert.Equal(m.Delivered[0].ToArray(), m.Delivered[2].ToArray());
    }

    [Fact]
    public void A_threshold_above_the_group_size_is_refused_with_what_to_do()
    {
        using var m = new Members(3);
        var e = Assert.Throws<IsisException>(() => m.Groups[0].SetSafeSendThreshold(5));
        Assert.Contains("SetSafeSendThreshold", e.Message);
        Assert.Throws<ArgumentOutOfRangeException>(() => m.Groups[0].SetSafeSendThreshold(0));
        m.Groups[0].SetSafeSendThreshold(1);
        m.Groups[0].SafeSend(1, "one acceptor", 1);
    }

    [Theory]
    [InlineData(1)]
    [InlineData(3)]
    [InlineData(0)]
    public async Task A_SafeSend_delivered_anywhere_is_delivered_by_every_survivor_when_the_sender_and_an_acceptor_crash(int phi)
    {
        using var m = new Members(5, phi);
        int sender = 4, acceptor = phi == 1 ? 2 : 1; // with phi 1 the only acceptor is rank 0; crash a non-acceptor then
        using var stop = new CancellationTokenSource();
        var streaming = Task.Run(() =>
        {
            for (int k = 1; k <= 100_000 && !stop.IsCancellationRequested; k++)
            {
                try { _ = m.Groups[sender].SafeSendAsync(1, "sender", k); }
                catch (IsisException) { return; }
            }
        });
        TestRuntimes.WaitUntil(() => m.Delivered[0].Count >= 200, "the stream is flowing");
        m.Runtime[sender].Crash();
        m.Runtime[acceptor].Crash();
        stop.Cancel();
        await streaming.WaitAsync(TimeSpan.FromSeconds(30));
        var survivors = Enumerable.Range(0, 5).Where(i => i != sender && i != acceptor).ToList();
        TestRuntimes.WaitUntil(() => survivors.All(i => m.Groups[i].GetView()?.Members.Length == 3), "the survivors install a view without both");

        // Handlers run on delivery threads: wait until the survivors' logs stop growing.
        int stableRounds = 0, last = -1;
        TestRuntimes.WaitUntil(() =>
        {
            int total = survivors.Sum(i => m.Delivered[i].Count);
            stableRounds = total == last ? stableRounds + 1 : 0;
            last = total;
            return stableRounds >= 20;
        }, "the survivors' deliveries settle");

        // Everything anyone delivered (the crashed members included) is delivered by every survivor, in one order.
        var reference = m.Delivered[survivors[0]].ToArray();
        foreach (int i in survivors) Assert.Equal(reference, m.Delivered[i].ToArray());
        var everSeen = new HashSet<string>(reference);
        Assert.All(m.Delivered[sender].Concat(m.Delivered[acceptor]), d => Assert.Contains(d, everSeen));
        Assert.True(reference.Length >= 200);
    }
}
