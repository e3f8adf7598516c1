using System.Globalization;
using System.Net;
using System.Text;
using Isis.Tools;
using static Isis.Tools.HtmlReportKit;

namespace Isis.ClosedLoop;

/// <summary>
/// The results as one self-contained HTML page (inline SVG, no scripts, nothing fetched), in the
/// manner of tools/Isis.Bench's report: the machine, the commit and the exact command on top; the
/// comparison and the issue's target; each variant against the floor (the HTTP hop alone); response
/// time and throughput against the client count; then every figure of each variant with its sample
/// count, and the checks of what the instances hold.
/// </summary>
internal static class HtmlReport
{
    private static readonly Dictionary<string, string> Colors = new() { [StoreNames.Postgres] = "#1f77b4", [StoreNames.Replicated] = "#d62728", [StoreNames.Floor] = "#7f7f7f" };

    public static string Render(ClosedLoopReport r)
    {
        var html = new StringBuilder();
        BeginPage(html, "Isis for .NET: closed loop against PostgreSQL");
        html.Append("<h1>Isis for .NET: closed loop against PostgreSQL (the Tempest experiment)</h1>");
        html.Append("<table>")
            .Append(r.FactRows())
            .Append(Row("service", E(Inv($"{r.Objects} objects (id -> a number), served over HTTP/1.1 by {r.Instances} instances on 127.0.0.1, each a process of its own; ") +
                                     "GET /objects/{id} reads, PUT /objects/{id}?value=V writes")))
            .Append(Row("clients", E(Inv($"closed loop, in the parent process, spread round-robin over the instances: pick an object by Zipf (s = {r.ZipfExponent}), ") +
                                     Inv($"read it with probability {r.ReadFraction} else write a new value, wait for the answer, think {r.ThinkMs} ms, repeat; ") +
                                     Inv($"one seeded random per client (seed {r.Seed}); one HttpClient (SocketsHttpHandler, a connection per client)"))))
            .Append(Row("phases", E(Inv($"per client count ({string.Join(", ", r.ClientCounts)}), on each variant in turn (every variant's processes run throughout, so all see the machine in the same state): ") +
                                    Inv($"{r.WarmupSeconds} s of warm-up (run, not recorded), then {r.Seconds} s measured; ") +
                                    Inv($"at most {r.RequestCapPerClient} requests per client. Latency samples: the requests that started in the measured window; ") +
                                    "throughput: the requests that ended in it, per second. Failed requests are counted apart and not in the latencies.")))
            .Append("</table>");
        if (r.Quick) html.Append("<p class=\"note\"><b>Quick mode</b>: a smoke test of the harness with two short client counts; its timings are not meaningful.</p>");

        html.Append("<h2>PostgreSQL baseline against replicated collections</h2>");
        if (r.Comparisons.Count == 0)
        {
            html.Append("<p>No client count was measured in both variants, so there is nothing to compare.</p>");
        }
        else
        {
            html.Append("<p>The issue's target: the replicated service's p50 at least 10x lower than the PostgreSQL baseline's at every client count, and its p99 lower too. ")
                .Append(r.TargetMet == true
                    ? "<span class=\"good\">Met at every client count.</span>"
                    : $"<span class=\"bad\">Not met</span> at {Inv($"{r.Comparisons.Count(c => !c.TargetMet)} of {r.Comparisons.Count}")} client counts ({string.Join(", ", r.Comparisons.Where(c => !c.TargetMet).Select(c => c.Clients))}).")
                .Append("</p><p class=\"note\">Ratios are the baseline's figure over the replicated one's (above 1: replicated is faster); the throughput ratio is replicated over baseline. Milliseconds.")
                .Append(r.FloorComparisons.Count > 0 ? " The last column is PostgreSQL's p50 over the floor's (below): the largest p50 ratio that any store behind this HTTP front could reach against PostgreSQL." : "")
                .Append("</p><table><tr><th>clients</th><th>p50 PostgreSQL</th><th>p50 replicated</th><th>p50 ratio</th><th>p99 PostgreSQL</th><th>p99 replicated</th><th>p99 ratio</th>")
                .Append("<th>read p50 ratio</th><th>write p50 ratio</th><th>read p99 ratio</th><th>write p99 ratio</th><th>req/s PostgreSQL</th><th>req/s replicated</th><th>throughput ratio</th><th>target</th>")
                .Append(r.FloorComparisons.Count > 0 ? "<th>p50 ratio the floor allows</th></tr>" : "</tr>");
            foreach (Comparison c in r.Comparisons)
            {
                LoadRun b = Run(r, StoreNames.Postgres, c.Clients)!, p = Run(r, StoreNames.Replicated, c.Clients)!;
                html.Append(Inv($"<tr><td>{c.Clients}</td><td>{Experiment.Ms(b.Overall.P50)}</td><td>{Experiment.Ms(p.Overall.P50)}</td><td>{Experiment.R(c.P50Ratio)}</td>"))
                    .Append(Inv($"<td>{Experiment.Ms(b.Overall.P99)}</td><td>{Experiment.Ms(p.Overall.P99)}</td><td>{Experiment.R(c.P99Ratio)}</td>"))
                    .Append(Inv($"<td>{Experiment.R(c.ReadP50Ratio)}</td><td>{Experiment.R(c.WriteP50Ratio)}</td><td>{Experiment.R(c.ReadP99Ratio)}</td><td>{Experiment.R(c.WriteP99Ratio)}</td>"))
                    .Append(Inv($"<td>{b.Throughput:F0}</td><td>{p.Throughput:F0}</td><td>{Experiment.R(c.ThroughputRatio)}</td>"))
                    .Append(c.TargetMet ? "<td class=\"good\">met</td>" : "<td class=\"bad\">not met</td>");
                if (r.FloorComparisons.Count > 0)
                    html.Append($"<td>{Experiment.R(r.FloorComparisons.FirstOrDefault(f => f.Clients == c.Clients)?.PostgresP50OverFloor)}</td>");
                html.Append("</tr>");
            }
            html.Append("</table>");
        }

        if (r.FloorComparisons.Count > 0)
        {
            html.Append("<h2>Against the floor: the HTTP hop alone</h2>")
                .Append("<p>The floor is <b>not a correct service</b>: each of its three instances keeps the objects in a plain dictionary of its own, ")
                .Append("neither shared nor replicated, so a write at one instance is never seen at the others. It is here only to show what every variant pays ")
                .Append("before its store: the loopback HTTP round trip, Kestrel and ASP.NET routing, and the client, measured back to back with the others at each client count. ")
                .Append("No store behind this HTTP front answers faster, so PostgreSQL's p50 over the floor's is the largest p50 ratio that any store could reach against PostgreSQL here.</p>")
                .Append("<p class=\"note\">Milliseconds; ratios are each variant's figure over the floor's (1: nothing above the HTTP hop).</p>")
                .Append("<table><tr><th>clients</th><th>p50 floor</th><th>p99 floor</th><th>req/s floor</th><th>p50 PostgreSQL / floor</th><th>p50 replicated / floor</th><th>p99 PostgreSQL / floor</th><th>p99 replicated / floor</th></tr>");
            foreach (FloorComparison f in r.FloorComparisons)
            {
                LoadRun floor = Run(r, StoreNames.Floor, f.Clients)!;
                html.Append(Inv($"<tr><td>{f.Clients}</td><td>{Experiment.Ms(floor.Overall.P50)}</td><td>{Experiment.Ms(floor.Overall.P99)}</td><td>{floor.Throughput:F0}</td>"))
                    .Append(Inv($"<td>{Experiment.R(f.PostgresP50OverFloor)}</td><td>{Experiment.R(f.ReplicatedP50OverFloor)}</td><td>{Experiment.R(f.PostgresP99OverFloor)}</td><td>{Experiment.R(f.ReplicatedP99OverFloor)}</td></tr>"));
            }
            html.Append("</table>");
        }

        html.Append("<h2>Response time and throughput against the number of clients</h2><div class=\"charts\">")
            .Append(Chart(r, "p50 response time, all requests", "ms (log)", run => run.Overall.P50 / 1000, logY: true))
            .Append(Chart(r, "p99 response time, all requests", "ms (log)", run => run.Overall.P99 / 1000, logY: true))
            .Append(Chart(r, "p50 response time, writes", "ms (log)", run => run.Writes.P50 / 1000, logY: true))
            .Append(Chart(r, "p50 response time, reads", "ms (log)", run => run.Reads.P50 / 1000, logY: true))
            .Append(Chart(r, "throughput", "completed requests/s", run => run.Throughput, logY: false))
            .Append("</div>");

        foreach (VariantRun v in r.Variants) html.Append(VariantSection(v));
        html.Append("</body></html>");
        return html.ToString();
    }

