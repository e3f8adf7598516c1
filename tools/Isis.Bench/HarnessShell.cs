using System.Diagnostics;
using System.Globalization;

namespace Isis.Bench;

/// <summary>What the experiments that drive other programs share: running a program with a time limit, finding the repository's (and ../shared's) files, medians, options.</summary>
internal static class HarnessShell
{
    /// <summary>Runs <paramref name="program"/> to its end (killed after <paramref name="limit"/>); its exit code and output, or -1 and why it did not run.</summary>
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
            return (p.ExitCode, stdout.Result + stderr.Result);
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            return (-1, $"{program}: {e.Message}");
        }
    }

    /// <summary>A file of the repository, or of ../shared beside it, found upwards from this program's directory.</summary>
    public static string? RepoFile(string relative)
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir != null; dir = dir.Parent)
        {
            string candidate = Path.Combine(dir.FullName, relative);
            if (File.Exists(candidate)) return candidate;
        }
        return null;
    }

    public static double Median(IEnumerable<double> values)
    {
        double[] v = [.. values.Order()];
        return v.Length % 2 == 1 ? v[v.Length / 2] : (v[v.Length / 2 - 1] + v[v.Length / 2]) / 2;
    }

    public static int Option(string[] args, string name, int fallback)
    {
        int i = Array.IndexOf(args, name);
        return i >= 0 && i + 1 < args.Length ? int.Parse(args[i + 1], CultureInfo.InvariantCulture) : fallback;
    }

    public static string? Text(string[] args, string name)
    {
        int i = Array.IndexOf(args, name);
        return i >= 0 && i + 1 < args.Length ? args[i + 1] : null;
    }
}
