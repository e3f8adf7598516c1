using System.Globalization;

namespace Isis.ClosedLoop;

/// <summary>The parent's command-line settings: which variants, how many clients, for how long.</summary>
internal sealed record ClosedLoopOptions
{
    public const string Usage = """
        Isis.ClosedLoop: the Tempest closed-loop experiment. A service of N objects served over HTTP by three
        instances on this machine (127.0.0.1), as a three-tier baseline on PostgreSQL and on a replicated
        collection; closed-loop clients (Zipf object choice, 50 % reads, think time) measure response times.
        A third variant, floor, keeps the objects in a plain dictionary in each instance (not shared: not a
        correct service): what the HTTP hop, ASP.NET and the clients cost every variant.
          dotnet run -c Release --project tools/Isis.ClosedLoop -- [options]
        options:
          --store postgres,replicated,floor  the variants to run, interleaved in this order (default all three)
          --clients 1,2,4,...           client counts (default 1,2,4,16,32,64,128,256,512)
          --seconds S                   measured seconds per client count (default 15)
          --warmup-seconds S            load before each measurement, not recorded (default 5)
          --think-ms MS                 each client's think time between requests (default 20)
          --objects N                   objects in the service (default 1024)
          --read-fraction F             share of reads (default 0.5)
          --zipf S                      Zipf exponent of the object choice (default 1)
          --pg-pool N                   Npgsql connection pool per instance (Max Pool Size, default 16)
          --max-requests N              cap per client per client count (default: what the think time allows, plus one)
          --seed N                      seed of the clients' random choices (default 1)
          --suspicion K                 silent 100 ms heartbeats before an instance is expelled (replicated; default 30)
          --merge-interval-ms MS        the replicated dictionary's MergeInterval, a wait before each merge list
                                        (default: the library's, 0: one list in flight, the updates that arrive
                                        meanwhile go in the next, sent when it comes back)
          --quick                       smoke test: 2 and 16 clients, 2 s each after 1 s of warm-up
          --out FILE.json               the results as JSON
          --html FILE.html              the self-contained HTML report
        """;

    public string[] Stores { get; init; } = [.. StoreNames.All];
    public int[] Clients { get; init; } = [1, 2, 4, 16, 32, 64, 128, 256, 512];
    public double Seconds { get; init; } = 15;
    public double WarmupSeconds { get; init; } = 5;
    public int ThinkMs { get; init; } = 20;
    public int Objects { get; init; } = 1024;
    public int Instances { get; init; } = 3;
    public double ReadFraction { get; init; } = 0.5;
    public double ZipfExponent { get; init; } = 1.0;
    public int PgPool { get; init; } = 16;
    public int? MaxRequests { get; init; }
    public int Seed { get; init; } = 1;
    public int Suspicion { get; init; } = 30;
    /// <summary>The replicated dictionary's merge interval; null for the library's default.</summary>
    public int? MergeIntervalMs { get; init; }
    public bool Quick { get; init; }
    public string? Out { get; init; }
    public string? Html { get; init; }

    /// <summary>Every HTTP request's limit: a request that takes longer counts as failed.</summary>
    public TimeSpan RequestTimeout => TimeSpan.FromSeconds(30);

    /// <summary>
    /// Requests one client may issue at one client count: each iteration thinks <see cref="ThinkMs"/>,
    /// so the think time alone bounds the loop; the cap is a second bound that holds without it.
    /// Write values encode the request number below a million (<see cref="LoadGenerator"/>).
    /// </summary>
    public int RequestCapPerClient => Math.Min(999_999, MaxRequests
        ?? (ThinkMs > 0 ? (int)Math.Ceiling((WarmupSeconds + Seconds) * 1000 / ThinkMs) + 1 : 100_000));

    public static ClosedLoopOptions Parse(string[] args)
    {
        var o = new ClosedLoopOptions();
        var given = new HashSet<string>();
        for (int i = 0; i < args.Length; i++)
        {
            string name = args[i];
            if (name == "--quick")
            {
                o = o with { Quick = true };
                continue;
            }
            if (i + 1 >= args.Length) throw new ArgumentException($"{name} needs a value");
            string value = args[++i];
            given.Add(name);
            o = name switch
            {
                "--store" => o with { Stores = Stores_(value) },
                "--clients" => o with { Clients = value.Split(',').Select(v => Int(name, v, 1)).ToArray() },
                "--seconds" => o with { Seconds = Double(name, value, 0.1) },
                "--warmup-seconds" => o with { WarmupSeconds = Double(name, value, 0) },
                "--think-ms" => o with { ThinkMs = Int(name, value, 0) },
                "--objects" => o with { Objects = Int(name, value, 1) },
                "--read-fraction" => o with { ReadFraction = Fraction(name, value) },
                "--zipf" => o with { ZipfExponent = Double(name, value, 0) },
                "--pg-pool" => o with { PgPool = Int(name, value, 1) },
                "--max-requests" => o with { MaxRequests = Int(name, value, 1) },
                "--seed" => o with { Seed = Int(name, value, 0) },
                "--suspicion" => o with { Suspicion = Int(name, value, 2) },
                "--merge-interval-ms" => o with { MergeIntervalMs = Int(name, value, 0) },
                "--out" => o with { Out = value },
                "--html" => o with { Html = value },
                _ => throw new ArgumentException($"unknown option {name}"),
            };
        }
        if (o.Quick)
        {
            if (!given.Contains("--clients")) o = o with { Clients = [2, 16] };
            if (!given.Contains("--seconds")) o = o with { Seconds = 2 };
            if (!given.Contains("--warmup-seconds")) o = o with { WarmupSeconds = 1 };
        }
        if (o.Objects > 1_000_000) throw new ArgumentException("--objects: at most 1,000,000");
        if (o.Clients.Max() >= 10_000) throw new ArgumentException("--clients: fewer than 10,000 per count");
        if (o.Clients.Length > 50) throw new ArgumentException("--clients: at most 50 client counts");
        return o;
    }

