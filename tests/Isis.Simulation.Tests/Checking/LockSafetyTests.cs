using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

/// <summary>The checker's LockSafety property on hand-built histories.</summary>
public sealed class LockSafetyTests
{
    private static readonly Isis.Core.Identity.NodeId P = N(1), Q = N(2), R = N(3);

    private static HistoryBuilder Acquire(HistoryBuilder b, Isis.Core.Identity.NodeId p, long token)
    {
        b.History.RecordLockAcquired(b.History.Count * 10 + 5, p, G, 1, "a", token);
        return b;
    }

    private static HistoryBuilder Release(HistoryBuilder b, Isis.Core.Identity.NodeId p, long token)
    {
        b.History.RecordLockReleased(b.History.Count * 10 + 5, p, G, "a", token);
        return b;
    }

    [Fact]
    public void Holders_taking_turns_with_growing_tokens_pass_and_a_crash_ends_a_hold()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        Acquire(b, P, 1);
        Release(b, P, 1);
        Acquire(b, Q, 2);
        b.Crash(Q);
        Acquire(b, R, 3);
        Assert.DoesNotContain(HistoryChecker.Check(b.History).Violations, v => v.Property == nameof(HistoryChecker.LockSafety));
    }

    [Fact]
    public void Two_holders_at_once_are_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        Acquire(b, P, 1);
        Acquire(b, Q, 2);
        Assert.Contains(HistoryChecker.Check(b.History).Violations, v => v.Property == nameof(HistoryChecker.LockSafety) && v.Description.Contains("while", StringComparison.Ordinal));
    }

    [Fact]
    public void A_token_that_does_not_grow_is_caught()
    {
        var b = new HistoryBuilder().InstallAll(1, P, Q, R);
        Acquire(b, P, 5);
        Release(b, P, 5);
        Acquire(b, Q, 5);
        Assert.Contains(HistoryChecker.Check(b.History).Violations, v => v.Property == nameof(HistoryChecker.LockSafety) && v.Description.Contains("not above", StringComparison.Ordinal));
    }
}
