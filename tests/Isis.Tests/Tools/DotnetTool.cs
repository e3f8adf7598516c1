using System.Diagnostics;

namespace Isis.Tests.Tools;

/// <summary>Runs one of the repository's programs (a dll) with the dotnet host, as a user's command line would, until it exits.</summary>
internal static class DotnetTool
{
    /// <summary>
    /// Runs <c>dotnet ARGS</c> and returns its exit code and output. <paramref name="limit"/> is a
    /// liveness bound, never a timing assertion: past it the process tree is killed and the test fails.
    /// </summary>
    public static async Task<(int ExitCode, string Log)> RunToExit(string[] args, TimeSpan limit, string? workingDirectory = null)
    {
        var psi = new ProcessStartInfo(DotnetHost()) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        if (workingDirectory != null) psi.WorkingDirectory = workingDirectory;
        foreach (string a in args) psi.ArgumentList.Add(a);
        using var process = Process.Start(psi)!;
        Task<string> stdout = process.StandardOutput.ReadToEndAsync();
        Task<string> stderr = process.StandardError.ReadToEndAsync();
        using var cancel = new CancellationTokenSource(limit);
        try
        {
            await process.WaitForExitAsync(cancel.Token);
        }
        catch (OperationCanceledException)
        {
            process.Kill(entireProcessTree: true);
            Assert.Fail($"{string.Join(' ', args)} did not finish within {limit.TotalSeconds} s:\n{await stdout}{await stderr}");
        }
        return (process.ExitCode, await stdout + await stderr);
    }

    /// <summary>The dotnet host running these tests (or DOTNET_HOST_PATH's, or the one on PATH).</summary>
    public static string DotnetHost()
    {
        string? current = Environment.ProcessPath;
        if (current != null && Path.GetFileNameWithoutExtension(current) == "dotnet") return current;
        string? hostPath = Environment.GetEnvironmentVariable("DOTNET_HOST_PATH");
        return hostPath != null && File.Exists(hostPath) ? hostPath : "dotnet";
    }
}
