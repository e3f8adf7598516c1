using System.Globalization;

namespace Isis.Bench;

/// <summary>Command-line settings, shared by the parent and the members it starts.</summary>
internal sealed record BenchOptions
{
    public const string Usage =
        "usage: Isis.Bench [--quick] [--out FILE.json|FILE.csv] [--warmup N] [--samples N] [--messages N] [--payload BYTES] [--timeout SECONDS]\n" +
        "  --quick      small counts for CI smoke tests (checks that the harness runs, never a timing)\n" +
        "  --out        where to write the results (JSON, or CSV if the name ends in .csv)\n" +
        "  --warmup     latency round trips not recorded (default 2000; quick 100)\n" +
        "  --samples    latency round trips recorded at each receiver (default 20000; quick 1000)\n" +
        "  --messages   messages in the throughput blast (default 300000; quick 20000)\n" +
        "  --payload    bytes of application data per message (default 100)\n" +
        "  --timeout    hard limit on the whole run; members are killed after it (default 300; quick 60)";

    public bool Quick { get; init; }
    public string? Out { get; init; }
    public int Warmup { get; init; } = 2_000;
    public int Samples { get; init; } = 20_000;
    public int Messages { get; init; } = 300_000;
    public int Payload { get; init; } = 100;
    public int TimeoutSeconds { get; init; } = 300;

    // Member-only settings, filled in by the parent.
    public int Index { get; init; } = -1;
    public int ServicePort { get; init; }
    public string? ResultPath { get; init; }
    public int ParentPid { get; init; }

    public const int Members = 3;

    public static BenchOptions Parse(ReadOnlySpan<string> args)
    {
        bool quick = args.Contains("--quick");
        var o = quick
            ? new BenchOptions { Quick = true, Warmup = 100, Samples = 1_000, Messages = 20_000, TimeoutSeconds = 60 }
            : new BenchOptions();
        for (int i = 0; i < args.Length; i++)
        {
            string name = args[i];
            if (name == "--quick") continue;
            if (i + 1 >= args.Length) throw new ArgumentException($"{name} needs a value");
            string value = args[++i];
            o = name switch
            {
                "--out" => o with { Out = value },
                "--warmup" => o with { Warmup = Int(name, value, 0) },
                "--samples" => o with { Samples = Int(name, value, 1) },
                "--messages" => o with { Messages = Int(name, value, 1) },
                "--payload" => o with { Payload = Int(name, value, 16) },
                "--timeout" => o with { TimeoutSeconds = Int(name, value, 5) },
                "--index" => o with { Index = Int(name, value, 0) },
                "--service-port" => o with { ServicePort = Int(name, value, 1) },
                "--result" => o with { ResultPath = value },
                "--parent-pid" => o with { ParentPid = Int(name, value, 1) },
                _ => throw new ArgumentException($"unknown option {name}"),
            };
        }
        return o;
    }

    /// <summary>The arguments that make a member process with these settings.</summary>
    public IEnumerable<string> MemberArguments(int index, int servicePort, string resultPath, int parentPid) =>
    [
        "member", "--index", Str(index), "--service-port", Str(servicePort), "--result", resultPath, "--parent-pid", Str(parentPid),
        "--warmup", Str(Warmup), "--samples", Str(Samples), "--messages", Str(Messages), "--payload", Str(Payload),
        "--timeout", Str(TimeoutSeconds),
    ];

    private static string Str(int v) => v.ToString(CultureInfo.InvariantCulture);

    private static int Int(string name, string value, int min)
    {
        if (!int.TryParse(value, NumberStyles.Integer, CultureInfo.InvariantCulture, out int v) || v < min)
            throw new ArgumentException($"{name} must be an integer >= {min}; got '{value}'");
        return v;
    }
}
