using System.Buffers.Binary;
using System.Net;
using System.Net.Sockets;
using Isis.Core.Identity;

namespace Isis.Transport;

/// <summary>Converts between the core's 64-bit endpoints and the socket API's addresses (IPv4 only).</summary>
internal static class EndpointConversions
{
    public static ulong FromIPEndPoint(IPEndPoint endPoint)
    {
        ArgumentNullException.ThrowIfNull(endPoint);
        if (endPoint.AddressFamily != AddressFamily.InterNetwork)
            throw new ArgumentException("Only IPv4 endpoints are supported.", nameof(endPoint));
        Span<byte> address = stackalloc byte[4];
        endPoint.Address.TryWriteBytes(address, out _);
        return EndpointCodec.FromIPv4(BinaryPrimitives.ReadUInt32BigEndian(address), (ushort)endPoint.Port);
    }

    public static IPEndPoint ToIPEndPoint(ulong endpoint)
    {
        Span<byte> address = stackalloc byte[4];
        BinaryPrimitives.WriteUInt32BigEndian(address, EndpointCodec.IPv4Of(endpoint));
        return new IPEndPoint(new IPAddress(address), EndpointCodec.PortOf(endpoint));
    }

    public static SocketAddress ToSocketAddress(ulong endpoint) => ToIPEndPoint(endpoint).Serialize();

    /// <summary>
    /// Reads a received sockaddr_in without allocating: the port (big-endian) is at offset 2 and
    /// the address at offset 4 on every platform .NET supports. Returns false for other families.
    /// </summary>
    public static bool TryFromSocketAddress(SocketAddress address, out ulong endpoint)
    {
        endpoint = 0;
        if (address.Family != AddressFamily.InterNetwork || address.Size < 8) return false;
        ReadOnlySpan<byte> raw = address.Buffer.Span;
        endpoint = EndpointCodec.FromIPv4(BinaryPrimitives.ReadUInt32BigEndian(raw[4..]), BinaryPrimitives.ReadUInt16BigEndian(raw[2..]));
        return true;
    }
}
