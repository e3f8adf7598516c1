using Isis.Core.Durability;
using Isis.Core.Wire;
using Isis.Runtime;

namespace Isis;

/// <summary>
/// A stopped member's SafeSend log, for the operator (the <c>isis-recover</c> tool uses these): what
/// it holds, and the permission for a forced recovery. While the member's process runs, use
/// <see cref="Group.ForceSafeSendRecoveryAsync"/> instead: these read and write the log file itself.
/// </summary>
public static class SafeSendHistory
{
    /// <summary>Reads what a member's SafeSend log of <paramref name="group"/> in <paramref name="directory"/> holds; the file is not changed.</summary>
    /// <param name="directory">The member's directory, as given to <see cref="Group.SetSafeSendDurability"/>.</param>
    /// <param name="group">The group's name.</param>
    /// <exception cref="FileNotFoundException">There is no log of that group in that directory.</exception>
    public static SafeSendLogInfo Inspect(string directory, string group)
    {
        string path = LogOf(directory, group);
        (List<byte[]> records, bool damaged) = HistoryLogFile.Inspect(path);
        HistoryLogImage image = HistoryLog.Read(records);
        HistoryViewRecord? last = image.LastView;
        return new SafeSendLogInfo(
            path,
            image.Incarnations.Select(n => new Address(n)).ToArray(),
            last?.Key.Epoch ?? 0,
            last?.Key.ViewId ?? 0,
            last == null ? [] : last.Members.Select(n => new Address(n)).ToArray(),
            last?.Lineage.ToString(),
            image.Count,
            image.Trimmed,
            image.ForcedWithout != null,
            image.GaveUp.Select(n => new Address(n)).ToArray(),
            damaged || image.Unreadable > 0);
    }

    /// <summary>
    /// Allows the group to recover its SafeSend history without <paramref name="without"/> (members
    /// of its last view that will never come back), from the next start of the member whose log
    /// this is (docs/operations.md, "Forced recovery"). The member's process must be stopped. The
    /// permission is spent once the member holds the history again.
    /// </summary>
    /// <param name="directory">The stopped member's directory.</param>
    /// <param name="group">The group's name.</param>
    /// <param name="without">The members to give up (see <see cref="SafeSendLogInfo.LastViewMembers"/>); empty: whichever have not come
    /// back when the group forms (the first member that starts may then recover alone: name them when you can).</param>
    /// <exception cref="FileNotFoundException">There is no log of that group in that directory.</exception>
    /// <exception cref="IOException">The log could not be written (is the member still running?).</exception>
    public static void AllowForcedRecovery(string directory, string group, IEnumerable<Address> without)
    {
        ArgumentNullException.ThrowIfNull(without);
        string path = LogOf(directory, group);
        (HistoryLogFile log, _) = HistoryLogFile.Open(path);
        using (log)
        {
            log.Append([HistoryLog.ForcedRecovery(new PacketWriter(), without.Select(a => a.Node))]);
            log.Sync();
        }
    }

    private static string LogOf(string directory, string group)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(directory);
        ArgumentException.ThrowIfNullOrWhiteSpace(group);
        string path = HistoryLogFile.PathFor(directory, group);
        if (!HistoryLogFile.Exists(path)) throw new FileNotFoundException($"There is no SafeSend log of group '{group}' in {directory} (looked for {path}).", path);
        return path;
    }
}

/// <summary>What a member's SafeSend log holds (<see cref="SafeSendHistory.Inspect"/>).</summary>
public sealed class SafeSendLogInfo
{
    internal SafeSendLogInfo(string path, IReadOnlyList<Address> incarnations, long lastViewEpoch, int lastViewId, IReadOnlyList<Address> lastViewMembers, string? lineage,
        long entries, long trimmed, bool forcedRecoveryAllowed, IReadOnlyList<Address> givenUp, bool damaged)
    {
        Path = path;
        Incarnations = incarnations;
        LastViewEpoch = lastViewEpoch;
        LastViewId = lastViewId;
        LastViewMembers = lastViewMembers;
        Lineage = lineage;
        Entries = entries;
        Trimmed = trimmed;
        ForcedRecoveryAllowed = forcedRecoveryAllowed;
        GivenUp = givenUp;
        Damaged = damaged;
    }

    /// <summary>The log's name: its first segment's file, and the stem of its other segments' (<c>{Path}.{generation}-{segment}</c>).</summary>
    public string Path { get; }

    /// <summary>The incarnations of the member that wrote it (one per start).</summary>
    public IReadOnlyList<Address> Incarnations { get; }

    /// <summary>The history's epoch (one more after each recovery from logs) in the last view in which this member held the whole history; 0 if it never did.</summary>
    public long LastViewEpoch { get; }

    /// <summary>The id of the last view in which this member held the whole history; 0 if it never did. Views order by epoch, then id.</summary>
    public int LastViewId { get; }

    /// <summary>The members of that last view: after a total crash, every one of them must come back (or be given up by force) before the group delivers.</summary>
    public IReadOnlyList<Address> LastViewMembers { get; }

    /// <summary>Which history it is (its founder and founding view), or null if it never held one.</summary>
    public string? Lineage { get; }

    /// <summary>How many SafeSends (and SafeQueries) of the history it holds, the trimmed ones included.</summary>
    public long Entries { get; }

    /// <summary>How many of them only a persistent checkpoint holds (the log starts after them).</summary>
    public long Trimmed { get; }

    /// <summary>A forced recovery is allowed from this member's next start.</summary>
    public bool ForcedRecoveryAllowed { get; }

    /// <summary>Incarnations earlier forced recoveries of this history gave up.</summary>
    public IReadOnlyList<Address> GivenUp { get; }

    /// <summary>Part of the file is damaged (torn, failing its checksum, or out of place): the member uses its intact prefix and moves the rest aside at its next start.</summary>
    public bool Damaged { get; }
}
