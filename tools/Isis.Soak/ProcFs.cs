using System.Globalization;

namespace Isis.Soak;

/// <summary>What the sampler reads from the machine: a process's resident memory (/proc) and the bytes of a directory's files.</summary>
internal static partial class ProcFs
{
    /// <summary>True for a segment of a SafeSend log: <c>{group}.safelog</c> or <c>{group}.safelog.{generation}-{segment}</c> (not a file kept aside, nor a copy under way).</summary>
    public static bool IsSafeSendLogSegment(string name) => name.EndsWith(".safelog", StringComparison.Ordinal) || SegmentName().IsMatch(name);

    [System.Text.RegularExpressions.GeneratedRegex(@"\.safelog\.[0-9]+-[0-9]+$")]
    private static partial System.Text.RegularExpressions.Regex SegmentName();

    /// <summary>VmRSS of <paramref name="pid"/> in bytes, or null if the process is gone (or there is no /proc).</summary>
    public static long? RssBytes(int pid)
    {
        try
        {
            foreach (string line in File.ReadLines($"/proc/{pid}/status"))
            {
                if (!line.StartsWith("VmRSS:", StringComparison.Ordinal)) continue;
                string[] f = line.Split(' ', StringSplitOptions.RemoveEmptyEntries); // "VmRSS:", "123456", "kB"
                return f.Length >= 2 && long.TryParse(f[1], NumberStyles.Integer, CultureInfo.InvariantCulture, out long kb) ? kb * 1024 : null;
            }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
        }
        return null;
    }

    /// <summary>The sizes of the files under <paramref name="directory"/> whose names pass <paramref name="include"/>; files that vanish meanwhile count 0.</summary>
    public static long DirectoryBytes(string directory, Func<string, bool> include) =>
        Files(directory).Where(f => include(f.Name)).Sum(f => f.Bytes);

    /// <summary>Every file under <paramref name="directory"/> with its size, read in one listing (a file that vanishes meanwhile counts 0).</summary>
    public static List<(string Name, long Bytes)> Files(string directory)
    {
        var files = new List<(string Name, long Bytes)>();
        try
        {
            foreach (FileInfo f in new DirectoryInfo(directory).EnumerateFiles("*", SearchOption.AllDirectories))
            {
                long length = 0;
                try
                {
                    length = f.Length;
                }
                catch (FileNotFoundException)
                {
                    // renamed or deleted between the listing and the read (a checkpoint put in place)
                }
                files.Add((f.Name, length));
            }
        }
        catch (DirectoryNotFoundException)
        {
        }
        return files;
    }
}
