using Isis.Core.Common;

namespace Isis.Simulation.Network;

/// <summary>Fault settings of the simulated network. All probabilities are per packet.</summary>
internal sealed record NetworkFaults
{
    public double LossRate { get; init; }

    public double DuplicateRate { get; init; }

    /// <summary>Shortest one-way delay, microseconds. Defaults to 50.</summary>
    public long MinDelay { get; init; } = 50;

    /// <summary>Longest one-way delay; a wide range reorders packets. Defaults to 300.</summary>
    public long MaxDelay { get; init; } = 300;

    public static readonly NetworkFaults None = new() { MinDelay = 50, MaxDelay = 50 };
}

/// <summary>
/// A seeded datagram network: every packet gets a random delay (so packets reorder), may be lost
/// or duplicated, and is dropped while its endpoints are on different sides of a partition.
/// Packets to a paused endpoint wait, as they would in a socket buffer. A packet to an IP multicast
/// group endpoint is one send that reaches every endpoint that joined it (not the sender), each
/// copy lost, duplicated, delayed and cut on its own, as on a real network.
/// </summary>
internal sealed class SimulatedNetwork
{
    private readonly DeterministicRandom _random;
    private readonly PriorityQueue<Envelope, (long Time, long Order)> _inFlight = new();
    private readonly HashSet<(ulong, ulong)> _cut = new();
    private long _order;

    // IP multicast: the endpoints receiving on each group endpoint (sorted, so fan-out is deterministic),
    // and the address each process endpoint joined for each of its groups.
    private readonly Dictionary<ulong, SortedSet<ulong>> _multicastReceivers = new();
    private readonly Dictionary<(ulong Endpoint, ulong Group), ulong> _joined = new();

    public SimulatedNetwork(DeterministicRandom random) => _random = random;

    public NetworkFaults Faults { get; set; } = NetworkFaults.None;

    public long Sent { get; private set; }

    /// <summary>Bytes of every packet handed to the network (lost or not), headers included.</summary>
    public long BytesSent { get; private set; }

    public long Lost { get; private set; }

    public long Duplicated { get; private set; }

    public long Partitioned { get; private set; }

    public int InFlight => _inFlight.Count;

    internal readonly record struct Envelope(ulong From, ulong To, byte[] Bytes);

    /// <summary>Multicast copies handed to receivers (one per receiver of each multicast send).</summary>
    public long MulticastCopies { get; private set; }

    /// <summary>
    /// Process <paramref name="endpoint"/> receives its group <paramref name="group"/>'s traffic on
    /// <paramref name="address"/> from now on (0: on none), leaving the address it used before.
    /// </summary>
    public void SetMulticast(ulong endpoint, ulong group, ulong address)
    {
        if (_joined.Remove((endpoint, group), out ulong previous)) Leave(endpoint, previous);
        if (address == 0) return;
        _joined[(endpoint, group)] = address;
        if (!_multicastReceivers.TryGetValue(address, out SortedSet<ulong>? receivers)) _multicastReceivers[address] = receivers = [];
        receivers.Add(endpoint);
    }

    /// <summary>A process crashed: its sockets, and their multicast memberships, are gone.</summary>
    public void ForgetMulticast(ulong endpoint)
    {
        foreach (var key in _joined.Keys.Where(k => k.Endpoint == endpoint).ToList())
        {
            Leave(endpoint, _joined[key]);
            _joined.Remove(key);
        }
    }

    private void Leave(ulong endpoint, ulong address)
    {
        // Another group of the same process may share the address: it stays joined for that one.
        if (_joined.Any(e => e.Key.Endpoint == endpoint && e.Value == address)) return;
        if (_multicastReceivers.TryGetValue(address, out SortedSet<ulong>? receivers)) receivers.Remove(endpoint);
    }

    private readonly Dictionary<ulong, long> _sentFrom = new();
    private readonly Dictionary<ulong, long> _arrivedAt = new();

    /// <summary>Packets <paramref name="endpoint"/> handed to the network (a multicast send counts once).</summary>
    public long SentFrom(ulong endpoint) => _sentFrom.GetValueOrDefault(endpoint);

    /// <summary>Packets that arrived at <paramref name="endpoint"/> (after loss, duplicates included).</summary>
    public long ArrivedAt(ulong endpoint) => _arrivedAt.GetValueOrDefault(endpoint);

    public void Send(ulong from, ulong to, byte[] bytes, long now)
    {
        Sent++;
        _sentFrom[from] = _sentFrom.GetValueOrDefault(from) + 1;
        BytesSent += bytes.Length;
        if (Core.Identity.EndpointCodec.IsMulticast(to))
        {
            if (!_multicastReceivers.TryGetValue(to, out SortedSet<ulong>? receivers)) return;
            foreach (ulong receiver in receivers)
            {
                if (receiver == from) continue; // the sender's own copy is skipped, as the runtime's transport skips it
                MulticastCopies++;
                Carry(from, receiver, bytes, now);
            }
            return;
        }
        Carry(from, to, bytes, now);
    }

    /// <summary>One copy of a packet on its way from one endpoint to another: cut, lost, duplicated and delayed on its own.</summary>
    private void Carry(ulong from, ulong to, byte[] bytes, long now)
    {
        if (_cut.Contains((from, to))) { Partitioned++; return; }
        if (_random.Chance(Faults.LossRate)) { Lost++; return; }
        Enqueue(from, to, bytes, now);
        if (_random.Chance(Faults.DuplicateRate))
        {
            Duplicated++;
            Enqueue(from, to, bytes, now);
        }
    }

    private void Enqueue(ulong from, ulong to, byte[] bytes, long now)
    {
        long delay = _random.NextInRange(Faults.MinDelay, Faults.MaxDelay + 1);
        _inFlight.Enqueue(new Envelope(from, to, bytes), (now + delay, _order++));
    }

    /// <summary>When the next packet arrives, if any is in flight.</summary>
    public bool TryPeekTime(out long time)
    {
        bool any = _inFlight.TryPeek(out _, out var key);
        time = key.Time;
        return any;
    }

    /// <summary>Takes the next packet due at or before <paramref name="now"/>.</summary>
    public bool TryTakeDue(long now, out Envelope envelope)
    {
        if (_inFlight.TryPeek(out envelope, out var key) && key.Time <= now)
        {
            _inFlight.Dequeue();
            // A partition that started while the packet was in flight still cuts it.
            if (_cut.Contains((envelope.From, envelope.To))) { Partitioned++; return TryTakeDue(now, out envelope); }
            _arrivedAt[envelope.To] = _arrivedAt.GetValueOrDefault(envelope.To) + 1;
            return true;
        }
        envelope = default;
        return false;
    }

    /// <summary>Cuts every link between the two sides, in both directions.</summary>
    public void Partition(IReadOnlyCollection<ulong> sideA, IReadOnlyCollection<ulong> sideB)
    {
        foreach (ulong a in sideA)
        {
            foreach (ulong b in sideB)
            {
                _cut.Add((a, b));
                _cut.Add((b, a));
            }
        }
    }

    public void HealPartitions() => _cut.Clear();
}
