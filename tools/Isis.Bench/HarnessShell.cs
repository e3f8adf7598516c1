using System.Diagnostics;
using System.Globalization;

namespace Isis.Bench;

/// <summary>What the experiments that drive other programs share: running a program with a time limit, finding the repository's (and ../shared's) files, medians, options.</summary>
internal static class HarnessShell
{
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
