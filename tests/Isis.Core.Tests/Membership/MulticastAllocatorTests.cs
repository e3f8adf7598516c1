using Isis.Core.Identity;
using Isis.Core.Membership;

namespace Isis.Core.Tests.Membership;

/// <summary>The rule by which the membership service hands out multicast addresses (see <see cref="MulticastAllocator"/>).</summary>
public sealed class MulticastAllocatorTests
{
    private const uint First = 0xEFC0_4D00; // 239.192.77.0
    private const ushort Port = 7346;

    /// <summary>Process <paramref name="index"/> on host 10.0.0.<paramref name="host"/>.</summary>
    private static NodeId P(int host, int index) => new(EndpointCodec.FromIPv4(0x0A00_0000u + (uint)host, (ushort)(5000 + index)), 1);

    private static NodeId[] Group(params (int Host, int Index)[] members) => [.. members.Select(m => P(m.Host, m.Index))];

    private static ulong Address(int i) => new MulticastPlan(First, 256, Port).Endpoint(i);

    [Fact]
    public void A_group_below_the_minimum_size_goes_by_unicast()
    {
        var plan = new MulticastPlan(First, 4, Port, MinMembers: 3);
        Assert.Equal(0ul, MulticastAllocator.Allocate(plan, Group((1, 1), (2, 1)), 0, []));
        Assert.Equal(Address(0), MulticastAllocator.Allocate(plan, Group((1, 1), (2, 1), (3, 1)), 0, []));
    }

    [Fact]
    public void A_new_group_takes_the_lowest_free_address_and_keeps_its_address_across_views()
    {
        var plan = new MulticastPlan(First, 4, Port);
        NodeId[] a = Group((1, 1), (2, 1), (3, 1));
        NodeId[] b = Group((1, 2), (2, 2), (3, 2));
        Assert.Equal(Address(1), MulticastAllocator.Allocate(plan, b, 0, [(a, Address(0))]));
        // b's next view (a member more) keeps address 2 although 1 has become free.
        Assert.Equal(Address(2), MulticastAllocator.Allocate(plan, [.. b, P(4, 2)], Address(2), [(a, Address(0))]));
    }

    [Fact]
    public void When_the_range_is_short_a_group_shares_the_address_whose_receivers_differ_least_from_its_members()
    {
        var plan = new MulticastPlan(First, 2, Port);
        NodeId[] x = Group((1, 1), (2, 1), (3, 1));
        NodeId[] y = Group((4, 1), (5, 1), (6, 1));
        NodeId[] nearY = Group((4, 1), (5, 1), (6, 1), (7, 1)); // the same processes as y, and one more
        Assert.Equal(Address(1), MulticastAllocator.Allocate(plan, nearY, 0, [(x, Address(0)), (y, Address(1))]));
        NodeId[] nearX = Group((1, 1), (2, 1), (8, 1));
        Assert.Equal(Address(0), MulticastAllocator.Allocate(plan, nearX, 0, [(x, Address(0)), (y, Address(1))]));
    }

    [Fact]
    public void No_host_joins_more_addresses_than_allowed_and_a_group_that_would_exceed_it_goes_by_unicast()
    {
        var plan = new MulticastPlan(First, 8, Port, MaxAddressesPerHost: 2);
        // Host 1 already joins two addresses, through two groups.
        NodeId[] g0 = Group((1, 1), (2, 1), (3, 1));
        NodeId[] g1 = Group((1, 2), (4, 1), (5, 1));
        (NodeId[], ulong)[] others = [(g0, Address(0)), (g1, Address(1))];
        // A third group with a process on host 1 may only share one of host 1's two addresses.
        ulong got = MulticastAllocator.Allocate(plan, Group((1, 3), (6, 1), (7, 1)), 0, others);
        Assert.Contains(got, new[] { Address(0), Address(1) });
        // A group off host 1 takes a fresh address.
        Assert.Equal(Address(2), MulticastAllocator.Allocate(plan, Group((6, 1), (7, 1), (8, 1)), 0, others));
        // With every address of the range in use elsewhere and host 1 at its limit on others, nothing fits: unicast.
        var tight = new MulticastPlan(First, 3, Port, MaxAddressesPerHost: 2);
        (NodeId[], ulong)[] full = [(g0, Address(0)), (g1, Address(1)), (Group((6, 1), (7, 1), (8, 1)), Address(2))];
        NodeId[] wantsTheThird = Group((1, 4), (6, 2), (7, 2));
        ulong shared = MulticastAllocator.Allocate(tight, wantsTheThird, 0, full);
        Assert.Contains(shared, new[] { Address(0), Address(1) }); // host 1 cannot add a third address, so the group shares one of its two
        // One address in the range, and host 1 already at its limit of one (another address): unicast.
        var one = new MulticastPlan(First, 1, Port, MaxAddressesPerHost: 1);
        Assert.Equal(0ul, MulticastAllocator.Allocate(one, Group((1, 9), (9, 1), (9, 2)), 0, [(Group((1, 1), (2, 1), (3, 1)), 0ul), (Group((1, 2), (2, 2), (3, 2)), new MulticastPlan(First + 1, 1, Port).Endpoint(0))]));
    }

    [Fact]
    public void A_current_address_outside_the_range_or_over_a_host_limit_is_replaced()
    {
        var plan = new MulticastPlan(First, 4, Port);
        ulong outside = new MulticastPlan(First + 100, 1, Port).Endpoint(0);
        Assert.Equal(Address(0), MulticastAllocator.Allocate(plan, Group((1, 1), (2, 1), (3, 1)), outside, []));
    }

    [Fact]
    public void A_range_outside_multicast_space_is_refused()
    {
        Assert.Throws<ArgumentException>(() => new MulticastPlan(0x0A00_0000, 4, Port).Validate());
        Assert.Throws<ArgumentOutOfRangeException>(() => new MulticastPlan(First, 4, Port, MinMembers: 1).Validate());
        new MulticastPlan(First, 4, Port).Validate();
    }
}
