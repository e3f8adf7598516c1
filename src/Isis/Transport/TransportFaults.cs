using System.Net;

namespace Isis.Transport;

/// <summary>Sends one datagram for real.</summary>
internal delegate void DatagramSender(SocketAddress destination, ReadOnlySpan<byte> datagram);

/// <summary>
/// Drops, duplicates and delays outgoing datagrams at random (seeded), for tests. Delayed datagrams
/// are copied and held until their time has come, then sent from the send path, which also
/// reorders them relative to later ones. Runs on the sending thread only.
/// </summary>
internal sealed class TransportFaults
{
    private readonly TransportFaultOptions _options;
    private readonly TransportCounters _counters;
    private readonly DatagramSender _send;
    private readonly Random _random;
    private readonly PriorityQueue<Held, long> _held = new();
    private readonly long _maxDelayMicros;

    private readonly record struct Held(SocketAddress Destination, byte[] Datagram);

    public TransportFaults(TransportFaultOptions options, TransportCounters counters, DatagramSender send)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        _options = options;
        _counters = counters;
        _send = send;
        _random = new Random(options.Seed);
        _maxDelayMicros = (long)options.MaxDelay.TotalMicroseconds;
    }

    /// <summary>Datagrams currently held back.</summary>
    public int HeldCount => _held.Count;

    /// <summary>Sends <paramref name="datagram"/> with faults applied; it may be read only during the call.</summary>
    public void Send(SocketAddress destination, ReadOnlySpan<byte> datagram, long nowMicros)
    {
        if (Chance(_options.DropProbability))
        {
            Interlocked.Increment(ref _counters.InjectedDrops);
            return;
        }
        int copies = 1;
        if (Chance(_options.DuplicateProbability))
        {
            Interlocked.Increment(ref _counters.InjectedDuplicates);
            copies = 2;
        }
        for (int i = 0; i < copies; i++)
        {
            if (Chance(_options.DelayProbability)) Hold(destination, datagram, nowMicros);
            else _send(destination, datagram);
        }
    }

    /// <summary>When the next held datagram is due (long.MaxValue: none held).</summary>
    public long NextDue => _held.TryPeek(out _, out long due) ? due : long.MaxValue;

    /// <summary>Sends the held datagrams whose time has come.</summary>
    public void ReleaseDue(long nowMicros)
    {
        while (_held.TryPeek(out _, out long due) && due <= nowMicros) SendOldestHeld();
    }

    /// <summary>Sends every held datagram now.</summary>
    public void ReleaseAll()
    {
        while (_held.Count > 0) SendOldestHeld();
    }

    private void Hold(SocketAddress destination, ReadOnlySpan<byte> datagram, long nowMicros)
    {
        Interlocked.Increment(ref _counters.InjectedDelays);
        // Bounded: when full, the datagram due first leaves early rather than growing the queue.
        if (_held.Count >= _options.MaxHeldDatagrams) SendOldestHeld();
        long due = nowMicros + (_maxDelayMicros == 0 ? 0 : _random.NextInt64(_maxDelayMicros + 1));
        _held.Enqueue(new Held(destination, datagram.ToArray()), due);
    }

    private void SendOldestHeld()
    {
        Held h = _held.Dequeue();
        _send(h.Destination, h.Datagram);
    }

    private bool Chance(double probability) => probability > 0 && _random.NextDouble() < probability;
}
