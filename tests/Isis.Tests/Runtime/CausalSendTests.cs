using System.Collections.Concurrent;
using Isis.Core.Node;
using Isis.Transport;

namespace Isis.Tests.Runtime;

/// <summary>
/// CausalSend and CausalQuery over real loopback sockets: the member that asks holds back each of its
/// datagrams for up to 40 ms, so the answers of a member that replies at once overtake its questions
/// on the wire; causal order must still deliver every question first, everywhere. Run once with the
/// deliberate bug that delivers causal messages on arrival, the same assertions fail.
/// </summary>
public sealed class CausalSendTests
{
    private const int Question = 1, Answer = 2, Add = 3, Count = 4;

    private sealed class Cluster : IDisposable
    {
        public readonly TestRuntimes Runtimes = new();
        public readonly List<Group> Groups = new();
        public readonly List<IsisRuntime> Members = new();
        public readonly List<ConcurrentQueue<string>> Seen = new();
        public readonly int[] Added = new int[3];

        public Cluster(ProtocolMutations mutations)
        {
            for (int i = 0; i < 3; i++)
            {
                IsisRuntime r = Runtimes.Start(o =>
                {
                    o.Mutations = mutations;
                    // Member 0 asks; each of its datagrams is late by up to 40 ms, independently per destination.
                    if (i == 0) o.TransportFaults = new TransportFaultOptions { Seed = 29, DelayProbability = 1, MaxDelay = TimeSpan.FromMilliseconds(40) };
                });
                var g = new Group(r, "causal");
                var seen = new ConcurrentQueue<string>();
                int me = i;
                g.Handlers[Question] += (Action<int>)(n =>
                {
                    seen.Enqueue($"q{n}");
                    if (me == 1) g.CausalSend(Answer, n); // member 1 answers at once, causally after the question
                });
                g.Handlers[Answer] += (Action<int>)(n => seen.Enqueue($"a{n}"));
                g.Handlers[Add] += (Action)(() => Interlocked.Increment(ref Added[me]));
                g.Handlers[Count] += (Action)(() => g.Reply(Volatile.Read(ref Added[me])));
                g.Join();
                Groups.Add(g);
                Members.Add(r);
                Seen.Add(seen);
            }
            TestRuntimes.WaitUntil(() => Groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");
        }

        /// <summary>Questions whose answer a member delivered first.</summary>
        public int Inversions(int member)
        {
            string[] order = [.. Seen[member]];
            return order.Count(e => e[0] == 'a' && Array.IndexOf(order, "q" + e[1..]) is int q && (q < 0 || q > Array.IndexOf(order, e)));
        }

        public void Dispose() => Runtimes.Dispose();
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Answers_are_delivered_after_their_questions_at_every_member(bool deliverOnArrival)
    {
        using var c = new Cluster(deliverOnArrival ? ProtocolMutations.CausalDeliversOnArrival : ProtocolMutations.None);
        const int Questions = 40;
        for (int n = 0; n < Questions; n++)
        {
            // One datagram per question (a burst would share a few), each late by its own delay at each member.
            await c.Groups[0].CausalSendAsync(Question, n);
            await Task.Delay(5);
        }
        TestRuntimes.WaitUntil(() => c.Seen.All(s => s.Count == 2 * Questions), "every question and answer at every member");
        int inversions = Enumerable.Range(0, 3).Sum(c.Inversions);
        long held = c.Members.Sum(m => m.GetStatistics().CausalMessagesHeld);
        if (deliverOnArrival)
        {
            // Without the causal gate the overtaking answers are delivered as they come.
            Assert.True(inversions > 0, "the deliberately broken protocol delivered every answer after its question: the test cannot tell");
            return;
        }
        Assert.Equal(0, inversions);
        Assert.True(held > 0, "no answer overtook its question on the wire, so causal order was not exercised");
        Assert.All(c.Members, m => Assert.Equal(0, m.GetStatistics().CausalMessagesDroppedAtViewEnd));
        // Each member's own questions (and answers) are in its sending order.
        foreach (var seen in c.Seen) Assert.Equal([.. Enumerable.Range(0, Questions).Select(n => $"q{n}")], seen.Where(e => e[0] == 'q'));
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_causal_query_is_answered_after_what_its_asker_had_delivered(bool deliverOnArrival)
    {
        using var c = new Cluster(deliverOnArrival ? ProtocolMutations.CausalDeliversOnArrival : ProtocolMutations.None);
        int stale = 0;
        for (int n = 1; n <= 20; n++)
        {
            // Member 0's update reaches each member late, by its own delay; member 1 asks once it has the update.
            await c.Groups[0].CausalSendAsync(Add);
            int expected = n;
            TestRuntimes.WaitUntil(() => Volatile.Read(ref c.Added[1]) >= expected, "member 1 has the update");
            IReadOnlyList<int> counts = n % 2 == 0
                ? await c.Groups[1].CausalQueryAsync<int>(Group.ALL, Count).WaitAsync(TimeSpan.FromSeconds(30))
                : await Task.Run(() =>
                {
                    var replies = new List<int>();
                    c.Groups[1].CausalQuery(Group.ALL, Count, new EOLMarker(), replies);
                    return (IReadOnlyList<int>)replies;
                }).WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal(3, counts.Count);
            stale += counts.Count(x => x < expected);
        }
        if (deliverOnArrival) Assert.True(stale > 0, "the deliberately broken protocol never answered before the update: the test cannot tell");
        else Assert.Equal(0, stale);
    }
}
