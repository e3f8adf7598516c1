using System.Diagnostics;

namespace Isis.Diagnostics;

/// <summary>
/// Keeps a flood of one kind of report from drowning the log: the first <c>burst</c> reports pass,
/// then at most one per <c>interval</c>, which says how many were held back since the last one.
/// Thread-safe; it reads the monotonic clock only when called.
/// </summary>
internal sealed class ReportRateLimiter(int burst, TimeSpan interval)
{
    private readonly Lock _gate = new();
    private readonly long _intervalTicks = (long)(interval.TotalSeconds * Stopwatch.Frequency);
    private int _passed;
    private long _nextAt;
    private long _heldBack;

    /// <summary>True if this report may be written; <paramref name="heldBack"/> then says how many were not since the last one written.</summary>
    public bool TryPass(out long heldBack)
    {
        long now = Stopwatch.GetTimestamp();
        lock (_gate)
        {
            heldBack = 0;
            if (_passed < burst)
            {
                _passed++;
                _nextAt = now + _intervalTicks;
                return true;
            }
            if (now >= _nextAt)
            {
                heldBack = _heldBack;
                _heldBack = 0;
                _nextAt = now + _intervalTicks;
                return true;
            }
            _heldBack++;
            return false;
        }
    }
}
