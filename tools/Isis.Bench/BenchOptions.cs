using System.Globalization;

namespace Isis.Bench;

/// <summary>The multicast primitive a latency or throughput phase exercises.</summary>
internal enum Primitive
{
    /// <summary>Send: FIFO, delivered locally at once.</summary>
    Send,
    /// <summary>OrderedSend: total order set by the oldest member.</summary>
    Ordered,
    /// <summary>SafeSend with phi = 1.</summary>
    Safe1,
    /// <summary>SafeSend with phi = 3.</summary>
    Safe3,
    /// <summary>SafeSend with phi = every member.</summary>
    SafeAll,
    /// <summary>QueryAsync(Group.ALL): request as a Send, every member replies.</summary>
    Query,
    /// <summary>CausalSend: delivered locally at once, elsewhere after its causal predecessors.</summary>
    Causal,
    /// <summary>P2PSend to one receiver (latency, acknowledged by it alone); the blast is a SubsetSend naming every member (the subset path's throughput).</summary>
    P2P,
}

internal static class Primitives
{
    public static readonly Primitive[] All = Enum.GetValues<Primitive>();

    public static string Name(this Primitive p) => p.ToString().ToLowerInvariant();

    /// <summary>The SafeSend threshold a primitive uses (0 = not a SafeSend; int.MaxValue = all members).</summary>
    public static int Phi(this Primitive p, int members) => p switch
    {
        Primitive.Safe1 => 1,
        Primitive.Safe3 => 3,
        Primitive.SafeAll => members,
        _ => 0,
    };

    public static bool IsSafe(this Primitive p) => p is Primitive.Safe1 or Primitive.Safe3 or Primitive.SafeAll;

    public static Primitive Parse(string s) =>
        All.FirstOrDefault(p => p.Name() == s.Trim().ToLowerInvariant(), (Primitive)(-1)) is var p && p >= 0
            ? p
            : throw new ArgumentException($"unknown primitive '{s}' (send, ordered, safe1, safe3, safeall, query, causal, p2p)");
}

