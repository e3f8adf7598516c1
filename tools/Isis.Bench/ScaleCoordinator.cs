using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;

namespace Isis.Bench;

/// <summary>
/// Scale mode: the parent hosts the membership service, starts N member processes
/// (<see cref="ScaleMember"/>) as fast as it can, and measures, from the members' own timestamps:
/// the time until every member installed a view with all N members; the CPU the formed group uses
/// while idle; K Sends from every member, all N x K delivered everywhere in FIFO order; memory per
/// member process (VmRSS from /proc and the member's managed heap) after forming and after the Sends;
/// and, after a SIGKILL of one member that is not the oldest, the time until every survivor
/// installed the view without it. Every wait is bounded by --timeout and names the members that did
/// not get there; every child is killed at the end, on failure, and on Ctrl-C or SIGTERM.
/// </summary>
internal static class ScaleCoordinator
{
    private static readonly double TicksPerMs = Stopwatch.Frequency / 1000.0;

    public static int Run(BenchOptions o)
    {
        var report = new BenchReport { PayloadBytes = o.Payload };
        report.Begin(Coordinator.CommandLine(), o.Quick);
        var run = new ScaleRun
        {
            Members = o.Members,
            SendsPerMember = o.Sends,
            PayloadBytes = o.Payload,
            HeartbeatMs = o.HeartbeatMs,
            Suspicion = o.Suspicion,
            ExpulsionAfterMs = o.HeartbeatMs * o.Suspicion,
            IdleSeconds = o.IdleSeconds,
            WaitLimitSeconds = o.TimeoutSeconds,
            Kernel = ReadFirstLine("/proc/sys/kernel/osrelease"),
            MemTotalKb = MemInfoKb("MemTotal"),
            Gc = "workstation, non-concurrent (tools/Isis.Bench/Isis.Bench.csproj)",
        };
        report.Scale = run;
        Console.WriteLine($"Isis.Bench scale: {o.Members} member processes, {o.Sends} Sends each ({o.Payload} B), heartbeat {o.HeartbeatMs} ms, " +
                          $"suspicion {o.Suspicion} (expulsion after {run.ExpulsionAfterMs} ms); each wait limited to {o.TimeoutSeconds} s");
        Console.WriteLine($"  machine: {Environment.ProcessorCount} CPUs, {run.MemTotalKb / 1024} MiB, Linux {run.Kernel}, {report.Runtime}; load average {report.LoadAverageAtStart}");

        using var scale = new ScaleGroup(o, run);
        using var interrupt = PosixSignalRegistration.Create(PosixSignal.SIGINT, Interrupted);
        using var terminate = PosixSignalRegistration.Create(PosixSignal.SIGTERM, Interrupted);
        void Interrupted(PosixSignalContext context)
        {
            context.Cancel = true; // the run's loops notice within 100 ms and the finally below kills every child
            scale.Cancel($"{context.Signal} received");
        }

        int code;
        try
        {
            code = scale.Run();
        }
        finally
        {
            scale.KillAll();
        }
        report.End();
        run.LoadAverageAtEnd = report.LoadAverageAtEnd;
        if (code != 0) return code;
        Print(report, run);
        if (o.Out != null) Coordinator.Write(report, o.Out);
        return 0;
    }

