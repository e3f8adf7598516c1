using System.Globalization;
using System.Net;
using System.Text;
using Isis.Tools;
using static Isis.Tools.HtmlReportKit;

namespace Isis.Bench;

/// <summary>
/// The results as one self-contained HTML page (inline SVG, no scripts, nothing fetched), readable
/// offline: latency against group size per primitive, latency CDFs, throughput against payload
/// size, the response-delay comparison, and every figure with its sample count, under the machine,
/// the commit and the exact command that produced them.
/// </summary>
internal static class HtmlReport
{
    private const string AllReceivers = "send->deliver, all receivers";
    private static readonly string[] Palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

    public static string Render(BenchReport r)
    {
        var html = new StringBuilder();
        BeginPage(html, "Isis for .NET benchmark report", maxWidth: "70em");
        html.Append("<h1>Isis for .NET: multi-process benchmark report</h1>");
        html.Append("<table>")
            .Append(r.FactRows())
            .Append(Row("phases", E("per primitive and group: warm-up latency rounds (run, not recorded), the recorded rounds, cool-down rounds (run, not recorded); " +
                                    "then a throughput blast whose rate is taken over its middle 80 % at each member (the first and the last 10 % of the deliveries are warm-up and cool-down); " +
                                    "the counts of every group are in the table below")))
            .Append("</table>");
        if (r.Groups.Any(g => !g.Completed))
        {
            html.Append("<p><b>Not every group completed:</b></p><ul>");
            foreach (GroupRun g in r.Groups.Where(g => !g.Completed)) html.Append(Inv($"<li>{g.Members} members, {g.PayloadBytes} B: {E(g.Failure ?? "")}</li>"));
            html.Append("</ul>");
        }
        if (r.SideBySide is { } sbs) html.Append(SideBySideSection(sbs));
        if (r.Quick) html.Append("<p class=\"note\"><b>Quick mode</b>: a smoke test of the harness with small counts; its timings are not meaningful.</p>");
        html.Append("<p class=\"note\">Every figure below comes from measured samples; each table gives the sample count. Latencies are from the send call to the handler's run at each member, on one clock (all members run on this machine).</p>");

        html.Append("<h2>Groups: settings and sample counts</h2>")
            .Append("<p class=\"note\">Counts not given on the command line are scaled down with the group size so that each size takes a bounded time on a small machine; ")
            .Append("failure detection is heartbeat period x silent periods before expulsion (relaxed from 20 members on, where the group saturates 2 cores). ")
            .Append("Rounds are per primitive; blast messages are for send and ordered / for safe and query.</p>")
            .Append("<table><tr><th>members</th><th>payload B</th><th>transport</th><th>failure detection</th><th>latency rounds: warm-up</th><th>recorded</th><th>cool-down</th>")
            .Append("<th>blast messages</th><th>blast deliveries not counted, each end</th><th>response-delay rounds: warm-up / recorded / cool-down</th><th>all joined after s</th><th>wall s</th><th>time limit s</th><th>status</th></tr>");
        foreach (GroupRun g in r.Groups)
        {
            html.Append(Inv($"<tr><td>{g.Members}</td><td>{g.PayloadBytes}</td><td>{g.Transport}</td><td>{g.HeartbeatMs} ms x {g.Suspicion}</td><td>{g.LatencyWarmupRounds}</td><td>{g.LatencyRecordedRounds}</td><td>{g.LatencyCooldownRounds}</td>"))
                .Append(Inv($"<td>{g.MessagesPerBlast} / {g.SlowMessagesPerBlast}</td><td>{g.BlastEdgeFraction:P0}</td>"))
                .Append(Inv($"<td>{g.ResponseDelayWarmupRounds} / {g.ResponseDelayRecordedRounds} / {g.ResponseDelayCooldownRounds}</td><td>{g.FormedSeconds:F1}</td><td>{g.WallSeconds:F1}</td><td>{g.TimeoutSeconds}</td>"))
                .Append($"<td>{(g.Completed ? "completed" : "<b>failed</b>: " + E(g.Failure ?? ""))}</td></tr>");
        }
        html.Append("</table>");

        html.Append("<h2>Latency against group size</h2><div class=\"charts\">");
        foreach (int payload in r.Runs.Select(x => x.PayloadBytes).Distinct().Order())
        {
            var runs = r.Runs.Where(x => x.PayloadBytes == payload).ToList();
            html.Append(LineChart($"p50 send to delivery, {payload} B", "members", "microseconds", Series(runs, x => x.Members, l => l.P50)));
            html.Append(LineChart($"p99 send to delivery, {payload} B", "members", "microseconds", Series(runs, x => x.Members, l => l.P99)));
        }
        html.Append("</div>");

        html.Append("<h2>Latency distribution (CDF, send to delivery at every receiver)</h2><div class=\"charts\">");
        foreach (var group in r.Runs.GroupBy(x => (x.Members, x.PayloadBytes)).OrderBy(g => g.Key.PayloadBytes).ThenBy(g => g.Key.Members))
        {
            var series = group.Select(run => (Label(run), Receivers(run) is { Cdf.Length: > 0 } l
                ? l.Cdf.Select((us, i) => (us, i / 100.0)).ToArray()
                : Array.Empty<(double, double)>())).Where(s => s.Item2.Length > 0).ToList();
            html.Append(LineChart($"{group.Key.Members} members, {group.Key.PayloadBytes} B", "microseconds (log)", "fraction of deliveries", series, logX: true));
        }
        html.Append("</div>");

        html.Append("<h2>Throughput against payload size</h2><div class=\"charts\">");
        foreach (int members in r.Runs.Select(x => x.Members).Distinct().Order())
        {
            var runs = r.Runs.Where(x => x.Members == members).ToList();
            var series = runs.GroupBy(Label).Select(g => (g.Key, g.OrderBy(x => x.PayloadBytes)
                .Select(x => ((double)x.PayloadBytes, MedianReceiverRate(x))).ToArray())).ToList();
            html.Append(LineChart($"{members} members: deliveries per second at a receiver (median)", "payload bytes", "deliveries/s", series));
        }
        html.Append("</div>");

        if (r.ResponseDelay.Count > 0)
        {
            html.Append("<h2>Response delay: K Sends then Flush, against K SafeSends</h2>")
                .Append("<p class=\"note\">The delay before the application may answer an outside user after a burst of K updates (Isis2 paper, Figure 8).</p><div class=\"charts\">");
            foreach (var (members, payload) in r.ResponseDelay.Select(d => (d.Members, d.PayloadBytes)).Distinct().Order())
            {
                var series = r.ResponseDelay.Where(d => d.Members == members && d.PayloadBytes == payload).GroupBy(d => d.Mode)
                    .Select(g => (g.Key, g.OrderBy(d => d.K).Select(d => ((double)d.K, d.Delay.P50)).ToArray())).ToList();
                html.Append(LineChart($"{members} members, {payload} B: p50 response delay", "K (burst size)", "microseconds", series));
            }
            html.Append("</div><table><tr><th>members</th><th>payload B</th><th>K</th><th>mode</th><th>warm-up rounds</th><th>recorded rounds</th><th>cool-down rounds</th><th>p50 us</th><th>p90 us</th><th>p99 us</th><th>max us</th></tr>");
            foreach (ResponseDelaySummary d in r.ResponseDelay)
            {
                html.Append(Inv($"<tr><td>{d.Members}</td><td>{d.PayloadBytes}</td><td>{d.K}</td><td>{E(d.Mode)}</td><td>{d.WarmupRounds}</td><td>{d.Delay.Samples}</td><td>{d.CooldownRounds}</td><td>{d.Delay.P50:F1}</td><td>{d.Delay.P90:F1}</td><td>{d.Delay.P99:F1}</td><td>{d.Delay.Max:F1}</td></tr>"));
            }
            html.Append("</table>");
        }

        html.Append("<h2>Every latency figure</h2><p class=\"note\">samples: recorded rounds (pooled over the receivers in the first row of each primitive); " +
                    "the warm-up and cool-down rounds around them were run and not recorded.</p>")
            .Append("<table><tr><th>primitive</th><th>members</th><th>payload B</th><th>measure</th><th>warm-up rounds</th><th>samples</th><th>cool-down rounds</th><th>p50 us</th><th>p90 us</th><th>p99 us</th><th>p99.9 us</th><th>max us</th></tr>");
        foreach (PrimitiveRun run in r.Runs)
        {
            foreach (LatencySummary l in run.Latency)
            {
                html.Append(Inv($"<tr><td>{E(Label(run))}</td><td>{run.Members}</td><td>{run.PayloadBytes}</td><td>{E(l.Name)}</td><td>{run.LatencyWarmupRounds}</td><td>{l.Samples}</td><td>{run.LatencyCooldownRounds}</td><td>{l.P50:F1}</td><td>{l.P90:F1}</td><td>{l.P99:F1}</td><td>{l.P999:F1}</td><td>{l.Max:F1}</td></tr>"));
            }
        }
        html.Append("</table><h2>Every throughput figure</h2><p class=\"note\">deliveries/s is over the measured window: the deliveries between the warm-up and the cool-down deliveries at that member; " +
                    "the whole blast's rate is given for comparison. The sender's calls per second are over the same middle part of its calls.</p>")
            .Append("<table><tr><th>primitive</th><th>members</th><th>payload B</th><th>member</th><th>warm-up deliveries</th><th>measured deliveries</th><th>cool-down deliveries</th><th>seconds</th><th>deliveries/s</th><th>whole blast /s</th></tr>");
        foreach (PrimitiveRun run in r.Runs)
        {
            foreach (ThroughputResult t in run.Throughput)
            {
                html.Append(Inv($"<tr><td>{E(Label(run))}</td><td>{run.Members}</td><td>{run.PayloadBytes}</td><td>{(t.Member == 0 ? "0 (sender)" : t.Member.ToString(CultureInfo.InvariantCulture))}</td><td>{t.WarmupDeliveries}</td><td>{t.MeasuredDeliveries}</td><td>{t.CooldownDeliveries}</td><td>{t.Seconds:F3}</td><td>{t.DeliveriesPerSecond:F0}</td><td>{t.WholeBlastPerSecond:F0}</td></tr>"));
            }
            html.Append(Inv($"<tr><td>{E(Label(run))}</td><td>{run.Members}</td><td>{run.PayloadBytes}</td><td>sender's calls</td><td>{run.BlastWarmupDeliveries}</td><td>{run.MessagesPerBlast - run.BlastWarmupDeliveries - run.BlastCooldownDeliveries}</td><td>{run.BlastCooldownDeliveries}</td><td></td><td>{run.SenderCallsPerSecond:F0}</td><td>{(run.SenderCompletedPerSecond > 0 ? run.SenderCompletedPerSecond.ToString("F0", CultureInfo.InvariantCulture) + " completed" : "")}</td></tr>"));
        }
        html.Append("</table></body></html>");
        return html.ToString();
    }

