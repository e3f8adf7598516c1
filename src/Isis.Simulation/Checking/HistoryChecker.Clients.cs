using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

internal static partial class HistoryChecker
{
    /// <summary>
    /// Non-member clients (runs with GroupClient nodes: ClientRequestIssued, ClientRequestRan and
    /// ClientRequestAnswered events):
    /// <list type="bullet">
    /// <item><b>At most once.</b> No member incarnation runs a client's request twice, however many
    /// relays issued it (a relay that failed, then another the client moved the request to), unless
    /// the group's state started over in between (a StateReset: every member had left, and the
    /// sessions went with the state).</item>
    /// <item><b>No invention.</b> A member runs only requests a client issued.</item>
    /// <item><b>An answer is true.</b> A request answered done (or with replies) ran at some member
    /// before the answer: a relay answers once it delivered the request, and delivering it either
    /// ran it or found that it ran before.</item>
    /// <item><b>Answered in the end.</b> If the run ends healed, every request a client issued was
    /// answered: the client moved it from relays that failed until one answered.</item>
    /// </list>
    /// </summary>
    internal static void ClientRequests(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(ClientRequests);
        var issued = new Dictionary<(NodeId Client, long Number), int>();
        var ran = new Dictionary<(NodeId Member, NodeId Client, long Number), int>();
        var ranAnywhere = new HashSet<(NodeId Client, long Number)>();
        var unanswered = new Dictionary<(NodeId Client, long Number), int>();
        bool healed = false;
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.ClientRequestIssued:
                    issued[(e.Process, e.LogIndex)] = i;
                    unanswered[(e.Process, e.LogIndex)] = i;
                    break;
                case HistoryEventKind.ClientRequestRan:
                {
                    var request = (e.Members![0], e.LogIndex);
                    if (!issued.ContainsKey(request)) sink.Report(P, $"{e.Process} ran request {e.LogIndex} of client {e.Members[0]} at {At(i, e)}, which the client never issued");
                    if (ran.TryGetValue((e.Process, request.Item1, request.LogIndex), out int first))
                    {
                        sink.Report(P, $"{e.Process} ran request {e.LogIndex} of client {e.Members[0]} twice: at event #{first} and again at {At(i, e)} (view {e.ViewId})");
                    }
                    else
                    {
                        ran[(e.Process, request.Item1, request.LogIndex)] = i;
                    }
                    ranAnywhere.Add(request);
                    break;
                }
                case HistoryEventKind.ClientRequestAnswered:
                    unanswered.Remove((e.Process, e.LogIndex));
                    if (e.Description is "Done" or "Replies" && !ranAnywhere.Contains((e.Process, e.LogIndex)))
                    {
                        sink.Report(P, $"client {e.Process} had request {e.LogIndex} answered {e.Description} at {At(i, e)}, but no member ran it before");
                    }
                    break;
                case HistoryEventKind.StateReset:
                    // Every member had left: the group's state, its client sessions with it, starts over.
                    ran.Clear();
                    break;
                case HistoryEventKind.Heal:
                    healed = true;
                    break;
            }
        }
        if (!healed) return;
        foreach (var ((client, number), at) in unanswered.OrderBy(u => u.Value).Take(5))
        {
            sink.Report(P, $"client {client}'s request {number}, issued at event #{at}, was never answered although the run ended healed");
        }
    }
}
