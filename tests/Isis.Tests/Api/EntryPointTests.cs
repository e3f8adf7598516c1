using System.Collections.Concurrent;
using Isis.Tests.Runtime;

namespace Isis.Tests.Api;

/// <summary>
/// The Isis2-style static entry point the README opens with (IsisSystem), ranks in a view, and
/// removing handlers: public API that each needs a test that fails if it breaks.
/// </summary>
public sealed class EntryPointTests
{
    private const int Update = 1;

    [Fact]
    public void IsisSystem_starts_the_default_runtime_that_new_Group_uses_and_shuts_it_down()
    {
        using var runtimes = new TestRuntimes();
        Assert.False(IsisSystem.IsRunning);
        Assert.Contains("IsisSystem.Start()", Assert.Throws<IsisException>(() => IsisSystem.Runtime).Message);
        IsisSystem.Start(runtimes.Options());
        try
        {
            Assert.True(IsisSystem.IsRunning);
            Assert.True(IsisSystem.Runtime.IsRunning);
            Assert.Contains("already started", Assert.Throws<InvalidOperationException>(() => IsisSystem.Start(runtimes.Options())).Message);
            var received = new ConcurrentQueue<int>();
            var g = new Group("entry-point"); // on IsisSystem.Runtime
            g.Handlers[Update] += (Action<int>)received.Enqueue;
            g.Join();
            var other = new Group(runtimes.Start(), "entry-point");
            other.Join();
            TestRuntimes.WaitUntil(() => g.GetView()?.Members.Length == 2, "the default runtime's member and another in one view");
            View view = g.GetView()!;
            Assert.Equal(0, view.GetRankOf(IsisSystem.Runtime.Address!)); // the oldest member
            Assert.Equal(1, view.GetRankOf(other.GetView()!.Members[other.GetView()!.GetMyRank()]));
            Assert.Equal(view.GetMyRank(), view.GetRankOf(view.Members[view.GetMyRank()]));
            other.Send(Update, 5);
            TestRuntimes.WaitUntil(() => received.Contains(5), "a message delivered on the default runtime");
        }
        finally
        {
            IsisSystem.Shutdown();
        }
        Assert.False(IsisSystem.IsRunning);
        Assert.Throws<IsisException>(() => IsisSystem.Runtime);
        IsisSystem.Shutdown(); // twice: nothing to stop
    }

    [Fact]
    public void A_removed_handler_and_a_removed_view_handler_are_no_longer_called()
    {
        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "removal");
        var kept = new ConcurrentQueue<int>();
        var removed = new ConcurrentQueue<int>();
        var keptViews = new ConcurrentQueue<int>();
        var removedViews = new ConcurrentQueue<int>();
        Action<int> gone = removed.Enqueue;
        ViewHandler goneView = v => removedViews.Enqueue(v.Members.Length);
        g.Handlers[Update] += (Action<int>)kept.Enqueue;
        g.Handlers[Update] += gone;
        g.ViewHandlers += (ViewHandler)(v => keptViews.Enqueue(v.Members.Length));
        g.ViewHandlers += goneView;
        g.Join();
        g.Send(Update, 1);
        TestRuntimes.WaitUntil(() => kept.Contains(1) && removed.Contains(1), "both handlers called");

        g.Handlers[Update] -= gone;
        g.ViewHandlers -= goneView;
        g.Send(Update, 2);
        var joiner = new Group(runtimes.Start(), "removal");
        joiner.Join();
        TestRuntimes.WaitUntil(() => kept.Contains(2) && keptViews.Contains(2), "the kept handlers saw the message and the new view");
        Assert.Equal([1], removed);
        Assert.Equal([1], removedViews);
    }
}
