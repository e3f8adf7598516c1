using System.Collections.Concurrent;
using System.Security.Cryptography;

namespace Isis.Tests.Runtime;

/// <summary>
/// GroupClient over real runtimes and sockets: a process that is not a member sends, orders,
/// SafeSends and queries through a member that relays; when relays fail mid-request its requests
/// move to other members and each still runs once at every member; a joiner receives the client
/// sessions; a group key is required of the client; a member that does not accept clients sends
/// it elsewhere; misuse is refused with what to do.
/// </summary>
public sealed class GroupClientTests
{
    private const int Add = 1, Count = 2, Fail = 3, Slow = 4, Never = 5;

    private sealed class Cluster : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<Group> Groups = new();
        public readonly List<IsisRuntime> Members = new();
        public readonly List<ConcurrentDictionary<string, int>> Seen = new(); // per member: "client/value" -> times run
        private readonly byte[]? _key;

        public Cluster(int n, byte[]? key = null, Action<Group, int>? adjust = null)
        {
            _key = key;
            for (int i = 0; i < n; i++) AddMember(adjust);
            WaitForView(n);
        }

        public void WaitForView(int n) => TestRuntimes.WaitUntil(() => Groups.Where((_, i) => Members[i].IsRunning).All(g => g.GetView()?.Members.Length == n), $"a {n}-member view");

        public Group AddMember(Action<Group, int>? adjust = null)
        {
            IsisRuntime r = Runtimes.Start();
            var g = new Group(r, "counters");
            if (_key != null) g.SetKey(_key);
            var seen = new ConcurrentDictionary<string, int>();
            int total = 0;
            g.Handlers[Add] += (Action<string, int>)((client, value) => seen.AddOrUpdate($"{client}/{value}", 1, (_, n) => n + 1));
            g.Handlers[Count] += (Action<string>)(client => g.Reply(seen.Keys.Count(k => k.StartsWith(client + "/", StringComparison.Ordinal)) + Interlocked.Increment(ref total) * 0));
            g.Handlers[Fail] += (Action<string>)(why => g.AbortReply(why));
            g.Handlers[Never] += (Action<string>)(_ => g.DeferReply()); // an answer that never comes
            g.MakeChkpt += (ChkptMaker)(_ => { foreach (var (k, n) in seen) g.SendChkpt(k, n); });
            g.LoadChkpt += (Action<string, int>)((k, n) => seen[k] = n);
            adjust?.Invoke(g, Groups.Count);
            g.Join();
            Groups.Add(g);
            Members.Add(r);
            Seen.Add(seen);
            return g;
        }

        public GroupClient Client(Action<GroupClientOptions>? adjust = null)
        {
            var o = new GroupClientOptions { Membership = Runtimes.Options(), GroupKey = _key, Timeout = TimeSpan.FromSeconds(30) };
            adjust?.Invoke(o);
            return new GroupClient("counters", o);
        }

