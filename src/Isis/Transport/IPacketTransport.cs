using System.Net;
using Isis.Transport.Framing;

namespace Isis.Transport;

/// <summary>
/// What the event loop drives to move the core's packets: the one abstraction every transport
/// implements (Kestrel's socket transport is the model). The loop knows nothing else about the
/// network; a transport knows nothing about the protocol beyond packets, endpoints and its own
/// framing. Socket errors are classified in one place (<see cref="SocketErrors"/>), counted in
/// <see cref="Counters"/>, and never thrown at the loop.
/// </summary>
/// <remarks>
/// <para>Threading: everything but <see cref="Wake"/> belongs to the thread that drives the core
/// (the loop, or an API thread holding the driver lock); <see cref="Wake"/> may be called from any
/// thread.</para>
/// <para>The conformance suite (<c>tests/Isis.Tests/Transport/Conformance</c>) runs the same tests
/// against every implementation: a stream's order, batching, fragmentation, hostile input, close
/// and restart, wake-ups, back-pressure.</para>
/// </remarks>
internal interface IPacketTransport : IDisposable
{
    /// <summary>This transport's address as the core's endpoint number (what peers send to).</summary>
    ulong LocalEndpoint { get; }

    /// <summary>The bound address (with the actual port when 0 was asked for).</summary>
    IPEndPoint LocalIPEndPoint { get; }

    /// <summary>What the transport did: packets, datagrams or frames, bytes, drops by reason, errors.</summary>
    TransportCounters Counters { get; }

    /// <summary>True until <see cref="IDisposable.Dispose"/>.</summary>
    bool IsReceiving { get; }

    /// <summary>
    /// Adds a packet for <paramref name="destination"/> (copied: the span may be reused at once),
    /// sent at the next <see cref="Flush"/> or earlier if many pile up. A packet over the maximum
    /// packet size is refused and counted, never thrown.
    /// </summary>
    void Enqueue(ulong destination, ReadOnlySpan<byte> packet);

    /// <summary>Sends everything enqueued.</summary>
    void Flush();

    /// <summary>
    /// Waits until something can be read (true) or <paramref name="timeoutMicros"/> passed (false),
    /// never returning before the timeout without a reason. Negative: no limit.
    /// </summary>
    bool WaitReadable(long timeoutMicros);

    /// <summary>
    /// Reads without blocking, up to <paramref name="maxReads"/> datagrams or frames, handing each
    /// packet to <paramref name="visitor"/> (the span is valid only during the call). Pass
    /// <paramref name="readable"/> after <see cref="WaitReadable"/> returned true. Returns the reads
    /// done, wake-ups included.
    /// </summary>
    int ReceivePending(IPacketVisitor visitor, int maxReads, bool readable);

    /// <summary>Makes a <see cref="WaitReadable"/> in progress, or the next one, return. Any thread.</summary>
    void Wake();

    /// <summary>Periodic upkeep at the loop's ticks: drops half-assembled packets that timed out.</summary>
    void EvictExpiredFragments();

    /// <summary>
    /// True when the transport can send one datagram to an IP multicast group endpoint and receive
    /// on the ones it joined (UDP with a multicast port); the TCP overlay cannot.
    /// </summary>
    bool SupportsMulticast { get; }

    /// <summary>Starts receiving what is sent to a group endpoint (a 224.0.0.0/4 address on the system's multicast port); joins nest.</summary>
    void JoinMulticast(ulong groupEndpoint);

    /// <summary>Undoes one <see cref="JoinMulticast"/>.</summary>
    void LeaveMulticast(ulong groupEndpoint);

    /// <summary>When the transport next needs <see cref="Flush"/> by itself (a fault-delayed datagram), in <see cref="MonotonicClock"/> microseconds; long.MaxValue: never.</summary>
    long NextHeldDatagramDue { get; }
}