    private static string SideBySideSection(SideBySideTable t)
    {
        var html = new StringBuilder($"<h2>Side by side: Isis{(t.Transport == "multicast" ? " (IP multicast)" : "")}, JGroups 2.12 ({(t.Transport == "tcp" ? "TCP" : "UDP")}) and the C floor, interleaved</h2>");
        html.Append(Inv($"<p class=\"note\">{t.Rounds} round(s) of ours, JGroups, the C ping-pong, in that order, 3 members, 100 B; load average {E(t.LoadAverageAtStart)} at start, {E(t.LoadAverageAtEnd)} at end; {t.WallSeconds:F0} s. "))
            .Append("Medians over the rounds, the range in brackets; the ratio is our median over JGroups' (below 1 is faster for latencies, above 1 is faster for rates). ")
            .Append("The plots and tables further down are our last round's.</p>");
        if (t.JGroupsSkipped != null) html.Append($"<p><b>JGroups skipped</b>: {E(t.JGroupsSkipped)}</p>");
        if (t.FloorSkipped != null) html.Append($"<p><b>C floor skipped</b>: {E(t.FloorSkipped)}</p>");
        html.Append("<table><tr><th>measure</th><th>unit</th><th>Isis</th><th>JGroups</th><th>Isis / JGroups</th><th>target</th></tr>");
        foreach (SideBySideRow row in t.Rows)
        {
            html.Append($"<tr><td>{E(row.Measure)}</td><td>{E(row.Unit)}</td><td>{E(SideBySide.Cell(row.OursMedian, row.Ours))}</td><td>{E(SideBySide.Cell(row.TheirsMedian, row.Theirs))}</td>")
                .Append($"<td>{(row.Ratio is double x ? Inv($"{x:F2}") : "-")}</td><td>{E(row.Target)}</td></tr>");
        }
        return html.Append("</table>").ToString();
    }

