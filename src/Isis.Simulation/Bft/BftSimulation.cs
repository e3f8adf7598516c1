using System.Buffers.Binary;
using System.Security.Cryptography;
using Isis.Core.Bft;
using Isis.Core.Common;
using Isis.Core.Node;

namespace Isis.Simulation.Bft;

/// <summary>What one seeded BFT run did, and what its checker found.</summary>
internal sealed record BftRunResult(
    int Seed,
    IReadOnlyList<string> Violations,
    int Accepted,
    int Issued,
    long[] ExecutedPerReplica,
    long Dropped,
    long Equivocations,
    long DivergentReplies,
    long ViewChanges,
    long FinalView,
    long SimulatedMicros,
    string Fingerprint,
    IReadOnlyList<string> ReplicaStates)
{
    public bool Ok => Violations.Count == 0;
}

/// <summary>
/// Runs a BFT service of 3f+1 <see cref="PbftReplica"/>s and its <see cref="BftClient"/>s over a
/// seeded network (delay, reordering, loss, duplication) with up to f replicas faulty in the ways of
/// <see cref="ByzantineBehaviour"/>, driven by <see cref="NodeStep"/> like every other node. Every
/// correct replica runs a deterministic application (a running total: each request adds its amount
/// and answers the new total), so a difference in order shows in the results. The checker
/// (<see cref="BftChecker"/>) reads what every node handed over.
/// </summary>
internal sealed class BftSimulation
{
    private const string ServiceName = "bank";
    private readonly BftScenario _scenario;
    private readonly DeterministicRandom _random;
    private readonly BftDeployment _deployment = new();
    private readonly PbftReplica[] _replicas;
    private readonly BftClient[] _clients;
    private readonly long[] _totals;
    private readonly PriorityQueue<(int Node, byte[] Packet), (long At, long Order)> _network = new();
    private readonly BftChecker _checker;
    private readonly BftKeys? _faultyKeys; // the equivocating primary's own keys: it may seal whatever it likes with them
    private readonly List<byte[]> _heardByFaulty = new();
    private readonly Dictionary<long, byte[]> _otherDigest = new(); // the equivocating primary's second request, per seq
    private readonly List<(int Node, NodeEvent Event)> _handedOver = new();
    private readonly int[] _issued;
    private readonly IncrementalHash _log = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
    private long _order;
    private long _now;

    public BftSimulation(BftScenario scenario, int seed)
    {
        _scenario = scenario;
        Seed = seed;
        _random = new DeterministicRandom((ulong)seed * 0x9E3779B97F4A7C15UL + 0xB47);
        byte[] systemKey = new byte[32];
        for (int i = 0; i < 32; i += 8) BinaryPrimitives.WriteUInt64LittleEndian(systemKey.AsSpan(i), _random.NextUInt64());
        int n = 3 * scenario.F + 1;
        _deployment.AddService(ServiceName, [.. Enumerable.Range(0, n).Select(i => (ulong)(1000 + i))]);
        int[] clientPrincipals = [.. Enumerable.Range(0, scenario.Clients).Select(c => _deployment.AddClient((ulong)(2000 + c)))];
        int[] replicaPrincipals = _deployment.Service(ServiceName).Replicas;
        _replicas = [.. Enumerable.Range(0, n).Select(i => new PbftReplica(_deployment, ServiceName, i, BftKeys.Derive(systemKey, _deployment, replicaPrincipals[i]), scenario.Options, 0))];
        _clients = [.. clientPrincipals.Select(p => new BftClient(_deployment, ServiceName, BftKeys.Derive(systemKey, _deployment, p), scenario.Options))];
        _totals = new long[n];
        _issued = new int[scenario.Clients];
        _checker = new BftChecker(n, scenario.Faulty.Keys);
        if (scenario.Faulty.Any(f => f.Value == ByzantineBehaviour.Equivocate))
            _faultyKeys = BftKeys.Derive(systemKey, _deployment, replicaPrincipals[scenario.Faulty.First(f => f.Value == ByzantineBehaviour.Equivocate).Key]);
    }

    public int Seed { get; }