/// <summary>Command-line settings, shared by the parent and the members it starts.</summary>
internal sealed record BenchOptions
{
    public const string Usage =
        "usage: Isis.Bench [--quick] [--matrix] [--members N[,N...]] [--primitive P[,P...]] [--response-delay K[,K...]] [--rounds N]\n" +
        "                  [--out FILE.json|FILE.csv|FILE.html] [--warmup N] [--samples N] [--cooldown N] [--messages N]\n" +
        "                  [--payload BYTES[,BYTES...]] [--timeout SECONDS] [--heartbeat-ms H] [--suspicion K]\n" +
        "  Each primitive runs a warm-up, a measured phase and a cool-down: latency rounds before and after the\n" +
        "  recorded ones are run but not recorded, and a throughput blast's rate is taken over its middle 80 %\n" +
        "  (the first and the last 10 % of the deliveries at each member are not counted), so every member is\n" +
        "  under load during the whole measured window. The report states every count.\n" +
        "  Counts not given on the command line are scaled down with the group size N so each size takes a\n" +
        "  bounded time on a small machine: latency and response-delay rounds by (3/N)^2 (at least 100 recorded\n" +
        "  latency rounds, 20 warm-up, 20 response-delay rounds), blasts by 3/N (at least 5,000 messages, 2,000\n" +
        "  for safe and query); a count given on the command line is used as is at every size.\n" +
        "  --quick          small counts for CI smoke tests (checks that the harness runs, never a timing);\n" +
        "                   covers send, ordered, safe3 and query plus a short response-delay phase\n" +
        "  --matrix         every primitive for 3, 5, 10, 20 and 50 members (or --members), plus the response-delay\n" +
        "                   phase for K = 1, 10, 100;\n" +
        "                   one combined result file\n" +
        "  --members        group size (3 or more; default 3), or a comma list run one after the other;\n" +
        "                   member 0 sends, the others receive\n" +
        "  --primitive      send|ordered|safe1|safe3|safeall|query|causal|p2p, or a comma list run one after the other in\n" +
        "                   the same group (default send); safeN is SafeSend with SetSafeSendThreshold(N), safeall phi = members\n" +
        "  --response-delay comma list of burst sizes K: time until the sender may answer an outside user after K\n" +
        "                   updates, (a) K Sends then Flush() versus (b) K SafeSendAsync (phi = all, and phi = 3 with 5 members)\n" +
        "  --rounds         recorded rounds per K and mode in the response-delay phase (default 300; quick 20)\n" +
        "  --out            where to write the results: JSON, CSV if the name ends in .csv, or a self-contained\n" +
        "                   HTML report with plots if it ends in .html (the CSV and JSON are written beside it)\n" +
        "  --warmup         latency round trips not recorded, before the recorded ones (default 2000; quick 100)\n" +
        "  --transport      udp (default), multicast (UDP with IsisOptions.Multicast: a group's Sends go to one IP\n" +
        "                   multicast address on 127.0.0.1) or tcp: how every process's packets travel\n" +
        "  --warmup-seconds the warm-up of each primitive lasts at least this long (default 1; quick 0): the JIT's\n" +
        "                   tiered compilation replaces the hot methods about a second after they start, and\n" +
        "                   rounds measured before that put its pauses in the tail\n" +
        "  --samples        latency round trips recorded (default 20000; quick 1000)\n" +
        "  --cooldown       latency round trips not recorded, after the recorded ones (default a tenth of the samples, at least 1)\n" +
        "  --messages       messages in each throughput blast (default 300000 for send/ordered, a third of it for\n" +
        "                   safe and query; quick 20000)\n" +
        "  --payload        bytes of application data per message, or a comma list run one after the other\n" +
        "                   (for example 100,1024; default 100)\n" +
        "  --timeout        hard limit on each group's run; members are killed after it (default 600, or 20 s per\n" +
        "                   member where that is more: 1,000 s at 50 members; quick 60)\n" +
        "  --heartbeat-ms   heartbeat period of every process, milliseconds (default 100 below 20 members, else 500;\n" +
        "                   scale 500)\n" +
        "  --safe-log DIR   SafeSend with disk durability: every member appends its SafeSends under DIR and fsyncs\n" +
        "                   before acknowledging (measure with --primitive safe3); the harness deletes what it wrote\n" +
        "  --suspicion      silent heartbeat periods before the membership service expels a process (default 30 below\n" +
        "                   20 members, else 40; scale 40)\n" +
        "  --large-group-from N  groups of N members or more use the large-group rules (gossiped digests, the\n" +
        "                   stability tree, data along the tree over TCP); default: the protocol's, 16\n" +
        "\n" +
        "Scale mode: N member processes join one group, every member Sends, one member is SIGKILLed:\n" +
        "  Isis.Bench --scale [--members N] [--sends K] [--payload BYTES] [--idle-seconds S] [--timeout SECONDS]\n" +
        "             [--suspicion K] [--heartbeat-ms H] [--out FILE.json|FILE.csv]\n" +
        "  --members        member processes, 3 or more (default 100)\n" +
        "  --sends          Sends per member once the group has formed; every member must deliver N x K (default 20)\n" +
        "  --payload        bytes of application data per Send (default 32 in scale mode)\n" +
        "  --idle-seconds   the formed group's CPU use is sampled over two windows of S seconds before the Sends,\n" +
        "                   right after forming and then steady (default 10)\n" +
        "  --timeout        limit on each wait (forming the group, the Sends, the view after the kill; default 300);\n" +
        "                   the run ends with an error naming the members that did not get there";

    public bool Quick { get; init; }
    public bool Matrix { get; init; }
    public string? Out { get; init; }
    public int Warmup { get; init; } = 2_000;
    public double WarmupSeconds { get; init; } = 1;
    public int Samples { get; init; } = 20_000;
    /// <summary>Latency rounds run after the recorded ones and not recorded (null: a tenth of the samples, at least 1).</summary>
    public int? CooldownGiven { get; init; }
    public int Cooldown => CooldownGiven ?? Math.Max(1, Samples / 10);
    public bool WarmupGiven { get; init; }
    public bool SamplesGiven { get; init; }
    public bool RoundsGiven { get; init; }
    public int Messages { get; init; } = 300_000;
    public bool MessagesGiven { get; init; }
    public int? SlowMessages { get; init; }
    public int Payload { get; init; } = 100;
    public int TimeoutSeconds { get; init; } = 600;
    public bool TimeoutGiven { get; init; }
    public int Members { get; init; } = 3;
    public Primitive[] PrimitiveList { get; init; } = [Primitive.Send];
    public int[] ResponseDelayBursts { get; init; } = [];
    public int Rounds { get; init; } = 300;
    /// <summary>With --safe-log DIR every member logs its SafeSends to disk under DIR and fsyncs before acknowledging (SafeSendDurability.Disk).</summary>
    public string? SafeLogDirectory { get; init; }
    /// <summary>How every process's packets travel (--transport udp|multicast|tcp; default udp).</summary>
    public IsisTransport Transport { get; init; } = IsisTransport.Udp;

