using Isis.Core.Identity;

namespace Isis.Core.Membership;

/// <summary>
/// What the membership service may hand out for IP multicast: <see cref="AddressCount"/>
/// consecutive IPv4 multicast addresses from <see cref="FirstAddress"/>, all on <see cref="Port"/>
/// (the port every process receives multicast on), with at most <see cref="MaxAddressesPerHost"/>
/// of them joined by the processes of any one host (network cards filter a limited number of
/// addresses in hardware), to groups of at least <see cref="MinMembers"/> members.
/// </summary>
/// <param name="FirstAddress">The first address, as a big-endian IPv4 number (224.0.0.0/4).</param>
/// <param name="AddressCount">How many consecutive addresses the range holds.</param>
/// <param name="Port">The multicast port.</param>
/// <param name="MaxAddressesPerHost">Most distinct addresses the processes of one host join together.</param>
/// <param name="MinMembers">
/// Smallest group that gets an address. With two members a unicast datagram is a single send as
/// well, and every multicast address costs each receiving host some filtering, so the default is 3:
/// from three members on, one multicast replaces two or more unicast copies.
/// </param>
internal sealed record MulticastPlan(uint FirstAddress, int AddressCount, ushort Port, int MaxAddressesPerHost = 20, int MinMembers = 3)
{
    /// <summary>The i-th address of the range as a group endpoint.</summary>
    public ulong Endpoint(int i) => EndpointCodec.FromIPv4(FirstAddress + (uint)i, Port);

    /// <summary>Throws <see cref="ArgumentException"/> for a range that is not multicast or cannot work.</summary>
    public void Validate()
    {
        if ((FirstAddress & 0xF000_0000) != 0xE000_0000 || ((FirstAddress + (uint)Math.Max(0, AddressCount - 1)) & 0xF000_0000) != 0xE000_0000)
            throw new ArgumentException("The multicast range must lie in 224.0.0.0/4.");
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(AddressCount);
        ArgumentOutOfRangeException.ThrowIfZero(Port);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(MaxAddressesPerHost);
        ArgumentOutOfRangeException.ThrowIfLessThan(MinMembers, 2);
    }
}

/// <summary>
/// Chooses the multicast endpoint of a group's next view (the Dr. Multicast idea from the Isis2
/// paper): a deterministic function of the committed views of every group, evaluated by the
/// leading replica when it proposes a view, so the choice is recorded in the view's decision and
/// every replica and member agrees on it.
/// </summary>
/// <remarks>
/// The rule, in order:
/// <list type="number">
/// <item>A group smaller than <see cref="MulticastPlan.MinMembers"/> goes by unicast (0).</item>
/// <item>An address is usable for the group if no host of its members would exceed
/// <see cref="MulticastPlan.MaxAddressesPerHost"/> distinct addresses by joining it.</item>
/// <item>The group keeps its current address while it is usable (members need not rejoin).</item>
/// <item>Otherwise it takes the lowest usable address no other group uses.</item>
/// <item>When the range is short, it shares the usable address whose current receivers differ
/// least from its own members (fewest processes receiving traffic they must filter out, or
/// missing from the address); receivers drop the other groups' packets by group id.</item>
/// <item>With no usable address, the group goes by unicast.</item>
/// </list>
/// </remarks>
internal static class MulticastAllocator
{
    /// <param name="plan">The range and rule.</param>
    /// <param name="members">The next view's members.</param>
    /// <param name="current">The group's address in its current view (0: none).</param>
    /// <param name="others">Every other group's committed members and address.</param>
    public static ulong Allocate(MulticastPlan plan, NodeId[] members, ulong current, IEnumerable<(NodeId[] Members, ulong Address)> others)
    {
        if (members.Length < plan.MinMembers) return 0;
        // Who receives each address now, and which addresses each host's processes joined.
        var receivers = new Dictionary<ulong, HashSet<NodeId>>();
        var hostAddresses = new Dictionary<uint, HashSet<ulong>>();
        foreach ((NodeId[] groupMembers, ulong address) in others)
        {
            if (address == 0) continue;
            if (!receivers.TryGetValue(address, out HashSet<NodeId>? set)) receivers[address] = set = [];
            foreach (NodeId m in groupMembers)
            {
                set.Add(m);
                uint host = EndpointCodec.IPv4Of(m.Endpoint);
                if (!hostAddresses.TryGetValue(host, out HashSet<ulong>? joined)) hostAddresses[host] = joined = [];
                joined.Add(address);
            }
        }
        HashSet<uint> hosts = [.. members.Select(m => EndpointCodec.IPv4Of(m.Endpoint))];
        bool Usable(ulong address) => hosts.All(h =>
            !hostAddresses.TryGetValue(h, out HashSet<ulong>? joined) || joined.Contains(address) || joined.Count < plan.MaxAddressesPerHost);

        if (current != 0 && InRange(plan, current) && Usable(current)) return current;
        for (int i = 0; i < plan.AddressCount; i++)
        {
            ulong address = plan.Endpoint(i);
            if (!receivers.ContainsKey(address) && Usable(address)) return address;
        }
        ulong best = 0;
        int bestCost = int.MaxValue;
        var mine = new HashSet<NodeId>(members);
        for (int i = 0; i < plan.AddressCount; i++)
        {
            ulong address = plan.Endpoint(i);
            if (!Usable(address)) continue;
            HashSet<NodeId> theirs = receivers[address];
            int cost = theirs.Count(n => !mine.Contains(n)) + mine.Count(n => !theirs.Contains(n));
            if (cost < bestCost)
            {
                best = address;
                bestCost = cost;
            }
        }
        return best;
    }

    private static bool InRange(MulticastPlan plan, ulong endpoint) =>
        EndpointCodec.PortOf(endpoint) == plan.Port && EndpointCodec.IPv4Of(endpoint) - plan.FirstAddress < (uint)plan.AddressCount;
}