    private static string VariantSection(VariantRun v)
    {
        string title = v.Store switch
        {
            StoreNames.Postgres => "Three-tier baseline: PostgreSQL",
            StoreNames.Replicated => "Replicated collections",
            _ => "The floor: a local dictionary per instance, not a correct service",
        };
        var html = new StringBuilder($"<h2>{title} ({E(v.Store)})</h2>");
        if (v.Skipped != null) html.Append($"<p><b>Skipped</b>: {E(v.Skipped)}</p>");
        if (v.Failure != null) html.Append($"<p class=\"bad\">Did not complete: {E(v.Failure)}</p>");
        if (v.Setup.Count > 0) html.Append("<ul>").Append(string.Concat(v.Setup.Select(s => $"<li>{E(s)}</li>"))).Append("</ul>");
        if (v.InstanceUrls.Count > 0)
            html.Append(Inv($"<p class=\"note\">Instances {E(string.Join(", ", v.InstanceUrls))}: healthy and populated {v.StartSeconds:F1} s after the first started.</p>"));
        if (v.Runs.Count == 0) return html.ToString();

        html.Append("<h3>Every figure</h3><p class=\"note\">Milliseconds. samples: requests that started in the measured window; completed: requests that ended in it; ")
            .Append("issued: every request, warm-up included; load average: the last minute's, at the start of the client count. Cores: CPU time over the window divided by its length, for the parent (the clients), the three instances together, and PostgreSQL's processes.</p>")
            .Append("<table><tr><th>clients</th><th>load average</th><th>issued</th><th>completed</th><th>req/s</th><th>failed</th><th>phantom reads</th><th>requests</th><th>samples</th>")
            .Append("<th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>mean</th><th>cores: clients</th><th>instances</th><th>PostgreSQL</th></tr>");
        foreach (LoadRun run in v.Runs)
        {
            foreach ((string kind, LatencySummary l) in (ReadOnlySpan<(string, LatencySummary)>)[("all", run.Overall), ("reads", run.Reads), ("writes", run.Writes)])
            {
                bool first = kind == "all";
                html.Append(first
                        ? Inv($"<tr><td>{run.Clients}</td><td>{E(run.LoadAverageAtStart.Split(' ')[0])}</td><td>{run.Issued}</td><td>{run.Completed}</td><td>{run.Throughput:F0}</td><td>{run.Failed}</td><td>{run.PhantomReads}</td>")
                        : "<tr><td></td><td></td><td></td><td></td><td></td><td></td><td></td>")
                    .Append(Inv($"<td>{kind}</td><td>{l.Samples}</td><td>{Experiment.Ms(l.P50)}</td><td>{Experiment.Ms(l.P90)}</td><td>{Experiment.Ms(l.P99)}</td><td>{Experiment.Ms(l.P999)}</td><td>{Experiment.Ms(l.Max)}</td><td>{Experiment.Ms(l.Mean)}</td>"))
                    .Append(first ? Inv($"<td>{run.ParentCores:F2}</td><td>{run.InstanceCores:F2}</td><td>{run.PostgresCores:F2}</td></tr>") : "<td></td><td></td><td></td></tr>");
            }
        }
        html.Append("</table>");
        foreach (LoadRun run in v.Runs.Where(x => x.FailureSamples.Count > 0))
            html.Append(Inv($"<p class=\"bad\">{run.Clients} clients, first failures: {E(string.Join(" | ", run.FailureSamples))}</p>"));

        if (v.Verification is { } check)
        {
            html.Append("<h3>What the instances hold after the load</h3><ul>")
                .Append(Inv($"<li{(check.UnwrittenValues == 0 ? "" : " class=\"bad\"")}>Values held that no client wrote to their object (nor its initial value): {check.UnwrittenValues}, of {check.ObjectsHeld} held over the {v.InstanceUrls.Count} instances.</li>"))
                .Append(!check.CrossInstance
                    ? "<li>The instances are not compared with each other: they share nothing (the floor), so they disagree by design.</li>"
                    : check.InstancesAgree
                    ? Inv($"<li>Every instance returned the same value for each of the {check.ObjectsCompared} objects ({check.AgreedAfterSeconds:F2} s after the clients stopped).</li>")
                    : "<li class=\"bad\">The instances do not agree.</li>")
                .Append(Inv($"<li>Read-your-writes: {check.ReadYourWritesChecks - check.ReadYourWritesFailures} of {check.ReadYourWritesChecks} writes (PUT at one instance) read back at once at that instance (GET).</li>"));
            if (check.CrossInstance)
            {
                html.Append(Inv($"<li>The same writes read at the other instances: {check.OtherInstanceChecks - check.OtherInstanceFailures} of {check.OtherInstanceChecks}") +
                            (v.Store == StoreNames.Replicated ? " (each polled until it merged the write, for at most 10 s).</li>" : " (at once: one database).</li>"));
            }
            foreach (string problem in check.Problems) html.Append($"<li class=\"bad\">{E(problem)}</li>");
            html.Append("</ul><table><tr><th>object</th><th>written at instance</th><th>value</th>")
                .Append(string.Concat(Enumerable.Range(0, check.Samples.FirstOrDefault()?.ReadBack.Length ?? 0).Select(i => Inv($"<th>read at instance {i}</th>")))).Append("</tr>");
            foreach (WriteCheck s in check.Samples)
            {
                html.Append(Inv($"<tr><td>{s.Object}</td><td>{s.Instance}</td><td>{ObjectValues.Format(s.Written)}</td>"))
                    .Append(string.Concat(s.ReadBack.Select(x => $"<td>{(x is double d ? ObjectValues.Format(d) : "-")}</td>"))).Append("</tr>");
            }
            html.Append("</table>");
        }
        return html.ToString();
    }

