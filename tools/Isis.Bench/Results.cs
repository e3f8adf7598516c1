using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Text.Json;

namespace Isis.Bench;

/// <summary>What one member process reports to the parent (its result file).</summary>
internal sealed class MemberResult
{
    public int Index { get; set; }

    /// <summary>Receivers: delivery - send, in Stopwatch ticks, one per recorded round.</summary>
    public long[] LatencyTicks { get; set; } = [];

    /// <summary>Sender: Send until both acknowledgements were delivered back, in Stopwatch ticks.</summary>
    public long[] RoundTripTicks { get; set; } = [];

    public List<ThroughputResult> Throughput { get; set; } = [];

    /// <summary>Sender: how long the Send calls of the blast took (they block on flow control).</summary>
    public double SendCallsSeconds { get; set; }

    public long SendStartTicks { get; set; }

    public StatsSnapshot? AfterLatency { get; set; }

    public StatsSnapshot? Final { get; set; }
}

internal sealed class ThroughputResult
{
    public int Member { get; set; }
    public long Deliveries { get; set; }
    public double Seconds { get; set; }
    public double DeliveriesPerSecond { get; set; }
}

internal sealed class StatsSnapshot
{
    public long DatagramsSent { get; set; }
    public long DatagramsReceived { get; set; }
    public long PacketsReceived { get; set; }
    public long NaksSent { get; set; }
    public long Duplicates { get; set; }
    public long HandlerMismatches { get; set; }
}

internal sealed class MemberCounters
{
    public int Member { get; set; }
    public StatsSnapshot? AfterLatency { get; set; }
    public StatsSnapshot? Final { get; set; }
}

/// <summary>Percentiles of a latency sample, in microseconds.</summary>
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
        };
    }
}

/// <summary>The whole run: what --out receives.</summary>
internal sealed class BenchReport
{
    public string Machine { get; set; } = "";
    public string Runtime { get; set; } = "";
    public int ProcessorCount { get; set; }
    public bool Quick { get; set; }
    public int Members { get; set; }
    public int PayloadBytes { get; set; }
    public int Warmup { get; set; }
    public int MessagesPerBlast { get; set; }
    public double WallSeconds { get; set; }
    public List<LatencySummary> Latency { get; set; } = [];
    public List<ThroughputResult> Throughput { get; set; } = [];
    public double SenderSendCallsPerSecond { get; set; }

    /// <summary>Throughput phase, per receiver: data packets per datagram received (batching).</summary>
    public List<double> PacketsPerDatagramAtReceivers { get; set; } = [];
    /// <summary>Each member's transport and protocol counters after the latency phase and at the end.</summary>
    public List<MemberCounters> Counters { get; set; } = [];

    public string ToCsv()
    {
        var sb = new StringBuilder("kind,name,samples_or_deliveries,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,deliveries_per_s\n");
        foreach (LatencySummary l in Latency)
            sb.AppendLine(Inv($"latency,\"{l.Name}\",{l.Samples},{l.P50:F1},{l.P90:F1},{l.P99:F1},{l.P999:F1},{l.Max:F1},{l.Mean:F1},"));
        foreach (ThroughputResult t in Throughput)
            sb.AppendLine(Inv($"throughput,member{t.Member},{t.Deliveries},,,,,,,{t.DeliveriesPerSecond:F0}"));
        return sb.ToString();
    }

    private static string Inv(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);
}

internal static class ResultJson
{
    public static readonly JsonSerializerOptions Options = new() { WriteIndented = true };
}
