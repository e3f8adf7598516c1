namespace Isis.Core.Identity;

/// <summary>
/// One process incarnation: the endpoint it listens on plus an incarnation number that changes
/// every time a process starts on that endpoint. The membership service expels incarnations, not
/// endpoints, so a restarted process is a new member and its dead predecessor stays firewalled.
/// </summary>
/// <remarks>
/// <see cref="Endpoint"/> is opaque to the core. The runtime packs an IPv4 address and port into
/// it (<see cref="EndpointCodec"/>); the simulator uses small integers.
/// </remarks>
internal readonly record struct NodeId(ulong Endpoint, uint Incarnation) : IComparable<NodeId>
{
    public static readonly NodeId None = default;

    public bool IsNone => Endpoint == 0 && Incarnation == 0;

    public int CompareTo(NodeId other)
    {
        int c = Endpoint.CompareTo(other.Endpoint);
        return c != 0 ? c : Incarnation.CompareTo(other.Incarnation);
    }

    public override string ToString() => $"{EndpointCodec.Format(Endpoint)}#{Incarnation}";
}

/// <summary>Packs IPv4 endpoints into the 64-bit endpoint number the core uses.</summary>
internal static class EndpointCodec
{
    /// <summary>Endpoint number for an IPv4 address given in network byte order as a big-endian uint, and a port.</summary>
    public static ulong FromIPv4(uint addressBigEndian, ushort port) => ((ulong)addressBigEndian << 16) | port;

    public static uint IPv4Of(ulong endpoint) => (uint)(endpoint >> 16);

    public static ushort PortOf(ulong endpoint) => (ushort)(endpoint & 0xFFFF);

    /// <summary>True for an IPv4 multicast (224.0.0.0/4) endpoint: a group address, not a process.</summary>
    public static bool IsMulticast(ulong endpoint) => (IPv4Of(endpoint) & 0xF000_0000) == 0xE000_0000;

    /// <summary>"a.b.c.d:port" for IPv4 endpoints; simulator endpoints (below 2^16) print as "sN".</summary>
    public static string Format(ulong endpoint)
    {
        if (endpoint < 0x1_0000) return $"s{endpoint}";
        uint ip = IPv4Of(endpoint);
        return $"{ip >> 24}.{(ip >> 16) & 0xFF}.{(ip >> 8) & 0xFF}.{ip & 0xFF}:{PortOf(endpoint)}";
    }
}
