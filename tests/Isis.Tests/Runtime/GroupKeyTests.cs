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
    public async Task The_system_key_rotates_in_three_rolling_restarts_while_the_group_goes_on()
    {
        using var runtimes = new TestRuntimes();
        byte[] oldKey = RandomNumberGenerator.GetBytes(32), newKey = RandomNumberGenerator.GetBytes(32);
        var delivered = new ConcurrentDictionary<string, ConcurrentQueue<string>>();
        (IsisRuntime Runtime, Group Group, string Name) Start(string name, byte[] sealWith, params byte[][] accept)
        {
            IsisRuntime r = runtimes.Start(o => { o.SystemKey = sealWith; foreach (byte[] k in accept) o.AcceptedSystemKeys.Add(k); });
            var g = new Group(r, "rotating");
            var mine = delivered.GetOrAdd(name, _ => new ConcurrentQueue<string>());
            g.Handlers[Put] += (Action<string>)mine.Enqueue;
            return (r, g, name);
        }
        var members = new List<(IsisRuntime Runtime, Group Group, string Name)>();
        for (int i = 0; i < 3; i++)
        {
            members.Add(Start($"m{i}", oldKey));
            await members[i].Group.JoinAsync();
        }
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 3), "three members with the old key");

        // The operator's three rolling restarts: accept the new key; seal with it, accepting the old; drop the old.
        (string Step, byte[] Seal, byte[][] Accept)[] steps = [("accept-new", oldKey, [newKey]), ("seal-new", newKey, [oldKey]), ("new-only", newKey, [])];
        foreach (var (step, seal, accept) in steps)
        {
            for (int i = 0; i < 3; i++)
            {
                members[i].Runtime.Shutdown(); // hands its membership replica over, leaves
                members[i] = Start($"m{i}-{step}", seal, accept);
                await members[i].Group.JoinAsync().WaitAsync(TimeSpan.FromSeconds(30));
                TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 3), $"{members[i].Name} is in a view with the others");
                // Traffic both ways between the restarted member and the others, whichever key each seals with.
                string fromNew = $"{members[i].Name} says hello", fromOld = $"{members[(i + 1) % 3].Name} answers {members[i].Name}";
                members[i].Group.Send(Put, fromNew);
                members[(i + 1) % 3].Group.Send(Put, fromOld);
                TestRuntimes.WaitUntil(() => members.All(m => delivered[m.Name].Contains(fromNew) && delivered[m.Name].Contains(fromOld)), $"after {members[i].Name}: every member delivers both");
            }
        }
        Assert.All(members, m => Assert.True(m.Runtime.IsRunning, m.Runtime.ShutdownReason));

        // The old key opens nothing any more.
        IsisRuntime stale = runtimes.Start(o => { o.SystemKey = oldKey; o.DiscoveryTimeout = TimeSpan.FromSeconds(2); });
        var staleGroup = new Group(stale, "rotating");
        await Assert.ThrowsAnyAsync<IsisException>(() => staleGroup.JoinAsync().WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.All(members, m => Assert.Equal(3, m.Group.GetView()!.Members.Length));
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
