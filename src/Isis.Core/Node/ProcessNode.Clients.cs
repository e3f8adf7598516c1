using Isis.Core.Clients;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Node;

/// <summary>
/// A member's side of non-member clients (see <see cref="GroupClientNode"/>): it tells a client the
/// group's members, hands the requests it receives to the runtime (which relays them into the
/// group), and sends the runtime's answers back.
/// </summary>
internal sealed partial class ProcessNode
{
    private void HandleFromClient(in PacketHeader h, ReadOnlySpan<byte> body)
    {
        GroupMember? member = _groups.GetValueOrDefault(h.Group);
        if (h.Kind == PacketKind.ClientLookup)
        {
            var r = new WireReader(body);
            string name = r.String(Options.MaxGroupNameBytes);
            if (!r.Complete || GroupId.FromName(name) != h.Group) { Counters.DroppedMalformed++; return; }
            if (member is not { State: MemberState.Active, View: { } view }) { Counters.DroppedUnknownGroup++; return; }
            SendTo(h.Sender.Endpoint, Writer.Begin(new PacketHeader(PacketKind.ClientMembers, Self, h.Group, view.Id, 0)).Nodes(view.Members).Finish());
            return;
        }
        if (!ClientWire.TryReadRequest(body, out ClientPrimitive primitive, out long floor, out int replies, out long timeout, out byte[] payload) || h.Number < 1)
        {
            Counters.DroppedMalformed++;
            return;
        }
        if (member is not { State: MemberState.Active })
        {
            AnswerClient(h.Group, h.Sender, h.Number, ClientOutcome.Refused, reason: "this process is not an active member of the group");
            return;
        }
        Emit(new ClientRequestArrived(h.Group, h.Sender, h.Number, primitive, floor, replies, timeout, payload));
    }

    /// <summary>Answers copy <paramref name="number"/> of <paramref name="client"/>'s request (the runtime relays it; see <see cref="ClientRequestArrived"/>).</summary>
    public void AnswerClient(GroupId group, NodeId client, long number, ClientOutcome outcome, IReadOnlyList<ClientReply>? replies = null, string? reason = null)
    {
        if (IsShutDown) return;
        Writer.Begin(new PacketHeader(PacketKind.ClientAnswer, Self, group, 0, number));
        SendTo(client.Endpoint, ClientWire.Answer(Writer, outcome, replies, reason).Finish());
    }

    /// <summary>As <see cref="AnswerClient(GroupId, NodeId, long, ClientOutcome, IReadOnlyList{ClientReply}, string)"/>, as a command from the driver (a step of its own).</summary>
    public void AnswerClient(GroupId group, NodeId client, long number, ClientOutcome outcome, IReadOnlyList<ClientReply>? replies, string? reason, long now)
    {
        _now = Outbox.StepTime = now;
        AnswerClient(group, client, number, outcome, replies, reason);
        Drain();
    }
}
