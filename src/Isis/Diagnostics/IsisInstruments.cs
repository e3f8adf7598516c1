using System.Diagnostics;
using System.Diagnostics.Metrics;

namespace Isis.Diagnostics;

/// <summary>
/// A runtime's metrics (meter "Isis", OpenTelemetry-style names and units) and its activity source
/// ("Isis"). Counters are observed from the runtime's own counts when a listener collects them, so
/// the message path pays nothing for them; the latency histograms and activities cost nothing
/// while no listener is enabled.
/// </summary>
internal sealed class IsisInstruments : IDisposable
{
    public const string Name = "Isis";

    private readonly Meter _meter;

    public IsisInstruments(IMeterFactory? meterFactory, IsisRuntime runtime)
    {
        _meter = meterFactory?.Create(new MeterOptions(Name)) ?? new Meter(Name);
        Activities = new ActivitySource(Name);
        _meter.CreateObservableCounter("isis.messages.sent", () => runtime.MessagesSent, "{message}",
            "Messages this process multicast (Send, OrderedSend, SafeSend and query requests) and handed to the protocol.");
        _meter.CreateObservableCounter("isis.messages.delivered", () => runtime.MessagesDelivered, "{message}",
            "Messages delivered to this process's groups, its own included.");
        _meter.CreateObservableCounter("isis.messages.undeliverable", () => runtime.GetCountsForMetrics().Mismatches, "{message}",
            "Messages that matched no handler (reported, not delivered).");
        _meter.CreateObservableCounter("isis.handler.exceptions", () => runtime.GetCountsForMetrics().HandlerExceptions, "{exception}",
            "Exceptions thrown by the application's handlers.");
        _meter.CreateObservableCounter("isis.packets.dropped", runtime.DropsForMetrics, "{packet}",
            "Packets dropped, by reason (isis.drop.reason): malformed, firewall, wrong_view, unknown_group, duplicate.");
        _meter.CreateObservableCounter("isis.views.installed", () => runtime.ViewsInstalled, "{view}",
            "Views installed by this process's groups (joins, leaves and failures).");
        _meter.CreateObservableUpDownCounter("isis.messages.unstable", () => runtime.UnstableMessages, "{message}",
            "Messages this process sent that not every member holds yet (flow control stops senders at MaxUnstableMessages).");
        FlushDuration = _meter.CreateHistogram<double>("isis.flush.duration", "s", "Time from a Flush call until earlier messages are stable everywhere.");
        SafeSendDuration = _meter.CreateHistogram<double>("isis.safesend.duration", "s", "Time from a SafeSend call until it is delivered at the sender (durable).");
        QueryDuration = _meter.CreateHistogram<double>("isis.query.duration", "s", "Time from a query call until its replies are in.");
    }

    public ActivitySource Activities { get; }

    public Histogram<double> FlushDuration { get; }

    public Histogram<double> SafeSendDuration { get; }

    public Histogram<double> QueryDuration { get; }

    /// <summary>Records how long <paramref name="task"/> takes, in seconds, tagged with the group, only while a listener is enabled.</summary>
    public static void Time(Histogram<double> histogram, Task task, string group)
    {
        if (!histogram.Enabled) return;
        long start = Stopwatch.GetTimestamp();
        task.ContinueWith(t =>
        {
            if (t.IsCompletedSuccessfully)
                histogram.Record(Stopwatch.GetElapsedTime(start).TotalSeconds, new KeyValuePair<string, object?>("isis.group", group));
        }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
    }

    public void Dispose()
    {
        _meter.Dispose();
        Activities.Dispose();
    }
}
