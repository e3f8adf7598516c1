using System.Globalization;
using System.Net;
using System.Text;
using static Isis.Tools.HtmlReportKit;

namespace Isis.Soak;

/// <summary>
/// The results as one self-contained HTML page (inline SVG, no scripts, nothing fetched), in the
/// manner of tools/Isis.ClosedLoop's report: the command, the commit and the machine on top; the
/// verdict and the violations; then RSS, disk and SafeSend log size per process and the throughput
/// against time, each with the faults drawn as vertical lines; then the faults and the checks.
/// </summary>
internal static class HtmlReport
{
    private static readonly string[] Palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#ff7f0e"];

    private static readonly Dictionary<string, string> FaultColors = new()
    {
        ["kill"] = "#d62728",
        ["crash"] = "#000000",
        ["join"] = "#2ca02c",
        ["leave"] = "#17becf",
        ["unplanned-exit"] = "#ff7f0e",
        ["check"] = "#aaaaaa", // the load pauses during a check: the dips in throughput
    };

    public static string Render(SoakResults r)
    {
        var html = new StringBuilder();
        BeginPage(html, "Isis for .NET: soak");
        html.Append("<h1>Isis for .NET: a durable group under load and faults (soak)</h1><table>")
            .Append(r.FactRows())
            .Append(Row("group", E(Inv($"{r.Members} member processes on 127.0.0.1 (plus an extra one that joins and leaves), embedded membership service, ") +
                                   Inv($"SafeSend disk durability and persistent checkpoints every {r.CheckpointIntervalSeconds} s, each member in a data directory of its own kept across its restarts"))))
            .Append(Row("load", E(Inv($"{r.Rate} operations/s over the members, {r.PayloadBytes} B each, at most {r.InFlight} in flight per member: ") +
                                  (r.Mix == "safesend" ? "every operation a SafeSend" : "40 % SafeSend, 10 % SafeQuery (all replies), 25 % OrderedSend, 25 % Send"))))
            .Append(Row("faults", E(Inv($"about every {r.KillEverySeconds} s a SIGKILL of one member and its restart; every {r.CrashEverySeconds} s a SIGKILL of every member and their restart in random order; ") +
                                    Inv($"every {r.JoinEverySeconds} s an extra member that joins and leaves gracefully {r.ExtraStaysSeconds} s later (0: never); one at a time, seed {r.Seed}"))))
            .Append(Row("time", E(Inv($"{r.LoadSeconds:F0} s of load ({r.DurationSeconds:F0} s asked)"))))
            .Append("</table>");

        SoakSummary m = r.Summary;
        html.Append("<h2>Verdict</h2><p>")
            .Append(r.Violations.Count == 0
                ? Inv($"<span class=\"good\">No violation.</span> {m.ChecksPassed} of {m.Checks} durability checks passed.")
                : Inv($"<span class=\"bad\">{r.Violations.Count} violations.</span> {m.ChecksPassed} of {m.Checks} durability checks passed."))
            .Append(Inv($" {m.AcknowledgedOperations} SafeSends and SafeQueries acknowledged ({m.AcknowledgedPerSecond:F1} per second over the load), {m.CompletedOperations} operations completed in all, {m.FailedOperations} failed (never acknowledged, so nothing is claimed about them); "))
            .Append(Inv($"{m.Kills} kills, {m.WholeGroupCrashes} whole-group crashes, {m.Joins} joins, {m.Leaves} leaves, {m.UnplannedExits} unplanned exits.</p>"));
        if (r.Violations.Count > 0) html.Append("<ul>").Append(string.Concat(r.Violations.Select(v => $"<li class=\"bad\">{E(v)}</li>"))).Append("</ul>");
        html.Append("<p class=\"note\">A check (after every whole-group restart, and at the end) pauses the load, waits until every running member holds a history of the same length, ")
            .Append("and requires: the same history at every member; no operation twice in it; each sender's operations in its order; the previous check's history a prefix of it; ")
            .Append("and every operation that any incarnation of any member recorded as acknowledged (awaited) in it.</p>");

        html.Append(Inv($"<h2>Per process from {m.TailFromSeconds:F0} s to the end of the load</h2>"))
            .Append("<table><tr><th>process</th><th>samples</th><th>RSS median</th><th>RSS max</th><th>max/median</th><th>disk median</th><th>disk max</th><th>max/median</th><th>SafeSend log max</th></tr>");
        foreach (ProcessTail p in m.Processes)
        {
            html.Append(Inv($"<tr><td>{E(p.Process)}</td><td>{p.Samples}</td><td>{Soak.Mib(p.RssMedian)}</td><td>{Soak.Mib(p.RssMax)}</td><td>{p.RssMaxOverMedian:F2}</td>"))
                .Append(Inv($"<td>{Soak.Mib(p.DiskMedian)}</td><td>{Soak.Mib(p.DiskMax)}</td><td>{p.DiskMaxOverMedian:F2}</td><td>{Soak.Mib(p.LogMax)}</td></tr>"));
        }
        html.Append("</table>");

        html.Append("<h2>Over time</h2><p class=\"note\">Vertical lines: ")
            .Append(string.Join(", ", FaultColors.Select(f => $"<span style=\"color:{f.Value}\">{E(f.Key)}</span>")))
            .Append(". Disk is what the library's files in each member's data directory take on disk, their allocated blocks as du counts them (the harness's acknowledgement file is left out); the live log is the bytes the SafeSend log's segments hold. A gap in RSS is a process that was not running.</p><div class=\"charts\">");
        const double Mebi = 1024 * 1024;
        html.Append(Chart(r, "Resident memory (VmRSS) per process", "MiB", r.Processes.Select(p => (p, Points(r, p, s => s.RssBytes / Mebi))).ToList()));
        html.Append(Chart(r, "Managed heap after the last garbage collection, per process", "MiB", r.Processes.Select(p => (p, Points(r, p, s => s.HeapBytes / Mebi))).ToList()));
        html.Append(Chart(r, "Data directory on disk per process (allocated blocks, spare log segments included)", "MiB", r.Processes.Select(p => (p, Points(r, p, s => s.DiskBytes / Mebi))).ToList()));
        html.Append(Chart(r, "Live SafeSend log (bytes in its segments) per process", "MiB", r.Processes.Select(p => (p, Points(r, p, s => s.LogBytes / Mebi))).ToList()));
        html.Append(Chart(r, "Throughput of the group", "operations/s", [
            ("acknowledged SafeSend + SafeQuery", r.Throughput.Select(t => (t.T, (double?)t.AckedPerSecond)).ToArray()),
            ("completed, all four", r.Throughput.Select(t => (t.T, (double?)t.CompletedPerSecond)).ToArray())]));
        html.Append("</div>");

        html.Append("<h2>Faults and steps</h2><table><tr><th>time (s)</th><th>what</th><th>took (s)</th><th>detail</th></tr>");
        foreach (FaultEvent f in r.Faults)
            html.Append(Inv($"<tr><td>{f.T:F1}</td><td>{E(f.Kind)}</td><td>{(f.Seconds is double s ? s.ToString("F1", CultureInfo.InvariantCulture) : "")}</td><td style=\"text-align:left\">{E(f.Detail)}</td></tr>"));
        html.Append("</table>");

        html.Append("<h2>Checks</h2><table><tr><th>time (s)</th><th>after</th><th>members</th><th>history</th><th>previous history</th><th>acknowledged checked</th><th>result</th></tr>");
        foreach (CheckResult c in r.Checks)
        {
            html.Append(Inv($"<tr><td>{c.T:F1}</td><td>{E(c.After)}</td><td>{c.MembersCompared}</td><td>{c.HistoryLength}</td><td>{c.PreviousHistoryLength}</td><td>{c.AcknowledgedChecked}</td>"))
                .Append(c.Passed ? "<td class=\"good\">passed</td></tr>" : $"<td class=\"bad\">{E(string.Join("; ", c.Problems))}</td></tr>");
        }
        html.Append("</table></body></html>");
        return html.ToString();
    }

