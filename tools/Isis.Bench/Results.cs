using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Text.Json;
using System.Text.Json.Serialization;
using Isis.Tools;

namespace Isis.Bench;

/// <summary>What one member process reports to the parent (its result file).</summary>
internal sealed class MemberResult
{
    public int Index { get; set; }

    /// <summary>One entry per primitive run in this group, in the order they ran.</summary>
    public List<PhaseResult> Phases { get; set; } = [];

    /// <summary>Sender only: the response-delay rounds.</summary>
    public List<ResponseDelayRaw> ResponseDelay { get; set; } = [];

    public StatsSnapshot? Final { get; set; }

    /// <summary>Sender only: seconds from its start until every receiver had joined and announced READY.</summary>
    public double FormedSeconds { get; set; }
}

/// <summary>One member's measurements of one primitive.</summary>
internal sealed class PhaseResult
{
    public string Primitive { get; set; } = "";

    /// <summary>Send timestamp to this member's handler, in Stopwatch ticks, one per recorded round (the sender records its local delivery).</summary>
    public long[] LatencyTicks { get; set; } = [];

    /// <summary>Sender: call until every receiver's ACK was delivered back (Query: until the QueryAsync task completed with all replies).</summary>
    public long[] RoundTripTicks { get; set; } = [];

    /// <summary>Sender, SafeSend and Query: call until the returned task completed.</summary>
    public long[] CompletionTicks { get; set; } = [];

    public List<ThroughputResult> Throughput { get; set; } = [];

    /// <summary>Sender: how long the calls of the blast took (they block on flow control).</summary>
    public double SendCallsSeconds { get; set; }

    /// <summary>Sender: the calls of the measured window (the blast less its first and last tenth) and how long they took.</summary>
    public long MeasuredCalls { get; set; }

    public double MeasuredCallsSeconds { get; set; }

    /// <summary>Sender, SafeSend and Query: from the first call until the last task completed.</summary>
    public double CompletedSeconds { get; set; }

    /// <summary>Receivers: counters at the first and the last delivery of the blast.</summary>
    public StatsSnapshot? BlastStart { get; set; }

    public StatsSnapshot? BlastEnd { get; set; }
}

internal sealed class ResponseDelayRaw
{
    public int K { get; set; }
    public string Mode { get; set; } = "";
    public long[] Ticks { get; set; } = [];
}

/// <summary>One member's deliveries in a blast; the rate is over the measured window, the middle of the blast.</summary>
internal sealed class ThroughputResult
{
    public int Member { get; set; }
    /// <summary>Every delivery of the blast at this member.</summary>
    public long Deliveries { get; set; }
    /// <summary>Deliveries at the start of the blast not counted in the rate (warm-up).</summary>
    public long WarmupDeliveries { get; set; }
    /// <summary>Deliveries in the measured window: every member is under load throughout it.</summary>
    public long MeasuredDeliveries { get; set; }
    /// <summary>Deliveries at the end of the blast not counted in the rate (cool-down).</summary>
    public long CooldownDeliveries { get; set; }
    /// <summary>From the first to the last delivery of the measured window.</summary>
    public double Seconds { get; set; }
    /// <summary>(MeasuredDeliveries - 1) / Seconds.</summary>
    public double DeliveriesPerSecond { get; set; }
    /// <summary>The whole blast, first to last delivery, for comparison.</summary>
    public double WholeBlastSeconds { get; set; }
    public double WholeBlastPerSecond { get; set; }
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
    public int Members { get; set; }
    public int Member { get; set; }
    public StatsSnapshot? Final { get; set; }
}

/// <summary>One primitive at one group size.</summary>
internal sealed class PrimitiveRun
{
    public int Members { get; set; }
    public string Primitive { get; set; } = "";
    /// <summary>Bytes of application data per message in this run.</summary>
    public int PayloadBytes { get; set; }
    /// <summary>SafeSend threshold (0 for the others).</summary>
    public int Phi { get; set; }
    public int MessagesPerBlast { get; set; }
    /// <summary>Latency rounds: run before the recorded ones (not recorded), recorded, run after them (not recorded).</summary>
    public int LatencyWarmupRounds { get; set; }
    public int LatencyRecordedRounds { get; set; }
    public int LatencyCooldownRounds { get; set; }
    /// <summary>Blast deliveries at each member left out of the rate at the start and at the end (MessagesPerBlast less both is the measured window).</summary>
    public int BlastWarmupDeliveries { get; set; }
    public int BlastCooldownDeliveries { get; set; }
    public List<LatencySummary> Latency { get; set; } = [];
    public List<ThroughputResult> Throughput { get; set; } = [];
    /// <summary>The sender's calls per second over the measured window (they block on flow control).</summary>
    public double SenderCallsPerSecond { get; set; }
    /// <summary>SafeSend and Query: operations completed at the sender per second (first call to last completion).</summary>
    public double SenderCompletedPerSecond { get; set; }
    /// <summary>Throughput phase, per receiver: packets per datagram received (batching).</summary>
    public List<double> PacketsPerDatagramAtReceivers { get; set; } = [];
}

