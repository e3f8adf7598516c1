using System.Globalization;

namespace Isis.Overload;

/// <summary>The experiment's settings, from the command line; every phase and rate is bounded.</summary>
internal sealed record OverloadOptions
{
    public const string Usage = """
        Isis.Overload: one of three replicas of a ReplicatedDictionary (ASP.NET instances, processes of their own,
        127.0.0.1 only) is starved of CPU and flooded on its UDP socket while a writer updates a key every few ms
        and query threads read it; stale reads per bin, and the time to converge once the overload ends.

          dotnet run -c Release --project tools/Isis.Overload -- [options]

          --warmup-seconds S     steady phase before the overload (default 10)
          --overload-seconds S   how long the starved replica is starved and flooded (default 10)
          --after-seconds S      measuring after the overload ends (default 20)
          --bin-seconds S        width of a report bin (default 2)
          --threads N            query threads reading the starved replica (default 8)
          --control-threads N    query threads reading a healthy replica, the control (default 2)
          --update-ms N          the writer's period: one acknowledged update at a time (default 20)
          --read-pause-ms N      pause of each query thread between reads (default 10)
          --read-timeout-ms N    a read not answered within this is counted as failed (default 2000)
          --gossip-ms N          the collections' GossipInterval (default 1000, the library's default)
          --stats-ms N           period of the /stats rounds over the three instances (default 250)
          --hogs N               busy-looping threads pinned to the starved replica's CPU (default 4; 0: none)
          --nice N               nice value given to every thread of the starved replica during the overload (default 19; 0: none)
          --flood-rate N         junk datagrams per second sent to its Isis UDP socket (default 20000; 0: none)
          --suspicion N          Isis:SuspicionCount of every instance, in heartbeat periods of 100 ms (default: the overload's
                                 length + 5 s, so that the starved member is not expelled; in our runs the library's default, 5,
                                 expelled it half a second into the overload, and 30 five seconds into it)
          --lag-tolerance-ms N   the lenient time to converge counts a read less than N ms out of date, and a history at most
                                 N / update-ms entries short, as caught up (default 100)
          --no-pin               do not pin the instances to CPUs (taskset); the hogs then run on every CPU
          --seed N               seed of the flood's junk (default 1)
          --quick                short phases (4 + 4 + 6 s) for a smoke test; its figures are not meaningful
          --out FILE.json        the result (every bin, every figure, the settings, the machine)
          --html FILE.html       the report as one self-contained page
          --markdown FILE.md     the per-bin table as markdown
        """;

    public int WarmupSeconds { get; init; } = 10;
    public int OverloadSeconds { get; init; } = 10;
    public int AfterSeconds { get; init; } = 20;
    public int BinSeconds { get; init; } = 2;
    public int Threads { get; init; } = 8;
    public int ControlThreads { get; init; } = 2;
    public int UpdateMs { get; init; } = 20;
    public int ReadPauseMs { get; init; } = 10;
    public int ReadTimeoutMs { get; init; } = 2000;
    public int GossipMs { get; init; } = 1000;
    public int StatsMs { get; init; } = 250;
    public int Hogs { get; init; } = 4;
    public int Nice { get; init; } = 19;
    public int FloodRate { get; init; } = 20_000;
    /// <summary>Isis:SuspicionCount as given, or null for <see cref="EffectiveSuspicion"/>'s default.</summary>
    public int? Suspicion { get; init; }

    /// <summary>The suspicion every instance runs with: as given, or enough heartbeat periods to outlast the overload by 5 s.</summary>
    public int EffectiveSuspicion => Suspicion ?? (int)Math.Ceiling((OverloadSeconds + 5) * 1000.0 / HeartbeatMs);

    public int LagToleranceMs { get; init; } = 100;
    public int HeartbeatMs { get; init; } = 100;
    public bool Pin { get; init; } = true;
    public int Seed { get; init; } = 1;
    public bool Quick { get; init; }
    public string? Out { get; init; }
    public string? Html { get; init; }
    public string? Markdown { get; init; }

    public static OverloadOptions Parse(string[] args)
    {
        var o = new OverloadOptions();
        if (args.Contains("--quick")) o = o with { Quick = true, WarmupSeconds = 4, OverloadSeconds = 4, AfterSeconds = 6 };
        for (int i = 0; i < args.Length; i++)
        {
            string name = args[i];
            string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{name} needs a value");
            int Int(int min, int max)
            {
                string text = Value();
                return int.TryParse(text, NumberStyles.Integer, CultureInfo.InvariantCulture, out int v) && v >= min && v <= max
                    ? v
                    : throw new ArgumentException($"{name} must be a whole number from {min} to {max}; it is '{text}'");
            }
            o = name switch
            {
                "--warmup-seconds" => o with { WarmupSeconds = Int(1, 600) },
                "--overload-seconds" => o with { OverloadSeconds = Int(1, 600) },
                "--after-seconds" => o with { AfterSeconds = Int(1, 600) },
                "--bin-seconds" => o with { BinSeconds = Int(1, 60) },
                "--threads" => o with { Threads = Int(1, 64) },
                "--control-threads" => o with { ControlThreads = Int(1, 64) },
                "--update-ms" => o with { UpdateMs = Int(1, 10_000) },
                "--read-pause-ms" => o with { ReadPauseMs = Int(0, 10_000) },
                "--read-timeout-ms" => o with { ReadTimeoutMs = Int(10, 60_000) },
                "--gossip-ms" => o with { GossipMs = Int(10, 60_000) },
                "--stats-ms" => o with { StatsMs = Int(50, 10_000) },
                "--hogs" => o with { Hogs = Int(0, 64) },
                "--nice" => o with { Nice = Int(0, 19) },
                "--flood-rate" => o with { FloodRate = Int(0, 200_000) },
                "--suspicion" => o with { Suspicion = Int(3, 10_000) },
                "--lag-tolerance-ms" => o with { LagToleranceMs = Int(0, 60_000) },
                "--no-pin" => o with { Pin = false },
                "--seed" => o with { Seed = Int(0, int.MaxValue) },
                "--quick" => o,
                "--out" => o with { Out = Value() },
                "--html" => o with { Html = Value() },
                "--markdown" => o with { Markdown = Value() },
                _ => throw new ArgumentException($"unknown option '{name}'"),
            };
        }
        return o;
    }
}