    private static string Label(PrimitiveRun run) => run.Phi > 0 ? $"{run.Primitive} (phi {run.Phi})" : run.Primitive;

    private static LatencySummary? Receivers(PrimitiveRun run) => run.Latency.FirstOrDefault(l => l.Name == AllReceivers && l.Samples > 0);

    private static double MedianReceiverRate(PrimitiveRun run)
    {
        double[] rates = run.Throughput.Where(t => t.Member != 0).Select(t => t.DeliveriesPerSecond).Order().ToArray();
        return rates.Length == 0 ? 0 : rates[(rates.Length - 1) / 2];
    }

    /// <summary>One series per primitive: x from the run, y from its all-receivers latency.</summary>
    private static List<(string, (double, double)[])> Series(List<PrimitiveRun> runs, Func<PrimitiveRun, double> x, Func<LatencySummary, double> y) =>
        runs.GroupBy(Label).Select(g => (g.Key, g.OrderBy(x)
            .Where(run => Receivers(run) != null).Select(run => (x(run), y(Receivers(run)!))).ToArray())).ToList();

    /// <summary>An SVG line chart with axes, ticks and a legend; points are marked, so one point still shows.</summary>
    private static string LineChart(string title, string xLabel, string yLabel, List<(string Name, (double X, double Y)[] Points)> series, bool logX = false)
    {
        const int W = 520, H = 320, L = 70, R = 150, T = 30, B = 50;
        var all = series.SelectMany(s => s.Points).Where(p => !logX || p.X > 0).ToList();
        var svg = new StringBuilder(Inv($"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\"><title>{E(title)}</title>"));
        svg.Append(Inv($"<text x=\"{W / 2}\" y=\"18\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{E(title)}</text>"));
        if (all.Count == 0)
        {
            svg.Append(Inv($"<text x=\"{W / 2}\" y=\"{H / 2}\" text-anchor=\"middle\" font-size=\"12\">no data in this run</text></svg>"));
            return svg.ToString();
        }
        double Fx(double v) => logX ? Math.Log10(v) : v;
        double x0 = all.Min(p => Fx(p.X)), x1 = all.Max(p => Fx(p.X)), y1 = all.Max(p => p.Y) * 1.08;
        if (x1 - x0 < 1e-9) { x0 -= 1; x1 += 1; }
        if (y1 <= 0) y1 = 1;
        double Px(double v) => L + (Fx(v) - x0) / (x1 - x0) * (W - L - R);
        double Py(double v) => H - B - v / y1 * (H - T - B);
        svg.Append(Inv($"<line x1=\"{L}\" y1=\"{H - B}\" x2=\"{W - R}\" y2=\"{H - B}\" stroke=\"#333\"/><line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{H - B}\" stroke=\"#333\"/>"));
        for (int i = 0; i <= 4; i++)
        {
            double yv = y1 * i / 4, xv = x0 + (x1 - x0) * i / 4;
            double xTick = logX ? Math.Pow(10, xv) : xv;
            svg.Append(Inv($"<line x1=\"{L}\" y1=\"{Py(yv):F1}\" x2=\"{W - R}\" y2=\"{Py(yv):F1}\" stroke=\"#eee\"/>"));
            svg.Append(Inv($"<text x=\"{L - 6}\" y=\"{Py(yv) + 4:F1}\" text-anchor=\"end\" font-size=\"10\">{Short(yv)}</text>"));
            svg.Append(Inv($"<text x=\"{L + (W - L - R) * i / 4.0:F1}\" y=\"{H - B + 15}\" text-anchor=\"middle\" font-size=\"10\">{Short(xTick)}</text>"));
        }
        svg.Append(Inv($"<text x=\"{(L + W - R) / 2}\" y=\"{H - 12}\" text-anchor=\"middle\" font-size=\"11\">{E(xLabel)}</text>"));
        svg.Append(Inv($"<text x=\"14\" y=\"{(T + H - B) / 2}\" text-anchor=\"middle\" font-size=\"11\" transform=\"rotate(-90 14 {(T + H - B) / 2})\">{E(yLabel)}</text>"));
        for (int s = 0; s < series.Count; s++)
        {
            string color = Palette[s % Palette.Length];
            var pts = series[s].Points.Where(p => !logX || p.X > 0).ToArray();
            if (pts.Length > 1) svg.Append($"<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.8\" points=\"{string.Join(' ', pts.Select(p => Inv($"{Px(p.X):F1},{Py(p.Y):F1}")))}\"/>");
            if (pts.Length <= 12)
            {
                foreach (var p in pts) svg.Append(Inv($"<circle cx=\"{Px(p.X):F1}\" cy=\"{Py(p.Y):F1}\" r=\"3\" fill=\"{color}\"><title>{E(series[s].Name)}: {Short(p.X)}, {Short(p.Y)}</title></circle>"));
            }
            svg.Append(Inv($"<rect x=\"{W - R + 10}\" y=\"{T + 16 * s}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{W - R + 25}\" y=\"{T + 9 + 16 * s}\" font-size=\"11\">{E(series[s].Name)}</text>"));
        }
        svg.Append("</svg>");
        return svg.ToString();
    }

}
