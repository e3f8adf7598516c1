using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Text.Json;
using Isis.Tools;

namespace Isis.Overload;

/// <summary>
/// One service instance as the parent runs it: this program re-launched in <c>serve</c> mode (under
/// <c>taskset</c> when pinned), its HTTP address, and the last lines of its output for the report.
/// </summary>
internal sealed class Instance : IDisposable
{
    private const int KeptLines = 200;
    private readonly Process _process;
    private readonly Queue<string> _log = new();

    public Instance(int index, string? cpus, int membershipPort, string membershipDirectory, OverloadOptions o)
    {
        Index = index;
        Cpus = cpus;
        Url = $"http://127.0.0.1:{LoopbackPorts.Next()}";
        string[] serve =
        [
            SelfDll, "serve", "--urls", Url, "--gossip-ms", o.GossipMs.ToString(CultureInfo.InvariantCulture),
            "--parent", Environment.ProcessId.ToString(CultureInfo.InvariantCulture),
            $"--Isis:MembershipServicePort={membershipPort}",
            $"--Isis:MembershipDataDirectory={membershipDirectory}",
            $"--Isis:SuspicionCount={o.EffectiveSuspicion}",
            $"--Isis:HeartbeatInterval={TimeSpan.FromMilliseconds(o.HeartbeatMs).ToString("c", CultureInfo.InvariantCulture)}",
        ];
        var psi = cpus != null ? new ProcessStartInfo("taskset") : new ProcessStartInfo(Dotnet);
        foreach (string a in cpus != null ? ["-c", cpus, Dotnet, .. serve] : serve) psi.ArgumentList.Add(a);
        psi.UseShellExecute = false;
        psi.RedirectStandardOutput = true;
        psi.RedirectStandardError = true;
        psi.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        _process = Process.Start(psi)!;
        _process.OutputDataReceived += (_, e) => Keep(e.Data);
        _process.ErrorDataReceived += (_, e) => Keep(e.Data);
        _process.BeginOutputReadLine();
        _process.BeginErrorReadLine();
        Http = new HttpClient(new SocketsHttpHandler { MaxConnectionsPerServer = 64, ConnectTimeout = TimeSpan.FromSeconds(2) }) { BaseAddress = new Uri(Url), Timeout = Timeout.InfiniteTimeSpan };
    }

    /// <summary>This program's dll, re-launched for every instance and hog.</summary>
    public static string SelfDll => typeof(Instance).Assembly.Location;

    /// <summary>The dotnet host running this program, or "dotnet" from the path.</summary>
    public static string Dotnet =>
        Environment.ProcessPath is { } p && Path.GetFileNameWithoutExtension(p) == "dotnet" ? p : "dotnet";

    public int Index { get; }

    /// <summary>The CPUs it is pinned to (taskset's list), or null.</summary>
    public string? Cpus { get; }

    public string Url { get; }

    /// <summary>Its client: many connections, each request with its own time limit.</summary>
    public HttpClient Http { get; }

    /// <summary>The pid of the service process (taskset execs it, so the pid stays the same).</summary>
    public int ProcessId => _process.Id;

    public bool HasExited => _process.HasExited;

    public string Log
    {
        get
        {
            lock (_log) return string.Join('\n', _log);
        }
    }

    /// <summary>GET /stats within <paramref name="limit"/>; null if it did not answer in time.</summary>
    public InstanceStats? Stats(TimeSpan limit)
    {
        using var cancel = new CancellationTokenSource(limit);
        try
        {
            using HttpResponseMessage r = Http.Send(new HttpRequestMessage(HttpMethod.Get, "/stats"), HttpCompletionOption.ResponseContentRead, cancel.Token);
            if (!r.IsSuccessStatusCode) return null;
            return r.Content.ReadFromJsonAsync<InstanceStats>(Json.Options, cancel.Token).GetAwaiter().GetResult();
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException or JsonException or IOException)
        {
            return null;
        }
    }

    /// <summary>Waits until the instance's health check says Healthy (it joined its group).</summary>
    public void WaitHealthy(TimeSpan limit)
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < limit)
        {
            if (HasExited) throw new InvalidOperationException($"instance {Index} exited with {_process.ExitCode} before it was healthy:\n{Log}");
            using var cancel = new CancellationTokenSource(TimeSpan.FromSeconds(2));
            try
            {
                using HttpResponseMessage r = Http.Send(new HttpRequestMessage(HttpMethod.Get, "/health"), cancel.Token);
                if (r.IsSuccessStatusCode) return;
            }
            catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
            {
            }
            Thread.Sleep(100);
        }
        throw new TimeoutException($"instance {Index} was not healthy within {limit.TotalSeconds:F0} s:\n{Log}");
    }

    /// <summary>SIGTERM (the host flushes and leaves its group), then SIGKILL if it has not stopped within <paramref name="grace"/>.</summary>
    public void Stop(TimeSpan grace)
    {
        if (HasExited) return;
        ToolProcess.Exec(TimeSpan.FromSeconds(5), "kill", "-TERM", ProcessId.ToString(CultureInfo.InvariantCulture));
        if (!_process.WaitForExit(grace)) Kill();
    }

    public void Kill()
    {
        try
        {
            if (!_process.HasExited) _process.Kill(entireProcessTree: true);
        }
        catch (InvalidOperationException)
        {
            // exited meanwhile
        }
    }

    public void Dispose()
    {
        Kill();
        _process.WaitForExit(5000);
        _process.Dispose();
        Http.Dispose();
    }

    private void Keep(string? line)
    {
        if (line == null) return;
        lock (_log)
        {
            _log.Enqueue(line);
            while (_log.Count > KeptLines) _log.Dequeue();
        }
    }

}

/// <summary>The JSON settings of /stats and the result file.</summary>
internal static class Json
{
    public static readonly JsonSerializerOptions Options = new(JsonSerializerDefaults.Web) { WriteIndented = true };
}
