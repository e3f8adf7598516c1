using System.Buffers.Binary;
using System.Globalization;
using System.Net;
using System.Net.Sockets;

namespace Isis;

/// <summary>
/// IP multicast settings (<see cref="IsisOptions.Multicast"/>). The membership service allocates
/// addresses from <see cref="AddressRange"/> to groups: a group of at least
/// <see cref="MinMembers"/> members gets one, keeps it while it stays usable, and shares one with
/// groups whose members overlap most when the range runs short (its members drop the other
/// groups' packets). Lost multicasts are repaired by unicast.
/// </summary>
public sealed class MulticastOptions
{
    /// <summary>
    /// The IPv4 multicast addresses groups may use, in CIDR form. Defaults to "239.192.77.0/24"
    /// (organization-local scope, 256 addresses).
    /// </summary>
    public string AddressRange { get; set; } = "239.192.77.0/24";

    /// <summary>The UDP port every process of the system receives multicast on. Defaults to 7346 (beside the membership service's 7345).</summary>
    public int Port { get; set; } = 7346;

    /// <summary>
    /// The interface multicast leaves and arrives on. Null (the default): the runtime's
    /// <see cref="IsisOptions.BindAddress"/>, or 127.0.0.1 when that is the any-address.
    /// </summary>
    public IPAddress? Interface { get; set; }

    /// <summary>
    /// Most distinct addresses the processes of one host join together: network cards filter few
    /// in hardware, and Linux lets one socket join at most net.ipv4.igmp_max_memberships (20 by
    /// default) addresses. Defaults to 20.
    /// </summary>
    public int MaxAddressesPerHost { get; set; } = 20;

    /// <summary>Smallest group that gets an address: from three members on, one multicast replaces two or more unicast copies. Defaults to 3.</summary>
    public int MinMembers { get; set; } = 3;

    /// <summary>Hops a multicast datagram may travel (IP_MULTICAST_TTL); 1 keeps it on the local network. Defaults to 1.</summary>
    public int TimeToLive { get; set; } = 1;

    internal void Validate()
    {
        _ = ParseRange();
        if (Port is <= 0 or > 65535) throw new ArgumentException($"IsisOptions.Multicast.Port must be 1-65535; it is {Port}.");
        if (Interface is { } i && i.AddressFamily != AddressFamily.InterNetwork) throw new ArgumentException($"IsisOptions.Multicast.Interface must be an IPv4 address; it is {i}.");
        if (MaxAddressesPerHost < 1) throw new ArgumentException($"IsisOptions.Multicast.MaxAddressesPerHost must be at least 1; it is {MaxAddressesPerHost}.");
        if (MinMembers < 2) throw new ArgumentException($"IsisOptions.Multicast.MinMembers must be at least 2; it is {MinMembers}.");
        if (TimeToLive is < 0 or > 255) throw new ArgumentException($"IsisOptions.Multicast.TimeToLive must be 0-255; it is {TimeToLive}.");
    }

    /// <summary>The range as its first address (big-endian number) and size; throws with what to write when it is not a multicast CIDR.</summary>
    private (uint First, int Count) ParseRange()
    {
        string text = AddressRange ?? "";
        int slash = text.IndexOf('/', StringComparison.Ordinal);
        if (slash < 0 || !IPAddress.TryParse(text[..slash], out IPAddress? address) || address.AddressFamily != AddressFamily.InterNetwork ||
            !int.TryParse(text[(slash + 1)..], NumberStyles.None, CultureInfo.InvariantCulture, out int prefix) || prefix is < 4 or > 32)
            throw new ArgumentException($"IsisOptions.Multicast.AddressRange must be an IPv4 CIDR range such as \"239.192.77.0/24\"; it is \"{text}\".");
        uint first = BinaryPrimitives.ReadUInt32BigEndian(address.GetAddressBytes());
        uint mask = prefix == 32 ? uint.MaxValue : ~(uint.MaxValue >> prefix);
        first &= mask;
        if ((first & 0xF000_0000) != 0xE000_0000)
            throw new ArgumentException($"IsisOptions.Multicast.AddressRange must lie in 224.0.0.0/4 (239.0.0.0/8 for organization-local use); it is \"{text}\".");
        long count = 1L << (32 - prefix);
        return (first, (int)Math.Min(count, 65_536));
    }

    internal Core.Membership.MulticastPlan ToPlan()
    {
        (uint first, int count) = ParseRange();
        return new Core.Membership.MulticastPlan(first, count, (ushort)Port, MaxAddressesPerHost, MinMembers);
    }
}
