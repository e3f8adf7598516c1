using System.Diagnostics;
using Isis.Tests.Api;

namespace Isis.Tests.Samples;

/// <summary>The README's payment-chain command keeps working: twelve replica processes and the ASP.NET front end, orders over HTTP, each service's primary killed, exit 0.</summary>
public sealed class PaymentChainSampleTests
{
    [Fact]
    public void PaymentChain_answers_every_order_rightly_before_and_after_each_primary_is_killed()
    {
        string configuration = new DirectoryInfo(Path.TrimEndingDirectorySeparator(AppContext.BaseDirectory)).Parent!.Name; // bin/<Configuration>/net10.0
        string dll = Path.Combine(RepoPaths.Root, "samples", "PaymentChain", "bin", configuration, "net10.0", "PaymentChain.dll");
        Assert.True(File.Exists(dll), $"{dll} is built with the solution");
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
            Assert.Fail("PaymentChain did not finish within 120 s:\n" + output);
        }
        process.WaitForExit();
        string text;
        lock (output) text = output.ToString();
        Assert.True(process.ExitCode == 0, "PaymentChain failed:\n" + text);
        Assert.Contains("12 processes", text);
        Assert.Contains("alice orders 2 book: accepted (charged, authorization A", text);
        Assert.Contains("declined by the bank: insufficient funds", text);
        Assert.Contains("killing store[0], gateway[0] and bank[0] with SIGKILL", text);
        Assert.Contains("stock: book 5, lamp 0, piano 1", text);
        Assert.Contains("PaymentChain: done", text);
        Assert.DoesNotContain("UNEXPECTED", text);
    }
}
