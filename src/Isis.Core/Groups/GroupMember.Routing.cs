using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>
/// Point-to-point control traffic along a tree, so that no member of a large group over TCP connects
/// to every other (<see cref="PacketKind.Routed"/>).
/// </summary>
/// <remarks>
/// <para>
/// Relaying (<see cref="Relaying"/>: a large group over a connection-based transport), data already
/// follows the stability tree, but a query's replies, the view-change flush and the durable history's
/// status messages go from one member to one other: every replier to the requester, the coordinator
/// to every survivor and back. Sent directly, those make the requester and the coordinator hubs with
/// a connection to every member. Instead such a packet is wrapped in an envelope that carries its
/// whole path (source routing): the sender computes the path over a tree, and each member on it
/// passes the envelope to the next one, until the last opens it and handles the packet inside as if
/// it had come straight from the path's first member. An answer goes back along the reversed path.
/// A joiner's state comes the same way: the oldest member makes it for every joiner.
/// </para>
/// <para>
/// Which tree: a reply, a state transfer or a history message goes over the sender's current view's tree (rank 0 the
/// root). A flush runs when members have failed, and a failed member inside the view's tree would cut
/// its subtree off; so the coordinator routes over a tree of the survivors alone, itself the root
/// (<see cref="FlushCoordinator"/>), and a survivor answers along the path the request came by. A
/// survivor that fails during the flush stops the attempt anyway (it cannot report), and the next
/// attempt's tree leaves it out.
/// </para>
/// <para>
/// Loss: an envelope lost on any hop is lost as a direct packet would be, and the same retransmission
/// repairs it (replies until acknowledged, wedges and commits each retry interval). A path through a
/// member that failed outside a flush (a reply's) fails until the view change that removes it, after
/// which the retransmission takes the new view's tree.
/// </para>
/// </remarks>
internal sealed partial class GroupMember
{
    /// <summary>The longest path an envelope may carry: a tree of fan-out 2 this deep holds more members than a group can have.</summary>
    private const int MaxRouteLength = 64;

    /// <summary>
    /// The path from this member to <paramref name="to"/> over the current view's tree when relaying
    /// and both are in the view; otherwise the direct one (this member, then <paramref name="to"/>).
    /// </summary>
    internal NodeId[] PathInView(NodeId to)
    {
        if (!Relaying || MyRank < 0 || to == Self) return [Self, to];
        int rank = View!.RankOf(to);
        if (rank < 0) return [Self, to];
        int[] ranks = StabilityTree.Path(MyRank, rank, _tree!.Fanout);
        var path = new NodeId[ranks.Length];
        for (int i = 0; i < ranks.Length; i++) path[i] = View.Members[ranks[i]];
        return path;
    }

    /// <summary>Sends a member-to-member packet to <paramref name="to"/>, over the view's tree when relaying.</summary>
    internal void SendToMember(NodeId to, ReadOnlyMemory<byte> packet) => SendAlong(PathInView(to), packet);

    /// <summary>
    /// Sends <paramref name="packet"/> (a whole packet whose sender is this member, the path's first)
    /// to the path's last member: directly if the path has no member in between, else in an envelope
    /// to the next one.
    /// </summary>
    internal void SendAlong(NodeId[] path, ReadOnlyMemory<byte> packet)
    {
        if (path.Length <= 2)
        {
            _node.SendTo(path[^1].Endpoint, packet);
            return;
        }
        ForwardEnvelope(path, 1, packet.Span);
    }

    /// <summary>
    /// Answers a packet that came along <paramref name="arrivedAlong"/> (null: it came directly) by
    /// the way it came: the reversed path, whose members were all alive a moment ago.
    /// </summary>
    private void SendBack(NodeId to, byte[] packet, NodeId[]? arrivedAlong)
    {
        if (arrivedAlong == null || arrivedAlong[0] != to) _node.SendTo(to.Endpoint, packet);
        else SendAlong([.. arrivedAlong.Reverse()], packet);
    }

    private void ForwardEnvelope(NodeId[] path, int next, ReadOnlySpan<byte> packet) =>
        _node.SendTo(path[next].Endpoint,
            _node.Writer.Begin(new PacketHeader(PacketKind.Routed, Self, Id, 0, next)).Nodes(path).Tail(packet).Finish(_node.Outbox));

    /// <summary>
    /// An envelope: passed on if this member is inside its path, handled if it is the last. The
    /// header's number is the position of the member it was sent to.
    /// </summary>
    private void OnRouted(in PacketHeader h, ReadOnlySpan<byte> body, long now)
    {
        var r = new WireReader(body);
        NodeId[] path = r.Nodes();
        ReadOnlySpan<byte> inner = r.TailSpan();
        long at = h.Number;
        if (!r.Ok || path.Length < 3 || path.Length > MaxRouteLength || at < 1 || at >= path.Length || path[at - 1] != h.Sender)
        {
            _node.Counters.DroppedMalformed++;
            return;
        }
        if (path[at] != Self)
        {
            _node.Counters.DroppedNotForMe++;
            return;
        }
        if (at < path.Length - 1)
        {
            ForwardEnvelope(path, (int)at + 1, inner);
            return;
        }
        // Ours: the packet inside must be whole, of this group, from the path's first member, of a kind
        // that travels this way, and from a member the firewall admits (the hops were checked as senders).
        if (PacketDecoder.TryReadHeader(inner, out PacketHeader packet) != HeaderVerdict.Ok || inner[2] != PacketHeader.CurrentVersion || packet.Group != Id
            || packet.Sender != path[0] || !IsRoutable(packet.Kind))
        {
            _node.Counters.DroppedMalformed++;
            return;
        }
        if (_node.IsExpelled(packet.Sender))
        {
            _node.Counters.DroppedFirewall++;
            return;
        }
        OnGroupPacket(packet, PacketDecoder.Body(inner), now, path);
    }

    /// <summary>The kinds that may travel in an envelope: one member's control traffic to one other.</summary>
    private static bool IsRoutable(PacketKind kind) =>
        kind is PacketKind.Reply or PacketKind.ReplyAck or PacketKind.Wedge or PacketKind.FlushReport or PacketKind.FlushCommit
            or PacketKind.CommitAck or PacketKind.HistoryStatus or PacketKind.HistoryPlan or PacketKind.HistoryAllCurrent
            or PacketKind.StateChunk or PacketKind.StateAck;
}