    private static (double X, double? Y)[] Points(SoakResults r, string process, Func<ProcessSample, double?> y) =>
        r.Samples.Where(s => s.Process == process).Select(s => (s.T, y(s))).ToArray();

    /// <summary>A line per series against time (linear axes), broken where a value is missing, with the faults as vertical lines.</summary>
    private static string Chart(SoakResults r, string title, string yLabel, List<(string Name, (double X, double? Y)[] Points)> series)
    {
        const int W = 640, H = 320, L = 70, R = 190, T = 30, B = 45;
        var all = series.SelectMany(s => s.Points).Where(p => p.Y != null).ToList();
        var svg = new StringBuilder(Inv($"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\"><title>{E(title)}</title>"));
        svg.Append(Inv($"<text x=\"{(L + W - R) / 2}\" y=\"18\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{E(title)}</text>"));
        if (all.Count == 0)
        {
            svg.Append(Inv($"<text x=\"{W / 2}\" y=\"{H / 2}\" text-anchor=\"middle\" font-size=\"12\">no data in this run</text></svg>"));
            return svg.ToString();
        }
        double x0 = 0, x1 = Math.Max(1, Math.Max(all.Max(p => p.X), r.Faults.Select(f => f.T).DefaultIfEmpty(0).Max()));
        double y0 = 0, y1 = Math.Max(1e-9, all.Max(p => p.Y!.Value)) * 1.08;
        double Px(double v) => L + (v - x0) / (x1 - x0) * (W - L - R);
        double Py(double v) => H - B - (v - y0) / (y1 - y0) * (H - T - B);
        svg.Append(Inv($"<line x1=\"{L}\" y1=\"{H - B}\" x2=\"{W - R}\" y2=\"{H - B}\" stroke=\"#333\"/><line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{H - B}\" stroke=\"#333\"/>"));
        for (int i = 0; i <= 4; i++)
        {
            double yv = y0 + (y1 - y0) * i / 4;
            svg.Append(Inv($"<line x1=\"{L}\" y1=\"{Py(yv):F1}\" x2=\"{W - R}\" y2=\"{Py(yv):F1}\" stroke=\"#eee\"/>"));
            svg.Append(Inv($"<text x=\"{L - 6}\" y=\"{Py(yv) + 4:F1}\" text-anchor=\"end\" font-size=\"10\">{Short(yv)}</text>"));
            double xv = x0 + (x1 - x0) * i / 4;
            svg.Append(Inv($"<text x=\"{Px(xv):F1}\" y=\"{H - B + 15}\" text-anchor=\"middle\" font-size=\"10\">{Short(xv)}</text>"));
        }
        svg.Append(Inv($"<text x=\"{(L + W - R) / 2}\" y=\"{H - 10}\" text-anchor=\"middle\" font-size=\"11\">seconds since the start</text>"));
        svg.Append(Inv($"<text x=\"14\" y=\"{(T + H - B) / 2}\" text-anchor=\"middle\" font-size=\"11\" transform=\"rotate(-90 14 {(T + H - B) / 2})\">{E(yLabel)}</text>"));
        foreach (FaultEvent f in r.Faults.Where(f => FaultColors.ContainsKey(f.Kind)))
        {
            svg.Append(Inv($"<line x1=\"{Px(f.T):F1}\" y1=\"{T}\" x2=\"{Px(f.T):F1}\" y2=\"{H - B}\" stroke=\"{FaultColors[f.Kind]}\" stroke-dasharray=\"4 3\" stroke-width=\"1.2\"><title>{E($"{f.T:F1} s {f.Kind}: {f.Detail}")}</title></line>"));
        }
        for (int s = 0; s < series.Count; s++)
        {
            string color = Palette[s % Palette.Length];
            // One polyline per run of consecutive present values: a process that was down leaves a gap.
            var run = new List<string>();
            void Flush()
            {
                if (run.Count > 1) svg.Append($"<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{string.Join(' ', run)}\"/>");
                run.Clear();
            }
            foreach (var (x, y) in series[s].Points.OrderBy(p => p.X))
            {
                if (y is double v) run.Add(Inv($"{Px(x):F1},{Py(v):F1}"));
                else Flush();
            }
            Flush();
            svg.Append(Inv($"<rect x=\"{W - R + 10}\" y=\"{T + 16 * s}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{W - R + 25}\" y=\"{T + 9 + 16 * s}\" font-size=\"11\">{E(series[s].Name)}</text>"));
        }
        return svg.Append("</svg>").ToString();
    }

}
