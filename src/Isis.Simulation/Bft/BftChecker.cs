using Isis.Core.Bft;

namespace Isis.Simulation.Bft;

/// <summary>
/// The guarantees of a BFT service, checked on what its nodes handed over. Faulty replicas are
/// excluded from every property: they may do anything.
/// <list type="bullet">
/// <item>Order: each correct replica hands inputs over at increasing positions in its service's
/// order, and each request once.</item>
/// <item>Agreement: correct replicas that hand over an input at one position hand over the
/// same input there.</item>
/// <item>Validity: every request handed over was issued by its client, with that operation.</item>
/// <item>Agreed clock and seed: correct replicas hand each request over with the same time and seed,
/// and the time only grows.</item>
/// <item>Replies: a client accepts only the result the correct replicas computed for its request.</item>
/// <item>Calls (a service calling another): every correct replica of the caller completes a call
/// with the same outcome at the same point of its order, and, unless the target is compromised
/// (more than f faulty), with the result the target's correct replicas computed.</item>
/// <item>Progress (where the scenario expects it): every request issued is answered.</item>
/// </list>
/// </summary>
internal sealed class BftChecker
{
    private readonly HashSet<int> _faulty;
    private readonly long[] _lastPosition;
    private readonly long[] _lastTime;
    private readonly HashSet<(int Client, long Number)>[] _executedAt;
    private readonly Dictionary<long, (int Replica, string What)> _atPosition = new();
    private readonly Dictionary<(string Target, long Number), (int Replica, byte[]? Result)> _callOutcomes = new();
    private readonly Dictionary<(int Client, long Number), byte[]> _issued = new();
    private readonly Dictionary<(int Client, long Number), (int Replica, byte[] Result)> _correctResult = new();
    private readonly HashSet<(int Client, long Number)> _accepted = new();
    private readonly List<string> _violations = new();

    public BftChecker(int replicas, IEnumerable<int> faulty)
    {
        _faulty = [.. faulty];
        _lastPosition = new long[replicas];
        _lastTime = new long[replicas];
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

    private void Ordered(int replica, long position, long time, ulong seed, string what)
    {
        if (position <= _lastPosition[replica]) Violation($"order: replica {replica} handed over position {position} after position {_lastPosition[replica]}");
        if (time <= _lastTime[replica]) Violation($"clock: replica {replica}'s agreed time went from {_lastTime[replica]} to {time} at position {position}");
        _lastPosition[replica] = position;
        _lastTime[replica] = time;
        what += $" at {time}, seed {seed:X16}";
        if (_atPosition.TryGetValue(position, out var first))
        {
            if (first.What != what) Violation($"agreement: at position {position} replica {first.Replica} handed over {first.What}, replica {replica} {what}");
        }
        else
        {
            _atPosition[position] = (replica, what);
        }
    }

    /// <summary>A correct replica handed a request over (its result, where known already, goes to <see cref="Answered"/>).</summary>
    public void Executed(int replica, BftRequestOrdered e, byte[]? result)
    {
        if (_faulty.Contains(replica)) return;
        Ordered(replica, e.Position, e.Time, e.Seed, $"request {e.Client}/{e.Number}");
        if (!_executedAt[replica].Add((e.Client, e.Number))) Violation($"order: replica {replica} handed over request {e.Client}/{e.Number} twice");
        if (!_issued.TryGetValue((e.Client, e.Number), out byte[]? operation) || !operation.AsSpan().SequenceEqual(e.Operation))
            Violation($"validity: replica {replica} handed over request {e.Client}/{e.Number}, which its client never issued so");
        if (result != null) Answered(replica, e.Client, e.Number, result);
    }

    /// <summary>A correct replica's answer to a request: every correct replica must answer the same.</summary>
    public void Answered(int replica, int client, long number, byte[] result)
    {
        if (_faulty.Contains(replica)) return;
        if (_correctResult.TryGetValue((client, number), out var known))
        {
            if (!known.Result.AsSpan().SequenceEqual(result))
                Violation($"agreement: request {client}/{number} gave replica {known.Replica} and replica {replica} different results (their histories differ)");
        }
        else
        {
            _correctResult[(client, number)] = (replica, result);
        }
    }

    /// <summary>A correct replica completed one of its service's calls.</summary>
    public void CallCompleted(int replica, BftCallCompleted e)
    {
        if (_faulty.Contains(replica)) return;
        string outcome = e.Result == null ? "aborted" : Convert.ToHexString(e.Result);
        Ordered(replica, e.Position, e.Time, e.Seed, $"call {e.Target}/{e.Number} -> {outcome}");
        if (!_callOutcomes.TryGetValue((e.Target, e.Number), out var first)) _callOutcomes[(e.Target, e.Number)] = (replica, e.Result);
        else if (first.Result == null != (e.Result == null) || first.Result != null && !first.Result.AsSpan().SequenceEqual(e.Result))
            Violation($"calls: call {e.Target}/{e.Number} completed differently at replica {first.Replica} and replica {replica}");
    }

    /// <summary>Against a correct target: every call answered (not aborted) got the result the target's correct replicas computed.</summary>
    public void CheckCallResults(string target, BftChecker targetChecker, int callerId)
    {
        foreach (var ((name, number), (replica, result)) in _callOutcomes)
        {
            if (name != target || result == null) continue;
            if (!targetChecker._correctResult.TryGetValue((callerId, number), out var computed))
                Violation($"calls: replica {replica} got a result for call {number}, which no correct replica of {target} executed");
            else if (!computed.Result.AsSpan().SequenceEqual(result))
                Violation($"calls: replica {replica} got {Convert.ToHexString(result)} for call {number}; {target}'s correct replicas computed {Convert.ToHexString(computed.Result)}");
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
