using System.Net;
using System.Net.Sockets;

namespace Isis.Tests.Runtime;

/// <summary>
/// With no logger configured, what goes wrong is still visible: undeliverable messages, handler
/// exceptions, hostile input and shutdown reasons reach standard error (here a captured writer
/// standing in for it), floods rate-limited; and a healthy run says nothing there.
/// </summary>
public sealed class VisibleByDefaultTests
{
    private const int Update = 1;

    /// <summary>A thread-safe stand-in for standard error, shared by the runtimes of a test.</summary>
    private sealed class CapturedStandardError
    {
        private readonly StringWriter _text = new();

        public TextWriter Writer { get; }

        public CapturedStandardError() => Writer = TextWriter.Synchronized(_text);

        public string Text
        {
            get { lock (Writer) return _text.ToString(); }
        }

        public string[] Lines => Text.Split('\n', StringSplitOptions.RemoveEmptyEntries);
    }

    private static (IsisRuntime Runtime, Group Group) Member(TestRuntimes runtimes, CapturedStandardError stderr, Action<Group>? handlers = null)
    {
        IsisRuntime r = runtimes.Start(o => o.StandardError = stderr.Writer);
        var g = new Group(r, "visible");
        handlers?.Invoke(g);
        g.Join();
        return (r, g);
    }

    [Fact]
    public void An_undeliverable_message_is_reported_on_standard_error_and_a_flood_of_them_is_rate_limited()
    {
        using var runtimes = new TestRuntimes();
        var stderr = new CapturedStandardError();
        int delivered = 0;
        var (_, receiver) = Member(runtimes, stderr, g => g.Handlers[Update] += (Action<int>)(_ => Interlocked.Increment(ref delivered)));
        var (_, sender) = Member(runtimes, stderr, g => g.Handlers[Update] += (Action<int>)(_ => Interlocked.Increment(ref delivered)));
        TestRuntimes.WaitUntil(() => receiver.GetView()?.Members.Length == 2, "two members");

        sender.Send(Update, "x"); // a string to an Action<int> handler
        TestRuntimes.WaitUntil(() => stderr.Text.Contains("not delivered to the application"), "the mismatch is reported on standard error");
        Assert.Contains("isis: warn:", stderr.Text);
        Assert.Contains("Group visible: message from", stderr.Text);

        for (int i = 0; i < 500; i++) sender.Send(Update, "flood");
        sender.Send(Update, 7); // a good one after the flood: every mismatch before it was handled
        TestRuntimes.WaitUntil(() => Volatile.Read(ref delivered) == 2, "both members deliver the good message");
        int reported = stderr.Lines.Count(l => l.Contains("not delivered to the application"));
        // Two members each got 501 mismatches; each group logs its first 10 and then one line per 10 s.
        Assert.InRange(reported, 2, 2 * 11);
    }

    [Fact]
    public void A_handler_exception_is_reported_on_standard_error_with_what_the_member_does_about_it()
    {
        using var runtimes = new TestRuntimes();
        var stderr = new CapturedStandardError();
        var (_, member) = Member(runtimes, stderr, g => g.Handlers[Update] += (Action<int>)(_ => throw new InvalidOperationException("boom in the handler")));
        member.Send(Update, 1);
        TestRuntimes.WaitUntil(() => stderr.Text.Contains("boom in the handler"), "the exception is on standard error");
        Assert.Contains("isis: error:", stderr.Text);
        Assert.Contains("a handler threw", stderr.Text);
        Assert.Contains("LeaveOnHandlerException", stderr.Text);
    }

    [Fact]
    public void Hostile_datagrams_are_reported_on_standard_error()
    {
        using var runtimes = new TestRuntimes();
        var stderr = new CapturedStandardError();
        var (runtime, _) = Member(runtimes, stderr);
        var target = IPEndPoint.Parse(runtime.Address!.Endpoint);
        using var attacker = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        var random = new Random(7);
        for (int i = 0; i < 200; i++)
        {
            byte[] junk = new byte[1 + random.Next(300)];
            random.NextBytes(junk);
            attacker.SendTo(junk, target);
        }
        TestRuntimes.WaitUntil(() => stderr.Text.Contains("malformed, truncated, forged, replayed, unauthenticated or oversized packets"), "the drops are reported");
        Assert.Contains(runtime.Address.ToString(), stderr.Text);
        Assert.True(runtime.IsRunning);
    }

    [Fact]
    public void A_shutdown_by_the_membership_protocol_says_why_on_standard_error()
    {
        using var runtimes = new TestRuntimes();
        var stderr = new CapturedStandardError();
        IsisRuntime service = runtimes.Start(o => { o.MembershipService = MembershipServiceMode.Host; o.StandardError = stderr.Writer; });
        IsisRuntime member = runtimes.Start(o => { o.MembershipService = MembershipServiceMode.Client; o.IsolationTimeout = TimeSpan.FromMilliseconds(600); o.StandardError = stderr.Writer; });
        new Group(member, "visible").Join();
        service.Crash();
        TestRuntimes.WaitUntil(() => member.ShutdownReason != null, "the member isolates itself");
        TestRuntimes.WaitUntil(() => stderr.Text.Contains("shut down by the membership protocol"), "the reason is on standard error");
        Assert.Contains("isis: critical:", stderr.Text);
        Assert.Contains("isolated", stderr.Text);
    }

    [Fact]
    public void A_healthy_group_writes_nothing_to_standard_error()
    {
        using var runtimes = new TestRuntimes();
        var stderr = new CapturedStandardError();
        int delivered = 0;
        var members = Enumerable.Range(0, 3).Select(_ => Member(runtimes, stderr, g => g.Handlers[Update] += (Action<int>)(_ => Interlocked.Increment(ref delivered)))).ToList();
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == 3), "three members");
        foreach (var (_, g) in members) for (int i = 0; i < 100; i++) g.Send(Update, i);
        TestRuntimes.WaitUntil(() => Volatile.Read(ref delivered) == 900, "every member delivers every message");
        members[2].Group.Leave();
        TestRuntimes.WaitUntil(() => members.Take(2).All(m => m.Group.GetView()?.Members.Length == 2), "a member leaves");
        Thread.Sleep(1_200); // one hostile-input check period: a false alarm would show
        Assert.Equal("", stderr.Text);
    }
}
