using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Core.Clients;

/// <summary>At a member: a non-member client asks this member to relay its request <paramref name="Number"/> into the group.</summary>
/// <param name="Group">The group.</param>
/// <param name="Client">The client's incarnation (the answer goes to its endpoint).</param>
/// <param name="Number">The request's number in the client's session.</param>
/// <param name="Primitive">What to issue.</param>
/// <param name="Floor">Every request of the client below this number was answered.</param>
/// <param name="Replies">A query's replies to wait for (-1: all).</param>
/// <param name="TimeoutMicros">A query's timeout.</param>
/// <param name="Payload">The encoded request code and arguments.</param>
internal sealed record ClientRequestArrived(GroupId Group, NodeId Client, long Number, ClientPrimitive Primitive, long Floor, int Replies, long TimeoutMicros, byte[] Payload) : GroupEvent(Group);

/// <summary>At a client: the answer to request <paramref name="Number"/> (never <see cref="ClientOutcome.Working"/> or <see cref="ClientOutcome.Refused"/>: those only steer the client).</summary>
/// <param name="Number">The request's number.</param>
/// <param name="Outcome">Done, the replies, or failed.</param>
/// <param name="Replies">A query's replies.</param>
/// <param name="Reason">Why it failed.</param>
/// <param name="Relay">The member that answered.</param>
internal sealed record ClientAnswered(long Number, ClientOutcome Outcome, ClientReply[] Replies, string Reason, NodeId Relay) : NodeEvent;

/// <summary>At a client: the members of the group's view <paramref name="ViewId"/>, from the membership service or a member.</summary>
/// <param name="ViewId">The view.</param>
/// <param name="Members">Its members, oldest first: the relays the client may use.</param>
internal sealed record ClientMembersLearned(int ViewId, NodeId[] Members) : NodeEvent;

/// <summary>At a client: request <paramref name="Number"/> moves from a relay that stopped answering (or refused it) to another.</summary>
/// <param name="Number">The request.</param>
/// <param name="From">The relay given up (<see cref="NodeId.None"/> if none had it).</param>
/// <param name="To">The relay tried next.</param>
internal sealed record ClientFailedOver(long Number, NodeId From, NodeId To) : NodeEvent;