    private static string[] Stores_(string value)
    {
        string[] stores = value.Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries);
        foreach (string s in stores)
        {
            if (!StoreNames.All.Contains(s)) throw new ArgumentException($"--store: '{s}' is none of {string.Join(", ", StoreNames.All)}");
        }
        if (stores.Distinct().Count() != stores.Length) throw new ArgumentException("--store: each variant at most once");
        return stores.Length > 0 ? stores : throw new ArgumentException($"--store: name at least one of {string.Join(", ", StoreNames.All)}");
    }

    internal static int Int(string name, string value, int min) =>
        int.TryParse(value, NumberStyles.Integer, CultureInfo.InvariantCulture, out int v) && v >= min
            ? v
            : throw new ArgumentException($"{name}: '{value}' is not an integer of at least {min}");

    private static double Double(string name, string value, double min) =>
        double.TryParse(value, NumberStyles.Float, CultureInfo.InvariantCulture, out double v) && v >= min
            ? v
            : throw new ArgumentException($"{name}: '{value}' is not a number of at least {min}");

    private static double Fraction(string name, string value) =>
        double.TryParse(value, NumberStyles.Float, CultureInfo.InvariantCulture, out double v) && v is >= 0 and <= 1
            ? v
            : throw new ArgumentException($"{name}: '{value}' is not a fraction between 0 and 1");
}

/// <summary>One instance's settings (the <c>serve</c> command the parent starts).</summary>
internal sealed record ServeOptions
{
    public string Store { get; init; } = "";
    public int Index { get; init; }
    public int Port { get; init; }
    public int Objects { get; init; } = 1024;
    public int Instances { get; init; } = 3;
    public int ParentPid { get; init; }

    /// <summary>PostgreSQL: the Npgsql connection string and the pool's size.</summary>
    public string? Connection { get; init; }
    public int PgPool { get; init; } = 16;

    /// <summary>Replicated: the run's private membership service port, and the failure detection.</summary>
    public int IsisPort { get; init; }
    public int Suspicion { get; init; } = 30;
    public int? MergeIntervalMs { get; init; }

    public static ServeOptions Parse(ReadOnlySpan<string> args)
    {
        var o = new ServeOptions();
        for (int i = 0; i + 1 < args.Length; i += 2)
        {
            string name = args[i], value = args[i + 1];
            o = name switch
            {
                "--store" => o with { Store = value },
                "--index" => o with { Index = ClosedLoopOptions.Int(name, value, 0) },
                "--port" => o with { Port = ClosedLoopOptions.Int(name, value, 1) },
                "--objects" => o with { Objects = ClosedLoopOptions.Int(name, value, 1) },
                "--instances" => o with { Instances = ClosedLoopOptions.Int(name, value, 1) },
                "--parent-pid" => o with { ParentPid = ClosedLoopOptions.Int(name, value, 0) },
                "--connection" => o with { Connection = value },
                "--pg-pool" => o with { PgPool = ClosedLoopOptions.Int(name, value, 1) },
                "--isis-port" => o with { IsisPort = ClosedLoopOptions.Int(name, value, 1) },
                "--suspicion" => o with { Suspicion = ClosedLoopOptions.Int(name, value, 2) },
                "--merge-interval-ms" => o with { MergeIntervalMs = ClosedLoopOptions.Int(name, value, 0) },
                _ => throw new ArgumentException($"serve: unknown option {name}"),
            };
        }
        if (args.Length % 2 != 0) throw new ArgumentException($"serve: {args[^1]} needs a value");
        if (!StoreNames.All.Contains(o.Store)) throw new ArgumentException($"serve: --store {string.Join('|', StoreNames.All)}");
        if (o.Port == 0) throw new ArgumentException("serve: --port P");
        if (o.Store == "postgres" && string.IsNullOrEmpty(o.Connection)) throw new ArgumentException("serve: --store postgres needs --connection");
        if (o.Store == "replicated" && o.IsisPort == 0) throw new ArgumentException("serve: --store replicated needs --isis-port");
        return o;
    }

    /// <summary>The command line that starts this instance (after <c>dotnet Isis.ClosedLoop.dll</c>).</summary>
    public IEnumerable<string> Arguments()
    {
        static string S(int v) => v.ToString(CultureInfo.InvariantCulture);
        yield return "serve";
        foreach (string a in (string[])["--store", Store, "--index", S(Index), "--port", S(Port), "--objects", S(Objects), "--instances", S(Instances), "--parent-pid", S(ParentPid)])
            yield return a;
        if (Store == StoreNames.Postgres)
        {
            foreach (string a in (string[])["--connection", Connection!, "--pg-pool", S(PgPool)]) yield return a;
        }
        else if (Store == StoreNames.Replicated)
        {
            foreach (string a in (string[])["--isis-port", S(IsisPort), "--suspicion", S(Suspicion)]) yield return a;
            if (MergeIntervalMs is int ms) foreach (string a in (string[])["--merge-interval-ms", S(ms)]) yield return a;
        }
    }
}
