using System.Collections.Concurrent;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Net;
using System.Net.Sockets;
using Microsoft.Extensions.DependencyInjection;

namespace Isis.Tests.Runtime;

/// <summary>The activity listener below sees every runtime of the test process: run alone.</summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class InstrumentsCollection
{
    public const string Name = "Instruments";
}

/// <summary>
/// The runtime's metrics (meter "Isis", created with the application's IMeterFactory) and
/// activities (source "Isis"), read the way OpenTelemetry reads them: a MeterListener and an
/// ActivityListener.
/// </summary>
[Collection(InstrumentsCollection.Name)]
public sealed class InstrumentsTests
{
    private const int Update = 1, Lookup = 2;

    [Fact]
    public async Task Counters_drops_by_reason_and_latency_histograms_describe_what_the_runtime_did()
    {
        using ServiceProvider provider = new ServiceCollection().AddMetrics().BuildServiceProvider();
        IMeterFactory factory = provider.GetRequiredService<IMeterFactory>();
        var longs = new ConcurrentDictionary<(string Name, string? Reason), long>();
        var histograms = new ConcurrentDictionary<string, ConcurrentBag<double>>();
        using var listener = new MeterListener();
        listener.InstrumentPublished = (instrument, l) =>
        {
            if (instrument.Meter.Name == "Isis" && instrument.Meter.Scope == factory) l.EnableMeasurementEvents(instrument);
        };
        listener.SetMeasurementEventCallback<long>((instrument, value, tags, _) =>
        {
            string? reason = null;
            foreach (var t in tags) if (t.Key == "isis.drop.reason") reason = (string?)t.Value;
            longs[(instrument.Name, reason)] = value; // observable counters report their running total
        });
        listener.SetMeasurementEventCallback<double>((instrument, value, _, _) => histograms.GetOrAdd(instrument.Name, _ => new()).Add(value));
        listener.Start();

        using var runtimes = new TestRuntimes();
        IsisRuntime measured = runtimes.Start(o => o.MeterFactory = factory);
        IsisRuntime other = runtimes.Start();
        var groups = new[] { measured, other }.Select(r =>
        {
            var g = new Group(r, "metered");
            g.Handlers[Update] += (Action<int>)(_ => { });
            g.Handlers[Lookup] += (Action)(() => g.Reply(1));
            g.Join();
            return g;
        }).ToArray();
        TestRuntimes.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 2), "two members");

        for (int i = 0; i < 10; i++) groups[0].Send(Update, i);
        await groups[0].SafeSendAsync(Update, 99);
        await groups[0].FlushAsync();
        await groups[0].QueryAsync<int>(Group.ALL, Lookup);
        groups[1].Send(Update, "not an int"); // undeliverable everywhere
        using (var attacker = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp))
        {
            for (int i = 0; i < 20; i++) attacker.SendTo(new byte[] { 1, 2, 3, (byte)i }, IPEndPoint.Parse(measured.Address!.Endpoint));
        }

        TestRuntimes.WaitUntil(() =>
        {
            listener.RecordObservableInstruments();
            return longs.GetValueOrDefault(("isis.messages.undeliverable", null)) >= 1 && longs.GetValueOrDefault(("isis.packets.dropped", "malformed")) >= 20;
        }, "the runtime counts the mismatch and the junk");
        Assert.True(longs[("isis.messages.sent", null)] >= 12, $"sent: {longs[("isis.messages.sent", null)]}"); // 10 Sends, a SafeSend, a query request
        Assert.True(longs[("isis.messages.delivered", null)] >= 12);
        Assert.True(longs[("isis.views.installed", null)] >= 1);
        Assert.Contains(("isis.packets.dropped", "firewall"), longs.Keys);
        Assert.Contains(("isis.messages.unstable", null), longs.Keys);
        foreach (string h in (string[])["isis.flush.duration", "isis.safesend.duration", "isis.query.duration"])
        {
            Assert.True(histograms.TryGetValue(h, out var values) && values.Count >= 1 && values.All(v => v > 0 && v < 60), $"{h}: {string.Join(", ", histograms.GetValueOrDefault(h) ?? [])}");
        }
    }

    [Fact]
    public async Task Send_SafeSend_query_and_view_changes_are_activities_of_the_Isis_source()
    {
        var activities = new ConcurrentQueue<Activity>();
        using var listener = new ActivityListener
        {
            ShouldListenTo = s => s.Name == "Isis",
            Sample = (ref ActivityCreationOptions<ActivityContext> _) => ActivitySamplingResult.AllDataAndRecorded,
            ActivityStopped = activities.Enqueue,
        };
        ActivitySource.AddActivityListener(listener);

        using var runtimes = new TestRuntimes();
        var g = new Group(runtimes.Start(), "traced");
        g.Handlers[Update] += (Action<int>)(_ => { });
        g.Handlers[Lookup] += (Action)(() => g.Reply(1));
        g.Join();
        g.Send(Update, 1);
        g.OrderedSend(Update, 2);
        await g.SafeSendAsync(Update, 3);
        await g.QueryAsync<int>(Group.ALL, Lookup);

        string[] ours = activities.Where(a => (string?)a.GetTagItem("isis.group") == "traced").Select(a => a.OperationName).ToArray();
        Assert.Contains("isis.send", ours);
        Assert.Contains("isis.ordered_send", ours);
        Assert.Contains("isis.safesend", ours);
        Assert.Contains("isis.query", ours);
        Assert.Contains("isis.view_change", ours);
    }
}
