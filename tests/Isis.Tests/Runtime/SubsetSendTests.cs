using System.Collections.Concurrent;
using Isis.Core.Node;
using Isis.Transport;

namespace Isis.Tests.Runtime;

/// <summary>
/// P2PSend, SubsetSend and P2PQuery over real loopback sockets: each message reaches the members it
/// names and no other, in the sender's FIFO order with its Sends, and survives the sender's crash
/// at every destination once a Flush returned; a P2PQuery is answered by its one member.
/// </summary>
public sealed class SubsetSendTests
{
    private const int Note = 1, Ask = 2, Hold = 3;

    private sealed class Cluster : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<Group> Groups = new();
        public readonly List<IsisRuntime> Members = new();
        public readonly List<ConcurrentQueue<string>> Seen = new();
        public readonly int[] Asked = new int[3];

        public Cluster(ProtocolMutations mutations = ProtocolMutations.None, double senderDrops = 0)
        {
            for (int i = 0; i < 3; i++)
            {
                int me = i;
                IsisRuntime r = Runtimes.Start(o =>
                {
                    o.Mutations = mutations;
                    if (me == 0 && senderDrops > 0) o.TransportFaults = new TransportFaultOptions { Seed = 13, DropProbability = senderDrops };
                });
                var g = new Group(r, "subset");
                var seen = new ConcurrentQueue<string>();
                g.Handlers[Note] += (Action<string>)(s => seen.Enqueue(s));
                g.Handlers[Ask] += (Action)(() =>
                {
                    Interlocked.Increment(ref Asked[me]);
                    g.Reply(100 + me);
                });
                g.Handlers[Hold] += (Action)(() => g.DeferReply()); // never answered
                g.Join();
                Groups.Add(g);
                Members.Add(r);
                Seen.Add(seen);
            }
            TestRuntimes.WaitUntil(() => Groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");
        }

        public Address Of(int i) => Members[i].Address!;

        public void Dispose() => Runtimes.Dispose();
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Each_message_reaches_the_members_it_names_in_the_senders_order(bool deliveredEverywhere)
    {
        using var c = new Cluster(deliveredEverywhere ? ProtocolMutations.SubsetDeliveredEverywhere : ProtocolMutations.None);
        Group sender = c.Groups[0];
        var expected = new List<string>[] { new(), new(), new() };
        for (int n = 0; n < 30; n++)
        {
            switch (n % 3)
            {
                case 0:
                    sender.P2PSend(c.Of(1), Note, $"p2p{n}");
                    expected[1].Add($"p2p{n}");
                    break;
                case 1:
                    await sender.SubsetSendAsync([c.Of(0), c.Of(2)], Note, $"sub{n}");
                    expected[0].Add($"sub{n}");
                    expected[2].Add($"sub{n}");
                    break;
                default:
                    sender.Send(Note, $"all{n}");
                    foreach (var e in expected) e.Add($"all{n}");
                    break;
            }
        }
        await sender.P2PSendAsync(c.Of(2), Note, "last");
        expected[2].Add("last");
        TestRuntimes.WaitUntil(() => c.Seen[2].Contains("last") && c.Seen[1].Contains("all29"), "the last messages");
        await sender.FlushAsync().WaitAsync(TimeSpan.FromSeconds(30));
        await Task.Delay(100); // anything misdelivered would be here by now
        if (deliveredEverywhere)
        {
            Assert.Contains("p2p0", c.Seen[2]); // the deliberately broken protocol: the test can tell
            return;
        }
        for (int i = 0; i < 3; i++) Assert.Equal(expected[i], c.Seen[i]);
    }

    [Fact]
    public void After_Flush_a_subset_send_survives_the_senders_crash_at_every_destination()
    {
        // The sender loses 40% of its datagrams: without repair and the flush, messages would be lost.
        using var c = new Cluster(senderDrops: 0.4);
        const int Count = 200;
        for (int n = 0; n < Count; n++) c.Groups[0].SubsetSend([c.Of(1), c.Of(2)], Note, $"m{n}");
        c.Groups[0].Flush();
        c.Members[0].Crash();
        TestRuntimes.WaitUntil(() => c.Groups[1].GetView()?.Members.Length == 2 && c.Groups[2].GetView()?.Members.Length == 2, "the survivors drop the crashed sender");
        string[] all = [.. Enumerable.Range(0, Count).Select(n => $"m{n}")];
        Assert.Equal(all, c.Seen[1]);
        Assert.Equal(all, c.Seen[2]);
    }

    [Fact]
    public async Task A_P2PQuery_is_answered_by_its_member_alone_and_fails_naming_it_when_it_fails()
    {
        using var c = new Cluster();
        Assert.Equal(102, await c.Groups[0].P2PQueryAsync<int>(c.Of(2), Ask).WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal(101, await Task.Run(() => c.Groups[0].P2PQuery<int>(c.Of(1), Ask)).WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal([0, 1, 1], c.Asked);

        // Member 2 takes the request and never answers; it fails: the query fails naming it.
        Task<int> held = c.Groups[1].P2PQueryAsync<int>(c.Of(2), Hold);
        await Task.Delay(200);
        Assert.False(held.IsCompleted);
        Address failed = c.Of(2);
        c.Members[2].Crash();
        var e = await Assert.ThrowsAsync<QueryTimeoutException>(() => held.WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal([failed], e.MissingMembers);
    }

    [Fact]
    public void Misuse_is_refused_with_what_to_do()
    {
        using var c = new Cluster();
        using var other = new TestRuntimes();
        Address stranger = other.Start().Address!;
        var notMember = Assert.Throws<ArgumentException>(() => c.Groups[0].P2PSend(stranger, Note, "x"));
        Assert.Contains("not a member of group 'subset'", notMember.Message);
        Assert.Contains("GetView().Members", notMember.Message);
        Assert.Contains("at least one destination", Assert.Throws<ArgumentException>(() => c.Groups[0].SubsetSend([], Note, "x")).Message);
        Assert.Throws<ArgumentException>(() => { _ = c.Groups[0].P2PQueryAsync<int>(stranger, Ask); });
    }
}
