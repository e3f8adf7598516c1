using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Reflection;

namespace Isis.ClosedLoop;

/// <summary>What the report says about this machine, and the few things read from /proc.</summary>
internal static class Machine
{
    public static string LoadAverage() => ReadProc("/proc/loadavg") is { } s ? string.Join(' ', s.Split(' ').Take(3)) : "unknown";

    public static string CpuModel() =>
        ReadProc("/proc/cpuinfo")?.Split('\n').FirstOrDefault(l => l.StartsWith("model name", StringComparison.Ordinal))?.Split(':', 2)[1].Trim() ?? "unknown";

    /// <summary>User plus system CPU seconds of a process so far (0 if it is gone or there is no /proc).</summary>
    public static double CpuSeconds(int pid)
    {
        string? stat = ReadProc($"/proc/{pid}/stat");
        if (stat == null) return 0;
        // The command name (field 2) is in parentheses and may hold spaces: count fields after its ')'.
        string[] f = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
        // Fields 14 and 15 of the whole line (utime, stime) are 12 and 13 here, in clock ticks (100 per second on Linux).
        return f.Length > 13 ? (long.Parse(f[11], CultureInfo.InvariantCulture) + long.Parse(f[12], CultureInfo.InvariantCulture)) / 100.0 : 0;
    }

    /// <summary>The processes whose parent is <paramref name="pid"/> (a PostgreSQL server's backends and workers).</summary>
    public static IEnumerable<int> Children(int pid)
    {
        if (!Directory.Exists("/proc")) yield break;
        foreach (string dir in Directory.EnumerateDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), NumberStyles.None, CultureInfo.InvariantCulture, out int child)) continue;
            string? stat = ReadProc($"/proc/{child}/stat");
            if (stat == null) continue;
            string[] f = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
            if (f.Length > 1 && f[1] == pid.ToString(CultureInfo.InvariantCulture)) yield return child;
        }
    }

    /// <summary>The file system type and device that hold <paramref name="path"/> (from /proc/mounts).</summary>
    public static string FileSystemOf(string path)
    {
        string full = Path.GetFullPath(path);
        string best = "", type = "unknown", device = "";
        foreach (string line in (ReadProc("/proc/mounts") ?? "").Split('\n'))
        {
            string[] f = line.Split(' ');
            if (f.Length < 3) continue;
            string mount = f[1];
            bool under = full == mount || full.StartsWith(mount.EndsWith('/') ? mount : mount + "/", StringComparison.Ordinal);
            if (under && mount.Length >= best.Length) (best, device, type) = (mount, f[0], f[2]);
        }
        return $"{type} ({device} on {best})";
    }

    /// <summary>The commit being measured: git's HEAD if git and the repository are at hand.</summary>
    public static string GitCommit()
    {
        (int code, string head) = Exec(TimeSpan.FromSeconds(10), "git", "rev-parse", "--short=12", "HEAD");
        if (code != 0 || head.Trim().Length == 0) return "unknown";
        (int statusCode, string status) = Exec(TimeSpan.FromSeconds(10), "git", "status", "--porcelain", "--untracked-files=no");
        return head.Trim() + (statusCode == 0 && status.Trim().Length > 0 ? " (with local changes)" : "");
    }

    /// <summary>Runs a program to its end (killed after <paramref name="limit"/>): its exit code and standard output, or -1 and why not.</summary>
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
            p.WaitForExit();
            string err = stderr.Result;
            return (p.ExitCode, stdout.Result + (p.ExitCode != 0 && err.Length > 0 ? err : ""));
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            return (-1, $"{program}: {e.Message}");
        }
    }

    /// <summary>How to run this program again: <c>dotnet Isis.ClosedLoop.dll</c>.</summary>
    public static (string Host, string Dll) SelfCommand()
    {
        string dll = Path.Combine(AppContext.BaseDirectory, Assembly.GetExecutingAssembly().GetName().Name + ".dll");
        string? current = Environment.ProcessPath;
        if (current != null && Path.GetFileNameWithoutExtension(current) == "dotnet") return (current, dll);
        string? hostPath = Environment.GetEnvironmentVariable("DOTNET_HOST_PATH");
        return (hostPath != null && File.Exists(hostPath) ? hostPath : "dotnet", dll);
    }

    public static int FreeTcpPort()
    {
        var l = new TcpListener(IPAddress.Loopback, 0);
        l.Start();
        int port = ((IPEndPoint)l.LocalEndpoint).Port;
        l.Stop();
        return port;
    }

    public static int FreeUdpPort()
    {
        using var s = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        s.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        return ((IPEndPoint)s.LocalEndPoint!).Port;
    }

    private static string? ReadProc(string path)
    {
        try
        {
            return File.ReadAllText(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return null;
        }
    }
}
