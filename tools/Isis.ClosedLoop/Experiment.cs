using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Npgsql;
using Isis.Tools;

namespace Isis.ClosedLoop;

/// <summary>
/// The parent process: for each variant, provides its store (a throwaway PostgreSQL server, or
/// nothing: the replicated instances, and the floor's, hold the objects), starts the three
/// instances, waits until they are healthy and populates the objects; then runs the closed-loop
/// clients at each client count on every variant in turn, checks what the instances hold, and stops
/// everything it started, also on Ctrl-C or a failure (a variant that fails stops; the others go on).
/// </summary>
internal static class Experiment
{
    private static readonly TimeSpan StartLimit = TimeSpan.FromSeconds(60);

    public static async Task<int> RunAsync(ClosedLoopOptions o, string[] args)
    {
        var report = new ClosedLoopReport
        {
            Objects = o.Objects,
            Instances = o.Instances,
            ThinkMs = o.ThinkMs,
            ReadFraction = o.ReadFraction,
            ZipfExponent = o.ZipfExponent,
            WarmupSeconds = o.WarmupSeconds,
            Seconds = o.Seconds,
            ClientCounts = o.Clients,
            RequestCapPerClient = o.RequestCapPerClient,
            Seed = o.Seed,
        };
        report.Begin(RunReport.DotnetRun("tools/Isis.ClosedLoop", args), o.Quick);
        Console.WriteLine(Inv($"Isis.ClosedLoop: {string.Join(" then ", o.Stores)}; {o.Instances} instances, {o.Objects} objects, Zipf s = {o.ZipfExponent}, ") +
                          Inv($"{o.ReadFraction:P0} reads, think {o.ThinkMs} ms; clients {string.Join(',', o.Clients)}, {o.WarmupSeconds} s warm-up + {o.Seconds} s measured each; ") +
                          $"load average {report.LoadAverageAtStart}" + (o.Quick ? " (quick mode: a smoke test, timings not meaningful)" : ""));

        using var cancel = new CancellationTokenSource();
        using var live = new LiveProcesses();
        Console.CancelKeyPress += (_, e) =>
        {
            if (cancel.IsCancellationRequested) return; // a second Ctrl-C ends the process at once (ProcessExit still stops the children)
            e.Cancel = true;
            Console.Error.WriteLine("Isis.ClosedLoop: cancelled; stopping the clients, the instances and PostgreSQL");
            cancel.Cancel();
        };
        AppDomain.CurrentDomain.ProcessExit += (_, _) => live.Dispose();

        using HttpClient http = HttpClientFor(o);
        var zipf = new Zipf(o.Objects, o.ZipfExponent);
        var variants = new List<LiveVariant>();
        try
        {
            // Every variant's processes are up before the first measurement; then each client count runs on
            // every variant back to back, so that all see the machine in the same state (its speed drifts,
            // and other work shares it).
            foreach (string store in o.Stores)
            {
                if (cancel.IsCancellationRequested) break;
                var variant = new LiveVariant(store, live);
                variants.Add(variant);
                report.Variants.Add(variant.Run);
                await variant.Guard(() => StartAsync(variant, o, http, cancel.Token), cancel.Token);
            }
            for (int run = 0; run < o.Clients.Length && !cancel.IsCancellationRequested; run++)
            {
                foreach (LiveVariant variant in variants.Where(v => v.Running))
                    await variant.Guard(() => MeasureAsync(variant, o, run, http, zipf, cancel.Token), cancel.Token);
            }
            foreach (LiveVariant variant in variants.Where(v => v.Running && !cancel.IsCancellationRequested))
                await variant.Guard(() => VerifyAsync(variant, o, http, cancel.Token), cancel.Token);
        }
        finally
        {
            foreach (LiveVariant variant in variants) variant.Dispose();
        }
        Compare(report);
        report.End();
        Print(report);
        if (o.Out != null) RunReport.WriteFile(o.Out, report.ToJson());
        if (o.Html != null) RunReport.WriteFile(o.Html, HtmlReport.Render(report));

        if (cancel.IsCancellationRequested) return 130;
        bool failed = false;
        foreach (VariantRun v in report.Variants)
        {
            if (v.Failure != null) Complain(ref failed, $"{v.Store}: {v.Failure}");
            foreach (LoadRun r in v.Runs.Where(r => r.Failed > 0 || r.PhantomReads > 0))
                Complain(ref failed, Inv($"{v.Store}, {r.Clients} clients: {r.Failed} failed requests, {r.PhantomReads} reads of values never written; first: {string.Join(" | ", r.FailureSamples)}"));
            if (v.Verification is { Passed: false } check)
                Complain(ref failed, $"{v.Store}: the checks after the load failed: " + string.Join("; ", check.Problems));
        }
        return failed ? 1 : 0;
    }

