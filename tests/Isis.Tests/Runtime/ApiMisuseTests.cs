namespace Isis.Tests.Runtime;

/// <summary>API misuse throws an exception whose message says what to do; nothing hangs.</summary>
public sealed class ApiMisuseTests
{
    [Fact]
    public void Send_before_Join_says_to_join_first()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "g");
        var e = Assert.Throws<IsisException>(() => g.Send(1, "x"));
        Assert.Contains("Join()", e.Message);
    }

    [Fact]
    public void Using_a_runtime_that_was_never_started_says_to_start_it()
    {
        var g = new Group(new IsisRuntime(new IsisOptions()), "g");
        var e = Assert.Throws<IsisException>(() => g.Join());
        Assert.Contains("Start()", e.Message);
    }

    [Fact]
    public void Joining_twice_or_with_a_second_group_object_of_the_same_name_is_refused()
    {
        using var runtimes = new TestRuntimes();
        var r = runtimes.Start();
        var g = new Group(r, "g");
        g.Join();
        Assert.Contains("already joined", Assert.Throws<IsisException>(() => g.Join()).Message);
        Assert.Contains("already exists", Assert.Throws<IsisException>(() => new Group(r, "g").Join()).Message);
    }

    [Fact]
    public async Task A_blocking_Leave_inside_the_groups_own_handler_throws_instead_of_deadlocking()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "g");
        var outcome = new TaskCompletionSource<Exception?>();
        g.Handlers[1] += (Action)(() =>
        {
            try { g.Leave(); outcome.TrySetResult(null); }
            catch (Exception e) { outcome.TrySetResult(e); }
        });
        g.Join();
        g.Send(1);
        var error = Assert.IsType<InvalidOperationException>(await outcome.Task.WaitAsync(TimeSpan.FromSeconds(20)));
        Assert.Contains("LeaveAsync", error.Message);
    }

    [Fact]
    public void Invalid_options_are_refused_with_the_name_of_the_setting()
    {
        Assert.Contains("SuspicionCount", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions { SuspicionCount = 1 })).Message);
        Assert.Contains("MaxDatagramSize", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions { MaxDatagramSize = 100 })).Message);
        Assert.Contains("IsolationTimeout", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions { IsolationTimeout = TimeSpan.FromMilliseconds(300) })).Message);
        Assert.Contains("DiscoveryTimeout", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions { DiscoveryTimeout = TimeSpan.Zero })).Message);
        Assert.Contains("needs a SystemKey", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions { AcceptedSystemKeys = { new byte[32] } })).Message);
        Assert.Contains("AcceptedSystemKeys[0] must be 32 bytes", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions { SystemKey = new byte[32], AcceptedSystemKeys = { new byte[8] } })).Message);
        Assert.Contains("odd number", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions
        {
            MembershipReplicas = { System.Net.IPEndPoint.Parse("127.0.0.1:7401"), System.Net.IPEndPoint.Parse("127.0.0.1:7402") },
        })).Message);
        Assert.Contains("twice", Assert.Throws<ArgumentException>(() => new IsisRuntime(new IsisOptions
        {
            MembershipReplicas = { System.Net.IPEndPoint.Parse("127.0.0.1:7401"), System.Net.IPEndPoint.Parse("127.0.0.1:7401"), System.Net.IPEndPoint.Parse("127.0.0.1:7403") },
        })).Message);
    }

    [Fact]
    public void A_message_above_the_size_limit_fails_at_the_call_that_sends_it()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(o => o.MaxMessageSize = 4096), "g");
        g.Handlers[1] += (Action<byte[]>)(_ => { });
        g.Join();
        var e = Assert.Throws<IsisException>(() => g.Send(1, new byte[10_000]));
        Assert.Contains("MaxMessageSize", e.Message);
    }

    [Fact]
    public void A_handler_exception_makes_the_member_leave_by_default()
    {
        using var runtimes = new TestRuntimes();
        var r = runtimes.Start();
        var g = new Group(r, "g");
        g.Handlers[1] += (Action)(() => throw new InvalidOperationException("boom"));
        g.Join();
        g.Send(1);
        TestRuntimes.WaitUntil(() => r.GetStatistics().HandlerExceptions == 1, "the exception is counted");
        TestRuntimes.WaitUntil(() => g.GetView() != null && SendFails(g), "the member left, so Send now refuses");

        static bool SendFails(Group g)
        {
            try { g.Send(2); return false; }
            catch (IsisException) { return true; }
        }
    }
}