/// <summary>Time until the application may answer an outside user after a burst of K updates.</summary>
internal sealed class ResponseDelaySummary
{
    public int Members { get; set; }
    public int PayloadBytes { get; set; }
    public int K { get; set; }
    public string Mode { get; set; } = "";
    /// <summary>Rounds run before and after the recorded ones (Delay.Samples), not recorded.</summary>
    public int WarmupRounds { get; set; }
    public int CooldownRounds { get; set; }
    public LatencySummary Delay { get; set; } = new();
}

/// <summary>One group of member processes (one size, one payload): its settings, its counts, and whether it completed.</summary>
internal sealed class GroupRun
{
    public int Members { get; set; }
    public int PayloadBytes { get; set; }
    /// <summary>udp or tcp (--transport).</summary>
    public string Transport { get; set; } = "udp";
    public int HeartbeatMs { get; set; }
    public int Suspicion { get; set; }
    /// <summary>The group's hard time limit (--timeout, or its default for this size).</summary>
    public int TimeoutSeconds { get; set; }
    /// <summary>Latency rounds per primitive: warm-up (not recorded), recorded, cool-down (not recorded).</summary>
    public int LatencyWarmupRounds { get; set; }
    public int LatencyRecordedRounds { get; set; }
    public int LatencyCooldownRounds { get; set; }
    /// <summary>Messages per blast: send and ordered; safe and query.</summary>
    public int MessagesPerBlast { get; set; }
    public int SlowMessagesPerBlast { get; set; }
    /// <summary>Fraction of a blast's deliveries left out at its start and, as many, at its end.</summary>
    public double BlastEdgeFraction { get; set; }
    public int ResponseDelayWarmupRounds { get; set; }
    public int ResponseDelayRecordedRounds { get; set; }
    public int ResponseDelayCooldownRounds { get; set; }
    /// <summary>From the sender's start until every member had joined (0 if it never got there).</summary>
    public double FormedSeconds { get; set; }
    public double WallSeconds { get; set; }
    public bool Completed { get; set; }
    /// <summary>Why the group did not complete (null if it did).</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public string? Failure { get; set; }
}

/// <summary>The whole run: what --out receives.</summary>
internal sealed class BenchReport : RunReport
{
    public int PayloadBytes { get; set; }
    /// <summary>Latency rounds as given or defaulted (at 3 members); each group's own counts are in Groups.</summary>
    public int Warmup { get; set; }
    public int Samples { get; set; }
    public int Cooldown { get; set; }
    /// <summary>Every group run (size x payload), completed or not, with its counts and failure-detection settings.</summary>
    public List<GroupRun> Groups { get; set; } = [];
    public List<PrimitiveRun> Runs { get; set; } = [];
    public List<ResponseDelaySummary> ResponseDelay { get; set; } = [];
    /// <summary>Each member's transport and protocol counters at the end of its group's run.</summary>
    public List<MemberCounters> Counters { get; set; } = [];

    /// <summary>Side-by-side mode only (--side-by-side): medians and ratios against JGroups and the C floor.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public SideBySideTable? SideBySide { get; set; }

    /// <summary>Scale mode only (--scale): the figures of the one large group.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public ScaleRun? Scale { get; set; }

