using System.Runtime.InteropServices;
using Isis.Core.Groups;
using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

internal static partial class HistoryChecker
{
    /// <summary>
    /// SubsetSend and P2PSend (the Send events of primitive Subset name their destinations):
    /// <list type="bullet">
    /// <item>only the members a message names deliver it;</item>
    /// <item>each destination delivers the subset messages of a sender's view that name it in
    /// sending order, with no gap among them (a suffix may be missing: the sender crashed);</item>
    /// <item>virtual synchrony among the destinations: every destination that comes through the
    /// message's view delivers it if any destination that comes through the view does;</item>
    /// <item>a destination the sender is delivers its message at once (SenderDeliversOwn); once the
    /// faults stop, every live destination in the final view delivers what live members sent it.</item>
    /// </list>
    /// The other properties leave subset messages to this one, except NoDuplicates, NoCreation,
    /// DeliveredInSendingView and FlushDurability (which asks a flushed one of its surviving destinations).
    /// </summary>
    internal static void SubsetDelivery(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(SubsetDelivery);
        var destinations = new Dictionary<MessageId, NodeId[]>();
        // Position of each subset message among its sender's view's subset messages to each destination.
        var position = new Dictionary<(MessageId, NodeId), int>();
        var sentTo = new Dictionary<(NodeId Sender, GroupId Group, int View, NodeId To), int>();
        var last = new Dictionary<(NodeId Process, NodeId Sender, GroupId Group, int View), int>();
        var deliveredAt = new Dictionary<MessageId, List<NodeId>>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Primitive != MessageKind.Subset) continue;
            MessageId m = e.Message;
            if (e.Kind == HistoryEventKind.Send)
            {
                NodeId[] to = e.Members ?? [];
                if (!destinations.TryAdd(m, to)) continue;
                foreach (NodeId q in to.Distinct())
                {
                    ref int n = ref CollectionsMarshal.GetValueRefOrAddDefault(sentTo, (m.Sender, m.Group, m.ViewId, q), out _);
                    position[(m, q)] = ++n;
                }
            }
            else if (e.Kind == HistoryEventKind.Deliver && destinations.TryGetValue(m, out NodeId[]? to))
            {
                if (Array.IndexOf(to, e.Process) < 0)
                {
                    sink.Report(P, $"{e.Process} delivered {m} at {At(i, e)}, which was addressed to {List(to)} only");
                    continue;
                }
                ref int prev = ref CollectionsMarshal.GetValueRefOrAddDefault(last, (e.Process, m.Sender, m.Group, m.ViewId), out _);
                int at = position[(m, e.Process)];
                if (at != prev + 1)
                {
                    sink.Report(P, at > prev + 1
                        ? $"{e.Process} delivered {m} at {At(i, e)} but only {prev} earlier subset messages {m.Sender} sent it in v{m.ViewId}: {at - prev - 1} skipped"
                        : $"{e.Process} delivered {m} at {At(i, e)} after a later subset message of {m.Sender} to it: out of FIFO order");
                }
                if (at > prev) prev = at;
                ref var at2 = ref CollectionsMarshal.GetValueRefOrAddDefault(deliveredAt, m, out _);
                (at2 ??= new List<NodeId>()).Add(e.Process);
            }
        }
        var views = ViewHistory.Of(events);
        foreach (var (m, at) in deliveredAt)
        {
            NodeId[] to = destinations[m];
            if (!at.Any(q => views.Survived(q, m))) continue; // delivered only at destinations that failed in its view: allowed, as for a Send
            foreach (NodeId q in to.Where(q => views.Survived(q, m) && !at.Contains(q)).Distinct())
            {
                sink.Report(P, $"{q} came through v{m.ViewId} of g={m.Group} without delivering {m}, which it was addressed to and which {List([.. at])} delivered");
            }
        }
    }

    /// <summary>Whether <paramref name="e"/> (a Send or Deliver) is of a subset message: the properties for the whole group leave those to <see cref="SubsetDelivery"/>.</summary>
    private static bool IsSubset(HistoryEvent e) => e.Primitive == MessageKind.Subset;
}
