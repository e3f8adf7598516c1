using Isis.Tools;

namespace Isis.Soak;

/// <summary>What a soak run produced: written as results.json and drawn by <see cref="HtmlReport"/>.</summary>
internal sealed class SoakResults : RunReport
{
    public int Members { get; set; }
    public double Rate { get; set; }
    public int PayloadBytes { get; set; }
    public string Mix { get; set; } = "default";
    public long StopAfterSafeSends { get; set; }
    public int InFlight { get; set; }
    public double CheckpointIntervalSeconds { get; set; }
    public double KillEverySeconds { get; set; }
    public double CrashEverySeconds { get; set; }
    public double JoinEverySeconds { get; set; }
    public double ExtraStaysSeconds { get; set; }
    public int Seed { get; set; }
    public double DurationSeconds { get; set; }

    /// <summary>Seconds from the start of the load to its end (the last check and the shutdown come after).</summary>
    public double LoadSeconds { get; set; }
    public List<string> Processes { get; set; } = new();
    public List<ProcessSample> Samples { get; set; } = new();
    public List<ThroughputSample> Throughput { get; set; } = new();
    public List<FaultEvent> Faults { get; set; } = new();
    public List<CheckResult> Checks { get; set; } = new();
    public List<string> Violations { get; set; } = new();
    public SoakSummary Summary { get; set; } = new();
}

/// <summary>
/// One second of one member's process (RSS is null while no incarnation runs; its directory is measured anyway).
/// Disk is the disk the library's files in the member's data directory take (their allocated
/// blocks, as <c>du</c> counts them, spare log segments and space reserved ahead of writes
/// included): the harness's own files there (acked.txt, which grows with every acknowledgement,
/// and the incarnation counter) are left out. The log is the live SafeSend log: the bytes its
/// segments hold.
/// </summary>
internal sealed class ProcessSample
{
    public double T { get; set; }
    public string Process { get; set; } = "";
    public int? Pid { get; set; }
    public long? RssBytes { get; set; }

    /// <summary>The managed heap after the process's last garbage collection (its own report, up to a second old).</summary>
    public long? HeapBytes { get; set; }

    /// <summary>Full (generation 2) collections the incarnation has run.</summary>
    public int? Gen2Collections { get; set; }
    public long DiskBytes { get; set; }
    public long LogBytes { get; set; }

    /// <summary>The disk the SafeSend log's spare segments take (kept for reuse).</summary>
    public long SpareBytes { get; set; }

    /// <summary>The persistent checkpoint files (the newest, the previous one, and one being written).</summary>
    public long CheckpointBytes { get; set; }
}

/// <summary>The group's acknowledged operations per second (SafeSend and SafeQuery, awaited) and all completed operations per second.</summary>
internal sealed class ThroughputSample
{
    public double T { get; set; }
    public double AckedPerSecond { get; set; }
    public double CompletedPerSecond { get; set; }
    public long AckedTotal { get; set; }
}

/// <summary>A fault or step of the run: kill, restart, crash, crash-restart, join, leave, unplanned-exit, check.</summary>
internal sealed class FaultEvent
{
    public double T { get; set; }
    public string Kind { get; set; } = "";
    public string Detail { get; set; } = "";

    /// <summary>For a restart, join, leave or check: how long it took to complete, in seconds.</summary>
    public double? Seconds { get; set; }
}

/// <summary>One durability check.</summary>
internal sealed class CheckResult
{
    public double T { get; set; }
    public string After { get; set; } = "";
    public int MembersCompared { get; set; }
    public long HistoryLength { get; set; }
    public int AcknowledgedChecked { get; set; }
    public long PreviousHistoryLength { get; set; }
    public bool Passed { get; set; }
    public List<string> Problems { get; set; } = new();
}

internal sealed class SoakSummary
{
    public long AcknowledgedOperations { get; set; }
    public long CompletedOperations { get; set; }
    public long FailedOperations { get; set; }
    public int Kills { get; set; }
    public int WholeGroupCrashes { get; set; }
    public int Joins { get; set; }
    public int Leaves { get; set; }
    public int UnplannedExits { get; set; }
    public int ChecksPassed { get; set; }
    public int Checks { get; set; }
    public int Violations { get; set; }

    /// <summary>Acknowledged SafeSends and SafeQueries per second, over the whole load (faults and checks included).</summary>
    public double AcknowledgedPerSecond { get; set; }

    /// <summary>From this second on to the end of the load (--tail, or its last quarter): where the per-process figures below come from.</summary>
    public double TailFromSeconds { get; set; }
    public List<ProcessTail> Processes { get; set; } = new();

    /// <summary>Each member's largest figures over the whole run, load and final check included (bytes).</summary>
    public List<ProcessRunMax> RunMaxima { get; set; } = new();
}

/// <summary>One member's largest sample of each kind over the whole run (bytes; each maximum may come from another second).</summary>
internal sealed class ProcessRunMax
{
    public string Process { get; set; } = "";
    public int Samples { get; set; }
    public long RssMax { get; set; }
    public long DiskMax { get; set; }
    public long LogMax { get; set; }
    public long CheckpointMax { get; set; }

    /// <summary>The spare log segments in the largest disk sample.</summary>
    public long SpareAtDiskMax { get; set; }

    /// <summary>The largest disk sample less its live log, spares and checkpoints: space reserved ahead of the log's writes, a copy of the history under way, other files.</summary>
    public long OtherAtDiskMax { get; set; }
}

/// <summary>One member's figures over the last quarter of the load (bytes).</summary>
internal sealed class ProcessTail
{
    public string Process { get; set; } = "";
    public int Samples { get; set; }
    public long RssMedian { get; set; }
    public long RssMax { get; set; }
    public long DiskMedian { get; set; }
    public long DiskMax { get; set; }

    /// <summary>The live SafeSend log (its segments' bytes): it saw-tooths between checkpoints, inside the disk the log keeps reserved.</summary>
    public long LogMedian { get; set; }
    public long LogMax { get; set; }

    /// <summary>RSS maximum over median: 1.2 or less is what the issue calls flat.</summary>
    public double RssMaxOverMedian { get; set; }

    /// <summary>Disk maximum over median.</summary>
    public double DiskMaxOverMedian { get; set; }
}
