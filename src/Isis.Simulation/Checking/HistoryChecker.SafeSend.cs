using System.Runtime.InteropServices;
using Isis.Core.Groups;
using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

// The checker, part 2: SafeSend's guarantees (the acceptor threshold, durability through a view
// change, and the durable history after every member crashed).
internal static partial class HistoryChecker
{
    /// <summary>
    /// Who installed which view, and who came through it (installed the next view of the group
    /// afterwards, without leaving in between): what the durability properties judge by.
    /// </summary>
    private sealed class ViewHistory
    {
        private readonly HashSet<(NodeId, GroupId, int)> _survived = new();

        public Dictionary<(GroupId, int), NodeId[]> MembersOf { get; } = new();

        public static ViewHistory Of(ReadOnlySpan<HistoryEvent> events)
        {
            var h = new ViewHistory();
            var current = new Dictionary<(NodeId, GroupId), int>();
            foreach (HistoryEvent e in events)
            {
                if (e.Kind == HistoryEventKind.ViewInstall)
                {
                    if (current.TryGetValue((e.Process, e.Group), out int previous)) h._survived.Add((e.Process, e.Group, previous));
                    current[(e.Process, e.Group)] = e.ViewId;
                    h.MembersOf.TryAdd((e.Group, e.ViewId), e.Members ?? []);
                }
                else if (e.Kind == HistoryEventKind.LeaveCompleted)
                {
                    current.Remove((e.Process, e.Group));
                }
            }
            return h;
        }

        public bool Survived(NodeId process, MessageId m) => _survived.Contains((process, m.Group, m.ViewId));

        /// <summary>Members of the message's view that came through it without delivering it.</summary>
        public IEnumerable<NodeId> SurvivorsWithout(MessageId m, HashSet<(NodeId, MessageId)> delivered) =>
            MembersOf.TryGetValue((m.Group, m.ViewId), out NodeId[]? members)
                ? members.Where(q => Survived(q, m) && !delivered.Contains((q, m)))
                : [];
    }

    private static int Acceptors(int phi, int viewSize) => phi <= 0 ? viewSize : Math.Min(phi, viewSize);