    /// <summary>Runs to the end: every request answered (then a little longer, for stragglers), or the scenario's duration.</summary>
    public BftRunResult Run()
    {
        for (int c = 0; c < _clients.Length; c++)
        {
            for (int i = 0; i < _scenario.Outstanding; i++) Issue(c);
            Step(_replicas.Length + c);
        }
        long quietUntil = long.MaxValue;
        while (_now < _scenario.Duration)
        {
            if (_checker.Accepted == _scenario.Clients * _scenario.RequestsPerClient && quietUntil == long.MaxValue) quietUntil = _now + 200_000;
            long next = NextDeadline();
            if (next > Math.Min(_scenario.Duration, quietUntil)) break;
            _now = next;
            if (_network.TryPeek(out _, out var head) && head.At <= _now)
            {
                var (node, packet) = _network.Dequeue();
                Deliver(node, packet);
            }
            else
            {
                for (int i = 0; i < NodeCount; i++)
                {
                    if (Alive(i) && Node(i).NextDeadline <= _now) Guarded(i, () => Node(i).Tick(_now));
                }
            }
        }
        if (_scenario.ExpectProgress) _checker.CheckAllAnswered(_scenario.Clients * _scenario.RequestsPerClient);
        return new BftRunResult(Seed, _checker.Violations, _checker.Accepted, _issued.Sum(),
            [.. _replicas.Select(r => r.LastExecuted)], _replicas.Sum(r => r.Dropped) + _clients.Sum(c => c.Dropped),
            _replicas.Sum(r => r.Equivocations), _clients.Sum(c => c.DivergentReplies),
            _replicas.Sum(r => r.ViewChangesStarted), _replicas.Where((_, i) => Behaviour(i) == ByzantineBehaviour.None).Max(r => r.View), _now, Convert.ToHexString(_log.GetHashAndReset())[..16],
            [.. _replicas.Select(r => r.Describe())]);
    }

    private int NodeCount => _replicas.Length + _clients.Length;

    private IProtocolNode Node(int i) => i < _replicas.Length ? _replicas[i] : _clients[i - _replicas.Length];

    private ByzantineBehaviour Behaviour(int node) =>
        node < _replicas.Length && _scenario.Faulty.TryGetValue(node, out ByzantineBehaviour b) ? b : ByzantineBehaviour.None;

    private bool Alive(int node) => !_broken.Contains(node) && !(Behaviour(node) == ByzantineBehaviour.Crash && _now >= _scenario.CrashAt);

    private readonly HashSet<int> _broken = new(); // nodes that broke an invariant: stopped, as the runtime stops them

    /// <summary>Runs one input of a node; a broken invariant is reported and the node stops.</summary>
    private void Guarded(int node, Action input)
    {
        try
        {
            input();
            Step(node);
        }
        catch (ProtocolInvariantException e)
        {
            _checker.InvariantBroken(node, e.Message);
            _broken.Add(node);
            NodeStep.Discard(Node(node), null);
        }
    }

    private long NextDeadline()
    {
        long next = _network.TryPeek(out _, out var head) ? head.At : long.MaxValue;
        for (int i = 0; i < NodeCount; i++)
        {
            if (Alive(i)) next = Math.Min(next, Node(i).NextDeadline);
        }
        return Math.Max(next, _now);
    }

    private void Issue(int client)
    {
        if (_issued[client] >= _scenario.RequestsPerClient) return;
        _issued[client]++;
        long amount = 1 + _random.Next(1000);
        var operation = new byte[8];
        BinaryPrimitives.WriteInt64LittleEndian(operation, amount);
        long number = _clients[client].Invoke(operation, _now);
        _checker.Issued(_clients[client].Principal, number, operation);
    }

    private void Deliver(int node, byte[] packet)
    {
        if (!Alive(node)) return;
        if (Behaviour(node) is ByzantineBehaviour.Replay or ByzantineBehaviour.Equivocate) _heardByFaulty.Add(packet);
        Guarded(node, () => Node(node).Receive(0, packet, _now));
    }

    /// <summary>Runs the node's outputs through the step function, then what its events ask (answers, next requests), until it is quiet.</summary>
    private void Step(int node)
    {
        var ports = new Ports(this, node);
        while (Node(node).HasReady)
        {
            NodeStep.Run(Node(node), null, ports);
            foreach (var (from, e) in _handedOver.ToList()) Handle(from, e);
            _handedOver.Clear();
        }
    }

    private void Handle(int node, NodeEvent e)
    {
        Log(node, e.ToString());
        switch (e)
        {
            case BftRequestOrdered ordered:
                long amount = BinaryPrimitives.ReadInt64LittleEndian(ordered.Operation);
                _totals[node] += amount;
                long answer = Behaviour(node) == ByzantineBehaviour.WrongReplies ? _totals[node] + 1_000_003 : _totals[node];
                var result = new byte[8];
                BinaryPrimitives.WriteInt64LittleEndian(result, answer);
                _checker.Executed(node, ordered, result);
                _replicas[node].Reply(ordered.Client, ordered.Number, result, _now);
                break;
            case BftReplyAccepted accepted:
                int client = node - _replicas.Length;
                _checker.ReplyAccepted(_clients[client].Principal, accepted.Number, accepted.Result);
                Issue(client);
                break;
        }
    }

