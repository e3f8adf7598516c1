using System.Globalization;
using System.Net;
using System.Text;

namespace Isis.Tools;

/// <summary>What the tools' HTML reports share: the page's head and style, a facts row, escaping, invariant formatting and short numbers.</summary>
internal static class HtmlReportKit
{
    /// <summary>Opens a page titled <paramref name="title"/> with the reports' style (and <paramref name="extraStyle"/>, CSS rules of the caller's own), up to the body.</summary>
    public static StringBuilder BeginPage(StringBuilder html, string title, string maxWidth = "90em", string extraStyle = "") =>
        html.Append("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>").Append(E(title)).Append("</title><style>")
            .Append("body{font-family:system-ui,sans-serif;margin:2em;max-width:").Append(maxWidth).Append(";color:#222}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}h3{font-size:1.05em}")
            .Append("table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f4f4f4}")
            .Append("td:first-child,th:first-child{text-align:left}code{background:#f4f4f4;padding:0 .2em}.charts{display:flex;flex-wrap:wrap;gap:1em}")
            .Append(".note{color:#555;font-size:.9em}.bad{color:#b00;font-weight:bold}.good{color:#070;font-weight:bold}")
            .Append(extraStyle).Append("</style></head><body>");

    /// <summary>A row of a facts table: the name as its header, the value (already HTML) left-aligned.</summary>
    public static string Row(string name, string valueHtml) => $"<tr><th>{E(name)}</th><td style=\"text-align:left\">{valueHtml}</td></tr>";

    /// <summary>HTML-escapes <paramref name="s"/>.</summary>
    public static string E(string s) => WebUtility.HtmlEncode(s);

    /// <summary>Formats with the invariant culture (a report reads the same on every machine).</summary>
    public static string Inv(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);

    /// <summary>A number for a chart's labels: 1.2M, 15k, 350, 0.25 (<paramref name="smallFormat"/> below 100).</summary>
    public static string Short(double v, string smallFormat = "0.##") =>
        Math.Abs(v) >= 1e6 ? (v / 1e6).ToString("0.##", CultureInfo.InvariantCulture) + "M"
        : Math.Abs(v) >= 1e4 ? (v / 1e3).ToString("0.#", CultureInfo.InvariantCulture) + "k"
        : Math.Abs(v) >= 100 ? v.ToString("0", CultureInfo.InvariantCulture)
        : v.ToString(smallFormat, CultureInfo.InvariantCulture);
}