    /// <summary>--transport multicast: UDP with IsisOptions.Multicast, groups' data on an IP multicast address.</summary>
    public bool Multicast { get; init; }

    /// <summary>The multicast port of the run (the coordinator picks a free one and gives it to every member).</summary>
    public int MulticastPort { get; init; }

    /// <summary>udp, multicast or tcp, as the report names it.</summary>
    public string TransportName => Multicast ? "multicast" : Transport == IsisTransport.Tcp ? "tcp" : "udp";

    // Failure detection of every process in a run (the parent's embedded membership service included).
    // Relaxed by default (see Coordinator.Options): 100 ms x 30 = 3 s; in scale mode 500 ms x 40 = 20 s,
    // because 100 members overload 2 cores even when idle (docs/performance.md, "Scale").
    /// <summary>--large-group-from N: the group size from which the large-group rules apply (gossip, the stability tree, relaying over TCP); the protocol's default (10) when absent.</summary>
    public int? LargeGroupFrom { get; init; }

    /// <summary>--keys: every process has a system key and the group a key of its own (AES-256-GCM on every packet), to measure what sealing costs.</summary>
    public bool Keys { get; init; }

    /// <summary>The keys a --keys run uses (fixed: a benchmark has nothing to keep secret).</summary>
    public static readonly byte[] BenchSystemKey = [.. Enumerable.Range(0, 32).Select(i => (byte)(0x30 + i))];

    public static readonly byte[] BenchGroupKey = [.. Enumerable.Range(0, 32).Select(i => (byte)(0xC0 ^ i))];

    public int? HeartbeatGiven { get; init; }
    public int? SuspicionGiven { get; init; }
    // From 20 members on, the benchmark's group alone saturates 2 cores during blasts (and the idle group
    // uses most of them at 50), so a starved member can be silent for seconds: it gets 500 ms x 40 as in
    // scale mode. Nobody is killed in this benchmark, so slow detection costs nothing.
    public int HeartbeatMs => HeartbeatGiven ?? (Scale || Members >= LargeGroup ? 500 : 100);
    public int Suspicion => SuspicionGiven ?? (Scale || Members >= LargeGroup ? 40 : 30);
    public const int LargeGroup = 20;

    // Scale mode.
    public bool Scale { get; init; }
    public int Sends { get; init; } = 20;
    public int IdleSeconds { get; init; } = 10;

    // Member-only settings, filled in by the parent.
    public int Index { get; init; } = -1;
    public int ServicePort { get; init; }
    public string? ResultPath { get; init; }
    public int ParentPid { get; init; }

    /// <summary>Messages in the throughput blast of one primitive: SafeSend and Query are slower, so they get a third unless --messages was given.</summary>
    public int MessagesFor(Primitive p) =>
        p is Primitive.Send or Primitive.Ordered or Primitive.Causal or Primitive.P2P ? Messages : SlowMessages ?? (MessagesGiven ? Messages : Math.Max(1, Messages / 3));

