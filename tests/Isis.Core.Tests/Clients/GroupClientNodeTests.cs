using Isis.Core.Clients;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests.Clients;

/// <summary>
/// The client's protocol on its own: it asks the seeds where the members are, sends each request
/// to one member, keeps waiting while that member says it is working, moves the request to the
/// next member when it falls silent or refuses, and reports the answer once.
/// </summary>
public sealed class GroupClientNodeTests
{
    private const ulong Replica = 1000;
    private static readonly NodeId M1 = new(1, 1), M2 = new(2, 1), M3 = new(3, 1);
    private static readonly ClientProtocolOptions Pacing = new(RetryInterval: 10_000, FailoverAfter: 50_000, LookupInterval: 20_000, RefreshInterval: 1_000_000);
    private readonly GroupId _group = GroupId.FromName("g");
    private readonly GroupClientNode _client = new(new NodeId(900, 1), "g", [Replica], salt: 7, systemKey: null, groupKey: null, Pacing);

    private List<(ulong To, PacketHeader Header, byte[] Packet)> Sent(out List<NodeEvent> events)
    {
        NodeOutputs outputs = _client.TakeOutputs();
        var packets = new List<(ulong, PacketHeader, byte[])>();
        foreach ((ulong destination, byte[] bytes) in outputs.Packets)
        {
            Assert.Equal(HeaderVerdict.Ok, PacketDecoder.TryReadHeader(bytes, out PacketHeader h));
            packets.Add((destination, h, bytes));
        }
        events = outputs.Events;
        return packets;
    }

    private void Members(long now, params NodeId[] members) =>
        _client.Receive(Replica, new PacketWriter().Begin(new PacketHeader(PacketKind.ClientMembers, new NodeId(Replica, 1), _group, 5, 0)).Nodes(members).Finish(), now);

    private void Answer(NodeId relay, long number, ClientOutcome outcome, long now) =>
        _client.Receive(relay.Endpoint, ClientWire.Answer(new PacketWriter().Begin(new PacketHeader(PacketKind.ClientAnswer, relay, _group, 0, number)), outcome, reason: outcome == ClientOutcome.Refused ? "no" : null).Finish(), now);

    [Fact]
    public void It_asks_the_seeds_then_sends_a_request_to_a_member_and_reports_its_answer_once()
    {
        _client.Tick(0);
        var lookup = Assert.Single(Sent(out _));
        Assert.Equal((Replica, PacketKind.ClientLookup), (lookup.To, lookup.Header.Kind));

        long number = _client.Issue(ClientPrimitive.Safe, [1, 2, 3], 0, 1_000_000, 1_000);
        Assert.DoesNotContain(Sent(out _), p => p.Header.Kind == PacketKind.ClientRequest); // no member known yet: it waits
        Members(2_000, M1, M2, M3);
        var request = Assert.Single(Sent(out List<NodeEvent> learned), p => p.Header.Kind == PacketKind.ClientRequest);
        Assert.IsType<ClientMembersLearned>(Assert.Single(learned));
        Assert.Equal(number, request.Header.Number);
        Assert.True(ClientWire.TryReadRequest(PacketDecoder.Body(request.Packet), out ClientPrimitive primitive, out long floor, out _, out _, out byte[] payload));
        Assert.Equal((ClientPrimitive.Safe, 1L), (primitive, floor));
        Assert.Equal([1, 2, 3], payload);

        Answer(new NodeId(request.To, 1), number, ClientOutcome.Done, 3_000);
        Sent(out List<NodeEvent> answered);
        var a = Assert.IsType<ClientAnswered>(Assert.Single(answered));
        Assert.Equal((number, ClientOutcome.Done), (a.Number, a.Outcome));
        Answer(new NodeId(request.To, 1), number, ClientOutcome.Done, 3_500); // a duplicate answer reports nothing
        Sent(out List<NodeEvent> again);
        Assert.Empty(again);
        Assert.Equal(0, _client.Outstanding);
        Assert.Equal(number + 1, _client.Floor);
    }

