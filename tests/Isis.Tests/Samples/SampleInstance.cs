using System.Diagnostics;
using System.Net;
using System.Reflection;

namespace Isis.Tests.Samples;

/// <summary>
/// One instance of an ASP.NET sample as its users run it: a real process (dotnet on the built
/// sample) on its own HTTP port, with the membership service's private port for the test, and its
/// output kept for the failure report.
/// </summary>
internal sealed class SampleInstance : IDisposable
{
    private static readonly TimeSpan Liveness = TimeSpan.FromSeconds(60);
    private readonly Process _process;
    private readonly System.Text.StringBuilder _log = new();

    /// <param name="dll">The built sample (see <see cref="SampleDll"/>).</param>
    /// <param name="isisPort">The test's private membership service port.</param>
    /// <param name="extraArguments">More command-line settings, for example "--Inventory:DataDirectory=...".</param>
    public SampleInstance(string dll, int isisPort, params string[] extraArguments)
    {
        Url = $"http://127.0.0.1:{Isis.Tools.LoopbackPorts.Next()}";
        var psi = new ProcessStartInfo("dotnet") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in (string[])[dll, "--urls", Url, $"--Isis:MembershipServicePort={isisPort}", "--Isis:SuspicionCount=20", .. extraArguments]) psi.ArgumentList.Add(a);
        psi.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        _process = Process.Start(psi)!;
        _process.OutputDataReceived += (_, e) => { lock (_log) _log.AppendLine(e.Data); };
        _process.ErrorDataReceived += (_, e) => { lock (_log) _log.AppendLine(e.Data); };
        _process.BeginOutputReadLine();
        _process.BeginErrorReadLine();
    }

    /// <summary>Where the build put the sample whose metadata key (in Isis.Tests.csproj) is <paramref name="key"/>.</summary>
    public static string SampleDll(string key)
    {
        string dll = typeof(SampleInstance).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == key).Value!;
        Assert.True(File.Exists(dll), $"{dll} is built with the solution");
        return dll;
    }

    public string Url { get; }

    public string Log
    {
        get { lock (_log) return _log.ToString(); }
    }

    public void Kill() => _process.Kill(); // SIGKILL on Linux

    /// <summary>SIGSTOP: the instance freezes with its sockets held.</summary>
    public void Freeze() => MultiProcess.ProcessSignals.Stop(_process);

    /// <summary>SIGCONT.</summary>
    public void Thaw() => MultiProcess.ProcessSignals.Continue(_process);

    /// <summary>Waits until the instance exits on its own; false if it still runs after <paramref name="timeout"/>.</summary>
    public bool WaitForExit(TimeSpan timeout)
    {
        if (!_process.WaitForExit(timeout)) return false;
        // The timed overload returns at exit, before the asynchronous readers reach the end of
        // stdout: without this the last lines (the reason the instance stopped) may be missing from Log.
        _process.WaitForExit();
        return true;
    }

    /// <summary>SIGTERM, as a supervisor stops a service, and waits for the host's graceful stop.</summary>
    public bool Terminate(TimeSpan timeout)
    {
        using (Process kill = Process.Start("kill", ["-TERM", _process.Id.ToString(System.Globalization.CultureInfo.InvariantCulture)])) kill.WaitForExit();
        return WaitForExit(timeout);
    }

    /// <summary>
    /// Starts <paramref name="count"/> instances one after the other, each healthy (in its group)
    /// before the next starts; each is in <paramref name="instances"/> before it is waited for, so the
    /// caller disposes (and reports) it whatever happens.
    /// </summary>
    public static async Task StartOneByOne(List<SampleInstance> instances, int count, Func<int, SampleInstance> start, HttpClient http)
    {
        for (int i = 0; i < count; i++)
        {
            SampleInstance instance = start(i);
            instances.Add(instance);
            await instance.WaitHealthy(http, $"instance {i} is healthy");
        }
    }

    /// <summary>
    /// Runs a test over sample instances: <paramref name="test"/> starts them into the list it is
    /// given; if it fails, each instance's output goes to the test log; whatever happens, every
    /// instance is stopped.
    /// </summary>
    public static async Task RunAll(Xunit.Abstractions.ITestOutputHelper output, Func<List<SampleInstance>, Task> test)
    {
        var instances = new List<SampleInstance>();
        try
        {
            await test(instances);
        }
        catch
        {
            foreach (SampleInstance i in instances) output.WriteLine($"--- {i.Url}\n{i.Log}");
            throw;
        }
        finally
        {
            foreach (SampleInstance i in instances) i.Dispose();
        }
    }

    /// <summary>Waits until the instance answers its health check.</summary>
    public Task WaitHealthy(HttpClient http, string what) =>
        Eventually(async () => await http.GetStringAsync(Url + "/health") == "Healthy" ? "ok" : null, what);

    /// <summary>Retries <paramref name="attempt"/> until it returns a value (HTTP errors count as not yet), within a liveness bound.</summary>
    public static async Task<T> Eventually<T>(Func<Task<T?>> attempt, string what) where T : class
    {
        DateTime deadline = DateTime.UtcNow + Liveness;
        while (true)
        {
            try
            {
                if (await attempt() is { } result) return result;
            }
            catch (HttpRequestException) { }
            catch (TaskCanceledException) { }
            if (DateTime.UtcNow > deadline) throw new TimeoutException("not within 60 s: " + what);
            await Task.Delay(100);
        }
    }

    public void Dispose()
    {
        try { if (!_process.HasExited) _process.Kill(); } catch (InvalidOperationException) { }
        _process.WaitForExit(5000);
        _process.Dispose();
    }
}
