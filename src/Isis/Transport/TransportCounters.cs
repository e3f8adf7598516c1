using Isis.Transport.Framing;

namespace Isis.Transport;

/// <summary>
/// What a <see cref="UdpTransport"/> did, for metrics and tests. Fields are written with
/// <see cref="Interlocked"/> (the send side runs on the event loop, the receive side on the receive
/// thread, readers anywhere), so reading them from any thread is safe, if slightly stale.
/// </summary>
internal sealed class TransportCounters
{
    /// <summary>Packets accepted by <see cref="UdpTransport.Enqueue"/>.</summary>
    public long PacketsEnqueued;

    /// <summary>Packets refused by <see cref="UdpTransport.Enqueue"/> for exceeding the maximum packet size.</summary>
    public long OversizePacketsRefused;

    /// <summary>Datagrams the socket accepted for sending (faults excluded, duplicates included).</summary>
    public long DatagramsSent;

    /// <summary>Bytes in <see cref="DatagramsSent"/>.</summary>
    public long BytesSent;

    /// <summary>Datagrams the socket refused (full buffers, unreachable, too big...). Never thrown.</summary>
    public long SendErrors;

    /// <summary>Datagrams read from the socket, hostile ones included.</summary>
    public long DatagramsReceived;

    /// <summary>Bytes in <see cref="DatagramsReceived"/>.</summary>
    public long BytesReceived;

    /// <summary>Datagrams from a non-IPv4 source, ignored.</summary>
    public long ForeignDatagrams;

    /// <summary>Packets handed to the receive callback.</summary>
    public long PacketsReceived;

    /// <summary>Wake-up datagrams this socket sent itself (<see cref="UdpTransport.Wake"/>) and read back; not counted as received.</summary>
    public long Wakes;

    /// <summary>Datagrams read from the multicast socket (addresses this process's groups joined), counted in <see cref="DatagramsReceived"/> too; echoes not included.</summary>
    public long MulticastDatagramsReceived;

    /// <summary>This process's own multicast datagrams, looped back to it by the kernel and skipped (it delivered them when it sent them).</summary>
    public long MulticastEchoes;

    /// <summary>Receive calls that failed with something other than a timeout.</summary>
    public long ReceiveErrors;

    /// <summary>The last <see cref="System.Net.Sockets.SocketError"/> seen on either path, as an int, for diagnostics.</summary>
    public int LastSocketError;

    /// <summary>Outgoing datagrams the fault layer dropped.</summary>
    public long InjectedDrops;

    /// <summary>Outgoing datagrams the fault layer sent twice.</summary>
    public long InjectedDuplicates;

    /// <summary>Outgoing datagrams the fault layer held back to send later.</summary>
    public long InjectedDelays;

    /// <summary>Drops on receipt by reason (malformed, bad record, out of bounds, evicted, oversize), written by the receive thread.</summary>
    public FramingCounters Framing { get; } = new();

    /// <summary>All faults injected.</summary>
    public long InjectedFaults => Interlocked.Read(ref InjectedDrops) + Interlocked.Read(ref InjectedDuplicates) + Interlocked.Read(ref InjectedDelays);

    /// <summary>All datagrams, records and packets dropped on receipt.</summary>
    public long ReceiveDrops => Framing.TotalDrops;
}
