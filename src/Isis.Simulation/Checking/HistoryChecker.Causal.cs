using System.Runtime.InteropServices;
using Isis.Core.Groups;
using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

internal static partial class HistoryChecker
{
    /// <summary>
    /// CausalSend (and CausalQuery): a process delivers a causal message only after every causal
    /// message of that view its sender had delivered before sending it. The predecessors come from
    /// the history itself (what the sender's Deliver events show before its Send), not from the
    /// timestamps on the wire, so a wrong timestamp is caught too. Causal order binds the causal
    /// messages among themselves (a Send, an OrderedSend or a SafeSend neither waits for nor holds
    /// back a CausalSend); FifoPerSender gives each sender's causal messages their sending order.
    /// </summary>
    internal static void CausalOrder(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(CausalOrder);
        // Per process and view, how many causal messages of each sender it has delivered: a prefix
        // of that sender's, so a count names them.
        var delivered = new Dictionary<(NodeId Process, GroupId Group, int View), Dictionary<NodeId, int>>();
        var sentSoFar = new Dictionary<(NodeId Sender, GroupId Group, int View), int>();
        var position = new Dictionary<MessageId, int>();
        var predecessors = new Dictionary<MessageId, KeyValuePair<NodeId, int>[]>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Primitive != MessageKind.CausalSend) continue;
            MessageId m = e.Message;
            if (e.Kind == HistoryEventKind.Send)
            {
                ref int n = ref CollectionsMarshal.GetValueRefOrAddDefault(sentSoFar, (m.Sender, m.Group, m.ViewId), out _);
                if (!position.TryAdd(m, ++n)) continue;
                predecessors[m] = delivered.TryGetValue((e.Process, m.Group, m.ViewId), out var before)
                    ? [.. before.Where(kv => kv.Key != m.Sender)]
                    : [];
            }
            else if (e.Kind == HistoryEventKind.Deliver && predecessors.TryGetValue(m, out var needed))
            {
                ref var mine = ref CollectionsMarshal.GetValueRefOrAddDefault(delivered, (e.Process, m.Group, m.ViewId), out _);
                mine ??= new Dictionary<NodeId, int>();
                foreach (var (sender, count) in needed)
                {
                    int have = mine.GetValueOrDefault(sender);
                    if (have >= count) continue;
                    sink.Report(P, $"{e.Process} delivered {m} at {At(i, e)} having delivered {have} causal messages from {sender} in v{m.ViewId} of g={m.Group}, " +
                        $"but {m.Sender} had delivered {count} of them before sending it");
                }
                ref int last = ref CollectionsMarshal.GetValueRefOrAddDefault(mine, m.Sender, out _);
                last = Math.Max(last, position[m]);
            }
        }
    }
}
