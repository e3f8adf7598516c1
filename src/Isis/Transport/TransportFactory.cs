using System.Net;

namespace Isis.Transport;

/// <summary>Makes the transport <see cref="IsisOptions.Transport"/> names: the one place the runtime chooses between them.</summary>
internal static class TransportFactory
{
    /// <summary>A transport its owner reads (the event loop's process socket).</summary>
    public static IPacketTransport ForOwner(IsisTransport kind, IPEndPoint bindTo, UdpTransportOptions options) => kind switch
    {
        IsisTransport.Tcp => new TcpTransport(bindTo, options.MaxPacketSize),
        _ => new UdpTransport(bindTo, options),
    };

    /// <summary>A transport that hands each received packet to <paramref name="onPacket"/> on a thread of its own (the membership replica's sockets).</summary>
    public static IPacketTransport WithCallback(IsisTransport kind, IPEndPoint bindTo, ReceivedPacketCallback onPacket, UdpTransportOptions options) => kind switch
    {
        IsisTransport.Tcp => new TcpTransport(bindTo, options.MaxPacketSize, onPacket),
        _ => new UdpTransport(bindTo, onPacket, options),
    };
}
