using System.Diagnostics;
using System.Globalization;
using Isis.Tools;

namespace Isis.ClosedLoop;

/// <summary>
/// One instance of the service as a child process (<c>dotnet Isis.ClosedLoop.dll serve ...</c>): its
/// output forwarded with a prefix, its last lines kept for a failure message, killed on dispose.
/// </summary>
internal sealed class ServiceInstance : IDisposable
{
    private readonly Process _process;
    private readonly Queue<string> _lastLines = new();

    public ServiceInstance(ServeOptions o)
    {
        Index = o.Index;
        Url = string.Create(CultureInfo.InvariantCulture, $"http://127.0.0.1:{o.Port}");
        Label = $"{o.Store} {o.Index}";
        var (host, dll) = ToolProcess.SelfCommand();
        var psi = new ProcessStartInfo(host) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        psi.ArgumentList.Add(dll);
        foreach (string a in o.Arguments()) psi.ArgumentList.Add(a);
        psi.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        _process = new Process { StartInfo = psi };
        _process.OutputDataReceived += (_, e) => Line(e.Data, Console.Out);
        _process.ErrorDataReceived += (_, e) => Line(e.Data, Console.Error);
        _process.Start();
        _process.BeginOutputReadLine();
        _process.BeginErrorReadLine();
    }

    public int Index { get; }
    public string Url { get; }
    public string Label { get; }
    public int Pid => _process.Id;

    public bool HasExited
    {
        get
        {
            try
            {
                return _process.HasExited;
            }
            catch (InvalidOperationException)
            {
                return true;
            }
        }
    }

    /// <summary>Why the process is gone (exit code and its last lines), for a failure message.</summary>
    public string ExitDescription()
    {
        _process.WaitForExit(2000);
        string code = HasExited ? _process.ExitCode.ToString(CultureInfo.InvariantCulture) : "?";
        lock (_lastLines) return $"instance {Label} exited with code {code}" + (_lastLines.Count > 0 ? ": " + string.Join(" | ", _lastLines) : "");
    }

    private void Line(string? line, TextWriter to)
    {
        if (line == null) return;
        lock (_lastLines)
        {
            _lastLines.Enqueue(line);
            if (_lastLines.Count > 8) _lastLines.Dequeue();
        }
        to.WriteLine($"[{Label}] {line}");
    }

    public void Dispose()
    {
        try
        {
            if (!_process.HasExited) _process.Kill(entireProcessTree: true);
            _process.WaitForExit(5000);
        }
        catch (InvalidOperationException)
        {
            // exited meanwhile
        }
        _process.Dispose();
    }
}