    /// <summary>
    /// SafeSend: no process delivers a SafeSend on the normal path before all of its acceptors (the
    /// first phi members of its view; phi 0 means every member) hold it. At the end of a view the
    /// flush delivers what the survivors hold (survivors cannot know what a crashed acceptor held),
    /// which SafeDurability checks.
    /// </summary>
    internal static void SafeThreshold(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(SafeThreshold);
        var phiOf = new Dictionary<MessageId, int>();
        var membersOf = new Dictionary<(GroupId, int), NodeId[]>();
        var accepted = new Dictionary<MessageId, HashSet<NodeId>>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.ViewInstall:
                    membersOf.TryAdd((e.Group, e.ViewId), e.Members ?? []);
                    break;
                case HistoryEventKind.Send when e.Primitive == MessageKind.Safe:
                    phiOf[e.Message] = e.Phi;
                    break;
                case HistoryEventKind.SafeAccepted:
                    ref var set = ref CollectionsMarshal.GetValueRefOrAddDefault(accepted, e.Message, out _);
                    (set ??= new HashSet<NodeId>()).Add(e.Process);
                    break;
                case HistoryEventKind.Deliver when e.Primitive == MessageKind.Safe && !e.AtViewEnd:
                {
                    if (!phiOf.TryGetValue(e.Message, out int phi) || !membersOf.TryGetValue((e.Message.Group, e.Message.ViewId), out NodeId[]? view)) break;
                    int needed = Acceptors(phi, view.Length);
                    var holders = accepted.GetValueOrDefault(e.Message);
                    var missing = view.Take(needed).Where(a => holders == null || !holders.Contains(a)).ToList();
                    if (missing.Count > 0)
                    {
                        sink.Report(P, $"{e.Process} delivered SafeSend {e.Message} (phi {phi}: {needed} acceptors) at {At(i, e)} before acceptors {List(missing.ToArray())} held it");
                    }
                    break;
                }
            }
        }
    }

    /// <summary>
    /// SafeSend: once any process delivers a SafeSend (even one that then crashes), every process
    /// that comes through its view (installs the next view) delivers it in that view, provided
    /// fewer than phi of its acceptors failed (at least one acceptor came through the view).
    /// </summary>
    internal static void SafeDurability(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(SafeDurability);
        var deliveredAnywhere = new Dictionary<MessageId, NodeId>();
        var phiOf = new Dictionary<MessageId, int>();
        var delivered = new HashSet<(NodeId, MessageId)>();
        foreach (HistoryEvent e in events)
        {
            switch (e.Kind)
            {
                case HistoryEventKind.Send when e.Primitive == MessageKind.Safe:
                    phiOf[e.Message] = e.Phi;
                    break;
                case HistoryEventKind.Deliver when e.Primitive == MessageKind.Safe:
                    deliveredAnywhere.TryAdd(e.Message, e.Process);
                    delivered.Add((e.Process, e.Message));
                    break;
            }
        }
        var views = ViewHistory.Of(events);
        foreach (var (m, first) in deliveredAnywhere)
        {
            if (!views.MembersOf.TryGetValue((m.Group, m.ViewId), out NodeId[]? members)) continue;
            int acceptors = Acceptors(phiOf.GetValueOrDefault(m), members.Length);
            if (!members.Take(acceptors).Any(a => views.Survived(a, m))) continue; // all its acceptors failed
            foreach (NodeId q in views.SurvivorsWithout(m, delivered))
            {
                sink.Report(P, $"SafeSend {m} was delivered by {first} but {q} came through v{m.ViewId} of g={m.Group} without delivering it");
            }
        }
    }

    /// <summary>
    /// Disk durability: the SafeSend history members replay (after a total crash, or when they
    /// join) is one history, made of SafeSends and SafeQueries that were sent, with the payloads
    /// they were sent with, each once; it holds every SafeSend and SafeQuery the group delivered
    /// before, in the order it was delivered; and it only grows.
    /// </summary>
    /// <remarks>
    /// "Delivered before" means committed: delivered in a view before the replaying member's first
    /// view, by a member that came through that view, or in a view none of whose members came
    /// through (every member crashed in it). A SafeSend delivered only by members that failed while
    /// others carried on is lost when all its acceptors failed (phi-1 is the limit), so it is not
    /// required. A replay's entries may also end with SafeSends that were logged but never
    /// delivered (a crash cut their acknowledgements short); they were sent, so they are not invented.
    /// A member that restores a persistent checkpoint has the entries it holds (Restore events)
    /// before the replay of the rest: they are judged as replayed entries, so a checkpoint of
    /// another history, or a replay that does not continue exactly where the checkpoint ends, is
    /// a violation.
    /// <para>A recovery the operator forced without members of the last view (a ForcedRecovery
    /// event) keeps the history's first LogIndex entries and goes on from there: entries after them
    /// may be replaced, and a committed SafeSend may be missing from later replays only if every
    /// process that delivered it before the recovery is an incarnation some forced recovery of the
    /// group gave up (their logs alone could hold it), or wrote the same log as one (LogOpened: a
    /// log is one file across restarts of its process, and a forced recovery gives up every log that
    /// names a given-up incarnation). Anything else a forced recovery loses is a violation like any
    /// other loss. A replay that came before a forced recovery is judged against the entries it
    /// replayed, the history as it stood then.</para>
    /// </remarks>
    /// <para>The history outlives an embedded service that every process restarted (a service
    /// era, see <see cref="ServiceEras(ReadOnlySpan{HistoryEvent}, ViolationSink, out int[])"/>),
    /// so the whole run is checked at once; view numbers start again in each era, so views are
    /// told apart by era, and a SafeSend committed in an earlier era precedes every later replay.</para>
    internal static void RecoveredHistory(ReadOnlySpan<HistoryEvent> events, ViolationSink sink, int[]? eraOfEvent = null)
    {
        int EraAt(int i) => eraOfEvent == null ? 0 : eraOfEvent[i];
        const string P = nameof(RecoveredHistory);
        var sends = new Dictionary<MessageId, ulong>();
        // The one history: entry index -> (message, hash, the first process that replayed it).
        var history = new Dictionary<(GroupId, long), (MessageId Message, ulong Hash, NodeId Process)>();
        var indexOf = new Dictionary<MessageId, long>();
        // Per membership (an incarnation may leave and join again): how many entries it replayed,
        // where its replay began, its first view, and whether it delivered anything yet.
        var membership = new Dictionary<(NodeId, GroupId), int>();
        var replays = new Dictionary<(NodeId, GroupId, int), (long Count, int Index)>();
        // What each membership replayed or restored: the history as it stood for it (a forced recovery
        // later may replace entries past what it kept, but not what this member already handled).
        var replayed = new Dictionary<(NodeId, GroupId, int), HashSet<MessageId>>();
        var firstView = new Dictionary<(NodeId, GroupId, int), int>();
        var deliveredHere = new HashSet<(NodeId, GroupId, int)>();
        // Replays that ended (HistoryHeld): a replay runs over several steps, and one a crash cut short
        // is a prefix the dead application saw, checked for its order and entries but not for completeness.
        var ended = new HashSet<(NodeId, GroupId, int)>();
        // Forced recoveries, in order (each once, though every member reports it): where, the entries kept, and every incarnation given up so far.
        // A recovery that founded a new history (no members given up, no entries kept) gave up everything before it: GaveUp is null.
        var forced = new List<(int At, GroupId Group, long Kept, HashSet<NodeId>? GaveUp)>();
        var forcedSeen = new HashSet<(GroupId, long, string)>();
        // Which incarnations wrote one log (LogOpened: a process restarted with the log its disk kept).
        // A forced recovery gives up every log that names a given-up incarnation, so what any of its
        // writers delivered alone is given up with it; a wiped disk starts a log of its own.
        var logOf = new Dictionary<(NodeId, GroupId), HashSet<NodeId>>();
        // Logs kept aside as given up (LogGivenUp), with their writers as the logs stood then: judged once every forced recovery is known.
        var keptAside = new List<(int At, HashSet<NodeId> Writers)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.ForcedRecovery:
                {
                    NodeId[] missing = e.Members ?? [];
                    if (!forcedSeen.Add((e.Group, e.LogIndex, string.Join(",", missing.Order())))) break;
                    HashSet<NodeId>? gaveUp = null;
                    if (missing.Length > 0 || e.LogIndex > 0)
                    {
                        gaveUp = new HashSet<NodeId>(missing);
                        foreach (var f in forced)
                        {
                            if (f.Group == e.Group && f.GaveUp != null) gaveUp.UnionWith(f.GaveUp);
                        }
                        // With them, every incarnation that wrote a log one of them wrote (as the logs stand now).
                        foreach (NodeId g in gaveUp.ToList())
                        {
                            if (logOf.TryGetValue((g, e.Group), out var writers)) gaveUp.UnionWith(writers);
                        }
                    }
                    forced.Add((i, e.Group, e.LogIndex, gaveUp));
                    // The history goes on from its first LogIndex entries: the ones after them are no longer its.
                    foreach (var key in history.Keys.Where(k => k.Item1 == e.Group && k.Item2 > e.LogIndex).ToList())
                    {
                        indexOf.Remove(history[key].Message);
                        history.Remove(key);
                    }
                    break;
                }
                case HistoryEventKind.Send when e.Primitive == MessageKind.Safe: // SafeSends and SafeQueries
                    sends.TryAdd(e.Message, e.PayloadHash);
                    break;
                case HistoryEventKind.LogOpened:
                {
                    var writers = new HashSet<NodeId> { e.Process };
                    foreach (NodeId earlier in e.Members ?? [])
                    {
                        if (logOf.TryGetValue((earlier, e.Group), out var theirs)) writers.UnionWith(theirs);
                        writers.Add(earlier);
                    }
                    foreach (NodeId w in writers) logOf[(w, e.Group)] = writers;
                    break;
                }
                case HistoryEventKind.LogGivenUp:
                    keptAside.Add((i, logOf.TryGetValue((e.Process, e.Group), out var wrote) ? [.. wrote] : [e.Process]));
                    break;
                case HistoryEventKind.LeaveCompleted:
                    CollectionsMarshal.GetValueRefOrAddDefault(membership, (e.Process, e.Group), out _)++;
                    break;
                case HistoryEventKind.ViewInstall:
                    firstView.TryAdd((e.Process, e.Group, membership.GetValueOrDefault((e.Process, e.Group))), e.ViewId);
                    break;
                case HistoryEventKind.Deliver:
                    deliveredHere.Add((e.Process, e.Group, membership.GetValueOrDefault((e.Process, e.Group))));
                    break;
                case HistoryEventKind.HistoryHeld:
                    ended.Add((e.Process, e.Group, membership.GetValueOrDefault((e.Process, e.Group))));
                    break;
                case HistoryEventKind.Replay or HistoryEventKind.Restore:
                {
                    var key = (e.Process, e.Group, membership.GetValueOrDefault((e.Process, e.Group)));
                    ref var mine = ref CollectionsMarshal.GetValueRefOrAddDefault(replays, key, out bool seen);
                    if (!seen) mine = (0, i);
                    ref var handled = ref CollectionsMarshal.GetValueRefOrAddDefault(replayed, key, out _);
                    (handled ??= []).Add(e.Message);
                    if (e.LogIndex != mine.Count + 1)
                    {
                        sink.Report(P, $"{e.Process} replayed entry {e.LogIndex} of g={e.Group} at {At(i, e)} after entry {mine.Count}: a history is replayed from 1, without gaps");
                    }
                    mine.Count = e.LogIndex;
                    if (deliveredHere.Contains(key))
                    {
                        sink.Report(P, $"{e.Process} replayed entry {e.LogIndex} of g={e.Group} at {At(i, e)} after it delivered other messages: the history comes first");
                    }
                    if (!sends.TryGetValue(e.Message, out ulong hash))
                    {
                        sink.Report(P, $"{e.Process} replayed {e.Message} as entry {e.LogIndex} at {At(i, e)}, but no such SafeSend was sent before");
                    }
                    else if (hash != e.PayloadHash)
                    {
                        sink.Report(P, $"{e.Process} replayed {e.Message} as entry {e.LogIndex} at {At(i, e)} with payload hash {e.PayloadHash:x16}; it was sent with {hash:x16}");
                    }
                    if (history.TryGetValue((e.Group, e.LogIndex), out var entry))
                    {
                        if (entry.Message != e.Message || entry.Hash != e.PayloadHash)
                        {
                            sink.Report(P, $"{e.Process} replayed {e.Message} as entry {e.LogIndex} of g={e.Group} at {At(i, e)}; {entry.Process} replayed {entry.Message} there: two histories");
                        }
                    }
                    else
                    {
                        history[(e.Group, e.LogIndex)] = (e.Message, e.PayloadHash, e.Process);
                        if (!indexOf.TryAdd(e.Message, e.LogIndex))
                        {
                            sink.Report(P, $"{e.Message} is entry {indexOf[e.Message]} and entry {e.LogIndex} of the history of g={e.Group}: a duplicate");
                        }
                    }
                    break;
                }
            }
        }
        // A log is kept aside as given up only once a forced recovery of its group gave up one of
        // its writers (before, or in the same step of the same process, which reports the recovery
        // it takes part in after it puts its own log aside). A plan decided without a member but
        // voided by a view change before anyone held the history by it gave nobody up: a log set
        // aside by such a plan silently drops what only it held.
        foreach (var (at, writers) in keptAside)
        {
            HistoryEvent k = events[at];
            bool byForce = false;
            foreach (var f in forced)
            {
                HistoryEvent fe = events[f.At];
                byForce |= f.Group == k.Group && (f.At < at || (fe.Time == k.Time && fe.Process == k.Process)) && (f.GaveUp == null || f.GaveUp.Overlaps(writers));
            }
            if (!byForce)
            {
                sink.Report(P, $"{k.Process} kept its log of g={k.Group} aside at {At(at, k)} as written by an incarnation a forced recovery gave up " +
                               $"({List([.. writers])}), but no forced recovery of the group gave any of them up");
            }
        }
        if (replays.Count == 0) return;

        // It only grows: a replay after another is at least as long (than what a forced recovery kept, after one).
        var longest = new Dictionary<GroupId, (long Count, NodeId Process)>();
        int nextForced = 0;
        foreach (var ((process, group, n), (count, index)) in replays.OrderBy(r => r.Value.Index))
        {
            if (!ended.Contains((process, group, n))) continue; // cut short by a crash
            for (; nextForced < forced.Count && forced[nextForced].At < index; nextForced++)
            {
                var f = forced[nextForced];
                if (longest.TryGetValue(f.Group, out var had) && had.Count > f.Kept) longest[f.Group] = (f.Kept, had.Process);
            }
            if (longest.TryGetValue(group, out var before) && count < before.Count)
            {
                sink.Report(P, $"{process} replayed {count} entries of g={group} at event #{index}, fewer than the {before.Count} {before.Process} replayed before: the history lost entries");
            }
            if (!longest.TryGetValue(group, out before) || count > before.Count) longest[group] = (count, process);
        }

        // Complete and in order: every committed SafeSend of a view before a replaying member's
        // first view is in its replay, and every member handled the history's entries in index order.
        int eraCount = eraOfEvent == null || eraOfEvent.Length == 0 ? 1 : eraOfEvent.Max() + 1;
        var views = new ViewHistory[eraCount];
        var nobodyCameThrough = new HashSet<(int, GroupId, int)>();
        for (int era = 0; era < eraCount; era++)
        {
            var ofEra = new List<HistoryEvent>();
            for (int i = 0; i < events.Length; i++)
            {
                if (EraAt(i) == era || events[i].Process.IsNone) ofEra.Add(events[i]);
            }
            ViewHistory v = views[era] = ViewHistory.Of(CollectionsMarshal.AsSpan(ofEra));
            foreach (var ((group, viewId), members) in v.MembersOf)
            {
                if (!members.Any(m => v.Survived(m, new MessageId(m, group, viewId, 1)))) nobodyCameThrough.Add((era, group, viewId));
            }
        }
        var committed = new List<(MessageId Message, int Index, NodeId Witness)>();
        var seenCommitted = new HashSet<MessageId>();
        var lastIndex = new Dictionary<(NodeId, GroupId, int), (long Index, MessageId Message)>();
        var deliverers = new Dictionary<MessageId, List<(NodeId Process, int At)>>();
        membership.Clear();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind == HistoryEventKind.LeaveCompleted) CollectionsMarshal.GetValueRefOrAddDefault(membership, (e.Process, e.Group), out _)++;
            bool safeDelivery = e.Kind == HistoryEventKind.Deliver && e.Primitive == MessageKind.Safe;
            if (!safeDelivery && e.Kind is not (HistoryEventKind.Replay or HistoryEventKind.Restore)) continue;
            MessageId m = e.Message;
            if (safeDelivery)
            {
                ref var who = ref CollectionsMarshal.GetValueRefOrAddDefault(deliverers, m, out _);
                (who ??= []).Add((e.Process, i));
            }
            if (safeDelivery && (views[EraAt(i)].Survived(e.Process, m) || nobodyCameThrough.Contains((EraAt(i), m.Group, m.ViewId))) && seenCommitted.Add(m))
            {
                committed.Add((m, i, e.Process));
            }
            if (!indexOf.TryGetValue(m, out long index)) continue;
            ref var last = ref CollectionsMarshal.GetValueRefOrAddDefault(lastIndex, (e.Process, e.Group, membership.GetValueOrDefault((e.Process, e.Group))), out bool had);
            if (had && index <= last.Index)
            {
                sink.Report(P, $"{e.Process} handled {m} (history entry {index}) at {At(i, e)} after {last.Message} (entry {last.Index}): the history's order is not the order it was delivered in");
            }
            last = (index, m);
        }
        foreach (var ((process, group, n), (count, index)) in replays)
        {
            if (!sink.Wants(P)) break;
            if (!ended.Contains((process, group, n))) continue; // cut short by a crash: a prefix, checked above
            int joinedIn = firstView.GetValueOrDefault((process, group, n));
            foreach (var (m, at, witness) in committed)
            {
                if (at >= index) break;
                // In the replaying member's era, a SafeSend of its first view or later is not before it; one of an earlier era is.
                if (m.Group != group || (EraAt(at) == EraAt(index) && m.ViewId >= joinedIn)) continue;
                if (LostByForce(m, at, index)) continue;
                // Judged against the entries it replayed (the history then), not the history as a later forced recovery left it.
                if (!replayed[(process, group, n)].Contains(m))
                {
                    sink.Report(P, $"SafeSend {m}, delivered by {witness} at event #{at}, is missing from the {count} entries {process} replayed at event #{index}");
                }
            }
        }

        // A forced recovery between the delivery and the replay gave up every process that had delivered it.
        bool LostByForce(MessageId m, int deliveredAt, int replayedAt) =>
            forced.Any(f => f.Group == m.Group && deliveredAt < f.At && f.At < replayedAt
                && (f.GaveUp == null || deliverers[m].Where(d => d.At < f.At).All(d => f.GaveUp.Contains(d.Process))));
    }
}