    private static void Complain(ref bool failed, string what)
    {
        failed = true;
        Console.Error.WriteLine("Isis.ClosedLoop: " + what);
    }

    /// <summary>One HttpClient for all clients: enough connections per instance for every client at once, loopback only, no proxy.</summary>
    private static HttpClient HttpClientFor(ClosedLoopOptions o) => new(new SocketsHttpHandler
    {
        MaxConnectionsPerServer = Math.Max(16, o.Clients.Max()),
        UseProxy = false,
        UseCookies = false,
        PooledConnectionIdleTimeout = TimeSpan.FromMinutes(5),
        ConnectTimeout = TimeSpan.FromSeconds(10),
    })
    {
        Timeout = o.RequestTimeout,
    };

    /// <summary>
    /// Provides the variant's store (PostgreSQL: a throwaway server; replicated and floor: nothing, the
    /// instances hold the objects), starts its instances one after the other, waits until all are
    /// healthy, and populates the objects through the first (the floor: through each, since its
    /// instances share nothing).
    /// </summary>
    private static async Task StartAsync(LiveVariant variant, ClosedLoopOptions o, HttpClient http, CancellationToken cancel)
    {
        VariantRun v = variant.Run;
        var started = Stopwatch.StartNew();
        int isisPort = 0;
        if (v.Store == StoreNames.Postgres)
        {
            // Room for every instance's pool, and a few more (the parent reads the settings; psql by hand).
            (PostgresServer? postgres, string? skipped, string? failure) = PostgresServer.Start(o.Instances * o.PgPool + 10);
            if (skipped != null || failure != null)
            {
                (v.Skipped, v.Failure) = (skipped, failure);
                Console.WriteLine($"Isis.ClosedLoop: postgres baseline {(skipped != null ? "skipped: " + skipped : "failed: " + failure)}");
                return;
            }
            variant.Postgres = postgres;
            Console.WriteLine(Inv($"Isis.ClosedLoop: PostgreSQL on 127.0.0.1:{postgres!.Port}, data in {postgres.DataDirectory}"));
            v.Setup.AddRange(await postgres.SettingsAsync());
            v.Setup.Add(Inv($"Npgsql {typeof(NpgsqlDataSource).Assembly.GetName().Version}: a pool of at most {o.PgPool} connections per instance ({o.Instances * o.PgPool} in all), ") +
                        "statements prepared automatically after two uses");
            v.Setup.Add("table objects (id integer PRIMARY KEY, value double precision NOT NULL); read = SELECT value WHERE id = $1; write = UPDATE ... WHERE id = $1, its own autocommit transaction");
        }
        else if (v.Store == StoreNames.Replicated)
        {
            isisPort = LoopbackPorts.Next();
            v.Setup.Add($"one group \"{ServeCommand.GroupName}\" joined by the {o.Instances} instances, each holding a ReplicatedDictionary<int, double> with " +
                        (o.MergeIntervalMs is int ms ? Inv($"MergeOrdering.Ordered and a merge interval of {ms} ms (--merge-interval-ms)") : "the default options (MergeOrdering.Ordered, no merge interval: one merge list in flight, the updates that arrive meanwhile go in the next)"));
            v.Setup.Add(Inv($"AddIsis with zero configuration but the run's own membership service port ({isisPort}; the first instances host the service) and failure detection 100 ms x {o.Suspicion}"));
            v.Setup.Add("read = the local dictionary (pessimistic: the merged history); write = SetAsync then WaitForAsync: answered once merged at the instance that took it");
        }
        else
        {
            v.Setup.Add("NOT a correct service: each instance keeps its own ConcurrentDictionary<int, double>, neither shared nor replicated, so a write at one instance is never seen at the others");
            v.Setup.Add("read = a local dictionary lookup; write = a local dictionary store: what remains is what every variant pays, the loopback HTTP round trip, Kestrel and ASP.NET routing, and the client");
            v.Setup.Add("here only to show the floor: no store behind this HTTP front answers faster, so PostgreSQL's p50 over the floor's is the largest p50 ratio any store could reach against it");
        }

        // One after the other: an instance answers HTTP once its group is joined, so each joins a group the previous ones formed.
        for (int i = 0; i < o.Instances; i++)
        {
            var serve = new ServeOptions
            {
                Store = v.Store,
                Index = i,
                Port = LoopbackPorts.Next(),
                Objects = o.Objects,
                Instances = o.Instances,
                ParentPid = Environment.ProcessId,
                Connection = variant.Postgres?.ConnectionString,
                PgPool = o.PgPool,
                IsisPort = isisPort,
                Suspicion = o.Suspicion,
                MergeIntervalMs = o.MergeIntervalMs,
            };
            ServiceInstance instance = variant.Start(serve);
            await Until(instance, async () =>
            {
                using HttpResponseMessage health = await http.GetAsync(instance.Url + "/health", cancel);
                return health.StatusCode is HttpStatusCode.OK or HttpStatusCode.ServiceUnavailable;
            }, "answers HTTP", cancel);
        }
        foreach (ServiceInstance instance in variant.Instances)
            await Until(instance, async () => await http.GetStringAsync(instance.Url + "/health", cancel) == "Healthy", "is healthy", cancel);

        // The objects and their initial values, through the first instance; then every instance holds them all.
        // The floor's instances share nothing: each is populated itself.
        using (var populate = new CancellationTokenSource(TimeSpan.FromMinutes(2)))
        using (var both = CancellationTokenSource.CreateLinkedTokenSource(populate.Token, cancel))
        {
            foreach (ServiceInstance instance in StoreNames.SharesState(v.Store) ? variant.Instances.Take(1) : variant.Instances)
            {
                using HttpResponseMessage response = await http.PostAsync(instance.Url + "/populate", null, both.Token);
                if (response.StatusCode != HttpStatusCode.NoContent)
                    throw new InvalidOperationException($"POST /populate at instance {instance.Label} answered {(int)response.StatusCode}: {await response.Content.ReadAsStringAsync(cancel)}");
            }
        }
        foreach (ServiceInstance instance in variant.Instances)
        {
            await Until(instance, async () => await http.GetStringAsync(instance.Url + "/count", cancel) == o.Objects.ToString(CultureInfo.InvariantCulture),
                Inv($"holds the {o.Objects} objects"), cancel);
        }
        v.StartSeconds = started.Elapsed.TotalSeconds;
        v.InstanceUrls = [.. variant.Instances.Select(i => i.Url)];
        Console.WriteLine(Inv($"Isis.ClosedLoop: {v.Store}: {o.Instances} instances healthy and populated after {v.StartSeconds:F1} s ({string.Join(", ", v.InstanceUrls)})"));
    }

