using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using Isis.Collections;
using Isis.Tests.Runtime;

namespace Isis.Tests.Collections;

/// <summary>
/// Adaptive redundant querying (issue 15, item 3) against real HTTP servers on loopback, each with a
/// delay and a failure switch the test controls. The delays differ by hundreds of milliseconds, so
/// the assertions are about which replicas serve, never about how fast.
/// </summary>
public sealed class RedundantQueryClientTests
{
    /// <summary>A replica: answers its own name after a delay (or 503 when broken), counting reads and probes.</summary>
    private sealed class Replica : IDisposable
    {
        private readonly HttpListener _listener = new();
        private readonly CancellationTokenSource _stop = new();
        public readonly ConcurrentQueue<string> Paths = new();
        public volatile int DelayMs;
        public volatile bool Broken;
        public volatile int Status = 200;
        public long Position = -1; // sent as the "items" collection's position when not negative

        public Replica(string name)
        {
            Name = name;
            for (int attempt = 0; ; attempt++)
            {
                int port = Isis.Tools.LoopbackPorts.Next();
                Uri = new Uri($"http://127.0.0.1:{port}/");
                _listener.Prefixes.Clear();
                _listener.Prefixes.Add(Uri.ToString());
                try
                {
                    _listener.Start();
                    break;
                }
                catch (HttpListenerException) when (attempt < 5)
                {
                    // The port was taken between the probe and the bind: another one.
                }
            }
            _ = Task.Run(Serve);
        }

        public string Name { get; }

        public Uri Uri { get; private set; } = null!;

        public int Reads => Paths.Count(p => p.StartsWith("/items", StringComparison.Ordinal));

        private async Task Serve()
        {
            while (!_stop.IsCancellationRequested)
            {
                HttpListenerContext context;
                try
                {
                    context = await _listener.GetContextAsync();
                }
                catch (Exception e) when (e is HttpListenerException or ObjectDisposedException or InvalidOperationException)
                {
                    return;
                }
                _ = Task.Run(async () =>
                {
                    Paths.Enqueue(context.Request.Url!.AbsolutePath);
                    try
                    {
                        if (DelayMs > 0) await Task.Delay(DelayMs, _stop.Token);
                        context.Response.StatusCode = Broken ? 503 : Status;
                        long position = Interlocked.Read(ref Position);
                        if (position >= 0) context.Response.AddHeader(HistoryPosition.HeaderName, HistoryPosition.Format(new HistoryPosition("items", position), new HistoryPosition("other, =odd", 1)));
                        byte[] body = System.Text.Encoding.UTF8.GetBytes(Name);
                        await context.Response.OutputStream.WriteAsync(body);
                        context.Response.Close();
                    }
                    catch (Exception e) when (e is OperationCanceledException or HttpListenerException or ObjectDisposedException)
                    {
                        // Stopping, or the client went away.
                    }
                });
            }
        }

        public void Dispose()
        {
            _stop.Cancel();
            _listener.Close();
        }
    }

    private static RedundantQueryOptions Fast => new() { ProbeInterval = TimeSpan.FromMilliseconds(100), Timeout = TimeSpan.FromSeconds(2) };

    [Fact]
    public async Task Reads_go_to_the_k_fastest_replicas_and_follow_them_when_their_speed_changes()
    {
        using Replica a = new("a"), b = new("b"), c = new("c");
        c.DelayMs = 400;
        using var client = new RedundantQueryClient([a.Uri, b.Uri, c.Uri], Fast);
        TestRuntimes.WaitUntil(() => client.Replicas[^1].BaseAddress == c.Uri && client.Replicas[^1].Latency > TimeSpan.FromMilliseconds(150), "the probes found c slow");
        for (int i = 0; i < 20; i++) Assert.Contains(await client.GetStringAsync("/items/x"), new[] { "a", "b" });
        // k = 2: each read went to both fast replicas. The client returns on the first answer, so the
        // other replica may count the last read a moment later (a CI run saw 19 of 20).
        TestRuntimes.WaitUntil(() => a.Reads >= 20 && b.Reads >= 20, "both fast replicas counted every read");
        Assert.Equal(20, a.Reads);
        Assert.Equal(20, b.Reads);
        Assert.Equal(0, c.Reads);

        // a slows down and c recovers: the probes notice, and reads move to b and c.
        a.DelayMs = 400;
        c.DelayMs = 0;
        TestRuntimes.WaitUntil(() => client.Replicas[^1].BaseAddress == a.Uri && client.Replicas[^1].Latency > TimeSpan.FromMilliseconds(150), "the probes found a slow");
        int aBefore = a.Reads;
        for (int i = 0; i < 20; i++) Assert.Contains(await client.GetStringAsync("/items/y"), new[] { "b", "c" });
        TestRuntimes.WaitUntil(() => c.Reads >= 20, "c counted every read (it may count the last one after the first answer returned)");
        Assert.Equal(aBefore, a.Reads);
    }

