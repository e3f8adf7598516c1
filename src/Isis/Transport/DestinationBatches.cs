using Isis.Transport.Framing;

namespace Isis.Transport;

/// <summary>A destination a transport batches packets for; transports derive their own (an address, a connection).</summary>
internal abstract class BatchedDestination(DatagramBatcher batcher)
{
    public DatagramBatcher Batcher { get; } = batcher;

    /// <summary>Packets were added since the last flush.</summary>
    public bool Pending;
}

/// <summary>
/// The send side every transport shares: per destination, a <see cref="DatagramBatcher"/> packing
/// the packets enqueued for it into datagrams (fragmenting big ones), the list of destinations with
/// packets waiting, and the counters of packets taken and refused. The transport only says how to
/// make a destination and how to send a destination's completed datagrams. Driving thread only.
/// </summary>
internal sealed class DestinationBatches<TDestination>(Func<ulong, TDestination> create, int eagerSendThreshold, TransportCounters counters)
    where TDestination : BatchedDestination
{
    private readonly Dictionary<ulong, TDestination> _all = [];
    private readonly List<TDestination> _pending = [];

    /// <summary>Every destination seen so far.</summary>
    public IEnumerable<TDestination> All => _all.Values;

    /// <summary>
    /// Adds a packet for <paramref name="destination"/> (copied). Returns the destination when so many
    /// datagrams completed that they should leave now rather than at the flush, else null. A packet over
    /// the maximum packet size is refused and counted.
    /// </summary>
    public TDestination? Add(ulong destination, ReadOnlySpan<byte> packet)
    {
        if (!_all.TryGetValue(destination, out TDestination? d))
        {
            d = create(destination);
            _all.Add(destination, d);
        }
        if (!d.Batcher.Add(packet))
        {
            Interlocked.Increment(ref counters.OversizePacketsRefused);
            return null;
        }
        Interlocked.Increment(ref counters.PacketsEnqueued);
        if (!d.Pending)
        {
            d.Pending = true;
            _pending.Add(d);
        }
        return d.Batcher.CompletedCount >= eagerSendThreshold ? d : null;
    }

    /// <summary>Seals every destination with packets waiting and hands it to <paramref name="send"/>; afterwards none is pending.</summary>
    public void Flush<TState>(TState state, Action<TDestination, TState> send)
    {
        foreach (TDestination d in _pending)
        {
            d.Batcher.Seal();
            send(d, state);
            d.Pending = false;
        }
        _pending.Clear();
    }

    /// <summary>Drops everything waiting and forgets every destination (the transport is closing).</summary>
    public void Clear()
    {
        foreach (TDestination d in _all.Values) d.Batcher.Reset();
        _all.Clear();
        _pending.Clear();
    }
}