    /// <summary>One client count on one variant.</summary>
    private static async Task MeasureAsync(LiveVariant variant, ClosedLoopOptions o, int run, HttpClient http, Zipf zipf, CancellationToken cancel)
    {
        PostgresServer? postgres = variant.Postgres;
        (double, double, double) Cpu() => (
            Machine.CpuSeconds(Environment.ProcessId),
            variant.Instances.Sum(i => Machine.CpuSeconds(i.Pid)),
            postgres?.PostmasterPid is int pm and > 0 ? Machine.CpuSeconds(pm) + Machine.Children(pm).Sum(Machine.CpuSeconds) : 0);
        LoadRun r = await LoadGenerator.RunAsync(http, variant.Run.InstanceUrls, o.Clients[run], run + 1, o, zipf, variant.Written, Cpu, cancel);
        cancel.ThrowIfCancellationRequested(); // a window cut short by Ctrl-C is not a measurement (its instances may be gone too: Ctrl-C reaches them as well)
        variant.Run.Runs.Add(r);
        PrintRun(variant.Run.Store, r);
        if (variant.Instances.FirstOrDefault(i => i.HasExited) is { } dead) throw new InvalidOperationException(dead.ExitDescription());
    }

    /// <summary>Polls <paramref name="condition"/> (HTTP errors count as not yet) until it holds; fails at once if the instance exits, or after a minute.</summary>
    private static async Task Until(ServiceInstance instance, Func<Task<bool>> condition, string what, CancellationToken cancel)
    {
        var waited = Stopwatch.StartNew();
        while (true)
        {
            try
            {
                if (await condition()) return;
            }
            catch (HttpRequestException)
            {
                // not listening yet
            }
            catch (TaskCanceledException) when (!cancel.IsCancellationRequested)
            {
                // no answer within the request timeout
            }
            if (instance.HasExited) throw new InvalidOperationException(instance.ExitDescription());
            if (waited.Elapsed > StartLimit) throw new TimeoutException(Inv($"instance {instance.Label} ({instance.Url}) {what}: not within {StartLimit.TotalSeconds:F0} s"));
            await Task.Delay(100, cancel);
        }
    }

