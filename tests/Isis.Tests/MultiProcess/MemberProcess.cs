using System.Diagnostics;
using System.Reflection;
using System.Text;
using System.Text.Json.Nodes;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// One child process running tests/Isis.MemberHost: its stdout JSON lines are collected as they
/// arrive, commands go to its stdin. Disposing kills it (SIGCONT first, in case it is stopped).
/// </summary>
internal sealed class MemberProcess : IDisposable
{

    private readonly Process _process;
    private readonly List<JsonObject> _lines = new();
    private readonly StringBuilder _stderr = new();
    private readonly object _gate = new();
    private bool _stdoutClosed;

    private MemberProcess(string name, Process process)
    {
        Name = name;
        _process = process;
    }

    public string Name { get; }

    public int Pid => _process.Id;

    /// <summary>The member's UDP port, from its "ready" line.</summary>
    public int Port { get; private set; }

    /// <summary>The member's address ("127.0.0.1:port#incarnation"), from its "ready" line.</summary>
    public string Address { get; private set; } = "";

    public bool HasExited => _process.HasExited;

    public static string HostPath
    {
        get
        {
            string? path = typeof(MemberProcess).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
                .FirstOrDefault(a => a.Key == "Isis.MemberHost.Path")?.Value;
            if (path == null || !File.Exists(path))
            {
                throw new FileNotFoundException($"Isis.MemberHost.dll not found at '{path}'; build Isis.sln (Isis.Tests references tests/Isis.MemberHost so it is built first).");
            }
            return path;
        }
    }

    /// <summary>Starts a member host and waits for its "ready" line.</summary>
    public static MemberProcess Start(string name, params string[] args) => Start(name, [], args);

    /// <summary>
    /// Starts a member host through <paramref name="launcher"/>, a command that runs the command
    /// line it is given (for example <c>ip netns exec NS</c>, which execs it, so the process id is
    /// still the member's), and waits for its "ready" line.
    /// </summary>
    public static MemberProcess Start(string name, IReadOnlyList<string> launcher, IReadOnlyList<string> args) =>
        StartProgram(name, HostPath, launcher, args);

