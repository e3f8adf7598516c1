using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>Queries: the request goes out as a message of the chosen ordering; replies are retransmitted until acknowledged.</summary>
internal sealed partial class GroupMember
{
    // Replies we sent and the requester has not acknowledged: retransmitted while it is in the view.
    private readonly Dictionary<(NodeId Requester, long Query), byte[]> _outgoingReplies = new();
    private long _nextReplyRetryAt;

    /// <summary>Replies this member sent whose requester has not acknowledged them yet.</summary>
    public int RepliesAwaitingAcknowledgement => _outgoingReplies.Count;

    // ---------------------------------------------------------------- Query

    /// <summary>
    /// Issues a query: the request is multicast with the chosen ordering (a query id in front of
    /// the payload) and replies are collected until <paramref name="needed"/> (a count,
    /// <see cref="QueryTracker.All"/> or <see cref="QueryTracker.Majority"/>) is met.
    /// </summary>
    public void Query(long queryId, MessageKind kind, byte[] payload, int needed, long deadline, QueryTimeoutAction action, int phi = 0, NodeId[]? to = null)
    {
        if (State is not (MemberState.Active or MemberState.Joining)) return;
        _queries.Add(queryId, needed, deadline, action);
        var request = new byte[8 + payload.Length];
        System.Buffers.Binary.BinaryPrimitives.WriteInt64LittleEndian(request, queryId);
        payload.CopyTo(request, 8);
        Send(kind, request, phi, to: to);
    }

    /// <summary>Answers a query: sent to the requester (over the view's tree when relaying) and retransmitted until it acknowledges or leaves the view.</summary>
    public void Reply(NodeId requester, long queryId, ReplyKind kind, byte[] payload)
    {
        if (View == null || State == MemberState.Left) return;
        byte[] packet = _node.Writer.Begin(new PacketHeader(PacketKind.Reply, Self, Id, View.Id, queryId))
            .Node(requester).U8((byte)kind).Tail(payload).Finish();
        if (requester != Self) _outgoingReplies[(requester, queryId)] = packet;
        SendToMember(requester, packet); // relaying, over the tree: otherwise every member would connect to the requester
    }

    private void OnReplyTraffic(in PacketHeader h, ReadOnlySpan<byte> body, NodeId[]? arrivedAlong)
    {
        var r = new WireReader(body);
        NodeId target = r.Node();
        if (h.Kind == PacketKind.ReplyAck)
        {
            if (!r.Complete) { _node.Counters.DroppedMalformed++; return; }
            if (target == Self) _outgoingReplies.Remove((h.Sender, h.Number));
            else _node.Counters.DroppedNotForMe++;
            return;
        }
        var kind = (ReplyKind)r.U8();
        byte[] payload = r.Tail();
        if (!r.Ok || !Enum.IsDefined(kind)) { _node.Counters.DroppedMalformed++; return; }
        if (target != Self) { _node.Counters.DroppedNotForMe++; return; }
        // Always acknowledge, so the replier stops even if this reply is a duplicate or too late.
        if (h.Sender != Self)
        {
            SendBack(h.Sender, _node.Writer.Begin(new PacketHeader(PacketKind.ReplyAck, Self, Id, View?.Id ?? 0, h.Number)).Node(h.Sender).Finish(), arrivedAlong);
        }
        if (!_queries.OnReply(h.Sender, h.Number, kind, payload, h.View)) _node.Counters.Duplicates++;
    }
}
