using Isis.Transport.Framing;

namespace Isis.Transport;

/// <summary>Settings of a <see cref="UdpTransport"/>.</summary>
internal sealed record UdpTransportOptions
{
    /// <summary>
    /// Largest datagram sent, headers included; packets are batched up to it and larger ones are
    /// fragmented. At most 65,507 (the IPv4 UDP limit).
    /// </summary>
    /// <remarks>Defaults to 16 KiB: big enough to amortize the per-datagram syscall, small enough that one lost datagram costs little.</remarks>
    public int MaxDatagramSize { get; init; } = FrameFormat.DefaultMaxDatagramSize;

    /// <summary>Requested SO_RCVBUF in bytes; the kernel may grant less (net.core.rmem_max).</summary>
    /// <remarks>Defaults to 8 MiB, so bursts such as a view-change flush are absorbed rather than dropped.</remarks>
    public int ReceiveBufferSize { get; init; } = 8 * 1024 * 1024;

    /// <summary>Requested SO_SNDBUF in bytes; the kernel may grant less (net.core.wmem_max).</summary>
    /// <remarks>Defaults to 4 MiB.</remarks>
    public int SendBufferSize { get; init; } = 4 * 1024 * 1024;

    /// <summary>Largest packet accepted for sending or rebuilt on receipt.</summary>
    /// <remarks>Defaults to 64 MiB.</remarks>
    public int MaxPacketSize { get; init; } = FrameFormat.DefaultMaxPacketSize;

    /// <summary>Bytes held in all incompletely received packets together.</summary>
    /// <remarks>Defaults to 256 MiB.</remarks>
    public long MaxReassemblyBytes { get; init; } = 256L * 1024 * 1024;

    /// <summary>Incompletely received packets held per source.</summary>
    /// <remarks>Defaults to 64.</remarks>
    public int MaxReassembliesPerSource { get; init; } = 64;

    /// <summary>Incompletely received packets held from all sources.</summary>
    /// <remarks>Defaults to 1,024.</remarks>
    public int MaxReassemblies { get; init; } = 1024;

    /// <summary>Fragments one received packet may claim.</summary>
    /// <remarks>Defaults to 65,536.</remarks>
    public int MaxFragmentsPerPacket { get; init; } = 65_536;

    /// <summary>Age at which an incompletely received packet is dropped.</summary>
    /// <remarks>Defaults to 5 seconds.</remarks>
    public TimeSpan ReassemblyTimeout { get; init; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// How long the receive thread waits for a datagram before doing housekeeping (expiring old
    /// reassemblies, noticing disposal).
    /// </summary>
    /// <remarks>Defaults to 200 ms.</remarks>
    public TimeSpan ReceivePollInterval { get; init; } = TimeSpan.FromMilliseconds(200);

    /// <summary>
    /// Completed datagrams a destination may accumulate before <see cref="UdpTransport.Enqueue"/>
    /// sends them without waiting for <see cref="UdpTransport.Flush"/>, bounding memory for huge packets.
    /// </summary>
    /// <remarks>Defaults to 64.</remarks>
    public int EagerSendThreshold { get; init; } = 64;

    /// <summary>
    /// The port every process of the system receives IP multicast on (each process binds it with
    /// SO_REUSEADDR beside its own unicast port, and joins the group addresses its groups use); 0:
    /// no IP multicast. Only for a transport whose owner receives (the event loop).
    /// </summary>
    /// <remarks>Defaults to 0.</remarks>
    public int MulticastPort { get; init; }

    /// <summary>
    /// The interface address multicast is sent from and received on (IP_MULTICAST_IF and the
    /// membership's interface). Null: the bound address, or 127.0.0.1 when bound to any address.
    /// </summary>
    /// <remarks>Defaults to null. Pin it: without it the kernel picks the default route's interface, and on a single host the datagrams may never come back.</remarks>
    public System.Net.IPAddress? MulticastInterface { get; init; }

    /// <summary>Hops a multicast datagram may travel (IP_MULTICAST_TTL): 1 keeps it on the local network.</summary>
    /// <remarks>Defaults to 1.</remarks>
    public int MulticastTimeToLive { get; init; } = 1;

    /// <summary>Fault injection for tests; null (no faults) unless a test turns it on.</summary>
    /// <remarks>Defaults to null.</remarks>
    public TransportFaultOptions? Faults { get; init; }

    internal ReassemblyLimits ToReassemblyLimits() => new()
    {
        MaxPacketSize = MaxPacketSize,
        MaxBufferedBytes = MaxReassemblyBytes,
        MaxInFlightPerSource = MaxReassembliesPerSource,
        MaxInFlight = MaxReassemblies,
        MaxFragmentsPerPacket = MaxFragmentsPerPacket,
        TimeoutMicros = (long)ReassemblyTimeout.TotalMicroseconds,
    };

    /// <summary>Throws <see cref="ArgumentOutOfRangeException"/> for settings that cannot work.</summary>
    public void Validate()
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(MaxDatagramSize, FrameFormat.MinDatagramSize);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(MaxDatagramSize, FrameFormat.MaxUdpPayload);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(ReceiveBufferSize);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(SendBufferSize);
        ArgumentOutOfRangeException.ThrowIfLessThan(ReceivePollInterval, TimeSpan.FromMilliseconds(1));
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(EagerSendThreshold);
        ArgumentOutOfRangeException.ThrowIfNegative(MulticastPort);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(MulticastPort, 65_535);
        ArgumentOutOfRangeException.ThrowIfLessThan(MulticastTimeToLive, 0);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(MulticastTimeToLive, 255);
        ToReassemblyLimits().Validate();
        Faults?.Validate();
    }
}
