using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using Isis.Tools;

namespace Isis.ClosedLoop;

/// <summary>
/// Object choice by Zipf's law over ids 0..N-1: id k (the rank) has probability proportional to
/// 1 / (k + 1)^s. With s = 1 and N = 1,024 the hottest object takes 13 % of the requests and the
/// ten hottest 39 %.
/// </summary>
internal sealed class Zipf
{
    private readonly double[] _cdf;

    public Zipf(int n, double exponent)
    {
        _cdf = new double[n];
        double sum = 0;
        for (int k = 0; k < n; k++) _cdf[k] = sum += 1.0 / Math.Pow(k + 1, exponent);
        for (int k = 0; k < n; k++) _cdf[k] /= sum;
        _cdf[n - 1] = 1.0;
    }

    public int Next(Random random)
    {
        int i = Array.BinarySearch(_cdf, random.NextDouble());
        return Math.Min(i >= 0 ? i : ~i, _cdf.Length - 1);
    }

    public double Probability(int id) => id == 0 ? _cdf[0] : _cdf[id] - _cdf[id - 1];
}

/// <summary>
/// Every value a client wrote to each object in one variant (registered before the PUT is sent), so
/// that a read can be checked: it must return the object's initial value or one of these. Write
/// values are unique: run × 10^10 + (client + 1) × 10^6 + request number (below 10^6 by the
/// request cap; clients below 10^4; the checks after the load write 9 × 10^11 and more).
/// </summary>
internal sealed class WrittenValues
{
    private readonly ConcurrentDictionary<(int Id, double Value), byte> _written = new();

    public void Add(int id, double value) => _written.TryAdd((id, value), 0);

    public bool CouldBeRead(int id, double value) => value == ObjectValues.InitialValue(id) || _written.ContainsKey((id, value));

    public static double Value(int run, int client, int request) => run * 1e10 + (client + 1) * 1e6 + request;
}

/// <summary>
/// The closed-loop clients of one client count: each picks an object (Zipf), reads it (GET) or
/// writes it (PUT a new value) with the configured odds, measures the response time, thinks, and
/// repeats, against the instance given to it round-robin. Clients start spread over one think time
/// (so that 512 of them do not fire in lockstep) and stop issuing at the end of the window; each
/// loop is bounded by the window and by a request cap.
/// </summary>
/// <remarks>
/// Latency samples are the requests that started inside the measured window (every one of them
/// completes: the loop waits for it); throughput counts the requests that ended inside the window.
/// Requests of the warm-up are issued and checked, not recorded.
/// </remarks>
internal static class LoadGenerator
{
    private const int MaxFailureSamples = 5;

    private sealed class ClientState
    {
        public readonly List<long> Reads = [];
        public readonly List<long> Writes = [];
        public long Issued, Completed, Failed, Phantom;
    }