    public static BenchOptions Parse(ReadOnlySpan<string> args)
    {
        bool quick = args.Contains("--quick");
        bool keys = args.Contains("--keys");
        bool scale = args.Contains("--scale");
        if (quick && scale) throw new ArgumentException("--quick and --scale do not go together");
        var o = scale
            ? new BenchOptions { Scale = true, Members = 100, Payload = 32, TimeoutSeconds = 300 }
            : quick
            ? new BenchOptions
            {
                Quick = true, Warmup = 100, WarmupSeconds = 0, Samples = 1_000, Messages = 20_000, TimeoutSeconds = 60, Rounds = 20,
                PrimitiveList = [Primitive.Send, Primitive.Ordered, Primitive.Safe3, Primitive.Query],
                ResponseDelayBursts = [1, 10],
            }
            : new BenchOptions();
        for (int i = 0; i < args.Length; i++)
        {
            string name = args[i];
            if (name is "--quick" or "--scale" or "--keys") continue;
            if (name == "--matrix")
            {
                o = o with { Matrix = true };
                continue;
            }
            if (i + 1 >= args.Length) throw new ArgumentException($"{name} needs a value");
            string value = args[++i];
            o = name switch
            {
                "--out" => o with { Out = value },
                "--warmup" => o with { Warmup = Int(name, value, 0), WarmupGiven = true },
                "--warmup-seconds" => o with { WarmupSeconds = double.Parse(value, System.Globalization.CultureInfo.InvariantCulture) },
                "--samples" => o with { Samples = Int(name, value, 1), SamplesGiven = true },
                "--cooldown" => o with { CooldownGiven = Int(name, value, 0) },
                "--messages" => o with { Messages = Int(name, value, 1), MessagesGiven = true },
                "--payload" => o with { Payload = Ints(name, value, 24)[0], PayloadSizes = Ints(name, value, 24) },
                "--timeout" => o with { TimeoutSeconds = Int(name, value, 5), TimeoutGiven = true },
                "--members" => o with { Members = Ints(name, value, 3)[0], MemberSizes = Ints(name, value, 3) },
                "--primitive" => o with { PrimitiveList = [.. value.Split(',', StringSplitOptions.RemoveEmptyEntries).Select(Primitives.Parse)] },
                "--response-delay" => o with { ResponseDelayBursts = [.. value.Split(',', StringSplitOptions.RemoveEmptyEntries).Select(k => Int(name, k, 1))] },
                "--rounds" => o with { Rounds = Int(name, value, 1), RoundsGiven = true },
                "--slow-messages" => o with { SlowMessages = Int(name, value, 1) },
                "--index" => o with { Index = Int(name, value, 0) },
                "--service-port" => o with { ServicePort = Int(name, value, 1) },
                "--result" => o with { ResultPath = value },
                "--parent-pid" => o with { ParentPid = Int(name, value, 1) },
                "--heartbeat-ms" => o with { HeartbeatGiven = Int(name, value, 5) },
                "--suspicion" => o with { SuspicionGiven = Int(name, value, 3) },
                "--large-group-from" => o with { LargeGroupFrom = Int(name, value, 2) },
                "--sends" => o with { Sends = Int(name, value, 1) },
                "--idle-seconds" => o with { IdleSeconds = Int(name, value, 1) },
                "--safe-log" => o with { SafeLogDirectory = Path.GetFullPath(value) },
                "--transport" => o with
                {
                    Transport = value switch
                    {
                        "udp" or "multicast" => IsisTransport.Udp,
                        "tcp" => IsisTransport.Tcp,
                        _ => throw new ArgumentException($"--transport must be udp, multicast or tcp; it is '{value}'"),
                    },
                    Multicast = value == "multicast",
                },
                "--multicast-port" => o with { MulticastPort = Int(name, value, 1) },
                _ => throw new ArgumentException($"unknown option {name}"),
            };
        }
        if (o.Matrix)
        {
            o = o with { PrimitiveList = Primitives.All, ResponseDelayBursts = o.ResponseDelayBursts.Length > 0 ? o.ResponseDelayBursts : [1, 10, 100] };
        }
        if (keys) o = o with { Keys = true };
        if (o.PrimitiveList.Length == 0) throw new ArgumentException("--primitive needs at least one primitive");
        if (o.Scale && o.MemberSizes is { Length: > 1 }) throw new ArgumentException("--scale runs one group size at a time; give --members one number");
        if (o.Scale && o.Matrix) throw new ArgumentException("--matrix and --scale do not go together");
        return o;
    }

    /// <summary>Group sizes to run, in order: --members takes a comma list; --matrix defaults to 3, 5, 10, 20 and 50.</summary>
    public int[] GroupSizes => MemberSizes ?? (Matrix ? [3, 5, 10, 20, 50] : [Members]);

    public int[]? MemberSizes { get; init; }

    /// <summary>Payload sizes to run, in order: --payload takes a comma list (for example 100,1024).</summary>
    public int[] PayloadSizes { get; init; } = [100];

