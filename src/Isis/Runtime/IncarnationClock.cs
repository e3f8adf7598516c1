namespace Isis.Runtime;

/// <summary>
/// Incarnation numbers that grow on each endpoint: a process that starts takes the number of
/// quarter-seconds since 2025-01-01 UTC (good until 2059), and holds its start until that quarter
/// second has passed, so a process that starts later on the same endpoint (after this one released
/// it) takes a strictly greater number.
/// </summary>
/// <remarks>
/// <para>The membership service keeps only the highest expelled incarnation per endpoint
/// (<see cref="Core.Membership.ExpelledIncarnations"/>), which is sound only if incarnations grow.
/// A random number (what earlier versions drew) does not; a counter would need a file per endpoint
/// that every process on it shares, and a process without a data directory has none. The wall
/// clock is what every process has.</para>
/// <para>Why quarter-seconds: the number has 32 bits, and a finer unit would wrap within years.
/// The wait (0.125 s on average, at most 0.25 s) is what makes two processes that start in the same
/// quarter-second on one endpoint impossible: the earlier one holds the endpoint until the unit
/// is over.</para>
/// <para>A clock stepped back by more than the time since the previous process on the endpoint
/// started can give a number at or below one expelled there: the service then firewalls the new
/// process as a zombie and tells it so (the process stops with "expelled"), and starting it again
/// once the clock has caught up works. Hosts that run Isis keep their clocks disciplined (NTP
/// slews small errors instead of stepping), so this needs a large manual step backwards.</para>
/// </remarks>
internal static class IncarnationClock
{
    private static readonly DateTime Epoch = new(2025, 1, 1, 0, 0, 0, DateTimeKind.Utc);
    private const long TicksPerUnit = TimeSpan.TicksPerSecond / 4;

    /// <summary>The incarnation of a process starting now; returns once no later start can take the same number.</summary>
    public static uint Next() => Next(() => DateTime.UtcNow, Thread.Sleep);

    /// <summary><see cref="Next()"/> over a given clock and sleep (tests).</summary>
    internal static uint Next(Func<DateTime> utcNow, Action<TimeSpan> sleep)
    {
        long unit = UnitOf(utcNow());
        // Hold until the unit is over (a clock stepped meanwhile ends the wait as well).
        for (DateTime now = utcNow(); UnitOf(now) == unit; now = utcNow())
        {
            sleep(TimeSpan.FromTicks(Math.Max(TimeSpan.TicksPerMillisecond, Epoch.Ticks + (unit + 1) * TicksPerUnit - now.Ticks)));
        }
        return (uint)Math.Clamp(unit, 1, uint.MaxValue);
    }

    private static long UnitOf(DateTime utc) => (utc.Ticks - Epoch.Ticks) / TicksPerUnit;
}
