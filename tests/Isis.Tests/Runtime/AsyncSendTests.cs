using System.Collections.Concurrent;

namespace Isis.Tests.Runtime;

/// <summary>
/// SendAsync and OrderedSendAsync: where Send blocks a thread under flow control, they return a
/// task that waits instead, keep the sender's order (with each other and with a blocking Send
/// issued after them), and a cancelled one is never sent.
/// </summary>
public sealed class AsyncSendTests
{
    private const int Numbered = 1;

    [Fact]
    public async Task Async_sends_are_delivered_like_blocking_ones_in_the_senders_order()
    {
        using var runtimes = new TestRuntimes();
        var delivered = new ConcurrentQueue<int>[2];
        var groups = new Group[2];
        for (int i = 0; i < 2; i++)
        {
            var log = delivered[i] = new ConcurrentQueue<int>();
            groups[i] = new Group(runtimes.Start(), "async-send");
            groups[i].Handlers[Numbered] += (Action<int>)log.Enqueue;
            groups[i].Join();
        }
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 2), "two members");

        for (int n = 1; n <= 300; n++)
        {
            if (n % 3 == 0) groups[0].Send(Numbered, n);
            else await groups[0].SendAsync(Numbered, n);
        }
        TestRuntimes.WaitUntil(() => delivered.All(d => d.Count == 300), "both deliver all 300");
        Assert.All(delivered, d => Assert.Equal(Enumerable.Range(1, 300), d));

        await groups[1].OrderedSendAsync(Numbered, 1000);
        await groups[0].OrderedSendAsync(Numbered, [2000], CancellationToken.None);
        // The token is not an argument of the message: the params overload says how to pass it.
        var e = await Assert.ThrowsAsync<ArgumentException>(() => groups[0].SendAsync(Numbered, 3000, CancellationToken.None));
        Assert.Contains("give the arguments as an array", e.Message);
        TestRuntimes.WaitUntil(() => delivered.All(d => d.Count == 302), "both deliver the ordered ones");
        Assert.Equal(delivered[0].Skip(300), delivered[1].Skip(300));
    }

    [Fact]
    public async Task Under_flow_control_an_async_send_waits_without_blocking_keeps_its_place_and_a_cancelled_one_is_never_sent()
    {
        using var runtimes = new TestRuntimes();
        // A small window, and a member that will stay in the view (unresponsive) for about 5 s.
        IsisRuntime Start() => runtimes.Start(o => { o.MaxUnstableMessages = 16; o.SuspicionCount = 100; });
        var mine = new ConcurrentQueue<int>();
        var sender = new Group(Start(), "window");
        sender.Handlers[Numbered] += (Action<int>)mine.Enqueue;
        sender.Join();
        IsisRuntime silentRuntime = Start();
        var silent = new Group(silentRuntime, "window");
        silent.Handlers[Numbered] += (Action<int>)(_ => { });
        silent.Join();
        TestRuntimes.WaitUntil(() => sender.GetView()?.Members.Length == 2, "two members");
        silentRuntime.Crash(); // nothing the sender sends from now on becomes stable until it is expelled

        // Fill the window: the call itself never blocks; the first task that cannot complete at once waits.
        var tasks = new List<Task>();
        Task? waiting = null;
        int n = 0;
        using var cancel = new CancellationTokenSource();
        while (waiting == null && n < 1_000)
        {
            Task t = sender.SendAsync(Numbered, [++n], n == 1 ? CancellationToken.None : cancel.Token);
            if (!t.IsCompleted) waiting = t;
            tasks.Add(t);
        }
        Assert.NotNull(waiting);
        int cancelledNumber = n;
        var keepsItsPlace = sender.SendAsync(Numbered, n + 1); // in line behind the waiting one
        var blocking = Task.Run(() => sender.Send(Numbered, n + 2)); // a blocking Send queues behind both
        Assert.False(keepsItsPlace.IsCompleted);

        cancel.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting!.WaitAsync(TimeSpan.FromSeconds(10)));

        // Once the silent member is expelled the window opens: the rest go out, in order.
        await keepsItsPlace.WaitAsync(TimeSpan.FromSeconds(60));
        await blocking.WaitAsync(TimeSpan.FromSeconds(60));
        TestRuntimes.WaitUntil(() => mine.Contains(n + 2), "the sender delivers what it sent");
        int[] expected = [.. Enumerable.Range(1, cancelledNumber - 1), cancelledNumber + 1, cancelledNumber + 2];
        Assert.Equal(expected, mine.ToArray());
    }
}
