using System.Collections.Concurrent;
using System.Security.Cryptography;

namespace Isis.Tests.Runtime;

/// <summary>Keys on real runtimes: a group's key among its members, a process with another key or none, and the system key.</summary>
public sealed class GroupKeyTests
{
    private const int Put = 1;

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Members_with_the_key_deliver_and_a_process_with_another_key_or_none_is_refused_with_the_reason(bool otherKey)
    {
        using var runtimes = new TestRuntimes();
        byte[] key = RandomNumberGenerator.GetBytes(32);
        var delivered = new ConcurrentQueue<string>();
        var members = new List<Group>();
        for (int i = 0; i < 3; i++)
        {
            var g = new Group(runtimes.Start(), "sealed");
            g.SetKey(key);
            int me = i;
            g.Handlers[Put] += (Action<string>)(s => delivered.Enqueue($"{me}:{s}"));
            await g.JoinAsync();
            members.Add(g);
        }
        members[0].Send(Put, "hello");
        TestRuntimes.WaitUntil(() => delivered.Count == 3, "the three members deliver");

        IsisRuntime outsiderRuntime = runtimes.Start();
        var outsider = new Group(outsiderRuntime, "sealed");
        if (otherKey) outsider.SetKey(RandomNumberGenerator.GetBytes(32));
        outsider.Handlers[Put] += (Action<string>)(s => delivered.Enqueue("outsider:" + s));
        var refused = await Assert.ThrowsAsync<IsisException>(() => outsider.JoinAsync().WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Contains("key", refused.Message);

        // The members drop its packets and have it removed; the group goes on without it.
        TestRuntimes.WaitUntil(() => members.All(m => m.GetView()?.Members.Length == 3), "the members' view is back to three");
        Assert.True(members.Sum(m => m.Runtime.GetStatistics().DroppedUnauthenticated) > 0);
        members[1].Send(Put, "after");
        TestRuntimes.WaitUntil(() => delivered.Count == 6, "the members deliver the next message");
        Assert.DoesNotContain(delivered, d => d.StartsWith("outsider", StringComparison.Ordinal));
        Assert.Null(outsider.GetView());
    }

    [Fact]
    public async Task Rotating_the_key_moves_the_group_to_it_at_a_view_change_without_losing_traffic_and_only_the_new_key_joins()
    {
        using var runtimes = new TestRuntimes();
        byte[] oldKey = RandomNumberGenerator.GetBytes(32), newKey = RandomNumberGenerator.GetBytes(32);
        var delivered = new ConcurrentDictionary<int, ConcurrentQueue<int>>();
        var members = new List<Group>();
        for (int i = 0; i < 3; i++)
        {
            var g = new Group(runtimes.Start(), "rotating");
            g.SetKey(oldKey);
            var mine = delivered[i] = new ConcurrentQueue<int>();
            g.Handlers[Put] += (Action<int>)(n => mine.Enqueue(n));
            await g.JoinAsync();
            members.Add(g);
        }
        TestRuntimes.WaitUntil(() => members.All(m => m.GetView()?.Members.Length == 3), "three members");
        int viewBefore = members[0].GetView()!.ViewId;

        // Traffic flows while the members are handed the new key one after the other.
        using var stop = new CancellationTokenSource();
        int sent = 0;
        // Paced (a burst of 20, then a millisecond): the test shares the machine with the others.
        Task sender = Task.Run(async () =>
        {
            while (!stop.IsCancellationRequested && sent < 4_000)
            {
                members[2].Send(Put, ++sent);
                if (sent % 20 == 0) await Task.Delay(1);
            }
        });
        Task first = members[0].RotateKeyAsync(newKey);
        Thread.Sleep(100);
        Assert.False(first.IsCompleted, "the group cannot move before every member holds the key");
        Task[] rest = [members[1].RotateKeyAsync(newKey), members[2].RotateKeyAsync(newKey)];
        await Task.WhenAll([first, .. rest]).WaitAsync(TimeSpan.FromSeconds(30)); // every member moved to the new key
        stop.Cancel();
        await sender;
        members[2].Flush();
        TestRuntimes.WaitUntil(() => delivered.Values.All(d => d.Count == sent), "every message sent around the move is delivered everywhere");
        Assert.All(delivered.Values, d => Assert.Equal(Enumerable.Range(1, sent), d));
        // Two view changes, same members: the move, then the one that retires the old key.
        TestRuntimes.WaitUntil(() => members.All(m => m.GetView()!.ViewId == viewBefore + 2), "the view that retires the old key");
        Thread.Sleep(200);
        Assert.All(members, m => Assert.Equal(viewBefore + 2, m.GetView()!.ViewId)); // and no more
        Assert.Equal(3, members[0].GetView()!.Members.Length);

        // A process with the old key is refused; one with the new key joins.
        var stale = new Group(runtimes.Start(), "rotating");
        stale.SetKey(oldKey);
        var refused = await Assert.ThrowsAsync<IsisException>(() => stale.JoinAsync().WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Contains("key", refused.Message);
        var fresh = new Group(runtimes.Start(), "rotating");
        fresh.SetKey(newKey);
        var freshDelivered = new ConcurrentQueue<int>();
        fresh.Handlers[Put] += (Action<int>)(n => freshDelivered.Enqueue(n));
        await fresh.JoinAsync().WaitAsync(TimeSpan.FromSeconds(30));
        members[0].Send(Put, -1);
        TestRuntimes.WaitUntil(() => freshDelivered.Contains(-1), "the process with the new key takes part");
    }

    [Fact]
    public void Rotating_the_key_of_a_group_without_one_or_to_a_bad_key_says_what_to_do()
    {
        using var runtimes = new TestRuntimes();
        var plain = new Group(runtimes.Start(), "plain");
        plain.Join();
        var noKey = Assert.Throws<InvalidOperationException>(() => plain.RotateKey(RandomNumberGenerator.GetBytes(32)));
        Assert.Contains("SetKey before Join", noKey.Message);
        var keyed = new Group(runtimes.Start(), "keyed");
        keyed.SetKey(RandomNumberGenerator.GetBytes(32));
        Assert.Throws<IsisException>(() => keyed.RotateKey(RandomNumberGenerator.GetBytes(32))); // not joined
        keyed.Join();
        Assert.Throws<ArgumentException>(() => keyed.RotateKey(new byte[16]));
    }

    [Fact]
    public async Task With_a_system_key_a_process_without_it_cannot_reach_the_membership_service()
    {
        using var runtimes = new TestRuntimes();
        byte[] systemKey = RandomNumberGenerator.GetBytes(32);
        var a = new Group(runtimes.Start(o => o.SystemKey = systemKey), "system");
        var b = new Group(runtimes.Start(o => o.SystemKey = systemKey), "system");
        await a.JoinAsync();
        await b.JoinAsync();
        TestRuntimes.WaitUntil(() => a.GetView()?.Members.Length == 2, "two members with the system key");

        IsisRuntime outsider = runtimes.Start();
        var c = new Group(outsider, "system");
        IsisException e = await Assert.ThrowsAnyAsync<IsisException>(() => c.JoinAsync().WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Contains("SystemKey", e.Message);
        Assert.False(outsider.IsRunning); // it found no service that answers it, and stopped with the reason
        Assert.Equal(2, a.GetView()!.Members.Length);
    }

    [Fact]
    public void A_key_of_the_wrong_size_or_set_after_Join_is_refused_with_what_to_do()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "misuse");
        Assert.Contains("32 bytes", Assert.Throws<ArgumentException>(() => g.SetKey(new byte[16])).Message);
        g.Join();
        Assert.Contains("before Join", Assert.Throws<InvalidOperationException>(() => g.SetKey(new byte[32])).Message);
        Assert.Contains("32 bytes", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions { SystemKey = new byte[8] })).Message);
    }
}