    public string ToCsv()
    {
        if (Scale != null) return Scale.ToCsv(this);
        // samples_or_deliveries is what was measured (recorded rounds, or deliveries in the measured window);
        // warmup and cooldown are the rounds or deliveries before and after it that were run but not counted.
        var sb = new StringBuilder("kind,members,payload_bytes,primitive,name,samples_or_deliveries,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,per_s,warmup,cooldown\n");
        foreach (GroupRun g in Groups)
        {
            string status = g.Completed ? "completed" : "FAILED: " + g.Failure;
            string name = Quote(Inv($"{status}; heartbeat {g.HeartbeatMs} ms x {g.Suspicion}; formed {g.FormedSeconds:F1} s; wall {g.WallSeconds:F1} s; latency rounds per primitive"));
            sb.AppendLine(Inv($"group,{g.Members},{g.PayloadBytes},,{name},{g.LatencyRecordedRounds},,,,,,,,{g.LatencyWarmupRounds},{g.LatencyCooldownRounds}"));
        }
        foreach (PrimitiveRun r in Runs)
        {
            foreach (LatencySummary l in r.Latency)
                sb.AppendLine(Inv($"latency,{r.Members},{r.PayloadBytes},{r.Primitive},\"{l.Name}\",{l.Samples},{l.P50:F1},{l.P90:F1},{l.P99:F1},{l.P999:F1},{l.Max:F1},{l.Mean:F1},,{r.LatencyWarmupRounds},{r.LatencyCooldownRounds}"));
            foreach (ThroughputResult t in r.Throughput)
                sb.AppendLine(Inv($"throughput,{r.Members},{r.PayloadBytes},{r.Primitive},member{t.Member} deliveries,{t.MeasuredDeliveries},,,,,,,{t.DeliveriesPerSecond:F0},{t.WarmupDeliveries},{t.CooldownDeliveries}"));
            if (r.SenderCompletedPerSecond > 0)
                sb.AppendLine(Inv($"throughput,{r.Members},{r.PayloadBytes},{r.Primitive},sender completed (whole blast),{r.MessagesPerBlast},,,,,,,{r.SenderCompletedPerSecond:F0},0,0"));
        }
        foreach (ResponseDelaySummary d in ResponseDelay)
        {
            LatencySummary l = d.Delay;
            sb.AppendLine(Inv($"response_delay,{d.Members},{d.PayloadBytes},{d.Mode},K={d.K},{l.Samples},{l.P50:F1},{l.P90:F1},{l.P99:F1},{l.P999:F1},{l.Max:F1},{l.Mean:F1},,{d.WarmupRounds},{d.CooldownRounds}"));
        }
        return sb.ToString();
    }

    internal static string Inv(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);

    /// <summary>A CSV field in quotes, its quotes doubled and line breaks made spaces.</summary>
    private static string Quote(string s) => "\"" + s.Replace("\"", "\"\"", StringComparison.Ordinal).Replace('\n', ' ').Replace('\r', ' ') + "\"";
}

/// <summary>Min, median (nearest rank) and max of one figure across member processes.</summary>
internal sealed class Distribution
{
    public string Name { get; set; } = "";
    public string Unit { get; set; } = "";
    public int Samples { get; set; }
    public double Min { get; set; }
    public double Median { get; set; }
    public double Max { get; set; }
    public double Mean { get; set; }

    public static Distribution Of(string name, string unit, IEnumerable<double> values)
    {
        double[] v = values.Order().ToArray();
        if (v.Length == 0) return new Distribution { Name = name, Unit = unit };
        return new Distribution
        {
            Name = name,
            Unit = unit,
            Samples = v.Length,
            Min = v[0],
            Median = v[(v.Length + 1) / 2 - 1],
            Max = v[^1],
            Mean = v.Average(),
        };
    }
}

/// <summary>Scale mode: N member processes in one group on this machine (docs/performance.md, "Scale").</summary>
internal sealed class ScaleRun
{
    public int Members { get; set; }
    public int SendsPerMember { get; set; }
    public int PayloadBytes { get; set; }
    public int HeartbeatMs { get; set; }
    public int Suspicion { get; set; }
    /// <summary>Silence after which the membership service expels a process: heartbeat x suspicion.</summary>
    public int ExpulsionAfterMs { get; set; }
    public int IdleSeconds { get; set; }
    public int WaitLimitSeconds { get; set; }
    public string Kernel { get; set; } = "";
    public long MemTotalKb { get; set; }
    public string Gc { get; set; } = "";
    public string LoadAverageAtEnd { get; set; } = "";

    /// <summary>From the parent's first Process.Start call to its last.</summary>
    public double StartSpanMs { get; set; }
    /// <summary>Per member: the parent's Process.Start call until the member's Main ran (runtime start-up, assembly loading).</summary>
    public Distribution StartToMainMs { get; set; } = new();
    /// <summary>Per member: Main until Join returned (runtime start, JIT, the join's view change).</summary>
    public Distribution MainToJoinedMs { get; set; } = new();
    /// <summary>Per member: the first Process.Start until this member installed a view with all N members.</summary>
    public Distribution FormedMs { get; set; } = new();
    /// <summary>Until the last member installed a view with all N members, from the first / the last Process.Start.</summary>
    public double FormFromFirstStartMs { get; set; }
    public double FormFromLastStartMs { get; set; }
    /// <summary>Per member: views installed until the first view with all N members (that one included).</summary>
    public Distribution ViewsToForm { get; set; } = new();
    public int FormedViewId { get; set; }