        public void Dispose() => Runtimes.Dispose();
    }

    [Fact]
    public async Task A_client_sends_orders_safesends_and_queries_through_a_member()
    {
        using var c = new Cluster(3);
        using GroupClient client = c.Client();
        await client.SendAsync(Add, "a", 1).WaitAsync(TimeSpan.FromSeconds(30));
        await client.OrderedSendAsync(Add, "a", 2).WaitAsync(TimeSpan.FromSeconds(30));
        await client.SafeSendAsync(Add, "a", 3).WaitAsync(TimeSpan.FromSeconds(30));
        // A SafeSend is answered once delivered at its relay; the others deliver it too.
        TestRuntimes.WaitUntil(() => c.Seen.All(s => s.Count == 3), "every member runs the three requests");
        Assert.All(c.Seen, s => Assert.All(s.Values, n => Assert.Equal(1, n)));
        IReadOnlyList<int> counts = await client.QueryAsync<int>(Group.ALL, Count, "a").WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal([3, 3, 3], counts);
        Assert.Equal(3, client.Members.Count);
        Assert.Equal(0, client.Failovers);
    }

    [Fact]
    public async Task Relays_that_crash_mid_request_hand_the_requests_to_other_members_and_each_runs_once_everywhere()
    {
        using var c = new Cluster(5);
        using GroupClient client = c.Client(o => o.FailoverAfter = TimeSpan.FromMilliseconds(500));
        TestRuntimes.WaitUntil(() => client.Members.Count == 5, "the client learns the five members");
        const int requests = 300;
        var inFlight = new SemaphoreSlim(8);
        var sent = new List<Task>();
        for (int i = 1; i <= requests; i++)
        {
            await inFlight.WaitAsync();
            int value = i;
            sent.Add(Task.Run(async () =>
            {
                try { await client.SafeSendAsync(Add, "c", value); }
                finally { inFlight.Release(); }
            }));
            // Two relays fail while requests are in flight to them: not the one that hosts the service.
            if (i == 100) c.Members[3].Crash();
            if (i == 180) c.Members[4].Crash();
        }
        await Task.WhenAll(sent).WaitAsync(TimeSpan.FromSeconds(90));
        Assert.True(client.Failovers > 0, "no request had to move: the crashes hit no relay in flight");
        var survivors = Enumerable.Range(0, 3).ToList();
        TestRuntimes.WaitUntil(() => survivors.All(m => c.Seen[m].Count == requests), "every survivor runs every request");
        foreach (int m in survivors)
        {
            Assert.All(c.Seen[m], e => Assert.True(e.Value == 1, $"member {m} ran {e.Key} {e.Value} times"));
        }
    }

    [Fact]
    public async Task A_client_given_a_members_address_as_its_seed_learns_the_others_from_it()
    {
        using var c = new Cluster(3);
        // No membership settings at all: the default service port is not this test's, so only the seed can answer.
        using GroupClient client = new("counters", new GroupClientOptions { Seeds = { System.Net.IPEndPoint.Parse(c.Members[1].Address!.Endpoint) }, Timeout = TimeSpan.FromSeconds(30) });
        await client.OrderedSendAsync(Add, "s", 1).WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal(3, client.Members.Count);
        TestRuntimes.WaitUntil(() => c.Seen.All(s => s.ContainsKey("s/1")), "every member runs the request");
    }

    [Fact]
    public async Task A_relay_that_is_slow_but_alive_keeps_the_request_it_says_it_is_working_on()
    {
        // The handler takes longer than the failover time at every member, so the relay delivers
        // the SafeSend (and answers) late; meanwhile it answers each copy "working", and the
        // client waits for it instead of moving the request.
        using var c = new Cluster(2, adjust: (g, _) => g.Handlers[Slow] += (Action<string>)(_ => Thread.Sleep(1_500)));
        using GroupClient client = c.Client(o => o.FailoverAfter = TimeSpan.FromMilliseconds(400));
        TestRuntimes.WaitUntil(() => client.Members.Count == 2, "the client learns the members");
        await client.SafeSendAsync(Slow, "slow").WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal(0, client.Failovers);
    }

    [Fact]
    public async Task A_joiner_receives_the_client_sessions_and_runs_no_retry_of_an_earlier_request()
    {
        using var c = new Cluster(2);
        using GroupClient client = c.Client();
        for (int i = 1; i <= 5; i++) await client.OrderedSendAsync(Add, "j", i).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => c.Groups.All(g => g.ClientSessionCount == 1), "both members hold the client's session");
        Group joiner = c.AddMember();
        c.WaitForView(3);
        Assert.Equal(1, joiner.ClientSessionCount);
        Assert.Equal(5, c.Seen[2].Count);
        await client.OrderedSendAsync(Add, "j", 6).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => c.Seen.All(s => s.Count == 6), "every member runs the request sent after the join");
    }

    [Fact]
    public async Task A_group_with_a_key_serves_a_client_with_the_key_and_refuses_one_without_it()
    {
        byte[] key = RandomNumberGenerator.GetBytes(32);
        using var c = new Cluster(2, key);
        using (GroupClient keyless = c.Client(o => { o.GroupKey = null; o.Timeout = TimeSpan.FromSeconds(2); }))
        {
            await Assert.ThrowsAsync<TimeoutException>(() => keyless.OrderedSendAsync(Add, "k", 1));
        }
        using GroupClient client = c.Client();
        await client.OrderedSendAsync(Add, "k", 2).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => c.Seen.All(s => s.ContainsKey("k/2") && !s.ContainsKey("k/1")), "only the keyed client's request runs");
        Assert.True(c.Members.Sum(m => m.GetStatistics().DroppedUnauthenticated) > 0, "the keyless client's packets were not counted as unauthenticated");
    }

    [Fact]
    public async Task A_member_that_does_not_accept_clients_sends_the_client_to_another()
    {
        using var c = new Cluster(2, adjust: (g, index) => g.AcceptClients = index == 1);
        using GroupClient client = c.Client();
        for (int i = 1; i <= 6; i++) await client.OrderedSendAsync(Add, "r", i).WaitAsync(TimeSpan.FromSeconds(30));
        TestRuntimes.WaitUntil(() => c.Seen.All(s => s.Count == 6), "both members run every request");
        Assert.True(client.Failovers > 0, "the refusing member was never asked");
    }

    [Fact]
    public async Task A_query_aborted_by_a_member_throws_QueryAbortedException_at_the_client()
    {
        using var c = new Cluster(2);
        using GroupClient client = c.Client();
        var e = await Assert.ThrowsAsync<QueryAbortedException>(() => client.QueryAsync<int>(Group.ALL, Fail, "no such account"));
        Assert.Equal("no such account", e.Reason);
        Assert.Contains(e.Member, c.Members.Select(m => m.Address));
    }

    [Fact]
    public async Task A_query_whose_members_do_not_answer_in_time_throws_QueryTimeoutException_naming_them()
    {
        using var c = new Cluster(2);
        using GroupClient client = c.Client(o => o.QueryTimeout = TimeSpan.FromMilliseconds(500));
        var e = await Assert.ThrowsAsync<QueryTimeoutException>(() => client.QueryAsync<int>(Group.ALL, Never, "x").WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal(c.Members.Select(m => m.Address).OrderBy(a => a!.ToString()), e.MissingMembers.OrderBy(a => a.ToString()));
    }

    [Fact]
    public void Misuse_is_refused_with_what_to_do()
    {
        var e = Assert.Throws<ArgumentException>(() => new GroupClient("g", new GroupClientOptions { GroupKey = new byte[5] }));
        Assert.Contains("32-byte key", e.Message);
        using var client = new GroupClient("g", new GroupClientOptions { Seeds = { new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, TestRuntimes.FreeUdpPort()) } });
        Assert.Throws<ArgumentOutOfRangeException>(() => { _ = client.QueryAsync<int>(0, Count, "x"); });
        client.Dispose();
        Assert.Throws<ObjectDisposedException>(() => { _ = client.SendAsync(Add, "x", 1); });
    }
}
