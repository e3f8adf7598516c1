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
