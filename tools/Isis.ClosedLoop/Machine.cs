using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Reflection;

using Isis.Tools;

namespace Isis.ClosedLoop;

/// <summary>What the experiment reads from /proc about its processes and disks (the machine's facts: <see cref="MachineFacts"/>).</summary>
internal static class Machine
{
    /// <summary>User plus system CPU seconds of a process so far (0 if it is gone or there is no /proc).</summary>
    public static double CpuSeconds(int pid)
    {
        string? stat = MachineFacts.ReadProc($"/proc/{pid}/stat");
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
            string? stat = MachineFacts.ReadProc($"/proc/{child}/stat");
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
        foreach (string line in (MachineFacts.ReadProc("/proc/mounts") ?? "").Split('\n'))
        {
            string[] f = line.Split(' ');
            if (f.Length < 3) continue;
            string mount = f[1];
            bool under = full == mount || full.StartsWith(mount.EndsWith('/') ? mount : mount + "/", StringComparison.Ordinal);
            if (under && mount.Length >= best.Length) (best, device, type) = (mount, f[0], f[2]);
        }
        return $"{type} ({device} on {best})";
    }
}
