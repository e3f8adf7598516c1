using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Core.Groups;

/// <summary>
/// SubsetSend, P2PSend and P2PQuery: a message in its sender's FIFO stream like a Send, naming the
/// members that deliver it. Every member holds it (so stability, repair and the flush treat it as
/// any other message, and a view change gives it to every surviving destination or to none), but
/// only the members it names deliver it.
/// </summary>
internal sealed partial class GroupMember
{
    /// <summary>Our subset message names, of its destinations, those in the view it is sent in.</summary>
    private StreamMessage AddressToView(StreamMessage message) =>
        message.Kind.IsSubset() ? message with { To = [.. (message.To ?? []).Where(View!.Contains).Distinct()] } : message;

    /// <summary>A subset message reached the head of its sender's stream: delivered here if it names this member.</summary>
    private void OnSubsetArrived(int rank, long seq, StreamMessage message)
    {
        bool everywhere = (Options.Mutations & ProtocolMutations.SubsetDeliveredEverywhere) != 0; // deliberate bug
        if (everywhere || Array.IndexOf(message.To!, Self) >= 0)
        {
            Deliver(rank, seq, message);
            return;
        }
        // Our own query to others: its place in our stream fixes its view and who must answer.
        if (rank == MyRank && message.Kind.IsQuery()) _queries.OnRequestDelivered(MessageKinds.QueryIdOf(message.Payload.Span), View!, message.To);
    }
}
