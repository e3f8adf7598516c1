using System.Diagnostics;
using Isis.Tests.Api;

namespace Isis.Tests.Samples;

/// <summary>The README's main command keeps working: the sample runs end to end and exits 0.</summary>
public sealed class HelloGroupSampleTests
{
    [Fact]
    public void HelloGroup_forms_a_group_survives_a_killed_member_and_exits_zero()
    {
        string configuration = new DirectoryInfo(Path.TrimEndingDirectorySeparator(AppContext.BaseDirectory)).Parent!.Name; // bin/<Configuration>/net10.0
        string dll = Path.Combine(RepoPaths.Root, "samples", "HelloGroup", "bin", configuration, "net10.0", "HelloGroup.dll");
        Assert.True(File.Exists(dll), $"{dll} is built with the solution");
        // The sample uses the default membership-service port, as a user's first run would.
        var start = new ProcessStartInfo("dotnet", $"\"{dll}\"") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        using var process = Process.Start(start)!;
        var output = new System.Text.StringBuilder();
        process.OutputDataReceived += (_, e) => { lock (output) output.AppendLine(e.Data); };
        process.ErrorDataReceived += (_, e) => { lock (output) output.AppendLine(e.Data); };
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        if (!process.WaitForExit(TimeSpan.FromSeconds(120)))
        {
            process.Kill(entireProcessTree: true);
            Assert.Fail("HelloGroup did not finish within 120 s:\n" + output);
        }
        process.WaitForExit();
        string text;
        lock (output) text = output.ToString();
        Assert.True(process.ExitCode == 0, "HelloGroup failed:\n" + text);
        Assert.Contains("the survivors install a view without it", text);
        Assert.Contains("HelloGroup: done", text);
    }
}
