using System.Globalization;

namespace Isis.Soak;

/// <summary>The soak's settings, from the command line; every phase, rate and wait is bounded.</summary>
internal sealed record SoakOptions
{
    public const string Usage = """
        Isis.Soak: a durable group of 3 to 5 member processes on this machine (127.0.0.1 only) under continuous
        SafeSend, SafeQuery, OrderedSend and Send load for a set time, with faults: SIGKILL of a member and its
        restart on its data directory, an extra member that joins and leaves gracefully, and whole-group crashes
        (SIGKILL of every member, restart of all in random order). After each whole-group restart and at the end
        it checks that every acknowledged SafeSend and SafeQuery is in the recovered history exactly once, that
        every member holds the same history, and that no history lost or reordered what an earlier one held.
        Samples RSS, disk and SafeSend log size per member every second; writes results.json and report.html.

          dotnet run -c Release --project tools/Isis.Soak -- [options]

          --duration T          how long the load and the faults run (default 120s; 90, 90s, 2m)
          --members N           members of the group, 3 to 5 (default 3)
          --rate N              operations per second over all members (default 200): 40 % SafeSend, 10 % SafeQuery,
                                25 % OrderedSend, 25 % Send
          --payload BYTES       payload of every operation (default 1024)
          --mix M               the operations: "default" (the mix above) or "safesend" (every operation a SafeSend)
          --stop-after-safesends N  end the load once N SafeSends/SafeQueries are acknowledged in all, before --duration
                                if that comes first (default 0: run for --duration)
          --inflight N          operations in flight per member at most (default 16)
          --checkpoint-interval T   PersistCheckpoints interval of every member (default 10s)
          --kill-every T        SIGKILL of a random member, then its restart, about every T (default 30s; 0: never)
          --crash-every T       whole-group crash and restart about every T (default 60s; 0: never)
          --join-every T        an extra member joins about every T and leaves gracefully after --extra-stays (default 45s; 0: never)
          --extra-stays T       how long the extra member stays (default 10s)
          --tail T              the end of the load over which the per-process figures (median and maximum of RSS and disk)
                                are taken, to judge whether they stay flat (default: the last quarter of the load)
          --step-timeout T      bound on each recovery step and check; past it the run stops with a violation (default 120s)
          --seed N              seed of the fault schedule, the victims and the load mix (default 1)
          --inject-violation K  a self-test of the checker: at the first check, "missing-ack" adds an acknowledgement of an
                                operation never sent, "duplicate" repeats an operation in one member's history as read; the
                                run must then report the violation and exit 1
          --out DIR             results.json, report.html, the members' data directories and logs (default artifacts/soak;
                                its data/ is deleted first: a soak starts from empty disks)

        Exit code: 0 when every check passed, 1 when a violation was found (listed in the output and the results),
        2 for a bad command line.
        """;

    public TimeSpan Duration { get; init; } = TimeSpan.FromSeconds(120);
    public int Members { get; init; } = 3;
    public double Rate { get; init; } = 200;
    public int PayloadBytes { get; init; } = 1024;

    /// <summary>The members' operations: "default" (40 % SafeSend, 10 % SafeQuery, 25 % OrderedSend, 25 % Send) or "safesend" (all SafeSends).</summary>
    public string Mix { get; init; } = "default";

    /// <summary>The load ends once this many SafeSends/SafeQueries are acknowledged (0: only --duration ends it).</summary>
    public long StopAfterSafeSends { get; init; }
    public int InFlight { get; init; } = 16;
    public TimeSpan CheckpointInterval { get; init; } = TimeSpan.FromSeconds(10);
    public TimeSpan KillEvery { get; init; } = TimeSpan.FromSeconds(30);
    public TimeSpan CrashEvery { get; init; } = TimeSpan.FromSeconds(60);
    public TimeSpan JoinEvery { get; init; } = TimeSpan.FromSeconds(45);
    public TimeSpan ExtraStays { get; init; } = TimeSpan.FromSeconds(10);
    public TimeSpan StepTimeout { get; init; } = TimeSpan.FromSeconds(120);

    /// <summary>The end of the load over which the per-process medians and maxima are taken (null: its last quarter).</summary>
    public TimeSpan? Tail { get; init; }
    public int Seed { get; init; } = 1;

