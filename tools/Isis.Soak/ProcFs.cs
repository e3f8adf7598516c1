using System.Buffers.Binary;
using System.Globalization;
using System.Runtime.InteropServices;

namespace Isis.Soak;

/// <summary>What the sampler reads from the machine: a process's resident memory (/proc) and the bytes of a directory's files.</summary>
internal static partial class ProcFs
{
    /// <summary>A file of a directory: its length, and the disk it takes (its allocated blocks, as <c>du</c> counts them: space reserved ahead of the writes included).</summary>
    public readonly record struct FileBytes(string Name, long Bytes, long Allocated);

    /// <summary>True for a segment of a SafeSend log: <c>{group}.safelog</c> or <c>{group}.safelog.{generation}-{segment}</c> (not a file kept aside, nor a copy under way).</summary>
    public static bool IsSafeSendLogSegment(string name) => name.EndsWith(".safelog", StringComparison.Ordinal) || SegmentName().IsMatch(name);

    /// <summary>True for a spare segment a SafeSend log keeps for reuse: <c>{group}.safelog.spare-{n}</c>.</summary>
    public static bool IsSpareSegment(string name) => name.Contains(".safelog.spare-", StringComparison.Ordinal);

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

    /// <summary>Every file under <paramref name="directory"/> with its size and allocated disk, read in one listing (a file that vanishes meanwhile counts 0).</summary>
    public static List<FileBytes> Files(string directory)
    {
        var files = new List<FileBytes>();
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
                files.Add(new FileBytes(f.Name, length, AllocatedBytes(f.FullName) ?? length));
            }
        }
        catch (DirectoryNotFoundException)
        {
        }
        return files;
    }

    /// <summary>
    /// The disk <paramref name="path"/> takes: st_blocks of stat(2), in 512-byte units; null where
    /// stat is not read here (not Linux on x86-64 or arm64, whose struct stat both hold st_blocks
    /// at byte 64) or the file is gone.
    /// </summary>
    public static long? AllocatedBytes(string path)
    {
        if (!OperatingSystem.IsLinux() || RuntimeInformation.ProcessArchitecture is not (Architecture.X64 or Architecture.Arm64)) return null;
        Span<byte> stat = stackalloc byte[256];
        if (Stat(path, ref MemoryMarshal.GetReference(stat)) != 0) return null;
        return BinaryPrimitives.ReadInt64LittleEndian(stat[64..]) * 512;
    }

    [LibraryImport("libc", EntryPoint = "stat", StringMarshalling = StringMarshalling.Utf8)]
    private static partial int Stat(string path, ref byte buffer);
}