    private static void Print(BenchReport r, ScaleRun s)
    {
        static string Ms(double v) => v.ToString("N0", CultureInfo.InvariantCulture);
        static string Mb(double v) => v.ToString("F1", CultureInfo.InvariantCulture);
        Console.WriteLine();
        Console.WriteLine($"Scale: {s.Members} member processes on {r.ProcessorCount} CPUs ({r.Runtime}, Linux {s.Kernel}), " +
                          $"heartbeat {s.HeartbeatMs} ms, suspicion {s.Suspicion}");
        Console.WriteLine($"  starting the processes: {Ms(s.StartSpanMs)} ms from the first start to the last; process start -> Main " +
                          $"{Ms(s.StartToMainMs.Median)} ms median, {Ms(s.StartToMainMs.Max)} ms max; Main -> Join returned {Ms(s.MainToJoinedMs.Median)} / {Ms(s.MainToJoinedMs.Max)} ms");
        Console.WriteLine($"  group formed (every member installed a view of all {s.Members}): {Ms(s.FormFromFirstStartMs)} ms from the first start, " +
                          $"{Ms(s.FormFromLastStartMs)} ms from the last start");
        Console.WriteLine($"    per member, from the first start: {Ms(s.FormedMs.Min)} / {Ms(s.FormedMs.Median)} / {Ms(s.FormedMs.Max)} ms min/median/max; " +
                          $"views installed until then: median {s.ViewsToForm.Median:F0}, max {s.ViewsToForm.Max:F0}; view id of the full view {s.FormedViewId}");
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"  idle once formed, first {s.IdleSeconds} s: CPU per member {s.IdleCpuFirstWindowPercentPerMember.Median:F1} % of a core median; " +
            $"next {s.IdleSeconds} s: {s.IdleCpuPercentPerMember.Median:F1} % median, " +
            $"{s.IdleCpuPercentPerMember.Max:F1} % max; all members {s.IdleCpuPercentAllMembers:F0} %, parent (membership service) {s.IdleCpuPercentParent:F1} %; " +
            $"datagrams received per member {s.IdleDatagramsReceivedPerSecond.Median:N0}/s median"));
        Console.WriteLine($"  Sends: {s.SendsPerMember} per member, {s.DeliveriesPerMember} deliveries expected at each: all delivered, FIFO, at every member " +
                          $"{Ms(s.SendsAllDeliveredMs)} ms after the command (per member: {Ms(s.SendsDeliveredMs.Min)} / {Ms(s.SendsDeliveredMs.Median)} / {Ms(s.SendsDeliveredMs.Max)} ms min/median/max)");
        Console.WriteLine($"  memory per member process (MB)                                {"median",8} {"max",8}");
        foreach (Distribution d in new[] { s.RssAfterFormMb, s.RssAfterSendsMb, s.PeakRssMb, s.RssAfterGcMb, s.HeapAfterFormMb, s.HeapAfterSendsMb, s.GcCommittedAfterFormMb, s.GcCommittedAfterSendsMb })
            Console.WriteLine($"    {d.Name,-58} {Mb(d.Median),8} {Mb(d.Max),8}");
        Console.WriteLine($"  SIGKILL of member {s.KilledMember} (rank {s.KilledRank} of {s.Members}): the view without it at every survivor " +
                          $"{Ms(s.KillToViewMs.Min)} / {Ms(s.KillToViewMs.Median)} / {Ms(s.KillToViewMs.Max)} ms min/median/max after the kill " +
                          $"({s.KillToViewMs.Samples} survivors; expulsion after {s.ExpulsionAfterMs} ms of silence)");
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"wall time {r.WallSeconds:F1} s; load average {r.LoadAverageAtStart} at start, {r.LoadAverageAtEnd} at end"));
    }

    internal static double Ms(long ticks) => ticks / TicksPerMs;

    private static string ReadFirstLine(string path)
    {
        try
        {
            return File.ReadLines(path).FirstOrDefault()?.Trim() ?? "unknown";
        }
        catch (IOException)
        {
            return "unknown";
        }
        catch (UnauthorizedAccessException)
        {
            return "unknown";
        }
    }

    private static long MemInfoKb(string key)
    {
        try
        {
            return ProcFile.Field(File.ReadAllText("/proc/meminfo"), key);
        }
        catch (IOException)
        {
            return 0;
        }
    }
}

/// <summary>Reads the /proc figures scale mode reports.</summary>
internal static class ProcFile
{
    /// <summary>The number after "key:" in a /proc status-style file (kB for the Vm* lines), or 0.</summary>
    public static long Field(string text, string key)
    {
        foreach (string line in text.Split('\n'))
        {
            if (!line.StartsWith(key + ":", StringComparison.Ordinal)) continue;
            string[] words = line[(key.Length + 1)..].Split([' ', '\t'], StringSplitOptions.RemoveEmptyEntries);
            return words.Length > 0 && long.TryParse(words[0], NumberStyles.Integer, CultureInfo.InvariantCulture, out long v) ? v : 0;
        }
        return 0;
    }

    /// <summary>A field of /proc/PID/status in kB (VmRSS, VmHWM), or -1 if the process is gone.</summary>
    public static long StatusKb(int pid, string field)
    {
        try
        {
            return Field(File.ReadAllText($"/proc/{pid}/status"), field);
        }
        catch (IOException)
        {
            return -1;
        }
    }

    /// <summary>User plus system CPU time of a process in clock ticks (USER_HZ), or -1 if it is gone.</summary>
    public static long CpuTicks(int pid)
    {
        try
        {
            string stat = File.ReadAllText($"/proc/{pid}/stat");
            // Fields after the command name, which is in parentheses and may hold spaces: state is field 3, utime 14, stime 15.
            string[] f = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
            return long.Parse(f[11], CultureInfo.InvariantCulture) + long.Parse(f[12], CultureInfo.InvariantCulture);
        }
        catch (IOException)
        {
            return -1;
        }
    }

    /// <summary>USER_HZ, the unit of /proc/PID/stat times; 100 on every Linux this runs on.</summary>
    public const double ClockTicksPerSecond = 100;
}