    /// <summary>A falsehood planted in the first check's input (missing-ack, duplicate), to show the checker finds it; null normally.</summary>
    public string? InjectViolation { get; init; }
    public string Out { get; init; } = Path.Combine("artifacts", "soak");

    /// <summary>The rate each member sends at: the total over the base members (the extra member sends at the same rate while it is in).</summary>
    public double RatePerMember => Rate / Members;

    public static SoakOptions Parse(string[] args)
    {
        var o = new SoakOptions();
        for (int i = 0; i < args.Length; i++)
        {
            string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            int Int() => int.Parse(Value(), CultureInfo.InvariantCulture);
            o = args[i] switch
            {
                "--duration" => o with { Duration = Time(Value()) },
                "--members" => o with { Members = Int() },
                "--rate" => o with { Rate = double.Parse(Value(), CultureInfo.InvariantCulture) },
                "--payload" => o with { PayloadBytes = Int() },
                "--mix" => o with { Mix = Value() is var m && m is "default" or "safesend" ? m : throw new ArgumentException("--mix is default or safesend") },
                "--stop-after-safesends" => o with { StopAfterSafeSends = long.Parse(Value(), CultureInfo.InvariantCulture) },
                "--inflight" => o with { InFlight = Int() },
                "--checkpoint-interval" => o with { CheckpointInterval = Time(Value()) },
                "--kill-every" => o with { KillEvery = Time(Value()) },
                "--crash-every" => o with { CrashEvery = Time(Value()) },
                "--join-every" => o with { JoinEvery = Time(Value()) },
                "--extra-stays" => o with { ExtraStays = Time(Value()) },
                "--step-timeout" => o with { StepTimeout = Time(Value()) },
                "--tail" => o with { Tail = Time(Value()) },
                "--seed" => o with { Seed = Int() },
                "--inject-violation" => o with { InjectViolation = Value() is var k && k is "missing-ack" or "duplicate" ? k : throw new ArgumentException("--inject-violation is missing-ack or duplicate") },
                "--out" => o with { Out = Value() },
                _ => throw new ArgumentException("unknown argument " + args[i]),
            };
        }
        if (o.Members is < 3 or > 5) throw new ArgumentException("--members is 3 to 5");
        if (o.Duration <= TimeSpan.Zero || o.Duration > TimeSpan.FromHours(24)) throw new ArgumentException("--duration is more than 0 and at most 24h");
        if (o.Rate is <= 0 or > 20_000) throw new ArgumentException("--rate is more than 0 and at most 20000");
        if (o.PayloadBytes is < 1 or > 1 << 20) throw new ArgumentException("--payload is 1 to 1048576 bytes");
        if (o.StopAfterSafeSends < 0) throw new ArgumentException("--stop-after-safesends is 0 (never) or more");
        if (o.InFlight is < 1 or > 1024) throw new ArgumentException("--inflight is 1 to 1024");
        if (o.CheckpointInterval < TimeSpan.FromMilliseconds(100)) throw new ArgumentException("--checkpoint-interval is at least 100ms");
        if (o.Tail is TimeSpan tail && (tail <= TimeSpan.Zero || tail > o.Duration)) throw new ArgumentException("--tail is more than 0 and at most --duration");
        if (o.StepTimeout < TimeSpan.FromSeconds(10)) throw new ArgumentException("--step-timeout is at least 10s");
        return o;
    }

    /// <summary>A time: "90" or "90s" (seconds), "500ms", "2m", "1h".</summary>
    public static TimeSpan Time(string text)
    {
        string t = text.Trim();
        (string number, double scale) = t.EndsWith("ms", StringComparison.Ordinal) ? (t[..^2], 0.001)
            : t.EndsWith('s') ? (t[..^1], 1)
            : t.EndsWith('m') ? (t[..^1], 60)
            : t.EndsWith('h') ? (t[..^1], 3600)
            : (t, 1);
        if (!double.TryParse(number, NumberStyles.Float, CultureInfo.InvariantCulture, out double value) || value < 0)
            throw new ArgumentException($"not a time: {text} (e.g. 90s, 500ms, 2m)");
        return TimeSpan.FromSeconds(value * scale);
    }

    /// <summary>The command line as given, for the report.</summary>
    public string Command { get; init; } = "";
}
