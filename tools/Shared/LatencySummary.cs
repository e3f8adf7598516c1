using System.Diagnostics;

namespace Isis.Tools;

/// <summary>Percentiles of a latency sample, in microseconds (nearest rank); the tools report them alike.</summary>
internal sealed class LatencySummary
{
    public string Name { get; set; } = "";
    public int Samples { get; set; }
    public double P50 { get; set; }
    public double P90 { get; set; }
    public double P99 { get; set; }
    public double P999 { get; set; }
    public double Max { get; set; }
    public double Mean { get; set; }

    /// <summary>The distribution for plotting: the value at 0%, 1%, ..., 100% of the samples (nearest rank).</summary>
    public double[] Cdf { get; set; } = [];

    /// <summary>The summary of <paramref name="ticks"/> (Stopwatch ticks), without a name.</summary>
    public static LatencySummary Of(IEnumerable<long> ticks) => Of("", ticks);

    /// <summary>The summary of <paramref name="ticks"/> (Stopwatch ticks), named <paramref name="name"/>.</summary>
    public static LatencySummary Of(string name, IEnumerable<long> ticks)
    {
        double[] us = ticks.Select(t => t * 1_000_000.0 / Stopwatch.Frequency).Order().ToArray();
        if (us.Length == 0) return new LatencySummary { Name = name };
        // Nearest rank: the smallest value with at least p of the samples at or below it.
        double P(double p) => us[Math.Clamp((int)Math.Ceiling(p * us.Length) - 1, 0, us.Length - 1)];
        return new LatencySummary
        {
            Name = name,
            Samples = us.Length,
            P50 = P(0.50),
            P90 = P(0.90),
            P99 = P(0.99),
            P999 = P(0.999),
            Max = us[^1],
            Mean = us.Average(),
            Cdf = Enumerable.Range(0, 101).Select(i => i == 0 ? us[0] : P(i / 100.0)).ToArray(),
        };
    }
}
