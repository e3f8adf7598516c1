using System.Diagnostics;
using System.Reflection;
using Isis.Tests.MultiProcess;
using Isis.Tests.Runtime;

namespace Isis.Tests.Samples;

/// <summary>The Generic Host worker sample: two instances form a group, hear each other's ticks, log through Serilog, and stop cleanly.</summary>
[Collection(MultiProcessCollection.Name)]
public sealed class WorkerSampleTests
{
    [Fact]
    public async Task Two_workers_hear_each_other_log_through_Serilog_and_stop_with_exit_code_zero()
    {
        string dll = typeof(WorkerSampleTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "WorkerDll").Value!;
        Assert.True(File.Exists(dll), $"{dll} is built with the solution");
        int port = TestRuntimes.FreeUdpPort();
        Task<(int Code, string Output)> Run() => Task.Run(() =>
        {
            var psi = new ProcessStartInfo("dotnet") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (string a in (string[])[dll, "--run-seconds", "4", $"--Isis:MembershipServicePort={port}"]) psi.ArgumentList.Add(a);
            using Process p = Process.Start(psi)!;
            Task<string> stdout = p.StandardOutput.ReadToEndAsync(), stderr = p.StandardError.ReadToEndAsync();
            if (!p.WaitForExit(TimeSpan.FromSeconds(60))) { p.Kill(); return (-1, "did not stop within 60 s"); }
            return (p.ExitCode, stdout.Result + stderr.Result);
        });
        Task<(int Code, string Output)> first = Run();
        await Task.Delay(500);
        (int Code, string Output)[] both = [await Run(), await first];

        foreach (var (code, text) in both)
        {
            Assert.True(code == 0, $"a worker exited with {code}:\n{text}");
            Assert.Contains("[INF] Isis: Isis runtime started", text); // the runtime logs through the host's Serilog
            Assert.Contains("view", text);
        }
        // Each heard the other's ticks: its log names a member other than itself.
        string Address(string text) => text.Split('\n').First(l => l.Contains("Isis runtime started at")).Split("started at ")[1].Split(';')[0];
        Assert.Contains($"from {Address(both[1].Output)}", both[0].Output);
        Assert.Contains($"from {Address(both[0].Output)}", both[1].Output);
    }
}