    private static LoadRun? Run(ClosedLoopReport r, string store, int clients) =>
        r.Variants.FirstOrDefault(v => v.Store == store)?.Runs.FirstOrDefault(x => x.Clients == clients);

    /// <summary>One series per variant against the client count (log 2 axis, a tick at each count measured).</summary>
    private static string Chart(ClosedLoopReport r, string title, string yLabel, Func<LoadRun, double> y, bool logY)
    {
        var series = r.Variants.Where(v => v.Runs.Count > 0)
            .Select(v => (v.Store, Points: v.Runs.Select(run => ((double)run.Clients, y(run))).Where(p => !logY || p.Item2 > 0).ToArray())).ToList();
        return LineChart(title, "clients (log)", yLabel, series, logY);
    }

    private static string LineChart(string title, string xLabel, string yLabel, List<(string Name, (double X, double Y)[] Points)> series, bool logY)
    {
        const int W = 520, H = 320, L = 70, R = 120, T = 30, B = 50;
        var all = series.SelectMany(s => s.Points).ToList();
        var svg = new StringBuilder(Inv($"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\"><title>{E(title)}</title>"));
        svg.Append(Inv($"<text x=\"{W / 2}\" y=\"18\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{E(title)}</text>"));
        if (all.Count == 0)
        {
            svg.Append(Inv($"<text x=\"{W / 2}\" y=\"{H / 2}\" text-anchor=\"middle\" font-size=\"12\">no data in this run</text></svg>"));
            return svg.ToString();
        }
        double Fy(double v) => logY ? Math.Log10(v) : v;
        double x0 = Math.Log2(all.Min(p => p.X)), x1 = Math.Log2(all.Max(p => p.X));
        double y0 = logY ? Math.Floor(all.Min(p => Fy(p.Y))) : 0, y1 = logY ? Math.Ceiling(all.Max(p => Fy(p.Y))) : all.Max(p => p.Y) * 1.08;
        if (x1 - x0 < 1e-9) { x0 -= 1; x1 += 1; }
        if (y1 - y0 < 1e-9) y1 = y0 + 1;
        double Px(double v) => L + (Math.Log2(v) - x0) / (x1 - x0) * (W - L - R);
        double Py(double v) => H - B - (Fy(v) - y0) / (y1 - y0) * (H - T - B);
        svg.Append(Inv($"<line x1=\"{L}\" y1=\"{H - B}\" x2=\"{W - R}\" y2=\"{H - B}\" stroke=\"#333\"/><line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{H - B}\" stroke=\"#333\"/>"));
        // y ticks: each power of ten on a log axis, quarters on a linear one
        IEnumerable<double> yTicks = logY
            ? Enumerable.Range((int)y0, (int)(y1 - y0) + 1).Select(e => Math.Pow(10, e))
            : Enumerable.Range(0, 5).Select(i => y0 + (y1 - y0) * i / 4);
        foreach (double yv in yTicks)
        {
            svg.Append(Inv($"<line x1=\"{L}\" y1=\"{Py(yv):F1}\" x2=\"{W - R}\" y2=\"{Py(yv):F1}\" stroke=\"#eee\"/>"));
            svg.Append(Inv($"<text x=\"{L - 6}\" y=\"{Py(yv) + 4:F1}\" text-anchor=\"end\" font-size=\"10\">{Short(yv)}</text>"));
        }
        foreach (double xv in all.Select(p => p.X).Distinct().Order())
            svg.Append(Inv($"<text x=\"{Px(xv):F1}\" y=\"{H - B + 15}\" text-anchor=\"middle\" font-size=\"10\">{Short(xv)}</text>"));
        svg.Append(Inv($"<text x=\"{(L + W - R) / 2}\" y=\"{H - 12}\" text-anchor=\"middle\" font-size=\"11\">{E(xLabel)}</text>"));
        svg.Append(Inv($"<text x=\"14\" y=\"{(T + H - B) / 2}\" text-anchor=\"middle\" font-size=\"11\" transform=\"rotate(-90 14 {(T + H - B) / 2})\">{E(yLabel)}</text>"));
        for (int s = 0; s < series.Count; s++)
        {
            string color = Colors.GetValueOrDefault(series[s].Name, "#2ca02c");
            var pts = series[s].Points.OrderBy(p => p.X).ToArray();
            if (pts.Length > 1) svg.Append($"<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.8\" points=\"{string.Join(' ', pts.Select(p => Inv($"{Px(p.X):F1},{Py(p.Y):F1}")))}\"/>");
            foreach (var p in pts) svg.Append(Inv($"<circle cx=\"{Px(p.X):F1}\" cy=\"{Py(p.Y):F1}\" r=\"3\" fill=\"{color}\"><title>{E(series[s].Name)}: {Short(p.X)} clients, {Short(p.Y)}</title></circle>"));
            svg.Append(Inv($"<rect x=\"{W - R + 10}\" y=\"{T + 16 * s}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{W - R + 25}\" y=\"{T + 9 + 16 * s}\" font-size=\"11\">{E(series[s].Name)}</text>"));
        }
        return svg.Append("</svg>").ToString();
    }

    private static string Short(double v) => HtmlReportKit.Short(v, "0.###");
}
