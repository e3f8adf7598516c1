using System.Net.Sockets;

namespace Isis.Transport;

/// <summary>What the transport does about a socket error.</summary>
internal enum SocketErrorKind
{
    /// <summary>Nothing arrived within the poll interval: do housekeeping and read again.</summary>
    Idle,

    /// <summary>One datagram lost (full buffers, ICMP feedback, unreachable, too big): count it and go on.</summary>
    Transient,

    /// <summary>The socket was closed under us: stop.</summary>
    Closed,

    /// <summary>Unexpected: count it, back off briefly, and go on (UDP has no connection to lose).</summary>
    Unexpected,
}

/// <summary>The one place that decides how OS socket errors are treated.</summary>
internal static class SocketErrors
{
    public static SocketErrorKind Classify(SocketError error) => error switch
    {
        // SO_RCVTIMEO expiry surfaces as one or the other depending on the platform.
        SocketError.TimedOut or SocketError.WouldBlock => SocketErrorKind.Idle,

        SocketError.NoBufferSpaceAvailable      // ENOBUFS: the NIC queue or socket buffer is full
        or SocketError.ConnectionReset          // ICMP port unreachable from an earlier send (Windows)
        or SocketError.ConnectionRefused        // the same, reported by Linux with IP_RECVERR
        or SocketError.MessageSize              // EMSGSIZE: datagram over the path MTU or the UDP limit
        or SocketError.HostUnreachable
        or SocketError.HostDown
        or SocketError.NetworkUnreachable
        or SocketError.NetworkDown
        or SocketError.NetworkReset
        or SocketError.AddressNotAvailable      // destination not routable from this address
        or SocketError.AccessDenied             // EACCES/EPERM: firewall rule or broadcast without SO_BROADCAST
        or SocketError.Interrupted
        or SocketError.TryAgain => SocketErrorKind.Transient,

        SocketError.OperationAborted
        or SocketError.Shutdown
        or SocketError.NotSocket
        or SocketError.Disconnecting => SocketErrorKind.Closed,

        _ => SocketErrorKind.Unexpected,
    };
}
