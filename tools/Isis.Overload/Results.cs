using Isis.Tools;

namespace Isis.Overload;

/// <summary>One update of the writer: the value, when its PUT left and when its answer came (seconds on the parent's clock), and whether it was acknowledged.</summary>
internal readonly record struct WriteRecord(long Value, double Sent, double Done, bool Acknowledged);

/// <summary>One read: its thread, whether it went to the starved replica, when it left and came back, the value (if answered).</summary>
internal readonly record struct ReadRecord(int Thread, bool Starved, double Sent, double Done, long Value, bool Answered);

/// <summary>One instance's /stats in one round of the poller (null if it did not answer within the limit).</summary>
internal readonly record struct StatsSample(int Round, int Instance, double Sent, double Done, InstanceStats? Stats);

/// <summary>The whole result file.</summary>
internal sealed class OverloadReport : RunReport
{
    public OverloadOptions Settings { get; set; } = new();

    /// <summary>How the starvation was applied: pinning, hogs, nice, and what could not be done.</summary>
    public StressResult Stress { get; set; } = new();
    public FloodResult Flood { get; set; } = new();
    public List<InstanceInfo> Instances { get; set; } = new();

    /// <summary>Seconds since the measurement started (the writer's and readers' start).</summary>
    public double OverloadStart { get; set; }
    public double OverloadEnd { get; set; }
    public double MeasurementEnd { get; set; }

    public WriterSummary Writer { get; set; } = new();
    public List<BinRow> Bins { get; set; } = new();
    public Convergence Convergence { get; set; } = new();

    /// <summary>The starved instance's /stats just before the overload, right after it, and after the run (every write merged).</summary>
    public InstanceStats? StarvedBefore { get; set; }
    public InstanceStats? StarvedAtOverloadEnd { get; set; }
    public InstanceStats? StarvedAfter { get; set; }

    /// <summary>Views installed after the three-member view the measurement started in, as each instance saw them.</summary>
    public List<ViewChange> ViewChanges { get; set; } = new();

    /// <summary>True if the starved instance left the group (expelled, or its process stopped).</summary>
    public bool StarvedExpelled { get; set; }

    /// <summary>If the others installed a view without the starved member: what it still did after that, unaware.</summary>
    public AfterExclusion? AfterExclusion { get; set; }
    public FinalState Final { get; set; } = new();

    /// <summary>Definitions of the figures, as the report states them.</summary>
    public List<string> Definitions { get; set; } = new();

    /// <summary>What went wrong (the run failed: the exit code is 1).</summary>
    public List<string> Problems { get; set; } = new();

    /// <summary>What this machine did not allow (no pinning, no renice back): the run still counts, weaker.</summary>
    public List<string> Notes { get; set; } = new();
}

internal sealed class InstanceInfo
{
    public int Index { get; set; }
    public string Role { get; set; } = "";
    public int ProcessId { get; set; }
    public string Url { get; set; } = "";
    public string IsisAddress { get; set; } = "";
    public int DataPort { get; set; }
    public int? MembershipReplicaPort { get; set; }
    public int Rank { get; set; }
    public string Cpus { get; set; } = "";
}

internal sealed class StressResult
{
    public bool Pinned { get; set; }
    public string StarvedCpus { get; set; } = "";
    public string OtherCpus { get; set; } = "";
    public int HogThreads { get; set; }
    public int Nice { get; set; }
    public bool ReniceApplied { get; set; }
    public bool ReniceRestored { get; set; }

    /// <summary>
    /// CPU the starved process used (user + system, from /proc/PID/stat) per second of each phase, in
    /// percent of one CPU: warm-up, overload, after; -1 where unknown.
    /// </summary>
    public double[] StarvedCpuPercent { get; set; } = [-1, -1, -1];
}

internal sealed class FloodResult
{
    public string Target { get; set; } = "";
    public int RatePerSecond { get; set; }
    public long DatagramsSent { get; set; }
    public long SendErrors { get; set; }
    public double Seconds { get; set; }

    /// <summary>The starved runtime's IsisStatistics.DroppedMalformed, after minus before the overload (after every write merged).</summary>
    public long DroppedMalformedAtStarved { get; set; }

    /// <summary>IsisStatistics.DatagramsReceived at the starved runtime over the same stretch.</summary>
    public long DatagramsReceivedAtStarved { get; set; }

    /// <summary>
    /// Datagrams the kernel dropped during the flood because a UDP socket's receive buffer was full
    /// (RcvbufErrors of /proc/net/snmp: every socket of this network namespace, so other programs' drops count too).
    /// </summary>
    public long KernelReceiveBufferErrors { get; set; }
}

