using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;
using System.Text.Json;
using System.Text.Json.Serialization;
using static Isis.Tools.HtmlReportKit;

namespace Isis.Tools;

/// <summary>
/// What every tool's report opens with: the command and commit that produced it, the machine it ran
/// on, when, for how long and under what load. Each tool's report (Isis.Bench, Isis.ClosedLoop,
/// Isis.Overload, Isis.Soak) derives from it, so its JSON keeps these facts at the top level, and
/// its HTML page opens with <see cref="FactRows"/>. This machine's speed drifts: a figure means
/// little without the load average beside it.
/// </summary>
internal abstract class RunReport
{
    private readonly Stopwatch _wall = new();

    /// <summary>The command line that produced this report.</summary>
    public string Command { get; set; } = "";

    /// <summary>The source revision measured (git), or "unknown".</summary>
    public string Commit { get; set; } = "";
    public string Machine { get; set; } = "";
    public string Cpu { get; set; } = "";
    public int ProcessorCount { get; set; }
    public long MemoryBytes { get; set; }
    public string Os { get; set; } = "";
    public string Runtime { get; set; } = "";
    public DateTime StartedUtc { get; set; }
    public double WallSeconds { get; set; }

    /// <summary>/proc/loadavg's three figures when the run started, and when it ended.</summary>
    public string LoadAverageAtStart { get; set; } = "";
    public string LoadAverageAtEnd { get; set; } = "";

    /// <summary>A smoke test of the tool with small counts: its figures are not meaningful.</summary>
    public bool Quick { get; set; }

    /// <summary>Records what runs, on what, and the load now; starts the wall clock.</summary>
    /// <param name="command">The command line, for example from <see cref="DotnetRun"/>.</param>
    /// <param name="quick">Whether this is a smoke test.</param>
    public void Begin(string command, bool quick)
    {
        Command = command;
        Commit = ToolProcess.GitCommit();
        Machine = Environment.MachineName;
        Cpu = MachineFacts.CpuModel();
        ProcessorCount = Environment.ProcessorCount;
        MemoryBytes = GC.GetGCMemoryInfo().TotalAvailableMemoryBytes;
        Os = RuntimeInformation.OSDescription;
        Runtime = RuntimeInformation.FrameworkDescription;
        StartedUtc = DateTime.UtcNow;
        LoadAverageAtStart = MachineFacts.LoadAverage();
        Quick = quick;
        _wall.Restart();
    }

    /// <summary>Records the wall time since <see cref="Begin"/> and the load now.</summary>
    public void End()
    {
        WallSeconds = _wall.Elapsed.TotalSeconds;
        LoadAverageAtEnd = MachineFacts.LoadAverage();
    }

    /// <summary>How <paramref name="project"/> (for example "tools/Isis.Bench") was run with <paramref name="args"/>.</summary>
    public static string DotnetRun(string project, IEnumerable<string> args) =>
        $"dotnet run -c Release --project {project} -- " + string.Join(' ', args);

    /// <summary>The rows of the page's facts table these facts fill (HTML).</summary>
    public string FactRows() => string.Concat(
        Row("command", $"<code>{E(Command)}</code>"),
        Row("commit", E(Commit)),
        Row("machine", E(Inv($"{Machine}: {Cpu}, {ProcessorCount} CPUs, {MemoryBytes / (1024 * 1024)} MiB, {Os}"))),
        Row("runtime", E(Runtime)),
        Row("started (UTC)", E(StartedUtc.ToString("yyyy-MM-dd HH:mm:ss", CultureInfo.InvariantCulture))),
        Row("load average", E($"{LoadAverageAtStart} at start, {LoadAverageAtEnd} at end")),
        Row("wall time", E(Inv($"{WallSeconds:F1} s"))));

    /// <summary>How the reports are written and read: the web's camelCase names, indented so a reader can diff two runs.</summary>
    public static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.Web) { WriteIndented = true };

    /// <summary>Writes <paramref name="text"/> to <paramref name="path"/> (its folder made if missing) and says where.</summary>
    public static void WriteFile(string path, string text)
    {
        string full = Path.GetFullPath(path);
        Directory.CreateDirectory(Path.GetDirectoryName(full)!);
        File.WriteAllText(full, text);
        Console.WriteLine($"written: {full}");
    }

    /// <summary>This report as indented JSON, with the derived tool's own figures.</summary>
    public string ToJson() => JsonSerializer.Serialize(this, GetType(), Json);
}

/// <summary>What the tools read about this machine from /proc.</summary>
internal static class MachineFacts
{
    /// <summary>The 1, 5 and 15 minute load averages, or "unknown".</summary>
    public static string LoadAverage() => ReadProc("/proc/loadavg") is { } s ? string.Join(' ', s.Split(' ').Take(3)) : "unknown";

    /// <summary>The CPU's model name, or "unknown".</summary>
    public static string CpuModel() =>
        ReadProc("/proc/cpuinfo")?.Split('\n').FirstOrDefault(l => l.StartsWith("model name", StringComparison.Ordinal))?.Split(':', 2)[1].Trim() ?? "unknown";

    /// <summary>A file of /proc, or null where it cannot be read (no /proc, or the process is gone).</summary>
    public static string? ReadProc(string path)
    {
        try
        {
            return File.ReadAllText(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return null;
        }
    }
}
