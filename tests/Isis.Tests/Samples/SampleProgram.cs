using System.Diagnostics;
using Isis.Tests.Api;

namespace Isis.Tests.Samples;

/// <summary>A console sample run to its end as the README runs it (dotnet on the built sample, no arguments): its exit code and everything it wrote.</summary>
internal static class SampleProgram
{
    public static (int ExitCode, string Output) RunToTheEnd(string sample, TimeSpan limit)
    {
        string configuration = new DirectoryInfo(Path.TrimEndingDirectorySeparator(AppContext.BaseDirectory)).Parent!.Name; // bin/<Configuration>/net10.0
        string dll = Path.Combine(RepoPaths.Root, "samples", sample, "bin", configuration, "net10.0", sample + ".dll");
        Assert.True(File.Exists(dll), $"{dll} is built with the solution");
        var start = new ProcessStartInfo("dotnet", $"\"{dll}\"") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        using var process = Process.Start(start)!;
        var output = new System.Text.StringBuilder();
        process.OutputDataReceived += (_, e) => { lock (output) output.AppendLine(e.Data); };
        process.ErrorDataReceived += (_, e) => { lock (output) output.AppendLine(e.Data); };
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        if (!process.WaitForExit(limit))
        {
            process.Kill(entireProcessTree: true);
            Assert.Fail($"{sample} did not finish within {limit.TotalSeconds:F0} s:\n{output}");
        }
        process.WaitForExit(); // the redirected output is complete only then
        lock (output) return (process.ExitCode, output.ToString());
    }
}