internal sealed class WriterSummary
{
    public int Instance { get; set; }
    public long Attempted { get; set; }
    public long Acknowledged { get; set; }
    public long Failed { get; set; }

    /// <summary>Periods that passed with no write started because the previous one was not yet answered.</summary>
    public long MissedPeriods { get; set; }
    public long LastAcknowledgedValue { get; set; }
}

/// <summary>One bin of the report: the reads sent in it (at the starved and the control replica), the writes answered in it, the starved replica's counters.</summary>
internal sealed class BinRow
{
    public double Start { get; set; }
    public double End { get; set; }

    /// <summary>"warm-up", "overload" or "after", by the bin's midpoint.</summary>
    public string Phase { get; set; } = "";
    public TargetBin Starved { get; set; } = new();
    public TargetBin Control { get; set; } = new();
    public int WritesAcknowledged { get; set; }
    public double WriteP50Ms { get; set; }
    public double WriteMaxMs { get; set; }

    /// <summary>The largest (healthy history length - starved history length) over the /stats rounds of the bin; -1 if no round completed.</summary>
    public long MaxHistoryGap { get; set; } = -1;
    public int StatsRounds { get; set; }
    public int StarvedStatsTimeouts { get; set; }
    public bool Trailing { get; set; }
    public long RepairedEntries { get; set; }
    public long LateDuplicates { get; set; }
    public long DroppedMalformed { get; set; }
}

internal sealed class TargetBin
{
    public int Reads { get; set; }
    public int Failed { get; set; }
    public int Answered { get; set; }
    public int Stale { get; set; }
    public double StalePercent { get; set; }
    public double MeanWritesBehind { get; set; }
    public long MaxWritesBehind { get; set; }
    public double MeanAgeMs { get; set; }
    public double MaxAgeMs { get; set; }
    public double LatencyP50Ms { get; set; }
    public double LatencyMaxMs { get; set; }
}

internal sealed class Convergence
{
    /// <summary>Strict: every read fresh, every /stats round with no history gap (the definition of the issue).</summary>
    public Settled Strict { get; set; } = new();

    /// <summary>Lenient: a read less than the lag tolerance out of date, and a gap of at most tolerance / update period entries, count as caught up.</summary>
    public Settled Lenient { get; set; } = new();

    public int LagToleranceMs { get; set; }
    public double? LastStaleReadSent { get; set; }
    public double? LastFailedReadSent { get; set; }
    public int StaleReadsAfterOverload { get; set; }
    public int FailedReadsAfterOverload { get; set; }
}

/// <summary>When the starved replica settled after the overload, under one definition of caught up.</summary>
internal sealed class Settled
{
    public bool Converged { get; set; }

    /// <summary>Seconds after the overload's end from which every read at the starved replica was answered and caught up; null if the last one was not.</summary>
    public double? ReadsAfter { get; set; }

    /// <summary>Seconds after the overload's end from which every /stats round found the starved history caught up; null if the last round did not.</summary>
    public double? HistoryAfter { get; set; }

    /// <summary>The later of the two: the time to converge.</summary>
    public double? After { get; set; }
}

internal sealed class ViewChange
{
    public int Instance { get; set; }
    public int ViewId { get; set; }
    public string[] Members { get; set; } = [];
    public string[] Leavers { get; set; } = [];

    /// <summary>Seconds since the measurement started, on the instance's wall clock.</summary>
    public double At { get; set; }
}

/// <summary>What an excluded replica did before it learned of its exclusion.</summary>
internal sealed class AfterExclusion
{
    /// <summary>When the first healthy instance installed a view without it (seconds, from that instance's wall clock).</summary>
    public double ExcludedAt { get; set; }

    /// <summary>Reads sent to it after that and answered (with its local, frozen state).</summary>
    public int ReadsAnswered { get; set; }
    public int StaleReadsAnswered { get; set; }
    public double? LastReadAnsweredAt { get; set; }

    /// <summary>Its /stats answers after that which still said its runtime ran and it was in the view the others had left.</summary>
    public int StatsAnswersStillInOldView { get; set; }
}

internal sealed class FinalState
{
    /// <summary>True if, after the writer stopped, every instance held the same value and the same history length.</summary>
    public bool Converged { get; set; }
    public double SecondsToQuiesce { get; set; }
    public List<FinalInstance> Instances { get; set; } = new();
}

internal sealed class FinalInstance
{
    public int Index { get; set; }
    public bool Answered { get; set; }
    public long Value { get; set; }
    public long HistoryLength { get; set; }
}