    [Fact]
    public async Task The_first_answer_wins_and_a_failed_replica_is_left_out_until_a_probe_finds_it_back()
    {
        using Replica a = new("a"), b = new("b"), c = new("c");
        var options = Fast;
        options.Redundancy = 3;
        options.Timeout = TimeSpan.FromSeconds(15); // the first request warms up HTTP on a loaded machine (a CI run timed out at 2 s)
        b.DelayMs = 1_500;
        c.DelayMs = 1_500;
        using var client = new RedundantQueryClient([a.Uri, b.Uri, c.Uri], options);
        Assert.Equal("a", await client.GetStringAsync("/items/x")); // sent to all three; a answers first

        // a fails (503): the read still succeeds from another replica, and a is marked down.
        a.Broken = true;
        b.DelayMs = 0;
        Assert.Equal("b", await client.GetStringAsync("/items/y"));
        // The read returns with the first answer; a's 503 may still be on its way (a CI run looked before it came).
        TestRuntimes.WaitUntil(() => !client.Replicas.Single(r => r.BaseAddress == a.Uri).Up, "a is marked down after its 503");
        // Repaired: a probe brings it back.
        a.Broken = false;
        TestRuntimes.WaitUntil(() => client.Replicas.Single(r => r.BaseAddress == a.Uri).Up, "a probe found a back");
    }

    [Fact]
    public async Task When_every_replica_fails_the_error_says_why_for_each()
    {
        using Replica a = new("a"), b = new("b");
        a.Broken = true;
        b.Broken = true;
        using var client = new RedundantQueryClient([a.Uri, b.Uri], new RedundantQueryOptions { Redundancy = 1, ProbeInterval = TimeSpan.FromSeconds(10) });
        var failed = await Assert.ThrowsAsync<HttpRequestException>(() => client.GetStringAsync("/items/z"));
        Assert.Contains(a.Uri.ToString(), failed.Message);
        Assert.Contains(b.Uri.ToString(), failed.Message); // k = 1: the second replica was tried after the first failed
        Assert.Contains("503", failed.Message);
        Assert.Throws<ArgumentException>(() => new RedundantQueryClient([]));
        Assert.Throws<ArgumentException>(() => new RedundantQueryClient([a.Uri], new RedundantQueryOptions { Redundancy = 0 }));
    }

    [Fact]
    public async Task A_lagging_replicas_404_is_not_taken_over_a_fresh_answer_and_the_client_prefers_or_requires_freshness()
    {
        using Replica a = new("a"), b = new("b");
        a.Position = b.Position = 10;
        var options = Fast;
        options.Timeout = TimeSpan.FromSeconds(15);
        Assert.Equal(ReadFreshness.PreferFresh, options.Freshness); // the default
        using var client = new RedundantQueryClient([a.Uri, b.Uri], options);
        Assert.Contains(await client.GetStringAsync("/items/x"), new[] { "a", "b" });
        Assert.Equal(10, client.SeenPositions["items"]);
        Assert.Equal(1, client.SeenPositions["other, =odd"]); // names are escaped in the header

        // b lags behind what the client saw and answers 404 at once; a is fresh, but slower.
        Interlocked.Exchange(ref b.Position, 5);
        b.Status = 404;
        a.DelayMs = 300;
        using (HttpResponseMessage answer = await client.SendAsync(u => new HttpRequestMessage(HttpMethod.Get, new Uri(u, "/items/y"))))
        {
            Assert.Equal(HttpStatusCode.OK, answer.StatusCode);
            Assert.Equal("a", await answer.Content.ReadAsStringAsync());
        }
        // Only the lagging replica answers: preferred freshness takes its answer (the least stale), required freshness fails.
        a.Broken = true;
        using (HttpResponseMessage answer = await client.SendAsync(u => new HttpRequestMessage(HttpMethod.Get, new Uri(u, "/items/z"))))
        {
            Assert.Equal(HttpStatusCode.NotFound, answer.StatusCode);
        }
        options.Freshness = ReadFreshness.RequireFresh;
        using var strict = new RedundantQueryClient([a.Uri, b.Uri], options);
        strict.NoteSeen(new HistoryPosition("items", 10)); // a write's position, from the instance that took it
        var refused = await Assert.ThrowsAsync<HttpRequestException>(() => strict.GetStringAsync("/items/z"));
        Assert.Contains("at least as fresh", refused.Message);
        Assert.Contains("items=5 older than 10", refused.Message);
        // Caught up: its answer is taken again.
        Interlocked.Exchange(ref b.Position, 12);
        b.Status = 200;
        Assert.Equal("b", await strict.GetStringAsync("/items/z"));
        Assert.Equal(12, strict.SeenPositions["items"]);
        // Any freshness: the first answer, however old.
        options.Freshness = ReadFreshness.Any;
        using var any = new RedundantQueryClient([b.Uri], options);
        any.NoteSeen(new HistoryPosition("items", 99));
        Assert.Equal("b", await any.GetStringAsync("/items/z"));
    }

    [Fact]
    public void A_position_header_reads_back_what_was_written_and_anything_else_is_refused()
    {
        HistoryPosition[] written = [new("trader-quotes", 120), new("a,b=c d", 0)];
        Assert.True(HistoryPosition.TryParse(HistoryPosition.Format(written), out HistoryPosition[] read));
        Assert.Equal(written, read);
        Assert.False(HistoryPosition.TryParse("", out _));
        Assert.False(HistoryPosition.TryParse("quotes", out _));
        Assert.False(HistoryPosition.TryParse("quotes=-1", out _));
        Assert.False(HistoryPosition.TryParse("quotes=12x", out _));
    }

    [Fact]
    public void Probes_go_to_the_configured_path()
    {
        using Replica a = new("a");
        var options = Fast;
        options.ProbePath = "/ready";
        using var client = new RedundantQueryClient([a.Uri], options);
        TestRuntimes.WaitUntil(() => a.Paths.Count(p => p == "/ready") >= 3, "several probes at /ready");
        Assert.DoesNotContain("/health", a.Paths);
    }
}
