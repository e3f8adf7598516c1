using System.Diagnostics;
using System.Reflection;

namespace Isis.Tools;

/// <summary>
/// What the multi-process tools (Isis.Bench, Isis.ClosedLoop, Isis.Overload) share to drive other
/// programs and themselves: running a program with a time limit, re-launching this one, the
/// commit measured (free ports: <see cref="LoopbackPorts"/>). Compiled into each tool (tools/Shared).
/// </summary>
internal static class ToolProcess
{
    /// <summary>Runs <paramref name="program"/> to its end (killed after <paramref name="limit"/>): its exit code and output, or -1 and why it did not run.</summary>
    public static (int Code, string Output) Exec(TimeSpan limit, string program, params string[] args)
    {
        var psi = new ProcessStartInfo(program) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in args) psi.ArgumentList.Add(a);
        try
        {
            using Process p = Process.Start(psi)!;
            Task<string> stdout = p.StandardOutput.ReadToEndAsync();
            Task<string> stderr = p.StandardError.ReadToEndAsync();
            if (!p.WaitForExit(limit))
            {
                p.Kill(entireProcessTree: true);
                return (-1, $"{program} did not finish within {limit.TotalSeconds:F0} s");
            }
            p.WaitForExit(); // the redirected output is complete only then
            return (p.ExitCode, stdout.Result + stderr.Result);
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            return (-1, $"{program}: {e.Message}");
        }
    }

    /// <summary>How to run this program again: the dotnet host (this process's, or DOTNET_HOST_PATH's) and this program's dll.</summary>
    public static (string Host, string Dll) SelfCommand()
    {
        string dll = Path.Combine(AppContext.BaseDirectory, Assembly.GetExecutingAssembly().GetName().Name + ".dll");
        string? current = Environment.ProcessPath;
        if (current != null && Path.GetFileNameWithoutExtension(current) == "dotnet") return (current, dll);
        string? hostPath = Environment.GetEnvironmentVariable("DOTNET_HOST_PATH");
        return (hostPath != null && File.Exists(hostPath) ? hostPath : "dotnet", dll);
    }

    /// <summary>The commit of the repository this program was built from (its short hash, and whether the tree had local changes), or "unknown".</summary>
    public static string GitCommit()
    {
        (int code, string head) = Exec(TimeSpan.FromSeconds(10), "git", "-C", AppContext.BaseDirectory, "rev-parse", "--short=12", "HEAD");
        if (code != 0 || head.Trim().Length == 0) return "unknown";
        (int statusCode, string status) = Exec(TimeSpan.FromSeconds(10), "git", "-C", AppContext.BaseDirectory, "status", "--porcelain", "--untracked-files=no");
        return head.Trim() + (statusCode == 0 && status.Trim().Length > 0 ? " (with local changes)" : "");
    }
}