    /// <summary>
    /// After the load: every instance must hold every object, each with its initial value or one a
    /// client wrote to it; every instance must hold the same value for every object (replicated: once
    /// the last merges arrived; not checked on the floor, whose instances share nothing); and a write
    /// at an instance must be read back there at once (read-your-writes) and, soon, at the others
    /// (again not on the floor).
    /// </summary>
    private static async Task VerifyAsync(LiveVariant variant, ClosedLoopOptions o, HttpClient http, CancellationToken cancel)
    {
        string store = variant.Run.Store;
        bool shared = StoreNames.SharesState(store);
        List<ServiceInstance> instances = variant.Instances;
        var check = variant.Run.Verification = new Verification { CrossInstance = shared };
        async Task<SortedDictionary<int, double>[]> HeldAsync() =>
            [.. (await Task.WhenAll(instances.Select(i => http.GetFromJsonAsync<SortedDictionary<int, double>>(i.Url + "/objects", cancel))))
                .Select(a => a ?? throw new JsonException("GET /objects returned null"))];

        // What each instance holds on its own: every object, and no value that nobody wrote there.
        SortedDictionary<int, double>[] held = await HeldAsync();
        for (int i = 0; i < held.Length; i++)
        {
            int missing = Enumerable.Range(0, o.Objects).Count(id => !held[i].ContainsKey(id));
            int unwritten = held[i].Count(kv => !variant.Written.CouldBeRead(kv.Key, kv.Value));
            check.ObjectsHeld += held[i].Count;
            check.UnwrittenValues += unwritten;
            if (missing > 0) check.Problems.Add(Inv($"instance {instances[i].Index} lacks {missing} of the {o.Objects} objects"));
            if (unwritten > 0) check.Problems.Add(Inv($"instance {instances[i].Index} holds {unwritten} values that no client wrote to their objects"));
        }

        var waited = Stopwatch.StartNew();
        for (SortedDictionary<int, double>[] all = held; shared; all = await HeldAsync())
        {
            int differing = Enumerable.Range(0, o.Objects).Count(id => all.Any(a => !a.TryGetValue(id, out double x) || !all[0].TryGetValue(id, out double y) || x != y));
            check.ObjectsCompared = all[0].Count;
            if (differing == 0)
            {
                (check.InstancesAgree, check.AgreedAfterSeconds) = (true, waited.Elapsed.TotalSeconds);
                break;
            }
            if (waited.Elapsed > TimeSpan.FromSeconds(15))
            {
                check.Problems.Add(Inv($"{differing} objects still differ between the instances 15 s after the load"));
                break;
            }
            await Task.Delay(100, cancel);
        }

        var random = new Random(o.Seed);
        int[] objects = [.. Enumerable.Range(0, Math.Min(5, o.Objects)).Concat(Enumerable.Range(0, 5).Select(_ => random.Next(o.Objects))).Distinct()];
        int sequence = 0;
        foreach (ServiceInstance writer in instances)
        {
            foreach (int id in objects)
            {
                double value = 9e11 + ++sequence; // above every value the clients write
                var sample = new WriteCheck { Object = id, Instance = writer.Index, Written = value, ReadBack = new double?[instances.Count] };
                using HttpResponseMessage put = await http.PutAsync(Inv($"{writer.Url}/objects/{id}?value={ObjectValues.Format(value)}"), null, cancel);
                if (put.StatusCode != HttpStatusCode.NoContent)
                {
                    check.Problems.Add(Inv($"PUT object {id} at instance {writer.Index} answered {(int)put.StatusCode}"));
                    continue;
                }
                check.ReadYourWritesChecks++;
                sample.ReadBack[writer.Index] = await ReadAsync(http, writer.Url, id, cancel);
                if (sample.ReadBack[writer.Index] != value)
                {
                    check.ReadYourWritesFailures++;
                    check.Problems.Add(Inv($"instance {writer.Index} read {sample.ReadBack[writer.Index]} right after its write of {value} to object {id}"));
                }
                foreach (ServiceInstance other in instances.Where(i => i != writer && shared))
                {
                    // PostgreSQL: at once (one database). Replicated: the other instance merges the update asynchronously.
                    check.OtherInstanceChecks++;
                    var limit = Stopwatch.StartNew();
                    double? seen;
                    while ((seen = await ReadAsync(http, other.Url, id, cancel)) != value && store == StoreNames.Replicated && limit.Elapsed < TimeSpan.FromSeconds(10))
                        await Task.Delay(5, cancel);
                    sample.ReadBack[other.Index] = seen;
                    if (seen != value)
                    {
                        check.OtherInstanceFailures++;
                        check.Problems.Add(Inv($"instance {other.Index} read {seen} for object {id} after instance {writer.Index} wrote {value}"));
                    }
                }
                check.Samples.Add(sample);
                if (check.Samples.Count > 6) check.Samples.RemoveAt(0);
            }
        }
        Console.WriteLine(Inv($"Isis.ClosedLoop: {store}: values nobody wrote held by the instances: {check.UnwrittenValues} (of {check.ObjectsHeld}); ") +
                          (shared
                              ? Inv($"instances agree on all {check.ObjectsCompared} objects: {check.InstancesAgree}; ")
                              : "instances not compared (they share nothing); ") +
                          Inv($"read-your-writes {check.ReadYourWritesChecks - check.ReadYourWritesFailures}/{check.ReadYourWritesChecks}") +
                          (shared ? Inv($", seen at the other instances {check.OtherInstanceChecks - check.OtherInstanceFailures}/{check.OtherInstanceChecks}") : ""));
    }

