using System.Diagnostics;
using System.Globalization;
using System.Text.Json.Nodes;
using Isis.Tools;

namespace Isis.Soak;

/// <summary>
/// The parent's handle on one incarnation of a member process: starts it (this program re-launched
/// with "member"), sends it commands, follows its JSON lines (joined, views, progress, answers),
/// and kills it with SIGKILL. Everything it writes, stdout and stderr, goes to the slot's log file
/// with the incarnation's pid in front, so a failure can be read there afterwards.
/// </summary>
internal sealed class MemberProcess
{
    private readonly Process _process;
    private readonly StreamWriter _log;
    private readonly Lock _gate = new();
    private readonly List<JsonObject> _answers = new();
    private readonly Action<MemberProcess, string> _onViolation;

    public MemberSlot Slot { get; }
    public int Pid { get; }
    public bool Joined { get; private set; }
    public int ViewSize { get; private set; }
    public long Acked { get; private set; }
    public long Completed { get; private set; }
    public long Failed { get; private set; }
    public long History { get; private set; }

    /// <summary>The managed heap after the process's last garbage collection, as it last reported (null before its first report).</summary>
    public long? HeapBytes { get; private set; }

    /// <summary>How many full (generation 2) collections the process has run, as it last reported.</summary>
    public int Gen2Collections { get; private set; }
    public string? LastFailure { get; private set; }
    public string? ShutdownReason { get; private set; }
    public double JoinMs { get; private set; }

    /// <summary>Set when the parent killed this incarnation or told it to leave, so that its exit is not an unplanned one.</summary>
    public bool Stopping { get; set; }

    public MemberProcess(MemberSlot slot, SoakOptions options, int servicePort, StreamWriter log, Action<MemberProcess, string> onViolation)
    {
        Slot = slot;
        _log = log;
        _onViolation = onViolation;
        (string host, string dll) = ToolProcess.SelfCommand();
        var psi = new ProcessStartInfo(host)
        {
            UseShellExecute = false,
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        // The GC sizes its generation-0 budget from the CPU's last-level cache: with a 300 MiB L3 a
        // member grows some 50 MiB of RSS before its first collections settle it, which the extra
        // member (it lives 10 s) never outgrows, and RSS figures then differ by machine. A fixed
        // 32 MiB budget (docs/operations.md, "Memory of a long-running durable member") makes them
        // the library's, wherever the soak runs. An explicit setting in the environment wins.
        if (Environment.GetEnvironmentVariable("DOTNET_GCgen0size") == null) psi.Environment["DOTNET_GCgen0size"] = "0x2000000";
        foreach (string a in (string[])[dll, "member", "--index", I(slot.Index), "--port", I(servicePort), "--data", slot.DataDirectory,
                     "--rate", options.RatePerMember.ToString(CultureInfo.InvariantCulture), "--payload", I(options.PayloadBytes),
                     "--checkpoint-ms", I((int)options.CheckpointInterval.TotalMilliseconds), "--inflight", I(options.InFlight), "--seed", I(options.Seed),
                     "--mix", options.Mix])
        {
            psi.ArgumentList.Add(a);
        }
        _process = Process.Start(psi)!;
        Pid = _process.Id;
        _process.OutputDataReceived += (_, e) => { if (e.Data != null) OnLine(e.Data); };
        _process.ErrorDataReceived += (_, e) => { if (e.Data != null) Log("err " + e.Data); };
        _process.BeginOutputReadLine();
        _process.BeginErrorReadLine();
    }

    public bool HasExited => _process.HasExited;

    public int? ExitCode => _process.HasExited ? _process.ExitCode : null;

    /// <summary>SIGKILL, as a crash: nothing of the process runs after it.</summary>
    public void Kill()
    {
        Stopping = true;
        try
        {
            if (!_process.HasExited) _process.Kill(entireProcessTree: false); // Process.Kill is SIGKILL on Linux
        }
        catch (InvalidOperationException)
        {
            // already gone
        }
    }

    public void WaitForExit(TimeSpan limit) => _process.WaitForExit(limit);

    public void Tell(string command)
    {
        try
        {
            _process.StandardInput.WriteLine(command);
            _process.StandardInput.Flush();
        }
        catch (Exception e) when (e is IOException or InvalidOperationException)
        {
            // The process is gone; its exit is seen elsewhere.
        }
    }

    /// <summary>Sends <paramref name="command"/> and waits (at most <paramref name="limit"/>) for the answer of event <paramref name="answer"/>; null if none came.</summary>
    public JsonObject? Ask(string command, string answer, TimeSpan limit)
    {
        lock (_gate) _answers.RemoveAll(a => (string?)a["event"] == answer);
        Tell(command);
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < limit)
        {
            lock (_gate)
            {
                JsonObject? found = _answers.FirstOrDefault(a => (string?)a["event"] == answer);
                if (found != null) return found;
            }
            if (_process.HasExited) return null;
            Thread.Sleep(20);
        }
        return null;
    }

    private void OnLine(string line)
    {
        Log(line);
        JsonObject? json;
        try
        {
            json = JsonNode.Parse(line) as JsonObject;
        }
        catch (System.Text.Json.JsonException)
        {
            return; // not one of ours (the runtime's own output)
        }
        if (json == null) return;
        switch ((string?)json["event"])
        {
            case "joined":
                JoinMs = (double?)json["ms"] ?? 0;
                History = (long?)json["history"] ?? History;
                Joined = true;
                break;
            case "view":
                ViewSize = (int?)json["members"] ?? 0;
                break;
            case "progress" or "status" or "paused":
                Acked = (long?)json["acked"] ?? Acked;
                Completed = (long?)json["completed"] ?? Completed;
                Failed = (long?)json["failed"] ?? Failed;
                History = (long?)json["history"] ?? History;
                LastFailure = (string?)json["lastFailure"] ?? LastFailure;
                HeapBytes = (long?)json["heapBytes"] ?? HeapBytes;
                Gen2Collections = (int?)json["gen2Collections"] ?? Gen2Collections;
                break;
            case "shutdown":
                ShutdownReason = (string?)json["reason"];
                break;
            case "violation":
                _onViolation(this, (string?)json["message"] ?? line);
                break;
        }
        lock (_gate)
        {
            _answers.Add(json);
            if (_answers.Count > 200) _answers.RemoveRange(0, 100);
        }
    }

    private void Log(string line)
    {
        lock (_log)
        {
            _log.Write(DateTime.UtcNow.ToString("HH:mm:ss.fff", CultureInfo.InvariantCulture));
            _log.Write(' ');
            _log.Write(I(Pid));
            _log.Write(' ');
            _log.WriteLine(line);
        }
    }

    private static string I(int v) => v.ToString(CultureInfo.InvariantCulture);
}

/// <summary>A member's place in the group: its index, its data directory (kept across its restarts), its log, and the incarnation running now.</summary>
internal sealed class MemberSlot(int index, string name, string dataDirectory, StreamWriter log)
{
    public int Index { get; } = index;
    public string Name { get; } = name;
    public string DataDirectory { get; } = dataDirectory;
    public StreamWriter Log { get; } = log;
    public MemberProcess? Current { get; set; }
    public int Starts { get; set; }

    /// <summary>Operations acknowledged by the incarnations that ended (the running one adds its own count).</summary>
    public long AckedBefore { get; set; }

    public long CompletedBefore { get; set; }

    public long FailedBefore { get; set; }

    public long AckedTotal => AckedBefore + (Current?.Acked ?? 0);

    public long CompletedTotal => CompletedBefore + (Current?.Completed ?? 0);

    public bool Live => Current is { HasExited: false, Stopping: false };
}
