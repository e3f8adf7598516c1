using System.Globalization;
using System.Net;
using System.Text;
using static Isis.Tools.HtmlReportKit;

namespace Isis.Overload;

/// <summary>
/// The result as markdown (the per-bin table and the summary, printed and pasted into
/// docs/performance.md) and as one self-contained HTML page (no scripts, nothing fetched), in the
/// manner of tools/Isis.Bench's report: the machine, the commit and the exact command above the figures.
/// </summary>
internal static class Report
{
    public static string Markdown(OverloadReport r)
    {
        var md = new StringBuilder();
        md.AppendLine(Inv($"Overload {r.OverloadStart:F1}-{r.OverloadEnd:F1} s; starved replica: instance 2 (CPUs {r.Stress.StarvedCpus}); reads: {r.Settings.Threads} threads at the starved replica, {r.Settings.ControlThreads} at the control (instance 1); one write every {r.Settings.UpdateMs} ms through instance 0 (the sequencer)."));
        md.AppendLine();
        md.AppendLine("| bin (s) | phase | starved: reads | failed | stale (%) | writes behind mean / max | age ms mean / max | read p50 / max ms | control: reads | stale (%) | behind max | age max ms | writes acked | history gap max | repaired | late dup. | dropped malformed |");
        md.AppendLine("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        foreach (BinRow b in r.Bins)
        {
            TargetBin s = b.Starved, c = b.Control;
            md.AppendLine(Inv($"| {b.Start:F0}-{b.End:F0} | {b.Phase} | {s.Reads:N0} | {s.Failed:N0} | {s.Stale:N0} ({s.StalePercent:F1}) | {s.MeanWritesBehind:F1} / {s.MaxWritesBehind} | {s.MeanAgeMs:F0} / {s.MaxAgeMs:F0} | {s.LatencyP50Ms:F1} / {s.LatencyMaxMs:F0} ") +
                          Inv($"| {c.Reads:N0} | {c.Stale:N0} ({c.StalePercent:F1}) | {c.MaxWritesBehind} | {c.MaxAgeMs:F0} | {b.WritesAcknowledged} | {(b.MaxHistoryGap < 0 ? "-" : b.MaxHistoryGap.ToString(CultureInfo.InvariantCulture))}{(b.Trailing ? " T" : "")} | {b.RepairedEntries:N0} | {b.LateDuplicates:N0} | {b.DroppedMalformed:N0} |"));
        }
        md.AppendLine();
        foreach (string line in Summary(r)) md.AppendLine("- " + line);
        return md.ToString();
    }

    /// <summary>The figures beside the table, one sentence each.</summary>
    public static IEnumerable<string> Summary(OverloadReport r)
    {
        Convergence c = r.Convergence;
        yield return c.Strict.Converged
            ? Inv($"Time to converge after the overload (strict: every read fresh, no history gap): {c.Strict.After:F2} s (reads from {c.Strict.ReadsAfter:F2} s, history from {c.Strict.HistoryAfter:F2} s after its end).")
            : Inv($"Not converged (strict: every read fresh, no history gap) by the end of the measurement: reads from {Opt(c.Strict.ReadsAfter)}, history from {Opt(c.Strict.HistoryAfter)}; the last stale read was sent at {Opt(c.LastStaleReadSent)}, the last failed one at {Opt(c.LastFailedReadSent)}.");
        yield return c.Lenient.Converged
            ? Inv($"Time to converge within {c.LagToleranceMs} ms (reads less than {c.LagToleranceMs} ms out of date, history at most {c.LagToleranceMs / r.Settings.UpdateMs} entries short): {c.Lenient.After:F2} s (reads from {c.Lenient.ReadsAfter:F2} s, history from {c.Lenient.HistoryAfter:F2} s).")
            : Inv($"Not converged within {c.LagToleranceMs} ms by the end of the measurement: reads from {Opt(c.Lenient.ReadsAfter)}, history from {Opt(c.Lenient.HistoryAfter)}.");
        yield return Inv($"After the overload's end: {c.StaleReadsAfterOverload} stale and {c.FailedReadsAfterOverload} failed reads at the starved replica.");
        yield return Inv($"Writer: {r.Writer.Acknowledged:N0} of {r.Writer.Attempted:N0} writes acknowledged ({r.Writer.Failed} failed), {r.Writer.MissedPeriods:N0} periods missed while a write was outstanding.");
        string hogs = r.Stress.HogThreads > 0 ? Inv($"{r.Stress.HogThreads} hog threads on CPU(s) {r.Stress.StarvedCpus}") : "no hogs";
        string nice = r.Stress.Nice == 0 ? "no renice" : Inv($"nice {r.Stress.Nice} on every thread ({(r.Stress.ReniceApplied ? "applied" : "not applied")}, {(r.Stress.ReniceRestored ? "restored to 0 after" : "not restored")})");
        yield return Inv($"Starved process CPU use (percent of one CPU): {Cpu(r.Stress.StarvedCpuPercent[0])} in the warm-up, {Cpu(r.Stress.StarvedCpuPercent[1])} during the overload, {Cpu(r.Stress.StarvedCpuPercent[2])} after; stress: {hogs}, {nice}.");
        yield return r.Flood.RatePerSecond == 0
            ? Inv($"Flood: none; the starved runtime received {r.Flood.DatagramsReceivedAtStarved:N0} datagrams (its group's traffic) over the run.")
            : Inv($"Flood: {r.Flood.DatagramsSent:N0} junk datagrams to {r.Flood.Target} in {r.Flood.Seconds:F1} s ({r.Flood.SendErrors} send errors); the starved runtime counted {r.Flood.DroppedMalformedAtStarved:N0} dropped as malformed and {r.Flood.DatagramsReceivedAtStarved:N0} datagrams received (junk and its group's traffic) over the run; the kernel dropped {r.Flood.KernelReceiveBufferErrors:N0} UDP datagrams for a full receive buffer during the flood (every socket of this network namespace).");
        if (r.StarvedBefore is { } b && r.StarvedAfter is { } a)
        {
            yield return Inv($"Starved collection statistics before the overload -> after the run: HistoryLength {b.Collection.HistoryLength:N0} -> {a.Collection.HistoryLength:N0}, Repairs {b.Collection.Repairs} -> {a.Collection.Repairs}, RepairedEntries {b.Collection.RepairedEntries:N0} -> {a.Collection.RepairedEntries:N0}, LateDuplicates {b.Collection.LateDuplicates:N0} -> {a.Collection.LateDuplicates:N0}, GossipRounds {b.Collection.GossipRounds} -> {a.Collection.GossipRounds}, Divergences {b.Collection.Divergences} -> {a.Collection.Divergences}.");
        }
        if (r.StarvedAtOverloadEnd is { } e) yield return Inv($"At the overload's end the starved replica was {(e.Collection.Trailing ? "trailing" : "not trailing")} with HistoryLength {e.Collection.HistoryLength:N0} and {e.Collection.Pending} pending.");
        yield return r.ViewChanges.Count == 0
            ? "No view change: the starved member stayed in the group throughout."
            : $"View changes: {string.Join("; ", r.ViewChanges.Select(v => Inv($"instance {v.Instance} installed view {v.ViewId} at {v.At:F1} s ({v.Members.Length} members{(v.Leavers.Length > 0 ? ", left: " + string.Join(", ", v.Leavers) : "")})")))}" +
              (r.StarvedExpelled ? " The starved member left the group." : "");
        if (r.AfterExclusion is { } x)
        {
            yield return Inv($"After the others excluded it ({x.ExcludedAt:F1} s) the starved replica, unaware, still answered {x.ReadsAnswered:N0} reads ({x.StaleReadsAnswered:N0} stale, the last at {Opt(x.LastReadAnsweredAt)}) and {x.StatsAnswersStillInOldView} /stats requests saying it ran in the old view.");
        }
        yield return Inv($"Final state after the writer stopped: {(r.Final.Converged ? "every instance holds" : "the instances do NOT hold")} the same value and history length ({string.Join(", ", r.Final.Instances.Select(i => Inv($"instance {i.Index}: value {i.Value:N0}, HistoryLength {i.HistoryLength:N0}")))}), {r.Final.SecondsToQuiesce:F1} s after it stopped.");
        yield return $"Load average {r.LoadAverageAtStart} at start, {r.LoadAverageAtEnd} at end; {r.ProcessorCount} CPUs.";
        foreach (string p in r.Problems) yield return "Problem: " + p;
        foreach (string n in r.Notes) yield return "Note: " + n;
    }

    public static string Html(OverloadReport r)
    {
        var html = new StringBuilder();
        BeginPage(html, "Isis for .NET: a starved replica (Tempest overload experiment)", extraStyle: "tr.overload td{background:#fff1f0}");
        html.Append("<h1>Isis for .NET: a starved replica (Tempest overload experiment)</h1>");
        html.Append("<table>")
            .Append(r.FactRows())
            .Append(Row("phases", E(Inv($"warm-up 0-{r.OverloadStart:F2} s, overload {r.OverloadStart:F2}-{r.OverloadEnd:F2} s, after {r.OverloadEnd:F2}-{r.MeasurementEnd:F2} s; bins of {r.Settings.BinSeconds} s"))))
            .Append(Row("load", E(Inv($"one write every {r.Settings.UpdateMs} ms (one at a time); {r.Settings.Threads} query threads at the starved replica and {r.Settings.ControlThreads} at the control, each pausing {r.Settings.ReadPauseMs} ms between reads, reads failed after {r.Settings.ReadTimeoutMs} ms"))))
            .Append(Row("starvation", E(Inv($"{r.Stress.HogThreads} busy-looping threads on CPU(s) {r.Stress.StarvedCpus} (the starved instance's; the others on {r.Stress.OtherCpus}), nice {r.Stress.Nice} on every thread of the starved instance, {r.Settings.FloodRate:N0} junk datagrams/s to its Isis UDP socket"))))
            .Append(Row("group", E(Inv($"ReplicatedDictionary<int, long>, GossipInterval {r.Settings.GossipMs} ms; failure detection {r.Settings.HeartbeatMs} ms x {r.Settings.EffectiveSuspicion} heartbeats"))))
            .Append("</table>");
        if (r.Quick) html.Append("<p class=\"note\"><b>Quick mode</b>: a smoke test with short phases; its figures are not meaningful.</p>");
        if (r.Problems.Count > 0)
        {
            html.Append("<p><b>Problems:</b></p><ul>");
            foreach (string p in r.Problems) html.Append($"<li>{E(p)}</li>");
            html.Append("</ul>");
        }
        if (r.Notes.Count > 0)
        {
            html.Append("<p><b>Notes:</b></p><ul>");
            foreach (string n in r.Notes) html.Append($"<li>{E(n)}</li>");
            html.Append("</ul>");
        }

        html.Append("<h2>Instances</h2><table><tr><th>instance</th><th>role</th><th>rank</th><th>pid</th><th>HTTP</th><th>Isis address</th><th>data port</th><th>membership replica port</th><th>CPUs</th></tr>");
        foreach (InstanceInfo i in r.Instances)
        {
            html.Append(Inv($"<tr><td>{i.Index}</td><td style=\"text-align:left\">{E(i.Role)}</td><td>{i.Rank}</td><td>{i.ProcessId}</td><td>{E(i.Url)}</td><td>{E(i.IsisAddress)}</td><td>{i.DataPort}</td><td>{(i.MembershipReplicaPort?.ToString(CultureInfo.InvariantCulture) ?? "-")}</td><td>{E(i.Cpus)}</td></tr>"));
        }
        html.Append("</table>");

        html.Append("<h2>Summary</h2><ul>");
        foreach (string line in Summary(r)) html.Append($"<li>{E(line)}</li>");
        html.Append("</ul>");

        html.Append("<h2>Per bin</h2><p class=\"note\">Rows of the overload are shaded. T after the history gap: the starved collection reported Trailing in the bin.</p>")
            .Append("<table><tr><th rowspan=\"2\">bin (s)</th><th rowspan=\"2\">phase</th><th colspan=\"8\">starved replica (instance 2)</th><th colspan=\"6\">control replica (instance 1)</th>")
            .Append("<th colspan=\"2\">writes</th><th colspan=\"5\">starved instance's counters</th></tr><tr>")
            .Append("<th>reads</th><th>failed</th><th>stale</th><th>stale %</th><th>writes behind mean / max</th><th>age ms mean / max</th><th>read p50 ms</th><th>read max ms</th>")
            .Append("<th>reads</th><th>failed</th><th>stale</th><th>stale %</th><th>writes behind max</th><th>age max ms</th>")
            .Append("<th>acked</th><th>p50 / max ms</th><th>history gap max</th><th>/stats rounds (timeouts)</th><th>repaired entries</th><th>late duplicates</th><th>dropped malformed</th></tr>");
        foreach (BinRow b in r.Bins)
        {
            TargetBin s = b.Starved, c = b.Control;
            html.Append(b.Phase == "overload" ? "<tr class=\"overload\">" : "<tr>")
                .Append(Inv($"<td>{b.Start:F0}-{b.End:F0}</td><td>{b.Phase}</td><td>{s.Reads:N0}</td><td>{s.Failed:N0}</td><td>{s.Stale:N0}</td><td>{s.StalePercent:F1}</td><td>{s.MeanWritesBehind:F1} / {s.MaxWritesBehind}</td><td>{s.MeanAgeMs:F0} / {s.MaxAgeMs:F0}</td><td>{s.LatencyP50Ms:F1}</td><td>{s.LatencyMaxMs:F0}</td>"))
                .Append(Inv($"<td>{c.Reads:N0}</td><td>{c.Failed:N0}</td><td>{c.Stale:N0}</td><td>{c.StalePercent:F1}</td><td>{c.MaxWritesBehind}</td><td>{c.MaxAgeMs:F0}</td>"))
                .Append(Inv($"<td>{b.WritesAcknowledged}</td><td>{b.WriteP50Ms:F1} / {b.WriteMaxMs:F0}</td><td>{(b.MaxHistoryGap < 0 ? "-" : b.MaxHistoryGap.ToString(CultureInfo.InvariantCulture))}{(b.Trailing ? " T" : "")}</td>"))
                .Append(Inv($"<td>{b.StatsRounds} ({b.StarvedStatsTimeouts})</td><td>{b.RepairedEntries:N0}</td><td>{b.LateDuplicates:N0}</td><td>{b.DroppedMalformed:N0}</td></tr>"));
        }
        html.Append("</table>");

        html.Append("<h2>The starved instance's statistics</h2><table><tr><th>counter</th><th>before the overload</th><th>at its end</th><th>after the run</th></tr>");
        InstanceStats?[] snaps = [r.StarvedBefore, r.StarvedAtOverloadEnd, r.StarvedAfter];
        foreach ((string name, Func<InstanceStats, string> get) in StatRows())
        {
            html.Append($"<tr><td>{E(name)}</td>");
            foreach (InstanceStats? s in snaps) html.Append($"<td>{(s == null ? "no answer" : E(get(s)))}</td>");
            html.Append("</tr>");
        }
        html.Append("</table>");

        html.Append("<h2>View changes</h2>");
        if (r.ViewChanges.Count == 0) html.Append("<p>None: every instance stayed in the three-member view the measurement started in.</p>");
        else
        {
            html.Append("<table><tr><th>instance</th><th>view</th><th>at s</th><th>members</th><th>leavers</th></tr>");
            foreach (ViewChange v in r.ViewChanges) html.Append(Inv($"<tr><td>{v.Instance}</td><td>{v.ViewId}</td><td>{v.At:F2}</td><td>{E(string.Join(", ", v.Members))}</td><td>{E(string.Join(", ", v.Leavers))}</td></tr>"));
            html.Append("</table>");
        }

        html.Append("<h2>Definitions</h2><ul>");
        foreach (string d in r.Definitions) html.Append($"<li>{E(d)}</li>");
        html.Append("</ul></body></html>");
        return html.ToString();
    }

    private static IEnumerable<(string, Func<InstanceStats, string>)> StatRows()
    {
        yield return ("HistoryLength", s => N(s.Collection.HistoryLength));
        yield return ("Pending", s => N(s.Collection.Pending));
        yield return ("Trailing", s => s.Collection.Trailing ? "yes" : "no");
        yield return ("Repairs", s => N(s.Collection.Repairs));
        yield return ("RepairedEntries", s => N(s.Collection.RepairedEntries));
        yield return ("LateDuplicates", s => N(s.Collection.LateDuplicates));
        yield return ("GossipRounds", s => N(s.Collection.GossipRounds));
        yield return ("Divergences", s => N(s.Collection.Divergences));
        yield return ("IsisStatistics.DroppedMalformed", s => s.Runtime == null ? "-" : N(s.Runtime.DroppedMalformed));
        yield return ("IsisStatistics.DatagramsReceived", s => s.Runtime == null ? "-" : N(s.Runtime.DatagramsReceived));
        yield return ("IsisStatistics.PacketsReceived", s => s.Runtime == null ? "-" : N(s.Runtime.PacketsReceived));
        yield return ("IsisStatistics.NaksSent", s => s.Runtime == null ? "-" : N(s.Runtime.NaksSent));
        yield return ("IsisStatistics.Duplicates", s => s.Runtime == null ? "-" : N(s.Runtime.Duplicates));
        yield return ("view", s => Inv($"{s.ViewId} ({s.Members.Length} members, rank {s.Rank})"));
    }

    private static string N(long v) => v.ToString("N0", CultureInfo.InvariantCulture);

    private static string Cpu(double percent) => percent < 0 ? "unknown" : Inv($"{percent:F1} %");

    private static string Opt(double? v) => v.HasValue ? Inv($"{v.Value:F2} s") : "never";

}