    private static async Task<double?> ReadAsync(HttpClient http, string url, int id, CancellationToken cancel)
    {
        using HttpResponseMessage r = await http.GetAsync(Inv($"{url}/objects/{id}"), cancel);
        string body = await r.Content.ReadAsStringAsync(cancel);
        return r.StatusCode == HttpStatusCode.OK && double.TryParse(body, NumberStyles.Float, CultureInfo.InvariantCulture, out double v) ? v : null;
    }

    private static double? Ratio(double x, double y) => y > 0 && x > 0 ? x / y : null;

    /// <summary>Baseline over replicated at each client count that both measured; each over the floor where it was measured.</summary>
    private static void Compare(ClosedLoopReport report)
    {
        VariantRun? baseline = report.Variants.FirstOrDefault(v => v.Store == StoreNames.Postgres);
        VariantRun? replicated = report.Variants.FirstOrDefault(v => v.Store == StoreNames.Replicated);
        VariantRun? floor = report.Variants.FirstOrDefault(v => v.Store == StoreNames.Floor);
        foreach (LoadRun f in floor?.Runs ?? [])
        {
            LoadRun? b = baseline?.Runs.FirstOrDefault(x => x.Clients == f.Clients), r = replicated?.Runs.FirstOrDefault(x => x.Clients == f.Clients);
            if (b == null && r == null) continue;
            report.FloorComparisons.Add(new FloorComparison
            {
                Clients = f.Clients,
                PostgresP50OverFloor = b == null ? null : Ratio(b.Overall.P50, f.Overall.P50),
                ReplicatedP50OverFloor = r == null ? null : Ratio(r.Overall.P50, f.Overall.P50),
                PostgresP99OverFloor = b == null ? null : Ratio(b.Overall.P99, f.Overall.P99),
                ReplicatedP99OverFloor = r == null ? null : Ratio(r.Overall.P99, f.Overall.P99),
            });
        }
        if (baseline == null || replicated == null) return;
        foreach (LoadRun b in baseline.Runs)
        {
            if (replicated.Runs.FirstOrDefault(r => r.Clients == b.Clients) is not { } r) continue;
            var c = new Comparison
            {
                Clients = b.Clients,
                P50Ratio = Ratio(b.Overall.P50, r.Overall.P50),
                P99Ratio = Ratio(b.Overall.P99, r.Overall.P99),
                ReadP50Ratio = Ratio(b.Reads.P50, r.Reads.P50),
                WriteP50Ratio = Ratio(b.Writes.P50, r.Writes.P50),
                ReadP99Ratio = Ratio(b.Reads.P99, r.Reads.P99),
                WriteP99Ratio = Ratio(b.Writes.P99, r.Writes.P99),
                ThroughputRatio = Ratio(r.Throughput, b.Throughput),
            };
            c.TargetMet = c.P50Ratio >= 10 && c.P99Ratio > 1;
            report.Comparisons.Add(c);
        }
        report.TargetMet = report.Comparisons.Count > 0 ? report.Comparisons.All(c => c.TargetMet) : null;
    }

