namespace Isis.Tests.Runtime;

/// <summary>
/// GroupLocks over real runtimes: first come first served, fencing tokens that grow with each grant,
/// a failed holder's lock going to the next in line at the next view, TryLock withdrawing on its
/// timeout, a joiner receiving the table, and misuse refused with what to do.
/// </summary>
public sealed class GroupLocksTests
{
    private sealed class Cluster : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<Group> Groups = new();
        public readonly List<GroupLocks> Locks = new();
        public readonly List<IsisRuntime> Members = new();

        public Cluster(int n)
        {
            for (int i = 0; i < n; i++) Add();
            TestRuntimes.WaitUntil(() => Groups.All(g => g.GetView()?.Members.Length == n), $"a {n}-member view");
        }

        public void Add()
        {
            IsisRuntime r = Runtimes.Start();
            var g = new Group(r, "locks");
            var locks = new GroupLocks(g);
            g.Join();
            Groups.Add(g);
            Locks.Add(locks);
            Members.Add(r);
        }

        public void Dispose() => Runtimes.Dispose();
    }

    [Fact]
    public async Task Requests_are_granted_first_come_first_served_with_growing_fencing_tokens()
    {
        using var c = new Cluster(3);
        long first = await c.Locks[0].LockAsync("printer").WaitAsync(TimeSpan.FromSeconds(30));
        Task<long> second = c.Locks[1].LockAsync("printer");
        TestRuntimes.WaitUntil(() => c.Locks[0].WaitingFor("printer") == 1, "member 1's request is queued");
        Task<long> third = c.Locks[2].LockAsync("printer");
        TestRuntimes.WaitUntil(() => c.Locks.All(l => l.WaitingFor("printer") == 2), "member 2's request is queued behind it");
        Assert.All(c.Locks, l => Assert.Equal((c.Members[0].Address!, first), l.HolderOf("printer")));
        Assert.False(second.IsCompleted || third.IsCompleted);

        c.Locks[0].Unlock("printer");
        long secondToken = await second.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.False(third.IsCompleted, "the third request was granted while the second held the lock");
        c.Locks[1].Unlock("printer");
        long thirdToken = await third.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.True(first < secondToken && secondToken < thirdToken, $"tokens {first}, {secondToken}, {thirdToken}");
        // Another lock is independent.
        Assert.Equal(1, await c.Locks[1].LockAsync("scanner").WaitAsync(TimeSpan.FromSeconds(30)));
    }

    [Fact]
    public async Task A_holders_failure_gives_its_lock_to_the_next_in_line_at_the_next_view()
    {
        using var c = new Cluster(3);
        long held = await c.Locks[1].LockAsync("leader").WaitAsync(TimeSpan.FromSeconds(30));
        Task<long> next = c.Locks[2].LockAsync("leader");
        TestRuntimes.WaitUntil(() => c.Locks[0].WaitingFor("leader") == 1, "member 2 waits");
        c.Members[1].Crash();
        long token = await next.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.True(token > held, $"the next holder's token {token} is not above the failed holder's {held}");
        TestRuntimes.WaitUntil(() => c.Locks[0].HolderOf("leader") is { } h && h.Holder == c.Members[2].Address, "every survivor sees the new holder");
    }

    [Fact]
    public async Task TryLock_gives_up_after_its_timeout_and_its_request_is_withdrawn()
    {
        using var c = new Cluster(2);
        long held = await c.Locks[0].LockAsync("door").WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Null(await c.Locks[1].TryLockAsync("door", TimeSpan.FromMilliseconds(300)).WaitAsync(TimeSpan.FromSeconds(30)));
        TestRuntimes.WaitUntil(() => c.Locks.All(l => l.WaitingFor("door") == 0), "the withdrawn request leaves the queue");
        c.Locks[0].Unlock("door");
        TestRuntimes.WaitUntil(() => c.Locks.All(l => l.HolderOf("door") == null), "the lock is free: nobody got it for the withdrawn request");
        Assert.Equal(held + 1, await c.Locks[1].TryLockAsync("door", TimeSpan.FromSeconds(30)).WaitAsync(TimeSpan.FromSeconds(30)));
        // A cancelled wait is withdrawn too.
        using var cancel = new CancellationTokenSource();
        Task<long> waiting = c.Locks[0].LockAsync("door", cancel.Token);
        TestRuntimes.WaitUntil(() => c.Locks[1].WaitingFor("door") == 1, "member 0 waits");
        cancel.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting.WaitAsync(TimeSpan.FromSeconds(30)));
        TestRuntimes.WaitUntil(() => c.Locks.All(l => l.WaitingFor("door") == 0), "the cancelled request leaves the queue");
    }

    [Fact]
    public async Task A_joiner_receives_the_lock_table_and_queues_behind_it()
    {
        using var c = new Cluster(2);
        long held = await c.Locks[0].LockAsync("table").WaitAsync(TimeSpan.FromSeconds(30));
        c.Add();
        TestRuntimes.WaitUntil(() => c.Groups.All(g => g.GetView()?.Members.Length == 3), "the joiner is in");
        Assert.Equal((c.Members[0].Address!, held), c.Locks[2].HolderOf("table"));
        Task<long> joiner = c.Locks[2].LockAsync("table");
        TestRuntimes.WaitUntil(() => c.Locks[0].WaitingFor("table") == 1, "the joiner waits");
        c.Locks[0].Unlock("table");
        Assert.Equal(held + 1, await joiner.WaitAsync(TimeSpan.FromSeconds(30)));
    }

    [Fact]
    public async Task A_member_that_leaves_while_it_waits_is_told_and_the_line_moves_on()
    {
        using var c = new Cluster(3);
        long held = await c.Locks[0].LockAsync("queue").WaitAsync(TimeSpan.FromSeconds(30));
        Task<long> leaver = c.Locks[1].LockAsync("queue");
        TestRuntimes.WaitUntil(() => c.Locks[0].WaitingFor("queue") == 1, "member 1 waits");
        Task<long> stayer = c.Locks[2].LockAsync("queue");
        TestRuntimes.WaitUntil(() => c.Locks[0].WaitingFor("queue") == 2, "member 2 waits behind it");
        await c.Groups[1].LeaveAsync().WaitAsync(TimeSpan.FromSeconds(30));
        var e = await Assert.ThrowsAsync<IsisException>(() => leaver.WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Contains("will not be granted", e.Message);
        TestRuntimes.WaitUntil(() => c.Locks[0].WaitingFor("queue") == 1, "the leaver's request leaves the line");
        c.Locks[0].Unlock("queue");
        Assert.Equal(held + 1, await stayer.WaitAsync(TimeSpan.FromSeconds(30)));
    }

    [Fact]
    public async Task An_uncontended_release_travels_with_the_members_next_request_and_a_waiter_gets_the_lock_at_once()
    {
        using var c = new Cluster(2);
        int pairs = 0, releasesAlone = 0;
        c.Groups[1].Handlers[GroupLocks.ReleaseThenRequestCode] += (Action<string, string, ulong, uint, long>)((_, _, _, _, _) => Interlocked.Increment(ref pairs));
        c.Groups[1].Handlers[GroupLocks.LockCode] += (Action<byte, string, ulong, uint, long>)((op, _, _, _, _) => { if (op == 1) Interlocked.Increment(ref releasesAlone); });
        long last = 0;
        for (int i = 0; i < 10; i++)
        {
            long token = await c.Locks[0].LockAsync("queue").WaitAsync(TimeSpan.FromSeconds(30));
            Assert.True(token > last, $"token {token} after {last}");
            last = token;
            c.Locks[0].Unlock("queue");
        }
        // The releases went with the next request (nine, unless a stalled thread let a millisecond
        // pass between an Unlock and the next LockAsync); the last goes alone a millisecond later.
        TestRuntimes.WaitUntil(() => c.Locks.All(l => l.HolderOf("queue") == null), "the last release is applied everywhere");
        TestRuntimes.WaitUntil(() => Volatile.Read(ref pairs) + Volatile.Read(ref releasesAlone) == 10, "member 1 applied the ten releases");
        Assert.True(pairs >= 5, $"only {pairs} of the ten releases travelled with the next request");
        Assert.Throws<InvalidOperationException>(() => c.Locks[0].Unlock("queue"));

        // Held and unlocked, not yet given back: another member's request makes the holder give it back at once.
        await c.Locks[0].LockAsync("door").WaitAsync(TimeSpan.FromSeconds(30));
        c.Locks[0].Unlock("door");
        Assert.Throws<InvalidOperationException>(() => c.Locks[0].Unlock("door")); // unlocked once already
        long other = await c.Locks[1].LockAsync("door").WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal(2, other);
    }

    [Fact]
    public async Task Misuse_is_refused_with_what_to_do()
    {
        using var c = new Cluster(1);
        Assert.Contains("does not hold lock 'x'", Assert.Throws<InvalidOperationException>(() => c.Locks[0].Unlock("x")).Message);
        Assert.Contains("before Join()", Assert.Throws<InvalidOperationException>(() => new GroupLocks(c.Groups[0])).Message);
        var fresh = new Group(c.Members[0], "locks-2");
        _ = new GroupLocks(fresh);
        Assert.Contains("one GroupLocks per group", Assert.Throws<InvalidOperationException>(() => new GroupLocks(fresh)).Message);
        Assert.Contains("Join()", (await Assert.ThrowsAsync<IsisException>(() => new GroupLocks(new Group(c.Members[0], "locks-3")).LockAsync("x"))).Message);
    }
}