    /// <summary>Starts another program that speaks the same JSON lines (for example tools/Isis.Oracle) and waits for its "ready" line.</summary>
    public static MemberProcess StartProgram(string name, string dllPath, IReadOnlyList<string> launcher, IReadOnlyList<string> args)
    {
        var psi = new ProcessStartInfo(launcher.Count > 0 ? launcher[0] : "dotnet")
        {
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        if (launcher.Count > 0)
        {
            foreach (string a in launcher.Skip(1)) psi.ArgumentList.Add(a);
            psi.ArgumentList.Add("dotnet");
        }
        psi.ArgumentList.Add(dllPath);
        foreach (string a in args) psi.ArgumentList.Add(a);
        // Keep children small and quick to start on a 2-core machine.
        psi.Environment["DOTNET_gcServer"] = "0";
        psi.Environment["DOTNET_TieredCompilation"] = "1";
        psi.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        var process = new Process { StartInfo = psi, EnableRaisingEvents = true };
        var member = new MemberProcess(name, process);
        process.OutputDataReceived += (_, e) => member.OnStdout(e.Data);
        process.ErrorDataReceived += (_, e) =>
        {
            if (e.Data == null) return;
            lock (member._gate)
            {
                if (member._stderr.Length < 64 * 1024) member._stderr.AppendLine(e.Data);
            }
        };
        process.Start();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        try
        {
            JsonObject ready = member.WaitFor("ready", TimeSpan.FromSeconds(30));
            member.Port = (int)ready["port"]!;
            member.Address = (string)ready["address"]!;
        }
        catch
        {
            member.Dispose();
            throw;
        }
        return member;
    }

    private void OnStdout(string? line)
    {
        lock (_gate)
        {
            if (line == null)
            {
                _stdoutClosed = true;
            }
            else if (line.Length > 0)
            {
                JsonObject json;
                try
                {
                    json = JsonNode.Parse(line) as JsonObject ?? new JsonObject { ["event"] = "garbage", ["text"] = line };
                }
                catch (System.Text.Json.JsonException)
                {
                    json = new JsonObject { ["event"] = "garbage", ["text"] = line };
                }
                _lines.Add(json);
            }
            Monitor.PulseAll(_gate);
        }
    }

    /// <summary>How many lines have arrived so far: pass it as <c>from</c> to wait for a later line.</summary>
    public int LineCount
    {
        get { lock (_gate) return _lines.Count; }
    }

    /// <summary>Waits for the first line at index &gt;= <paramref name="from"/> of kind <paramref name="kind"/> matching <paramref name="match"/>.</summary>
    public JsonObject WaitFor(string kind, TimeSpan timeout, Func<JsonObject, bool>? match = null, int from = 0)
    {
        DateTime deadline = DateTime.UtcNow + timeout;
        lock (_gate)
        {
            int i = from;
            while (true)
            {
                for (; i < _lines.Count; i++)
                {
                    JsonObject line = _lines[i];
                    if ((string?)line["event"] == kind && (match == null || match(line))) return line;
                }
                TimeSpan left = deadline - DateTime.UtcNow;
                if (left <= TimeSpan.Zero || (_stdoutClosed && _lines.Count == i))
                {
                    throw new TimeoutException($"{Name}: no '{kind}' line matching the condition within {timeout.TotalSeconds:0} s{(_stdoutClosed ? " (the process closed its stdout)" : "")}.\n{DescribeLocked()}");
                }
                Monitor.Wait(_gate, left < TimeSpan.FromMilliseconds(200) ? left : TimeSpan.FromMilliseconds(200));
            }
        }
    }

    /// <summary>The last line of a kind, or null.</summary>
    public JsonObject? Last(string kind)
    {
        lock (_gate)
        {
            for (int i = _lines.Count - 1; i >= 0; i--)
            {
                if ((string?)_lines[i]["event"] == kind) return _lines[i];
            }
            return null;
        }
    }

    public List<JsonObject> All(string kind)
    {
        lock (_gate) return _lines.Where(l => (string?)l["event"] == kind).ToList();
    }

    public void Command(string command)
    {
        try
        {
            _process.StandardInput.WriteLine(command);
            _process.StandardInput.Flush();
        }
        catch (Exception e) when (e is IOException or InvalidOperationException or ObjectDisposedException)
        {
            // It exited; the caller's wait reports that with the output.
        }
    }

    /// <summary>Asks for a statistics line and returns it.</summary>
    public JsonObject Stats(TimeSpan? timeout = null)
    {
        int from = LineCount;
        Command("stats");
        return WaitFor("stats", timeout ?? TimeSpan.FromSeconds(15), from: from);
    }

    /// <summary>Asks for a fresh progress line and returns it.</summary>
    public JsonObject Status(TimeSpan? timeout = null)
    {
        int from = LineCount;
        Command("status");
        return WaitFor("progress", timeout ?? TimeSpan.FromSeconds(15), from: from);
    }

    /// <summary>Closes stdin (the member leaves and exits) and waits for the exit.</summary>
    public bool CloseAndWait(TimeSpan timeout)
    {
        try { _process.StandardInput.Close(); }
        catch (IOException) { }
        return WaitForExit(timeout);
    }

    public bool WaitForExit(TimeSpan timeout)
    {
        if (!_process.WaitForExit(timeout)) return false;
        _process.WaitForExit(); // drains the asynchronous stdout/stderr readers
        return true;
    }

    /// <summary>SIGKILL (Process.Kill is SIGKILL on Linux).</summary>
    public void Kill()
    {
        try { _process.Kill(entireProcessTree: true); }
        catch (InvalidOperationException) { /* already gone */ }
    }

    public void Stop() => ProcessSignals.Stop(_process);

    public void Continue() => ProcessSignals.Continue(_process);

    /// <summary>What the member wrote to standard error so far (the runtime reports problems there when no logger is configured).</summary>
    public string StandardError
    {
        get { lock (_gate) return _stderr.ToString(); }
    }

    public string Describe()
    {
        lock (_gate) return DescribeLocked();
    }

    private string DescribeLocked()
    {
        var sb = new StringBuilder();
        sb.Append("--- ").Append(Name).Append(" (pid ").Append(_process.Id).Append(", ").Append(Address).Append(") last lines:\n");
        foreach (JsonObject line in _lines.Skip(Math.Max(0, _lines.Count - 15))) sb.Append("  ").Append(line.ToJsonString()).Append('\n');
        if (_stderr.Length > 0) sb.Append("  stderr: ").Append(_stderr.ToString(0, Math.Min(_stderr.Length, 4000))).Append('\n');
        return sb.ToString();
    }

    public void Dispose()
    {
        try
        {
            if (!_process.HasExited)
            {
                try { ProcessSignals.Continue(_process); } catch (Exception) { /* best effort */ }
                Kill();
                _process.WaitForExit(5000);
            }
        }
        catch (InvalidOperationException)
        {
            // never started
        }
        _process.Dispose();
    }
}