    private void Log(int node, string what)
    {
        Span<byte> line = stackalloc byte[16];
        BinaryPrimitives.WriteInt64LittleEndian(line, _now);
        BinaryPrimitives.WriteInt64LittleEndian(line[8..], node);
        _log.AppendData(line);
        _log.AppendData(System.Text.Encoding.UTF8.GetBytes(what));
    }

    /// <summary>Puts a packet from <paramref name="from"/> on the wire, as its behaviour has it.</summary>
    private void Transmit(int from, ulong destination, byte[] packet)
    {
        ByzantineBehaviour behaviour = Behaviour(from);
        if (behaviour == ByzantineBehaviour.Silent || !Alive(from)) return;
        int to = destination >= 2000 ? _replicas.Length + (int)(destination - 2000) : (int)(destination - 1000);
        switch (behaviour)
        {
            case ByzantineBehaviour.ForgeSender:
                byte[] forged = (byte[])packet.Clone();
                int victim = _deployment.Service(ServiceName).Replicas[(from + 1) % _replicas.Length];
                BinaryPrimitives.WriteInt32LittleEndian(forged.AsSpan(2), victim);
                Wire(from, to, forged);
                break;
            case ByzantineBehaviour.Replay when _heardByFaulty.Count > 0 && _random.Next(4) == 0:
                Wire(from, _random.Next(_replicas.Length), _heardByFaulty[_random.Next(_heardByFaulty.Count)]);
                break;
            case ByzantineBehaviour.Equivocate when packet.Length > 1 && packet[1] == (byte)BftKind.PrePrepare && to % 2 == 1:
                packet = OtherPrePrepare(packet, to) ?? packet;
                break;
            case ByzantineBehaviour.Equivocate when packet.Length > 1 && packet[1] == (byte)BftKind.Commit && to % 2 == 1:
                // It backs its second request with its commit too, to the half that got that one.
                if (BftWire.TryReadVote(BftWire.BodyOf(packet), out long view, out long seq, out _) && _otherDigest.TryGetValue(seq, out byte[]? other))
                    packet = BftWire.Seal(_faultyKeys!, BftKind.Commit, BftWire.Vote(view, seq, other), [_deployment.Service(ServiceName).Replicas[to]]);
                break;
        }
        Wire(from, to, packet);
    }

    /// <summary>The same (view, seq) as the equivocating primary's pre-prepare, with another request it heard of.</summary>
    private byte[]? OtherPrePrepare(byte[] packet, int to)
    {
        if (!BftWire.TryReadPrePrepare(BftWire.BodyOf(packet), out long view, out long seq, out ReadOnlySpan<byte> request)) return null;
        byte[] digest = BftWire.RequestDigest(BftWire.BodyOf(request));
        foreach (byte[] heard in _heardByFaulty)
        {
            if (heard[1] != (byte)BftKind.Request) continue;
            byte[] other = BftWire.RequestDigest(BftWire.BodyOf(heard));
            if (other.AsSpan().SequenceEqual(digest) || _otherDigest.TryGetValue(seq, out byte[]? chosen) && !chosen.AsSpan().SequenceEqual(other)) continue;
            _otherDigest[seq] = other;
            return BftWire.Seal(_faultyKeys!, BftKind.PrePrepare, BftWire.PrePrepare(view, seq, heard), [_deployment.Service(ServiceName).Replicas[to]]);
        }
        return null;
    }

    private void Wire(int from, int to, byte[] packet)
    {
        if (_random.NextDouble() < _scenario.Loss) return;
        int copies = _random.NextDouble() < _scenario.Duplication ? 2 : 1;
        long slow = Behaviour(from) == ByzantineBehaviour.Slow ? 10 : 1;
        for (int i = 0; i < copies; i++)
        {
            long delay = slow * _random.NextInRange(_scenario.MinDelay, _scenario.MaxDelay);
            _network.Enqueue((to, packet), (_now + delay, _order++));
        }
    }

    private readonly struct Ports(BftSimulation sim, int node) : INodePorts
    {
        public bool MakeDurable(StepSource source, in Ready ready) => true; // the BFT nodes keep nothing on disk yet

        public void Send(StepSource source, in OutboundPacket packet) => sim.Transmit(node, packet.Destination, packet.Bytes.ToArray());

        public void FlushSends()
        {
        }

        public void Deliver(StepSource source, NodeEvent e, long time) => sim._handedOver.Add((node, e));
    }
}
