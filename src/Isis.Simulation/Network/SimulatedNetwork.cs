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
/// Packets to a paused endpoint wait, as they would in a socket buffer.
/// </summary>
internal sealed class SimulatedNetwork
{
    private readonly DeterministicRandom _random;
    private readonly PriorityQueue<Envelope, (long Time, long Order)> _inFlight = new();
    private readonly HashSet<(ulong, ulong)> _cut = new();
    private long _order;

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

    public void Send(ulong from, ulong to, byte[] bytes, long now)
    {
        Sent++;
        BytesSent += bytes.Length;
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
