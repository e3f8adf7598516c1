using Isis.Core.Bft;

namespace Isis.Simulation.Bft;

/// <summary>
/// The guarantees of a BFT service, checked on what its nodes handed over. Faulty replicas are
/// excluded from every property: they may do anything.
/// <list type="bullet">
/// <item>Order: each correct replica hands requests over in increasing sequence numbers, and each
/// request once.</item>
/// <item>Agreement: correct replicas that hand over a request at one sequence number hand over the
/// same request there.</item>
/// <item>Validity: every request handed over was issued by its client, with that operation.</item>
/// <item>Replies: a client accepts only the result the correct replicas computed for its request.</item>
/// <item>Progress (where the scenario expects it): every request issued is answered.</item>
/// </list>
/// </summary>
internal sealed class BftChecker
{
    private readonly HashSet<int> _faulty;
    private readonly long[] _lastSeq;
    private readonly HashSet<(int Client, long Number)>[] _executedAt;
    private readonly Dictionary<long, (int Replica, int Client, long Number)> _atSeq = new();
    private readonly Dictionary<(int Client, long Number), byte[]> _issued = new();
    private readonly Dictionary<(int Client, long Number), (int Replica, byte[] Result)> _correctResult = new();
    private readonly HashSet<(int Client, long Number)> _accepted = new();
    private readonly List<string> _violations = new();

    public BftChecker(int replicas, IEnumerable<int> faulty)
    {
        _faulty = [.. faulty];
        _lastSeq = new long[replicas];
        _executedAt = [.. Enumerable.Range(0, replicas).Select(_ => new HashSet<(int, long)>())];
    }

    public IReadOnlyList<string> Violations => _violations;

    public int Accepted => _accepted.Count;

    private void Violation(string what)
    {
        if (_violations.Count < 20) _violations.Add(what);
    }

    /// <summary>A node broke one of its own invariants (and stopped): a protocol bug the checker reports like any other violation.</summary>
    public void InvariantBroken(int node, string rule) => Violation($"invariant: node {node}: {rule}");

    public void Issued(int client, long number, byte[] operation) => _issued[(client, number)] = operation;

    public void Executed(int replica, BftRequestOrdered e, byte[] result)
    {
        if (_faulty.Contains(replica)) return;
        if (e.Seq <= _lastSeq[replica]) Violation($"order: replica {replica} handed over seq {e.Seq} after seq {_lastSeq[replica]}");
        _lastSeq[replica] = e.Seq;
        if (!_executedAt[replica].Add((e.Client, e.Number))) Violation($"order: replica {replica} handed over request {e.Client}/{e.Number} twice");
        if (!_issued.TryGetValue((e.Client, e.Number), out byte[]? operation) || !operation.AsSpan().SequenceEqual(e.Operation))
            Violation($"validity: replica {replica} handed over request {e.Client}/{e.Number}, which its client never issued so");
        if (_atSeq.TryGetValue(e.Seq, out var first))
        {
            if (first.Client != e.Client || first.Number != e.Number)
                Violation($"agreement: at seq {e.Seq} replica {first.Replica} handed over {first.Client}/{first.Number}, replica {replica} {e.Client}/{e.Number}");
        }
        else
        {
            _atSeq[e.Seq] = (replica, e.Client, e.Number);
        }
        if (_correctResult.TryGetValue((e.Client, e.Number), out var known))
        {
            if (!known.Result.AsSpan().SequenceEqual(result))
                Violation($"agreement: request {e.Client}/{e.Number} gave replica {known.Replica} and replica {replica} different results (their histories differ)");
        }
        else
        {
            _correctResult[(e.Client, e.Number)] = (replica, result);
        }
    }

    public void ReplyAccepted(int client, long number, byte[] result)
    {
        if (!_accepted.Add((client, number))) Violation($"replies: client {client} accepted request {number} twice");
        if (!_correctResult.TryGetValue((client, number), out var correct))
            Violation($"replies: client {client} accepted a result for request {number}, which no correct replica executed");
        else if (!correct.Result.AsSpan().SequenceEqual(result))
            Violation($"replies: client {client} accepted {Convert.ToHexString(result)} for request {number}; the correct replicas computed {Convert.ToHexString(correct.Result)}");
    }

    public void CheckAllAnswered(int issued)
    {
        if (_accepted.Count < issued) Violation($"progress: {_accepted.Count} of {issued} requests answered");
    }
}