    public static async Task<LoadRun> RunAsync(HttpClient http, IReadOnlyList<string> urls, int clients, int runIndex, ClosedLoopOptions o,
        Zipf zipf, WrittenValues written, Func<(double Parent, double Instances, double Postgres)> cpu, CancellationToken cancel)
    {
        var run = new LoadRun { Clients = clients, WarmupSeconds = o.WarmupSeconds, Seconds = o.Seconds, LoadAverageAtStart = MachineFacts.LoadAverage() };
        var failures = new ConcurrentQueue<string>();
        long t0 = Stopwatch.GetTimestamp();
        long windowStart = t0 + (long)(o.WarmupSeconds * Stopwatch.Frequency);
        long windowEnd = windowStart + (long)(o.Seconds * Stopwatch.Frequency);
        int cap = o.RequestCapPerClient;
        var states = new ClientState[clients];

        async Task Client(int c)
        {
            var state = states[c] = new ClientState();
            var random = new Random(unchecked(o.Seed * 1_000_003 + clients * 10_007 + c));
            string baseUrl = urls[c % urls.Count];
            if (!await Think(random.Next(o.ThinkMs + 1), cancel)) return;
            for (int request = 1; request <= cap; request++)
            {
                long start = Stopwatch.GetTimestamp();
                if (start >= windowEnd || cancel.IsCancellationRequested) break;
                int id = zipf.Next(random);
                bool read = random.NextDouble() < o.ReadFraction;
                string? failure = null;
                bool phantom = false;
                try
                {
                    if (read)
                    {
                        using HttpResponseMessage response = await http.GetAsync(Inv($"{baseUrl}/objects/{id}"), cancel);
                        string body = await response.Content.ReadAsStringAsync(cancel);
                        if (response.StatusCode != HttpStatusCode.OK) failure = Inv($"GET object {id}: {(int)response.StatusCode} {body}");
                        else if (!double.TryParse(body, NumberStyles.Float, CultureInfo.InvariantCulture, out double value)) failure = $"GET object {id}: not a number: {body}";
                        else if (!written.CouldBeRead(id, value)) (phantom, failure) = (true, Inv($"GET object {id} returned {value}, which no client wrote there"));
                    }
                    else
                    {
                        double value = WrittenValues.Value(runIndex, c, request);
                        written.Add(id, value);
                        using HttpResponseMessage response = await http.PutAsync(Inv($"{baseUrl}/objects/{id}?value={ObjectValues.Format(value)}"), null, cancel);
                        if (response.StatusCode != HttpStatusCode.NoContent)
                            failure = Inv($"PUT object {id}: {(int)response.StatusCode} {await response.Content.ReadAsStringAsync(cancel)}");
                    }
                }
                catch (HttpRequestException e)
                {
                    failure = $"{(read ? "GET" : "PUT")} object {id}: {e.Message}";
                }
                catch (TaskCanceledException) when (!cancel.IsCancellationRequested)
                {
                    failure = Inv($"{(read ? "GET" : "PUT")} object {id}: no answer within {o.RequestTimeout.TotalSeconds:F0} s");
                }
                catch (OperationCanceledException)
                {
                    break; // Ctrl-C
                }
                long end = Stopwatch.GetTimestamp();
                state.Issued++;
                if (phantom) state.Phantom++;
                if (failure != null && failures.Count < MaxFailureSamples) failures.Enqueue(failure);
                if (failure != null && !phantom)
                {
                    state.Failed++;
                }
                else
                {
                    if (start >= windowStart) (read ? state.Reads : state.Writes).Add(end - start);
                    if (end >= windowStart && end < windowEnd) state.Completed++;
                }
                if (!await Think(o.ThinkMs, cancel)) break;
            }
        }

        // CPU time of the processes over exactly the measured window.
        async Task<(double, double, double)> CpuOverWindow()
        {
            await Task.Delay(Remaining(windowStart), cancel);
            var a = cpu();
            await Task.Delay(Remaining(windowEnd), cancel);
            var b = cpu();
            return ((b.Parent - a.Parent) / o.Seconds, (b.Instances - a.Instances) / o.Seconds, (b.Postgres - a.Postgres) / o.Seconds);
        }

        Task<(double, double, double)> cores = CpuOverWindow();
        Task all = Task.WhenAll(Enumerable.Range(0, clients).Select(c => Task.Run(() => Client(c), CancellationToken.None)));
        // The loops end by themselves (window, cap, request timeout); this bound only guards against a bug.
        await all.WaitAsync(TimeSpan.FromSeconds(o.WarmupSeconds + o.Seconds) + o.RequestTimeout + TimeSpan.FromSeconds(30), CancellationToken.None);
        try
        {
            (run.ParentCores, run.InstanceCores, run.PostgresCores) = await cores;
        }
        catch (OperationCanceledException)
        {
            // Ctrl-C: no CPU figures
        }

        run.Issued = states.Sum(s => s.Issued);
        run.Completed = states.Sum(s => s.Completed);
        run.Failed = states.Sum(s => s.Failed);
        run.PhantomReads = states.Sum(s => s.Phantom);
        run.Throughput = run.Completed / o.Seconds;
        run.Reads = LatencySummary.Of(states.SelectMany(s => s.Reads));
        run.Writes = LatencySummary.Of(states.SelectMany(s => s.Writes));
        run.Overall = LatencySummary.Of(states.SelectMany(s => s.Reads.Concat(s.Writes)));
        run.FailureSamples = [.. failures];
        return run;
    }

    private static TimeSpan Remaining(long until) => TimeSpan.FromSeconds(Math.Max(0, (until - Stopwatch.GetTimestamp()) / (double)Stopwatch.Frequency));

    /// <summary>Waits <paramref name="ms"/>; false if the run was cancelled meanwhile.</summary>
    private static async Task<bool> Think(int ms, CancellationToken cancel)
    {
        try
        {
            if (ms > 0) await Task.Delay(ms, cancel);
            return !cancel.IsCancellationRequested;
        }
        catch (OperationCanceledException)
        {
            return false;
        }
    }

    private static string Inv(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);
}
