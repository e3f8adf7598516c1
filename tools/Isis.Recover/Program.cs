using Isis;

// isis-recover: what stopped members' SafeSend logs hold, and the operator's forced recovery
// (docs/operations.md, "Forced recovery"). Works on the files, so the members must be stopped.
//   isis-recover inspect --group NAME DIR [DIR...]   what each log holds; with several, whom a recovery waits for
//   isis-recover force --group NAME DIR [DIR...]     allow the group to recover without the members of its last view whose
//                                                    directories are not given (they never come back), from the next start of
//                                                    the first DIR's member (run inspect first: it says what may be lost)
return RecoverCommand.Run(args, Console.Out, Console.Error);

internal static class RecoverCommand
{
    public static int Run(string[] args, TextWriter output, TextWriter error)
    {
        if (args.Length == 0 || args[0] is "-h" or "--help" || args[0] is not ("inspect" or "force"))
        {
            output.WriteLine("usage: isis-recover inspect --group NAME DIR [DIR...]");
            output.WriteLine("       isis-recover force --group NAME DIR [DIR...]");
            output.WriteLine("  DIR: a stopped member's directory (the one given to SetSafeSendDurability). inspect lists what each SafeSend log");
            output.WriteLine("  holds and, given the directories of every member that can come back, which members of the group's last view");
            output.WriteLine("  a restart would wait for. force, given the directories of every member that can come back, lets the first");
            output.WriteLine("  one's member recover the group without the others of the last view at its next start:");
            output.WriteLine("  SafeSends only they held are lost, and their logs are kept aside if they ever come back.");
            return args.Length == 0 || args[0] is not ("-h" or "--help") ? 2 : 0;
        }
        int g = Array.IndexOf(args, "--group");
        if (g < 0 || g + 1 >= args.Length)
        {
            error.WriteLine("isis-recover: --group NAME is required");
            return 2;
        }
        string group = args[g + 1];
        string[] directories = args.Skip(1).Where((_, i) => i + 1 != g && i + 1 != g + 1).ToArray();
        if (directories.Length == 0)
        {
            error.WriteLine($"isis-recover {args[0]}: give at least one member's directory");
            return 2;
        }
        var logs = new List<SafeSendLogInfo>();
        foreach (string directory in directories)
        {
            try
            {
                logs.Add(SafeSendHistory.Inspect(directory, group));
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                error.WriteLine($"isis-recover: {e.Message}");
                return 1;
            }
        }
        foreach (SafeSendLogInfo log in logs) Describe(log, output);
        Address[]? missing = WhatARestartNeeds(logs, output);
        if (args[0] == "inspect") return 0;
        if (missing is { Length: 0 })
        {
            output.WriteLine("nothing to force: these members recover the group on their own");
            return 0;
        }
        try
        {
            SafeSendHistory.AllowForcedRecovery(directories[0], group, missing ?? []);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            error.WriteLine($"isis-recover: the log could not be written ({e.Message}); is the member still running? Stop it first.");
            return 1;
        }
        output.WriteLine(missing == null
            ? $"forced recovery allowed in {logs[0].Path}: no log here held the history, so the group founds a new, empty one when this member starts"
            : $"forced recovery allowed in {logs[0].Path} without {string.Join(", ", missing)}: start the members; the group recovers without those,");
        output.WriteLine("and every member logs what may be lost (SafeSends only the given-up members held).");
        return 0;
    }

    private static void Describe(SafeSendLogInfo log, TextWriter output)
    {
        output.WriteLine(log.Path);
        output.WriteLine($"  written by    {string.Join(", ", log.Incarnations)}");
        output.WriteLine(log.LastViewId == 0
            ? "  last view     none: this member never held the history"
            : $"  last view     {View(log)} of history {log.Lineage}, members {string.Join(", ", log.LastViewMembers)}");
        output.WriteLine($"  entries       {log.Entries} ({log.Trimmed} of them only in a persistent checkpoint)");
        if (log.ForcedRecoveryAllowed) output.WriteLine("  forced recovery allowed at its next start");
        if (log.GivenUp.Count > 0) output.WriteLine($"  given up      {string.Join(", ", log.GivenUp)} (by earlier forced recoveries)");
        if (log.Damaged) output.WriteLine("  damaged       its tail is torn or corrupt: the member uses the intact part and moves the rest aside");
    }

    /// <summary>As the group's oldest member would decide from these logs after a total crash: the members of the last view not among them (null: no log held the history).</summary>
    private static Address[]? WhatARestartNeeds(List<SafeSendLogInfo> logs, TextWriter output)
    {
        SafeSendLogInfo? latest = logs.Where(l => l.LastViewId != 0).OrderByDescending(l => l.LastViewEpoch).ThenByDescending(l => l.LastViewId)
            .ThenByDescending(l => l.Entries).FirstOrDefault();
        if (latest == null)
        {
            output.WriteLine("none of these logs ever held the history: a restart waits for a member whose log did, or founds a new history by force");
            return null;
        }
        var present = logs.SelectMany(l => l.Incarnations).ToHashSet();
        Address[] missing = latest.LastViewMembers.Where(m => !present.Contains(m)).ToArray();
        if (missing.Length == 0)
        {
            output.WriteLine($"a restart of these members recovers the history from {latest.Path} ({latest.Entries} entries): every member of its last view {View(latest)} is here");
            return missing;
        }
        output.WriteLine($"a restart of only these members waits for {string.Join(", ", missing)} (members of the last view {View(latest)}).");
        output.WriteLine($"forced without them, the history is the {latest.Entries} entries of {latest.Path}; SafeSends only they held");
        output.WriteLine($"(delivered in that view after entry {latest.Entries}, or in a later view of theirs alone) would be lost.");
        return missing;
    }

    private static string View(SafeSendLogInfo log) => $"e{log.LastViewEpoch}/v{log.LastViewId}";
}