    [Fact]
    public void A_working_relay_keeps_the_request_and_a_silent_one_loses_it_to_the_next_member()
    {
        Members(0, M1, M2, M3);
        Sent(out _);
        long number = _client.Issue(ClientPrimitive.Ordered, [9], 0, 1_000_000, 1_000);
        ulong first = Assert.Single(Sent(out _)).To;
        // Working answers every 20 ms: no failover for 200 ms, only resends to the same member.
        for (long t = 11_000; t < 200_000; t += 10_000)
        {
            if (t % 20_000 == 1_000) Answer(new NodeId(first, 1), number, ClientOutcome.Working, t);
            _client.Tick(t);
            Assert.All(Sent(out List<NodeEvent> events).Where(p => p.Header.Kind == PacketKind.ClientRequest), p => Assert.Equal(first, p.To));
            Assert.Empty(events.OfType<ClientFailedOver>());
        }
        // Then silence: after FailoverAfter the request moves on, and the client asks where the members are.
        _client.Tick(260_000);
        var moved = Sent(out List<NodeEvent> failed);
        var f = Assert.IsType<ClientFailedOver>(Assert.Single(failed));
        Assert.Equal(first, f.From.Endpoint);
        Assert.NotEqual(first, f.To.Endpoint);
        Assert.Contains(moved, p => p.Header.Kind == PacketKind.ClientRequest && p.To == f.To.Endpoint);
        Assert.Contains(moved, p => p.Header.Kind == PacketKind.ClientLookup);
    }

    [Fact]
    public void A_refusal_moves_the_request_at_once_and_a_view_without_the_relay_too()
    {
        Members(0, M1, M2);
        Sent(out _);
        long number = _client.Issue(ClientPrimitive.Send, [1], 0, 1_000_000, 1_000);
        ulong first = Assert.Single(Sent(out _)).To;
        NodeId firstNode = first == M1.Endpoint ? M1 : M2, other = first == M1.Endpoint ? M2 : M1;
        Answer(firstNode, number, ClientOutcome.Refused, 2_000);
        Assert.Contains(Sent(out _), p => p.Header.Kind == PacketKind.ClientRequest && p.To == other.Endpoint);
        // The next view no longer holds the member it moved to: it moves again, to the new member.
        _client.Receive(Replica, new PacketWriter().Begin(new PacketHeader(PacketKind.ClientMembers, new NodeId(Replica, 1), _group, 6, 0)).Nodes([firstNode, M3]).Finish(), 3_000);
        Assert.Contains(Sent(out _), p => p.Header.Kind == PacketKind.ClientRequest && p.To != other.Endpoint);
        // An older view is ignored.
        Members(4_000, M1);
        Assert.Equal(6, _client.Members.ViewId);
    }

    [Fact]
    public void An_abandoned_request_is_retried_until_answered_and_keeps_the_floor_below_it()
    {
        Members(0, M1);
        Sent(out _);
        long first = _client.Issue(ClientPrimitive.Safe, [1], 0, 1_000_000, 1_000);
        long second = _client.Issue(ClientPrimitive.Safe, [2], 0, 1_000_000, 1_000);
        Sent(out _);
        _client.Abandon(first);
        Answer(M1, second, ClientOutcome.Done, 2_000);
        Sent(out _);
        Assert.Equal(first, _client.Floor);
        _client.Tick(15_000);
        Assert.Contains(Sent(out _), p => p.Header.Kind == PacketKind.ClientRequest && p.Header.Number == first);
        Answer(M1, first, ClientOutcome.Done, 16_000);
        Sent(out List<NodeEvent> events);
        Assert.Empty(events); // nobody waits for it any more
        Assert.Equal(second + 1, _client.Floor);
    }

    [Fact]
    public void Packets_for_another_group_or_malformed_are_dropped_and_counted()
    {
        _client.Receive(5, new PacketWriter().Begin(new PacketHeader(PacketKind.ClientMembers, new NodeId(5, 1), GroupId.FromName("other"), 1, 0)).Nodes([M1]).Finish(), 0);
        _client.Receive(5, new PacketWriter().Begin(new PacketHeader(PacketKind.ClientAnswer, new NodeId(5, 1), _group, 0, 1)).U8(99).Finish(), 0);
        _client.Receive(6, new PacketWriter().Begin(new PacketHeader(PacketKind.ClientAnswer, new NodeId(5, 1), _group, 0, 1)).U8(2).Finish(), 0); // a forged sender endpoint
        Assert.Equal(3, _client.Dropped);
        Assert.Equal(-1, _client.Members.ViewId);
    }
}
