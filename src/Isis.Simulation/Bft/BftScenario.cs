using Isis.Core.Bft;

namespace Isis.Simulation.Bft;

/// <summary>How a faulty replica of the simulated service misbehaves.</summary>
internal enum ByzantineBehaviour
{
    /// <summary>Correct.</summary>
    None,

    /// <summary>Sends nothing at all (receives and runs, but is never heard).</summary>
    Silent,

    /// <summary>Runs correctly, then stops for good at <see cref="BftScenario.CrashAt"/>.</summary>
    Crash,

    /// <summary>Runs the protocol correctly but its application answers every request with a wrong result.</summary>
    WrongReplies,

    /// <summary>Also sends every packet under another replica's name, tags made with its own keys (they cannot verify).</summary>
    ForgeSender,

    /// <summary>Also sends again, later and to other replicas, packets it received (their tags verify: replays must be harmless).</summary>
    Replay,

    /// <summary>As primary, sends half the backups one request and the other half another one for the same sequence number.</summary>
    Equivocate,

    /// <summary>Correct, but every packet it sends takes ten times longer.</summary>
    Slow,

    /// <summary>As primary, stamps its proposals an hour ahead: the agreed clock must not follow it.</summary>
    WrongClock,

    /// <summary>
    /// Silent as a primary (it never starts a view), and its view changes lie: for every sequence
    /// number it knows of, it claims to have prepared another request in the latest earlier view.
    /// The new view must keep what committed anyway.
    /// </summary>
    LyingViewChange,

    /// <summary>
    /// A target replica that, with others like it, answers a call differently to different caller
    /// replicas (its replies to every other caller replica carry another result): with more than f
    /// of them the target is compromised, and the caller must stay consistent anyway.
    /// </summary>
    Compromised,

    /// <summary>
    /// As primary, adds to every batch it proposes a request that no client sent, under a client's
    /// name (its tags, made with the faulty replica's own keys, cannot verify): backups must check
    /// every input of a batch, not only the first.
    /// </summary>
    SlipInput,
}

/// <summary>One simulated run of a BFT service: its size, its clients and load, the network, and who is faulty how.</summary>
internal sealed record BftScenario
{
    /// <summary>The service tolerates F faulty replicas: it has 3F+1.</summary>
    public int F { get; init; } = 1;

    public int Clients { get; init; } = 2;

    /// <summary>Requests each client issues, <see cref="Outstanding"/> at a time.</summary>
    public int RequestsPerClient { get; init; } = 40;

    /// <summary>How many requests a client keeps outstanding (1: synchronous calls).</summary>
    public int Outstanding { get; init; } = 3;

    /// <summary>Per packet: the chance it is lost, and that it arrives twice.</summary>
    public double Loss { get; init; } = 0.05;

    public double Duplication { get; init; } = 0.02;

    /// <summary>One-way delay, microseconds: uniform in [min, max), so packets overtake each other.</summary>
    public long MinDelay { get; init; } = 100;

    public long MaxDelay { get; init; } = 2_000;

    /// <summary>Replica indexes that are faulty, and how (at most F for the guarantees to hold).</summary>
    public IReadOnlyDictionary<int, ByzantineBehaviour> Faulty { get; init; } = new Dictionary<int, ByzantineBehaviour>();

    /// <summary>When a <see cref="ByzantineBehaviour.Crash"/> replica stops, microseconds into the run.</summary>
    public long CrashAt { get; init; } = 30_000;

    /// <summary>How long the run may take, microseconds of simulated time.</summary>
    public long Duration { get; init; } = 20_000_000;

    /// <summary>Whether every request must complete.</summary>
    public bool ExpectProgress { get; init; } = true;

    /// <summary>
    /// 1: the clients call one service ("bank"). 2: the clients call "store", whose replicas call
    /// "bank" for every request (Perpetual's replicated-to-replicated call) and answer with its result.
    /// </summary>
    public int Tiers { get; init; } = 1;

    /// <summary>With two tiers: the target ("bank") tolerates TargetF faulty replicas.</summary>
    public int TargetF { get; init; } = 1;

    /// <summary>With two tiers: the target's faulty replicas, and how.</summary>
    public IReadOnlyDictionary<int, ByzantineBehaviour> TargetFaulty { get; init; } = new Dictionary<int, ByzantineBehaviour>();

    /// <summary>With two tiers: how long the store waits for a call before its replicas agree to abort it (microseconds; 0: never).</summary>
    public long CallTimeout { get; init; }

    public BftOptions Options { get; init; } = new();
}
