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
    long[] SequenceNumbersPerReplica,
    long Dropped,
    long Equivocations,
    long DivergentReplies,
    long DivergentMessages,
    long ViewChanges,
    long ClockRefusals,
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
    private const string Bank = "bank", Store = "store";
    private readonly BftScenario _scenario;
    private readonly string[] _services; // the clients call the first; with two tiers it calls the second
    private readonly int[] _serviceOf; // per replica node: its service's index
    private readonly int[] _indexIn; // per replica node: its index in its service
    private readonly BftChecker[] _checkers;
    private readonly Dictionary<int, BftKeys> _ownKeysOfFaulty = new(); // a faulty replica may seal whatever it likes with its own keys
    private readonly Dictionary<long, (int Client, long Number)>[] _callFor; // per replica node: a call of the store, and the request it serves
    private readonly DeterministicRandom _random;
    private readonly BftDeployment _deployment = new();
    private readonly PbftReplica[] _replicas;
    private readonly BftClient[] _clients;
    private readonly long[] _totals; // each replica's application: a running total
    private readonly PriorityQueue<(int Node, byte[] Packet), (long At, long Order)> _network = new();
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
        _services = scenario.Tiers == 2 ? [Store, Bank] : [Bank];
        int[] sizes = scenario.Tiers == 2 ? [3 * scenario.F + 1, 3 * scenario.TargetF + 1] : [3 * scenario.F + 1];
        for (int t = 0; t < _services.Length; t++) _deployment.AddService(_services[t], [.. Enumerable.Range(0, sizes[t]).Select(i => (ulong)(1000 + 100 * t + i))]);
        int[] clientPrincipals = [.. Enumerable.Range(0, scenario.Clients).Select(c => _deployment.AddClient((ulong)(2000 + c)))];
        _serviceOf = [.. Enumerable.Range(0, _services.Length).SelectMany(t => Enumerable.Repeat(t, sizes[t]))];
        _indexIn = [.. Enumerable.Range(0, _services.Length).SelectMany(t => Enumerable.Range(0, sizes[t]))];
        _replicas = new PbftReplica[_serviceOf.Length];
        for (int node = 0; node < _replicas.Length; node++)
        {
            BftService service = _deployment.Service(_services[_serviceOf[node]]);
            var keys = BftKeys.Derive(systemKey, _deployment, service.Replicas[_indexIn[node]]);
            _replicas[node] = new PbftReplica(_deployment, service.Name, _indexIn[node], keys, scenario.Options, 0);
            if (Behaviour(node) != ByzantineBehaviour.None) _ownKeysOfFaulty[node] = keys;
        }
        _clients = [.. clientPrincipals.Select(p => new BftClient(_deployment, _services[0], BftKeys.Derive(systemKey, _deployment, p), scenario.Options))];
        // Transmit maps an endpoint to its node through the deployment: node i is principal i.
        if (_replicas.Select(r => r.Principal).Concat(_clients.Select(c => c.Principal)).Where((p, i) => p != i).Any())
            throw new InvalidOperationException("the simulation's nodes must be numbered as the deployment's principals");
        _totals = new long[_replicas.Length];
        _callFor = [.. _replicas.Select(_ => new Dictionary<long, (int, long)>())];
        _issued = new int[scenario.Clients];
        _checkers = [.. Enumerable.Range(0, _services.Length).Select(t => new BftChecker(sizes[t], (t == 0 ? scenario.Faulty : scenario.TargetFaulty).Keys))];
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
            if (_checkers[0].Accepted == _scenario.Clients * _scenario.RequestsPerClient && quietUntil == long.MaxValue) quietUntil = _now + 200_000;
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
        BftChecker front = _checkers[0];
        if (_scenario.ExpectProgress) front.CheckAllAnswered(_scenario.Clients * _scenario.RequestsPerClient);
        bool targetCompromised = _scenario.TargetFaulty.Count > _scenario.TargetF;
        if (_services.Length == 2 && !targetCompromised) front.CheckCallResults(Bank, _checkers[1], _deployment.ServiceId(_deployment.Service(Store)));
        List<string> violations = [.. _checkers.SelectMany((c, t) => c.Violations.Select(v => $"{_services[t]}: {v}"))];
        return new BftRunResult(Seed, violations, front.Accepted, _issued.Sum(),
            [.. _replicas.Select(r => r.InputsExecuted)], [.. _replicas.Select(r => r.LastExecuted)], _replicas.Sum(r => r.Dropped) + _clients.Sum(c => c.Dropped),
            _replicas.Sum(r => r.Equivocations), _clients.Sum(c => c.DivergentReplies), _replicas.Sum(r => r.DivergentMessages),
            _replicas.Sum(r => r.ViewChangesStarted), _replicas.Sum(r => r.ClockRefusals), _replicas.Where((_, i) => Behaviour(i) == ByzantineBehaviour.None).Max(r => r.View), _now, Convert.ToHexString(_log.GetHashAndReset())[..16],
            [.. _replicas.Select(r => r.Describe())]);
    }

    private int NodeCount => _replicas.Length + _clients.Length;

    private IProtocolNode Node(int i) => i < _replicas.Length ? _replicas[i] : _clients[i - _replicas.Length];

    private ByzantineBehaviour Behaviour(int node) =>
        node < _serviceOf.Length && (_serviceOf[node] == 0 ? _scenario.Faulty : _scenario.TargetFaulty).TryGetValue(_indexIn[node], out ByzantineBehaviour b) ? b : ByzantineBehaviour.None;

    private BftChecker CheckerOf(int node) => _checkers[_serviceOf[node]];

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
            (node < _replicas.Length ? CheckerOf(node) : _checkers[0]).InvariantBroken(node, e.Message);
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
        _checkers[0].Issued(_clients[client].Principal, number, operation);
    }

    private void Deliver(int node, byte[] packet)
    {
        if (!Alive(node)) return;
        if (Behaviour(node) is ByzantineBehaviour.Replay or ByzantineBehaviour.Equivocate or ByzantineBehaviour.LyingViewChange) _heardByFaulty.Add(packet);
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
            case BftRequestOrdered ordered when _services.Length == 2 && _serviceOf[node] == 0:
                // The store serves each client request by calling the bank, and answers when the call completes.
                CheckerOf(node).Executed(_indexIn[node], ordered, null);
                long call = _replicas[node].Call(Bank, ordered.Operation, _scenario.CallTimeout, _now);
                _callFor[node][call] = (ordered.Client, ordered.Number);
                if (Behaviour(node) == ByzantineBehaviour.None) _checkers[1].Issued(_deployment.ServiceId(_deployment.Service(Store)), call, ordered.Operation);
                break;
            case BftRequestOrdered ordered:
                long amount = BinaryPrimitives.ReadInt64LittleEndian(ordered.Operation);
                _totals[node] += amount;
                byte[] result = Answer(node, _totals[node]);
                CheckerOf(node).Executed(_indexIn[node], ordered, result);
                _replicas[node].Reply(ordered.Client, ordered.Number, result, _now);
                break;
            case BftCallCompleted completed:
                CheckerOf(node).CallCompleted(_indexIn[node], completed);
                (int client, long number) = _callFor[node][completed.Number];
                _callFor[node].Remove(completed.Number);
                byte[] answer = completed.Result is { } bankSays ? Answer(node, BinaryPrimitives.ReadInt64LittleEndian(bankSays)) : Answer(node, -1);
                CheckerOf(node).Answered(_indexIn[node], client, number, answer);
                _replicas[node].Reply(client, number, answer, _now);
                break;
            case BftReplyAccepted accepted:
                int c = node - _replicas.Length;
                _checkers[0].ReplyAccepted(_clients[c].Principal, accepted.Number, accepted.Result);
                Issue(c);
                break;
        }
    }

    /// <summary>A replica's answer: the value, or a wrong one if it answers wrongly on purpose.</summary>
    private byte[] Answer(int node, long value)
    {
        var result = new byte[8];
        BinaryPrimitives.WriteInt64LittleEndian(result, Behaviour(node) == ByzantineBehaviour.WrongReplies ? value + 1_000_003 : value);
        return result;
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
        int to = _deployment.PrincipalAt(destination); // nodes are numbered as the deployment numbers its principals
        switch (behaviour)
        {
            case ByzantineBehaviour.ForgeSender:
                byte[] forged = (byte[])packet.Clone();
                int[] peers = _deployment.Service(_services[_serviceOf[from]]).Replicas;
                int victim = peers[(_indexIn[from] + 1) % peers.Length];
                BinaryPrimitives.WriteInt32LittleEndian(forged.AsSpan(2), victim);
                Wire(from, to, forged);
                break;
            case ByzantineBehaviour.Replay when _heardByFaulty.Count > 0 && _random.Next(4) == 0:
                Wire(from, _random.Next(_replicas.Length), _heardByFaulty[_random.Next(_heardByFaulty.Count)]); // to any replica, of either tier
                break;
            case ByzantineBehaviour.Equivocate when packet.Length > 1 && packet[1] == (byte)BftKind.PrePrepare && _indexIn[to] % 2 == 1:
                packet = OtherPrePrepare(from, packet, to) ?? packet;
                break;
            case ByzantineBehaviour.Equivocate when packet.Length > 1 && packet[1] == (byte)BftKind.Commit && _indexIn[to] % 2 == 1:
                // It backs its second request with its commit too, to the half that got that one.
                if (BftWire.TryReadVote(BftWire.BodyOf(packet), out long view, out long seq, out _) && _otherDigest.TryGetValue(seq, out byte[]? other))
                    packet = BftWire.Seal(_ownKeysOfFaulty[from], BftKind.Commit, BftWire.Vote(view, seq, other), [_replicas[to].Principal]);
                break;
            case ByzantineBehaviour.WrongClock when packet.Length > 1 && packet[1] == (byte)BftKind.PrePrepare
                && BftWire.TryReadPrePrepare(BftWire.BodyOf(packet), out long v, out long s, out ReadOnlySpan<byte> stamped) && stamped.Length > 9:
                long hourAhead = BinaryPrimitives.ReadInt64LittleEndian(stamped[1..]) + 3_600_000_000;
                packet = BftWire.Seal(_ownKeysOfFaulty[from], BftKind.PrePrepare, BftWire.PrePrepare(v, s, Proposal.Stamp(stamped, hourAhead)), [_replicas[to].Principal]);
                break;
            case ByzantineBehaviour.LyingViewChange when packet.Length > 1 && packet[1] is (byte)BftKind.PrePrepare or (byte)BftKind.NewView:
                return; // never leads a view
            case ByzantineBehaviour.LyingViewChange when packet.Length > 1 && packet[1] == (byte)BftKind.ViewChange:
                packet = LyingViewChange(from, packet, to) ?? packet;
                break;
            case ByzantineBehaviour.Compromised when packet.Length > 1 && packet[1] == (byte)BftKind.ReplyBundle && to < _replicas.Length && _serviceOf[to] != _serviceOf[from] && _indexIn[to] % 2 == 1:
                packet = ForkedBundle(from, packet, to) ?? packet;
                break;
            case ByzantineBehaviour.SlipInput when packet.Length > 1 && packet[1] == (byte)BftKind.PrePrepare:
                packet = WithSlippedInput(from, packet, to) ?? packet;
                break;
            case ByzantineBehaviour.Compromised when packet.Length > 1 && packet[1] == (byte)BftKind.CallReply && to < _replicas.Length && _indexIn[to] % 2 == 1:
                // To every other caller replica, another result: with f+1 like it, a second valid certificate.
                byte[] body = BftWire.BodyOf(packet).ToArray();
                body[^1] ^= 0x5A;
                packet = BftWire.Seal(_ownKeysOfFaulty[from], BftKind.CallReply, body, [_replicas[to].Principal]);
                break;
        }
        Wire(from, to, packet);
    }

    /// <summary>
    /// A compromised responder's bundle for one caller replica: another result, in replies made by
    /// every compromised replica of its service with its own keys (with more than f of them, a valid
    /// certificate for a result the correct replicas never computed).
    /// </summary>
    private byte[]? ForkedBundle(int from, byte[] packet, int to)
    {
        var r = new Isis.Core.Wire.WireReader(BftWire.BodyOf(packet));
        if (r.Count(4) < 1 || !r.Ok) return null;
        byte[] body = BftWire.BodyOf(r.Bytes()).ToArray();
        if (!r.Ok || body.Length <= 16) return null;
        body[^1] ^= 0x5A;
        BftService caller = _deployment.ServiceById(BinaryPrimitives.ReadInt32LittleEndian(body))!;
        var w = new Isis.Core.Wire.PacketWriter().BeginRecord();
        var colluders = _ownKeysOfFaulty.Where(k => _serviceOf[k.Key] == _serviceOf[from] && Behaviour(k.Key) == ByzantineBehaviour.Compromised).ToList();
        w.I32(colluders.Count);
        foreach (var (_, keys) in colluders) w.Bytes(BftWire.Seal(keys, BftKind.CallReply, body, caller.Replicas));
        return BftWire.Seal(_ownKeysOfFaulty[from], BftKind.ReplyBundle, w.FinishRecord(), [_replicas[to].Principal]);
    }

    /// <summary>The primary's pre-prepare with one more input at the end of its batch: a request under the first client's name that it never sent.</summary>
    private byte[]? WithSlippedInput(int from, byte[] packet, int to)
    {
        BftService service = _deployment.Service(_services[_serviceOf[from]]);
        if (!BftWire.TryReadPrePrepare(BftWire.BodyOf(packet), out long view, out long seq, out ReadOnlySpan<byte> proposal)
            || !Proposal.TryReadBatch(proposal, _deployment, service, null, out _) || proposal.IsEmpty) return null;
        var items = new List<byte[]>();
        var r = new Isis.Core.Wire.WireReader(proposal[9..]);
        for (int i = 0, n = r.Count(4); i < n && r.Ok; i++) items.Add(r.Bytes());
        int client = _clients[0].Principal;
        var operation = new byte[8];
        BinaryPrimitives.WriteInt64LittleEndian(operation, 666);
        byte[] forged = BftWire.Seal(_ownKeysOfFaulty[from], BftKind.Request, BftWire.RequestBody(client, 1_000_000 + seq, operation), [.. service.Replicas.Where(p => p != _replicas[from].Principal)]);
        BinaryPrimitives.WriteInt32LittleEndian(forged.AsSpan(2), client);
        items.Add(Proposal.OfRequest(forged));
        byte[] batch = Proposal.Stamp(Proposal.Batch(items), BinaryPrimitives.ReadInt64LittleEndian(proposal[1..]));
        return BftWire.Seal(_ownKeysOfFaulty[from], BftKind.PrePrepare, BftWire.PrePrepare(view, seq, batch), [_replicas[to].Principal]);
    }

    /// <summary>The same (view, seq) as the equivocating primary's pre-prepare, with another request it heard of.</summary>
    private byte[]? OtherPrePrepare(int from, byte[] packet, int to)
    {
        BftService service = _deployment.Service(_services[_serviceOf[from]]);
        if (!BftWire.TryReadPrePrepare(BftWire.BodyOf(packet), out long view, out long seq, out ReadOnlySpan<byte> proposal)
            || !Proposal.TryReadBatch(proposal, _deployment, service, null, out BatchMeaning meant)) return null;
        foreach (byte[] heard in _heardByFaulty)
        {
            if (heard[1] != (byte)BftKind.Request) continue;
            byte[] instead = Proposal.Stamp(Proposal.Batch([Proposal.OfRequest(heard)]), meant.Time);
            if (!Proposal.TryReadBatch(instead, _deployment, service, null, out BatchMeaning other)) continue;
            if (other.Digest.AsSpan().SequenceEqual(meant.Digest) || _otherDigest.TryGetValue(seq, out byte[]? chosen) && !chosen.AsSpan().SequenceEqual(other.Digest)) continue;
            _otherDigest[seq] = other.Digest;
            return BftWire.Seal(_ownKeysOfFaulty[from], BftKind.PrePrepare, BftWire.PrePrepare(view, seq, instead), [_replicas[to].Principal]);
        }
        return null;
    }

    /// <summary>The faulty replica's view change, re-signed with its own key after its lies: for each sequence number it knows, another request, "prepared" in the latest earlier view.</summary>
    private byte[]? LyingViewChange(int from, byte[] packet, int to)
    {
        BftService service = _deployment.Service(_services[_serviceOf[from]]);
        BftKeys keys = _ownKeysOfFaulty[from];
        if (PbftReplica.DecodeViewChange(BftWire.BodyOf(packet), keys, _deployment, service, _scenario.Options.CheckpointInterval) is not { } claim || claim.View < 2) return null;
        var prepared = new List<(long, long, byte[], byte[])>();
        var prePrepared = new List<(long, long, byte[])>(claim.PrePrepared);
        foreach (long seq in claim.Prepared.Select(p => p.Seq).Concat(claim.PrePrepared.Select(p => p.Seq)).Distinct())
        {
            var honest = claim.Prepared.Where(p => p.Seq == seq).Select(p => p.Digest).Concat(claim.PrePrepared.Where(p => p.Seq == seq).Select(p => p.Digest)).ToList();
            foreach (byte[] heard in _heardByFaulty.Where(h => h.Length > 1 && h[1] == (byte)BftKind.Request))
            {
                byte[] lie = Proposal.Stamp(Proposal.Batch([Proposal.OfRequest(heard)]), _now);
                if (!Proposal.TryReadBatch(lie, _deployment, service, null, out BatchMeaning m) || honest.Any(d => d.AsSpan().SequenceEqual(m.Digest))) continue;
                prepared.Add((seq, claim.View - 1, m.Digest, lie));
                prePrepared.Add((seq, claim.View - 1, m.Digest));
                break;
            }
        }
        byte[] signed = PbftReplica.EncodeViewChange(keys, claim.Replica, claim.View, claim.Stable, claim.StableDigest, claim.Checkpoints, prepared, prePrepared);
        return BftWire.Seal(keys, BftKind.ViewChange, signed, [_replicas[to].Principal]);
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