    private static void PrintRun(string store, LoadRun r) =>
        Console.WriteLine(Inv($"  {store,-10} {r.Clients,4} clients: {r.Completed,7} completed = {r.Throughput,8:F0}/s; ms p50/p99/max: ") +
                          Inv($"all {Ms(r.Overall.P50)}/{Ms(r.Overall.P99)}/{Ms(r.Overall.Max)}, reads {Ms(r.Reads.P50)}/{Ms(r.Reads.P99)}, writes {Ms(r.Writes.P50)}/{Ms(r.Writes.P99)}; ") +
                          Inv($"failed {r.Failed}; cores: clients {r.ParentCores:F2}, instances {r.InstanceCores:F2}, postgres {r.PostgresCores:F2}; load {r.LoadAverageAtStart}"));

    private static void Print(ClosedLoopReport report)
    {
        Console.WriteLine();
        Console.WriteLine("Response times in ms (all requests of the window; reads and writes), throughput in completed requests per second");
        Console.WriteLine($"  {"store",-10} {"clients",7} {"completed",9} {"req/s",8} {"p50",8} {"p90",8} {"p99",8} {"p99.9",8} {"max",8} {"rd p50",8} {"rd p99",8} {"wr p50",8} {"wr p99",8} {"failed",6}");
        foreach (VariantRun v in report.Variants)
        {
            if (v.Skipped != null) Console.WriteLine($"  {v.Store,-10} skipped: {v.Skipped}");
            foreach (LoadRun r in v.Runs)
            {
                Console.WriteLine(Inv($"  {v.Store,-10} {r.Clients,7} {r.Completed,9} {r.Throughput,8:F0} {Ms(r.Overall.P50),8} {Ms(r.Overall.P90),8} {Ms(r.Overall.P99),8} {Ms(r.Overall.P999),8} {Ms(r.Overall.Max),8} ") +
                                  Inv($"{Ms(r.Reads.P50),8} {Ms(r.Reads.P99),8} {Ms(r.Writes.P50),8} {Ms(r.Writes.P99),8} {r.Failed,6}"));
            }
            if (v.Failure != null) Console.WriteLine($"  {v.Store,-10} FAILED: {v.Failure}");
        }
        if (report.Comparisons.Count > 0)
        {
            Console.WriteLine();
            Console.WriteLine("PostgreSQL baseline over replicated (above 1: replicated is faster); target: p50 ratio >= 10 and p99 ratio > 1 at every client count");
            Console.WriteLine($"  {"clients",7} {"p50",8} {"p99",8} {"rd p50",8} {"wr p50",8} {"thr rep/pg",10}  target");
            foreach (Comparison c in report.Comparisons)
                Console.WriteLine(Inv($"  {c.Clients,7} {R(c.P50Ratio),8} {R(c.P99Ratio),8} {R(c.ReadP50Ratio),8} {R(c.WriteP50Ratio),8} {R(c.ThroughputRatio),10}  {(c.TargetMet ? "met" : "NOT met")}"));
            Console.WriteLine($"  target met at every client count: {(report.TargetMet == true ? "yes" : "no")}");
        }
        if (report.FloorComparisons.Count > 0)
        {
            Console.WriteLine();
            Console.WriteLine("Over the floor (each instance a local dictionary: the HTTP round trip, ASP.NET and the client alone; not a correct service)");
            Console.WriteLine("  pg/floor p50 is the largest p50 ratio against PostgreSQL that any store behind this HTTP front could reach");
            Console.WriteLine($"  {"clients",7} {"pg p50",8} {"rep p50",8} {"pg p99",8} {"rep p99",8}");
            foreach (FloorComparison f in report.FloorComparisons)
                Console.WriteLine(Inv($"  {f.Clients,7} {R(f.PostgresP50OverFloor),8} {R(f.ReplicatedP50OverFloor),8} {R(f.PostgresP99OverFloor),8} {R(f.ReplicatedP99OverFloor),8}"));
        }
        Console.WriteLine(Inv($"wall time {report.WallSeconds:F1} s; load average {report.LoadAverageAtStart} at start, {report.LoadAverageAtEnd} at end"));
    }

