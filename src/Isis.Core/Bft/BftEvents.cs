using Isis.Core.Node;

namespace Isis.Core.Bft;

/// <summary>
/// A service's replicas agreed that this request is the <paramref name="Position"/>-th input it hands
/// over (a position in the order, not a PBFT sequence number, which orders a batch): every correct
/// replica hands over the same requests in the same order (the application executes it and answers
/// with <see cref="PbftReplica.Reply"/>). <paramref name="Time"/> is the agreed clock at this request
/// (microseconds, the primary's stamp, never going back) and <paramref name="Seed"/> a random seed
/// every correct replica has alike: Perpetual's deterministic time and random values.
/// </summary>
internal sealed record BftRequestOrdered(string Service, long Position, int Client, long Number, byte[] Operation, long Time, ulong Seed) : NodeEvent;

/// <summary>
/// A call this service made (<see cref="PbftReplica.Call"/>) completed, at the same point of the order at
/// every correct replica (<paramref name="Position"/>, counted with the requests): with the result f+1 target replicas sent, or aborted (<paramref name="Result"/>
/// null) because f+1 replicas of this service gave up waiting first.
/// </summary>
internal sealed record BftCallCompleted(string Service, long Position, string Target, long Number, byte[]? Result, long Time, ulong Seed) : NodeEvent;

/// <summary>f+1 replicas of the service sent the same result for request <paramref name="Number"/>: at least one of them is correct.</summary>
internal sealed record BftReplyAccepted(string Service, long Number, byte[] Result) : NodeEvent;

/// <summary>Tuning and deliberate bugs of the BFT protocols.</summary>
internal sealed record BftOptions
{
    /// <summary>A checkpoint every this many executed sequence numbers (PBFT's K).</summary>
    public int CheckpointInterval { get; init; } = 16;

    /// <summary>
    /// How many batches the primary keeps in agreement at once. What arrives meanwhile waits and goes
    /// out as the next batch when one executes: under load, one agreement round orders many inputs
    /// (PBFT's batching); a lone request goes out at once.
    /// </summary>
    public int BatchesInFlight { get; init; } = 2;

    /// <summary>The most inputs the primary puts in one batch (at most <see cref="Proposal.MaxBatchItems"/>).</summary>
    public int MaxBatch { get; init; } = 64;

    /// <summary>The most bytes of inputs the primary puts in one batch (a batch holds at least one input, whatever its size).</summary>
    public int MaxBatchBytes { get; init; } = 32 * 1024;

    /// <summary>How many sequence numbers above the stable checkpoint the primary may assign (PBFT's log size L; at least 2K).</summary>
    public int Window => 2 * CheckpointInterval;

    /// <summary>How long before an unanswered message is sent again, in microseconds (doubling while nothing new happens).</summary>
    public long RetryInterval { get; init; } = 20_000;

    /// <summary>
    /// How long a backup waits for a request it knows of to execute before it suspects the primary,
    /// in microseconds; each view that does not start in time gets twice as long as the one before.
    /// </summary>
    public long ViewChangeTimeout { get; init; } = 200_000;

    /// <summary>
    /// How far a primary's stamp may be from a backup's clock for the backup to prepare it, in
    /// microseconds: a primary with a wrong clock makes no progress and is replaced.
    /// </summary>
    public long MaxClockSkew { get; init; } = 2_000_000;

    /// <summary>Deliberate bugs, for the simulator to show that its checker catches each.</summary>
    public BftMutations Mutations { get; init; }
}

/// <summary>Deliberate bugs in the BFT protocols; each must be caught by the simulator's checker.</summary>
[Flags]
internal enum BftMutations
{
    None = 0,

    /// <summary>
    /// Crash-fault quorums in a Byzantine protocol: prepared on f prepares, committed on f+1 commits.
    /// An equivocating primary then gets two requests committed at one sequence number.
    /// </summary>
    CrashQuorums = 1,

    /// <summary>A client accepts a reply on f matching copies instead of f+1 (a single faulty replica then decides it when f = 1).</summary>
    ReplyOnFMatches = 2,

    /// <summary>A new view ignores the prepared requests its view changes claim (rule A) and fills every sequence number with the null request: what committed is replaced.</summary>
    NewViewDropsPrepared = 4,

    /// <summary>A new view takes a prepared claim without the f+1 pre-prepares that vouch for it (rule A2): one lying replica's claim of a later view then replaces what committed.</summary>
    NewViewWithoutPrePrepareQuorum = 8,

    /// <summary>
    /// A backup replays the messages that arrived above its window where the window moves, inside the
    /// execution or catch-up that moved it, instead of once that input is handled: the catch-up then
    /// finds its history moved past the certified checkpoint it was checking (an invariant breaks).
    /// </summary>
    ReplayEarlyInPlace = 16,

    /// <summary>
    /// A backup checks the tags of a batch's first input only: a faulty primary then slips an input
    /// no client or caller sent into a batch, and correct replicas execute it (validity breaks).
    /// </summary>
    BatchChecksFirstOnly = 32,

    /// <summary>
    /// A caller replica sends an overdue call again to the target's primary only, not to every target
    /// replica: a silent target primary then stalls every call for good (progress breaks), since its
    /// backups never hold the call and never change the view.
    /// </summary>
    CallRetryToPrimaryOnly = 64,
}

/// <summary>
/// Replica <paramref name="PeerReplica"/> of service <paramref name="Peer"/> sent, for call
/// <paramref name="Number"/>, something other than what f+1 of its service agreed on: as the target's
/// reply (<paramref name="AsReply"/>; seen by a caller replica, or by the responder of the replica's
/// own service, which gathers the replies), or as its copy of a call this service executed. Either that
/// replica is faulty or its application is not deterministic; the call went on with the agreed value.
/// </summary>
internal sealed record BftDivergence(string Service, string Peer, int PeerReplica, long Number, bool AsReply) : NodeEvent;