    /// <summary>
    /// The settings of one group of <paramref name="members"/> processes: counts not given on the command line
    /// scaled down with the group size (latency and response-delay rounds by (3/N)^2, blasts by 3/N, with
    /// floors), so each size takes a bounded time on a small machine. On 2 cores a latency round costs about
    /// 0.3 ms at 3 members, 3 ms at 10, 15 ms at 20 and 150 ms at 50 (roughly N^2: every receiver acknowledges,
    /// and all of them share the cores), and a receiver's blast rate falls about as 1/N.
    /// </summary>
    public BenchOptions ForGroupSize(int members)
    {
        double rounds = Math.Min(1.0, 9.0 / ((double)members * members));
        double blast = Math.Min(1.0, 3.0 / members);
        int samples = SamplesGiven ? Samples : Math.Min(Samples, Math.Max(MinSamples, (int)Math.Round(Samples * rounds)));
        int warmup = WarmupGiven ? Warmup : Math.Min(Warmup, Math.Max(MinWarmup, (int)Math.Round(Warmup * rounds)));
        int messages = MessagesGiven ? Messages : Math.Min(Messages, Math.Max(MinMessages, (int)Math.Round(Messages * blast)));
        int? slow = SlowMessages ?? (MessagesGiven ? null : Math.Min(MessagesFor(Primitive.Query), Math.Max(MinSlowMessages, (int)Math.Round(MessagesFor(Primitive.Query) * blast))));
        int responseRounds = RoundsGiven ? Rounds : Math.Min(Rounds, Math.Max(MinResponseRounds, (int)Math.Round(Rounds * rounds)));
        return this with
        {
            Members = members,
            Samples = samples,
            Warmup = warmup,
            CooldownGiven = CooldownGiven ?? Math.Max(1, samples / 10),
            Messages = messages,
            SlowMessages = slow,
            Rounds = responseRounds,
            // The 50-member group took 210-290 s on 2 cores with nothing else running; another user of the
            // machine can double that, so large groups get 20 s per member before they count as stuck.
            TimeoutSeconds = TimeoutGiven ? TimeoutSeconds : Math.Max(TimeoutSeconds, 20 * members),
        };
    }

    private const int MinSamples = 100, MinWarmup = 20, MinMessages = 5_000, MinSlowMessages = 2_000, MinResponseRounds = 20;

    /// <summary>Response-delay rounds run before the recorded ones and not recorded.</summary>
    public int ResponseWarmup => Math.Max(3, Rounds / 10);

    /// <summary>Response-delay rounds run after the recorded ones and not recorded.</summary>
    public int ResponseCooldown => Math.Max(1, Rounds / 10);

    /// <summary>Deliveries of a blast not counted at its start (warm-up) and, as many, at its end (cool-down): a tenth each.</summary>
    public static int BlastEdge(int messages) => messages / 10;

    /// <summary>The arguments that make a member process with these settings.</summary>
    public IEnumerable<string> MemberArguments(int index, int servicePort, string resultPath, int parentPid) =>
    [
        "member", "--index", Str(index), "--service-port", Str(servicePort), "--result", resultPath, "--parent-pid", Str(parentPid),
        "--warmup", Str(Warmup), "--warmup-seconds", WarmupSeconds.ToString(System.Globalization.CultureInfo.InvariantCulture), "--samples", Str(Samples), "--cooldown", Str(Cooldown), "--payload", Str(Payload),
        "--messages", Str(Messages), "--slow-messages", Str(MessagesFor(Primitive.Query)),
        "--timeout", Str(TimeoutSeconds), "--members", Str(Members), "--rounds", Str(Rounds),
        "--primitive", string.Join(',', PrimitiveList.Select(p => p.Name())),
        "--heartbeat-ms", Str(HeartbeatMs), "--suspicion", Str(Suspicion),
        .. (ResponseDelayBursts.Length > 0 ? new[] { "--response-delay", string.Join(',', ResponseDelayBursts.Select(Str)) } : []),
        .. (SafeLogDirectory != null ? new[] { "--safe-log", SafeLogDirectory } : []),
        "--transport", TransportName,
        .. (Multicast ? new[] { "--multicast-port", Str(MulticastPort) } : []),
        .. (LargeGroupFrom is { } from ? new[] { "--large-group-from", Str(from) } : []),
        .. (Keys ? new[] { "--keys" } : []),
    ];

    /// <summary>The arguments that make a scale-mode member process; it lives until the parent says "quit" or closes its stdin.</summary>
    public IEnumerable<string> ScaleMemberArguments(int index, int servicePort, int hardLimitSeconds) =>
    [
        "scale-member", "--scale", "--index", Str(index), "--service-port", Str(servicePort), "--members", Str(Members),
        "--sends", Str(Sends), "--payload", Str(Payload), "--timeout", Str(hardLimitSeconds),
        "--heartbeat-ms", Str(HeartbeatMs), "--suspicion", Str(Suspicion),
        .. (LargeGroupFrom is { } from ? new[] { "--large-group-from", Str(from) } : []),
    ];

    private static string Str(int v) => v.ToString(CultureInfo.InvariantCulture);

    private static int[] Ints(string name, string value, int min) =>
        value.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(v => Int(name, v, min)).ToArray() is { Length: > 0 } all
            ? all
            : throw new ArgumentException($"{name} needs at least one value");

    private static int Int(string name, string value, int min)
    {
        if (!int.TryParse(value, NumberStyles.Integer, CultureInfo.InvariantCulture, out int v) || v < min)
            throw new ArgumentException($"{name} must be an integer >= {min}; got '{value}'");
        return v;
    }
}