    /// <summary>CPU time (user + system, /proc/PID/stat) in the first idle window right after forming, percent of one core.</summary>
    public Distribution IdleCpuFirstWindowPercentPerMember { get; set; } = new();
    /// <summary>The same in the second idle window (steady state); the figures below are of this window.</summary>
    public Distribution IdleCpuPercentPerMember { get; set; } = new();
    public double IdleCpuPercentAllMembers { get; set; }
    /// <summary>The parent: the embedded membership service and the harness itself.</summary>
    public double IdleCpuPercentParent { get; set; }
    /// <summary>Per member, datagrams received per second around the idle window (digests, heartbeat answers).</summary>
    public Distribution IdleDatagramsReceivedPerSecond { get; set; } = new();

    public long DeliveriesPerMember { get; set; }
    /// <summary>From writing "send" to every member until the last member delivered all N x K.</summary>
    public double SendsAllDeliveredMs { get; set; }
    public Distribution SendsDeliveredMs { get; set; } = new();

    /// <summary>VmRSS of each member process, MB (10^6 bytes).</summary>
    public Distribution RssAfterFormMb { get; set; } = new();
    public Distribution RssAfterSendsMb { get; set; } = new();
    /// <summary>Live managed heap of each member after a full compacting collection (GCMemoryInfo: heap size less fragmentation), MB.</summary>
    public Distribution HeapAfterFormMb { get; set; } = new();
    public Distribution HeapAfterSendsMb { get; set; } = new();
    /// <summary>GCMemoryInfo.TotalCommittedBytes after that collection: what the GC keeps committed, MB.</summary>
    public Distribution GcCommittedAfterFormMb { get; set; } = new();
    public Distribution GcCommittedAfterSendsMb { get; set; } = new();
    /// <summary>VmRSS again once the stats request's full compacting GC ran (the GC may give back what its gen-0 budget had touched).</summary>
    public Distribution RssAfterGcMb { get; set; } = new();
    /// <summary>VmHWM of each member (its peak RSS so far), MB, read after the Sends.</summary>
    public Distribution PeakRssMb { get; set; } = new();

    public int KilledMember { get; set; }
    public int KilledRank { get; set; }
    /// <summary>Per survivor: the SIGKILL until it installed the view without the killed member.</summary>
    public Distribution KillToViewMs { get; set; } = new();

    public string ToCsv(BenchReport r)
    {
        var sb = new StringBuilder("kind,members,name,unit,samples,min,median,max,mean\n");
        void Row(string name, string unit, int samples, double v) => sb.AppendLine(BenchReport.Inv($"scale,{Members},\"{name}\",{unit},{samples},{v:F1},{v:F1},{v:F1},{v:F1}"));
        void Dist(Distribution d) => sb.AppendLine(BenchReport.Inv($"scale,{Members},\"{d.Name}\",{d.Unit},{d.Samples},{d.Min:F1},{d.Median:F1},{d.Max:F1},{d.Mean:F1}"));
        Row("start span (first to last Process.Start)", "ms", Members, StartSpanMs);
        Dist(StartToMainMs);
        Dist(MainToJoinedMs);
        Dist(FormedMs);
        Row("formed, from the first start", "ms", Members, FormFromFirstStartMs);
        Row("formed, from the last start", "ms", Members, FormFromLastStartMs);
        Dist(ViewsToForm);
        Dist(IdleCpuFirstWindowPercentPerMember);
        Dist(IdleCpuPercentPerMember);
        Row("idle CPU, all members, second window", "% of a core", Members, IdleCpuPercentAllMembers);
        Row("idle CPU, parent (membership service), second window", "% of a core", 1, IdleCpuPercentParent);
        Dist(IdleDatagramsReceivedPerSecond);
        Row("sends, all delivered at every member", "ms", Members, SendsAllDeliveredMs);
        Dist(SendsDeliveredMs);
        Dist(RssAfterFormMb);
        Dist(RssAfterSendsMb);
        Dist(HeapAfterFormMb);
        Dist(HeapAfterSendsMb);
        Dist(GcCommittedAfterFormMb);
        Dist(GcCommittedAfterSendsMb);
        Dist(PeakRssMb);
        Dist(RssAfterGcMb);
        Dist(KillToViewMs);
        sb.AppendLine(BenchReport.Inv($"# machine {r.Machine}; {r.ProcessorCount} CPUs; MemTotal {MemTotalKb} kB; Linux {Kernel}; {r.Runtime}; GC {Gc}"));
        sb.AppendLine(BenchReport.Inv($"# heartbeat {HeartbeatMs} ms; suspicion {Suspicion}; {SendsPerMember} Sends of {PayloadBytes} B per member; killed member {KilledMember} (rank {KilledRank}); load average {r.LoadAverageAtStart} at start, {LoadAverageAtEnd} at end; wall {r.WallSeconds:F1} s"));
        return sb.ToString();
    }
}
