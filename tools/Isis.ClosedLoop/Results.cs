using System.Diagnostics;
using System.Text.Json;
using System.Text.Json.Serialization;
using Isis.Tools;

namespace Isis.ClosedLoop;

/// <summary>The whole run: settings, machine, the variants, and the comparisons (the JSON of --out, the input of the HTML report).</summary>
internal sealed class ClosedLoopReport : RunReport
{
    public int Objects { get; set; }
    public int Instances { get; set; }
    public int ThinkMs { get; set; }
    public double ReadFraction { get; set; }
    public double ZipfExponent { get; set; }
    public double WarmupSeconds { get; set; }
    public double Seconds { get; set; }
    public int[] ClientCounts { get; set; } = [];
    public int RequestCapPerClient { get; set; }
    public int Seed { get; set; }

    public List<VariantRun> Variants { get; set; } = [];

    /// <summary>Per client count measured in both variants: baseline over replicated.</summary>
    public List<Comparison> Comparisons { get; set; } = [];

    /// <summary>Per client count measured on the floor: each other variant's figures over the floor's.</summary>
    public List<FloorComparison> FloorComparisons { get; set; } = [];

    /// <summary>The target at every client count compared: replicated p50 at least 10x lower and p99 lower; null if nothing was compared.</summary>
    public bool? TargetMet { get; set; }
}

/// <summary>One variant (postgres, replicated or floor): its setup, a run per client count, and the correctness checks.</summary>
internal sealed class VariantRun
{
    public string Store { get; set; } = "";

    /// <summary>Why the variant did not run (for example no PostgreSQL), or null.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public string? Skipped { get; set; }

    /// <summary>Why the variant stopped before its end, or null.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public string? Failure { get; set; }

    /// <summary>What the variant ran on, one line each: PostgreSQL's settings in force, the group's view, pool sizes.</summary>
    public List<string> Setup { get; set; } = [];

    public List<string> InstanceUrls { get; set; } = [];

    /// <summary>From the first instance's start until all were healthy and populated.</summary>
    public double StartSeconds { get; set; }

    public List<LoadRun> Runs { get; set; } = [];

    public Verification? Verification { get; set; }
}

/// <summary>One client count: its counts, throughput, latencies and the processes' CPU use over the measured window.</summary>
internal sealed class LoadRun
{
    public int Clients { get; set; }
    public double WarmupSeconds { get; set; }
    public double Seconds { get; set; }
    public string LoadAverageAtStart { get; set; } = "";

    /// <summary>Every request issued, warm-up included.</summary>
    public long Issued { get; set; }

    /// <summary>Requests answered successfully within the measured window (ended in it), whenever they started.</summary>
    public long Completed { get; set; }

    /// <summary><see cref="Completed"/> per second of the window.</summary>
    public double Throughput { get; set; }

    /// <summary>Failed requests (an HTTP error, a timeout, a wrong status or an unparsable answer), warm-up included.</summary>
    public long Failed { get; set; }

    /// <summary>Reads that returned a value no client ever wrote to that object (nor its initial value): must be 0.</summary>
    public long PhantomReads { get; set; }

    /// <summary>The first few failures, for the report.</summary>
    public List<string> FailureSamples { get; set; } = [];

    /// <summary>Requests that started in the window, by kind (all of them completed: the loop waits for them).</summary>
    public LatencySummary Overall { get; set; } = new();
    public LatencySummary Reads { get; set; } = new();
    public LatencySummary Writes { get; set; } = new();

    /// <summary>Cores busy over the measured window: the parent (the clients), the three instances together, PostgreSQL's processes.</summary>
    public double ParentCores { get; set; }
    public double InstanceCores { get; set; }
    public double PostgresCores { get; set; }
}

/// <summary>After the load: does each instance hold only values written, do the instances agree, and does each read its own writes?</summary>
internal sealed class Verification
{
    /// <summary>
    /// Whether the instances were checked against each other (agreement, a write seen at the others):
    /// true but for the floor, whose instances share nothing. When false, <see cref="InstancesAgree"/>,
    /// <see cref="ObjectsCompared"/> and the other-instance counts stay 0.
    /// </summary>
    public bool CrossInstance { get; set; }

    /// <summary>Objects held, summed over the instances (each should hold all of them).</summary>
    public int ObjectsHeld { get; set; }

    /// <summary>Values held by some instance that are neither the object's initial value nor one a client wrote to it: must be 0.</summary>
    public int UnwrittenValues { get; set; }

    /// <summary>Whether every instance returned the same value for every object once the clients had stopped.</summary>
    public bool InstancesAgree { get; set; }
    public int ObjectsCompared { get; set; }
    /// <summary>Seconds until they agreed (replicated merges asynchronously at the instances that did not take a write).</summary>
    public double AgreedAfterSeconds { get; set; }

    /// <summary>PUT at one instance, then GET at the same instance: the value just written, every time.</summary>
    public int ReadYourWritesChecks { get; set; }
    public int ReadYourWritesFailures { get; set; }

    /// <summary>The same writes read at the other instances (at once for postgres, within 10 s for replicated).</summary>
    public int OtherInstanceChecks { get; set; }
    public int OtherInstanceFailures { get; set; }

    /// <summary>The last few writes and what each instance read back.</summary>
    public List<WriteCheck> Samples { get; set; } = [];

    public List<string> Problems { get; set; } = [];

    [JsonIgnore]
    public bool Passed => (InstancesAgree || !CrossInstance) && UnwrittenValues == 0 && ReadYourWritesFailures == 0 && OtherInstanceFailures == 0 && Problems.Count == 0;
}

internal sealed class WriteCheck
{
    public int Object { get; set; }
    public int Instance { get; set; }
    public double Written { get; set; }
    /// <summary>What each instance returned afterwards, by instance index (the writer's first read included).</summary>
    public double?[] ReadBack { get; set; } = [];
}

/// <summary>Baseline (PostgreSQL) over replicated at one client count: above 1 means the replicated service is faster (latency) or carries more (throughput, inverted).</summary>
internal sealed class Comparison
{
    public int Clients { get; set; }
    public double? P50Ratio { get; set; }
    public double? P99Ratio { get; set; }
    public double? ReadP50Ratio { get; set; }
    public double? WriteP50Ratio { get; set; }
    public double? ReadP99Ratio { get; set; }
    public double? WriteP99Ratio { get; set; }
    /// <summary>Replicated throughput over the baseline's.</summary>
    public double? ThroughputRatio { get; set; }
    /// <summary>p50 at least 10x lower and p99 lower, replicated against the baseline.</summary>
    public bool TargetMet { get; set; }
}

/// <summary>
/// Each variant over the floor at one client count (same run, back to back): how much above the
/// bare HTTP round trip each store's response time is. PostgreSQL's p50 over the floor's is the
/// largest p50 ratio against PostgreSQL that any store behind this HTTP front could reach.
/// </summary>
internal sealed class FloorComparison
{
    public int Clients { get; set; }
    public double? PostgresP50OverFloor { get; set; }
    public double? ReplicatedP50OverFloor { get; set; }
    public double? PostgresP99OverFloor { get; set; }
    public double? ReplicatedP99OverFloor { get; set; }
}
