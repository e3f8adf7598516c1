using System.Diagnostics;

namespace Isis.Transport;

/// <summary>Microseconds from an arbitrary origin, never going backwards: the time the core's framing is fed.</summary>
internal static class MonotonicClock
{
    // Int128 because timestamp * 1e6 overflows a long after a few hours of uptime with ns ticks.
    public static long NowMicros() => (long)((Int128)Stopwatch.GetTimestamp() * 1_000_000 / Stopwatch.Frequency);
}
