using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>
/// Incarnations grow on an endpoint (the membership service keeps only the highest expelled one
/// per endpoint): a start takes its quarter-second since 2025-01-01 and holds until that
/// quarter-second is over, so the next start on the endpoint takes a greater number. Driven by a
/// fake clock: no test waits for real time.
/// </summary>
public sealed class IncarnationClockTests
{
    private sealed class FakeClock(DateTime start)
    {
        public DateTime Now = start;
        public List<TimeSpan> Sleeps { get; } = [];

        public void Sleep(TimeSpan span)
        {
            Sleeps.Add(span);
            Now += span;
        }
    }

    private static readonly DateTime Epoch = new(2025, 1, 1, 0, 0, 0, DateTimeKind.Utc);

    [Fact]
    public void A_start_takes_its_quarter_second_and_holds_until_it_is_over_so_the_next_start_takes_a_greater_number()
    {
        var clock = new FakeClock(Epoch.AddSeconds(100).AddMilliseconds(30)); // 30 ms into quarter-second 400
        uint first = IncarnationClock.Next(() => clock.Now, clock.Sleep);
        Assert.Equal(400u, first);
        Assert.True(clock.Now >= Epoch.AddSeconds(100.25), $"held until {clock.Now:O}, before its quarter-second ended");
        Assert.True(clock.Sleeps.Sum(s => s.TotalMilliseconds) <= 250, "held for at most a quarter-second");

        // A process that starts on the endpoint right after this one released it.
        uint second = IncarnationClock.Next(() => clock.Now, clock.Sleep);
        Assert.True(second > first, $"{second} after {first}");

        // Starts spread over days keep growing.
        uint previous = second;
        for (int day = 1; day <= 5; day++)
        {
            clock.Now = Epoch.AddDays(day).AddMilliseconds(7 * day);
            uint next = IncarnationClock.Next(() => clock.Now, clock.Sleep);
            Assert.True(next > previous);
            previous = next;
        }
    }

    [Fact]
    public void A_clock_stepped_back_during_the_wait_ends_it_and_the_number_is_never_zero()
    {
        var clock = new FakeClock(Epoch.AddSeconds(10).AddMilliseconds(10));
        uint n = IncarnationClock.Next(() => clock.Now, span =>
        {
            clock.Sleeps.Add(span);
            clock.Now = Epoch.AddSeconds(5); // an operator steps the clock back mid-wait
        });
        Assert.Equal(40u, n);
        Assert.Single(clock.Sleeps);

        // Before the epoch (a clock far off): the smallest valid incarnation, never 0 (0 means none).
        var early = new FakeClock(Epoch.AddDays(-3));
        Assert.Equal(1u, IncarnationClock.Next(() => early.Now, early.Sleep));
    }
}