    internal static string Ms(double us) => (us / 1000).ToString(us >= 100_000 ? "F0" : us >= 10_000 ? "F1" : "F2", CultureInfo.InvariantCulture);

    internal static string R(double? ratio) => ratio is double x ? x.ToString(x >= 100 ? "F0" : x >= 10 ? "F1" : "F2", CultureInfo.InvariantCulture) : "-";

    private static string Inv(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);
}

/// <summary>One variant while it runs: its report, its server and instances, the values its clients wrote.</summary>
internal sealed class LiveVariant(string store, LiveProcesses live) : IDisposable
{
    public VariantRun Run { get; } = new() { Store = store };

    public PostgresServer? Postgres
    {
        get;
        set
        {
            field = value;
            if (value != null) live.Add(value);
        }
    }

    public List<ServiceInstance> Instances { get; } = [];

    public WrittenValues Written { get; } = new();

    /// <summary>Started and neither skipped nor failed.</summary>
    public bool Running => Run.Skipped == null && Run.Failure == null;

    public ServiceInstance Start(ServeOptions serve)
    {
        var instance = new ServiceInstance(serve);
        Instances.Add(instance);
        live.Add(instance);
        return instance;
    }

    /// <summary>Runs one step of the variant; a failure is recorded in the report and stops the variant (the others go on).</summary>
    public async Task Guard(Func<Task> step, CancellationToken cancel)
    {
        try
        {
            await step();
        }
        catch (OperationCanceledException) when (cancel.IsCancellationRequested)
        {
            Run.Failure = "cancelled (Ctrl-C)";
        }
        catch (Exception e) when (e is TimeoutException or HttpRequestException or InvalidOperationException or NpgsqlException or JsonException or TaskCanceledException)
        {
            Run.Failure = e.Message;
            Console.Error.WriteLine($"Isis.ClosedLoop: {Run.Store}: {e.Message}; stopping this variant");
        }
        if (!Running) Dispose();
    }

    public void Dispose()
    {
        foreach (ServiceInstance instance in Instances)
        {
            instance.Dispose();
            live.Remove(instance);
        }
        Instances.Clear();
        if (Postgres is { } postgres)
        {
            postgres.Dispose();
            live.Remove(postgres);
        }
    }
}

/// <summary>What this process started and must stop: on the normal path, on a failure, on Ctrl-C and at process exit.</summary>
internal sealed class LiveProcesses : IDisposable
{
    private readonly List<IDisposable> _live = [];

    public void Add(IDisposable d)
    {
        lock (_live) _live.Add(d);
    }

    public void Remove(IDisposable d)
    {
        lock (_live) _live.Remove(d);
    }

    public void Dispose()
    {
        IDisposable[] all;
        lock (_live)
        {
            all = [.. _live];
            _live.Clear();
        }
        // Instances before the server they use.
        foreach (IDisposable d in Enumerable.Reverse(all)) d.Dispose();
    }
}
