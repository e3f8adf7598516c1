using System.Globalization;
using System.Security.Cryptography;
using System.Text;

namespace Isis.Runtime;

/// <summary>
/// The machine's registry of durable groups: for each group whose SafeSend history (or, without a
/// SafeSend log, whose persistent state) some process of this machine held, the lineage it held
/// and the data directories that held it. One small file per group, in the membership data folder
/// (never the temporary folder), keyed by the membership service's endpoint like the replica file.
/// </summary>
/// <remarks>
/// <para>Why: the embedded membership service keeps its state in its processes' memory, so after
/// every process stopped it forgets every group, and numbers a group's views from 1 again. A
/// process with an empty data directory that started first would then found an empty history (or
/// start an empty state), and the members that come back later with the real one would copy the
/// empty one. The registry outlives the processes, so such a process knows a history exists and
/// waits for the members that hold it (docs/semantics.md, "A history founded twice").</para>
/// <para>Writes go to a temporary file of the writer's own that is fsynced, renamed over the old
/// one, and the folder fsynced; a process rewrites only what changed, and the runtimes of one
/// process record one at a time. Processes of one machine that record the group at once hold the
/// same lineage, so the last rename wins with at most a directory missing from the list (it only
/// helps the operator, and its process records it again at its next join). A file that cannot be read counts as an entry whose lineage is unknown: a
/// history may exist, so nothing is founded over it.</para>
/// </remarks>
internal static class DurableGroupRegistry
{
    private const string Magic = "isis-durable-group 1";
    private const int MaxDirectories = 16;

    // Runtimes of one process record one at a time, so that one's read-modify-write never loses
    // another's directory; across processes the last rename wins (see the remarks).
    private static readonly Lock RecordGate = new();

    /// <summary>What the registry holds for one group.</summary>
    /// <param name="Lineage">The lineage last held on this machine ("?" if the file is damaged).</param>
    /// <param name="HeldUtc">When a process of this machine last recorded holding it.</param>
    /// <param name="Directories">The data directories that held it, most recent first.</param>
    /// <param name="Path">The registry file.</param>
    internal sealed record Entry(string Lineage, DateTime HeldUtc, IReadOnlyList<string> Directories, string Path)
    {
        public override string ToString() =>
            $"lineage {Lineage}, last held {HeldUtc:u} in {(Directories.Count == 0 ? "no directory recorded" : string.Join(", ", Directories))} (registry file {Path})";
    }

    /// <summary>The registry's file for <paramref name="group"/> in <paramref name="folder"/>.</summary>
    public static string PathFor(string folder, string group)
    {
        string safe = string.Concat(group.Take(40).Select(c => char.IsLetterOrDigit(c) || c is '-' or '_' ? c : '_'));
        string hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(group)))[..16];
        return System.IO.Path.Combine(folder, $"{safe}-{hash}.group");
    }

    /// <summary>The entry for <paramref name="group"/>, or null if this machine never recorded it.</summary>
    public static Entry? Read(string folder, string group)
    {
        string path = PathFor(folder, group);
        string[] lines;
        try
        {
            if (!File.Exists(path)) return null;
            lines = File.ReadAllLines(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return new Entry("?", DateTime.MinValue, [], path);
        }
        return Parse(lines, group, path) ?? new Entry("?", DateTime.MinValue, [], path);
    }

    private static Entry? Parse(string[] lines, string group, string path)
    {
        if (lines.Length < 4 || lines[0] != Magic || lines[1] != "group " + group || !lines[2].StartsWith("lineage ", StringComparison.Ordinal)) return null;
        if (!lines[3].StartsWith("held ", StringComparison.Ordinal) ||
            !DateTime.TryParse(lines[3]["held ".Length..], CultureInfo.InvariantCulture, DateTimeStyles.AdjustToUniversal | DateTimeStyles.AssumeUniversal, out DateTime held))
        {
            return null;
        }
        var directories = new List<string>();
        foreach (string line in lines.Skip(4))
        {
            if (!line.StartsWith("directory ", StringComparison.Ordinal)) return null;
            directories.Add(line["directory ".Length..]);
        }
        return new Entry(lines[2]["lineage ".Length..], held, directories, path);
    }

    /// <summary>
    /// Records that <paramref name="directory"/> holds <paramref name="group"/>'s history or state
    /// of <paramref name="lineage"/>. A new lineage replaces the old one and its directories (they
    /// hold another history now). Returns a problem to report, or null; an unchanged entry is not
    /// rewritten.
    /// </summary>
    public static string? Record(string folder, string group, string lineage, string directory, DateTime nowUtc)
    {
        string path = PathFor(folder, group);
        directory = System.IO.Path.GetFullPath(directory);
        lock (RecordGate)
        {
            try
            {
                Directory.CreateDirectory(folder);
                Entry? old = File.Exists(path) ? Parse(File.ReadAllLines(path), group, path) : null;
                if (old != null && old.Lineage == lineage && old.Directories.Count > 0 && old.Directories[0] == directory) return null;
                IEnumerable<string> others = old != null && old.Lineage == lineage ? old.Directories.Where(d => d != directory) : [];
                var text = new StringBuilder()
                    .Append(Magic).Append('\n')
                    .Append("group ").Append(group).Append('\n')
                    .Append("lineage ").Append(lineage).Append('\n')
                    .Append("held ").Append(nowUtc.ToString("O", CultureInfo.InvariantCulture)).Append('\n');
                foreach (string d in others.Prepend(directory).Take(MaxDirectories)) text.Append("directory ").Append(d).Append('\n');
                IDurableFiles files = DurableFiles.System;
                string temporary = $"{path}.{Environment.ProcessId}-{Guid.NewGuid():N}.next"; // this writer's own
                using (IDurableFile file = files.OpenAppend(temporary, truncate: true))
                {
                    file.Write(Encoding.UTF8.GetBytes(text.ToString()));
                    file.Sync();
                }
                files.Rename(temporary, path);
                files.SyncDirectory(folder);
                return null;
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                return $"the registry of durable groups could not record group '{group}' in {path} ({e.Message})";
            }
        }
    }

    /// <summary>Forgets <paramref name="group"/> (the operator's choice: its history is gone for good). True if there was an entry.</summary>
    public static bool Forget(string folder, string group)
    {
        string path = PathFor(folder, group);
        if (!File.Exists(path)) return false;
        File.Delete(path);
        return true;
    }
}
