using System.Runtime.InteropServices;
using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

/// <summary>
/// Checks a recorded <see cref="History"/> against the guarantees of DESIGN.md section 3. The same
/// checker reads simulator runs and real multi-process runs, so it trusts nothing but the events.
/// </summary>
/// <remarks>
/// "Before" and "after" mean position in the history. Each property is one method and one linear
/// pass (two for NoCreation and Liveness) with dictionaries keyed by struct ids, so a history of
/// millions of events checks in seconds.
/// </remarks>
internal static partial class HistoryChecker
{
    public static CheckResult Check(History history, int maxViolationsPerProperty = 20)
    {
        ArgumentNullException.ThrowIfNull(history);
        var sink = new ViolationSink(maxViolationsPerProperty);
        ReadOnlySpan<HistoryEvent> all = history.AsSpan();
        // An embedded service founded again after every process restarted: one service at a time,
        // and each service's era (its processes, replicas, views and log) checked on its own.
        List<HistoryEvent[]> eras = ServiceEras(all, sink, out int[] eraOfEvent);
        foreach (HistoryEvent[] era in eras) CheckEra(era, sink);
        // A durable history outlives the service: its members' logs bring it into the next era.
        RecoveredHistory(all, sink, eraOfEvent);
        TimersWithinDeadline(all, sink);
        return sink.ToResult(all.Length);
    }

    private static void CheckEra(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        WellFormed(events, sink);
        ViewAgreement(events, sink);
        PrimaryViewSequence(events, sink);
        ServiceQuorums(events, sink);
        ServiceSnapshots(events, sink);
        VirtualSynchrony(events, sink);
        FifoPerSender(events, sink);
        TotalOrder(events, sink);
        CausalOrder(events, sink);
        SubsetDelivery(events, sink);
        LockSafety(events, sink);
        ClientRequests(events, sink);
        FlushDurability(events, sink);
        QueryReplies(events, sink);
        SafeThreshold(events, sink);
        SafeDurability(events, sink);
        NoDuplicates(events, sink);
        NoCreation(events, sink);
        DeliveredInSendingView(events, sink);
        SenderDeliversOwn(events, sink);
        FirewallAfterExpulsion(events, sink);
        NoDeliveryAfterExpulsion(events, sink);
        StateTransfer(events, sink);
        Collections(events, sink);
        Liveness(events, sink);
    }

    /// <summary>
    /// Every node's timers fire no earlier than the deadline it reported (simulator histories only:
    /// the simulator ticks every millisecond and records an EarlyTimer when a tick before the
    /// reported deadline produced anything). The runtime sleeps until that deadline, so such a
    /// timer would fire late there: a heartbeat, a retransmission or a NAK delayed without bound.
    /// Nor is a deadline still due right after a tick (StaleDeadline): the runtime would spin.
    /// </summary>
    internal static void TimersWithinDeadline(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(TimersWithinDeadline);
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind == HistoryEventKind.StaleDeadline)
            {
                sink.Report(P, $"{At(i, e)} {e.Process} reported a deadline (t={e.LogIndex}) not after the tick that just ran; a driver sleeping until it would tick again at once, forever");
            }
            if (e.Kind != HistoryEventKind.EarlyTimer) continue;
            sink.Report(P, $"{At(i, e)} {e.Process} produced {e.Description} at a tick {e.LogIndex - e.Time} us before the deadline it had reported (t={e.LogIndex}); its NextDeadline leaves out a timer");
        }
    }

    private static string At(int index, HistoryEvent e) => $"event #{index} (t={e.Time})";

    private static string List(NodeId[] members) => "[" + string.Join(", ", members) + "]";

    private static string List(IEnumerable<MessageId> messages) => string.Join(", ", messages);

    /// <summary>
    /// The history is something the other properties can be judged on: time never goes back, End
    /// is last, each kind has its fields, Send/Deliver agree with their message id, and a crashed
    /// incarnation records nothing more.
    /// </summary>
    internal static void WellFormed(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(WellFormed);
        long previousTime = long.MinValue;
        int endIndex = -1;
        var crashedAt = new Dictionary<NodeId, int>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Time < previousTime)
            {
                sink.Report(P, $"{At(i, e)} {e.Kind} at {e.Process} goes back in time from t={previousTime}; sort merged logs by time");
            }
            previousTime = Math.Max(previousTime, e.Time);
            if (endIndex >= 0)
            {
                sink.Report(P, $"{At(i, e)} {e.Kind} comes after the End at event #{endIndex}");
            }
            bool global = e.Kind is HistoryEventKind.Heal or HistoryEventKind.End;
            if (global != e.Process.IsNone)
            {
                sink.Report(P, global
                    ? $"{At(i, e)} {e.Kind} names process {e.Process}; Heal and End belong to no process"
                    : $"{At(i, e)} {e.Kind} names no process");
            }
            // Expel is the membership service's event about the process, and normally follows its crash.
            if (e.Kind != HistoryEventKind.Expel && !e.Process.IsNone && crashedAt.TryGetValue(e.Process, out int crash))
            {
                sink.Report(P, $"{At(i, e)} {e.Kind} at {e.Process}, which crashed at event #{crash}");
            }
            switch (e.Kind)
            {
                case HistoryEventKind.Send:
                    if (e.Message.Sender != e.Process || e.Message.Group != e.Group || e.Message.ViewId != e.ViewId)
                    {
                        sink.Report(P, $"{At(i, e)} Send at {e.Process} in g={e.Group} v{e.ViewId} carries message id {e.Message} of another sender, group or view");
                    }
                    goto case HistoryEventKind.Deliver;
                case HistoryEventKind.Deliver:
                    if (e.Message.Sender.IsNone || e.Message.Seq < 1 || e.Message.Group != e.Group)
                    {
                        sink.Report(P, $"{At(i, e)} {e.Kind} at {e.Process} has an invalid message id {e.Message} (no sender, seq < 1, or group differs from g={e.Group})");
                    }
                    break;
                case HistoryEventKind.ViewInstall:
                    if (e.Members is null || e.Members.Length == 0)
                    {
                        sink.Report(P, $"{At(i, e)} ViewInstall at {e.Process} of g={e.Group} v{e.ViewId} has no members");
                    }
                    else if (HasDuplicate(e.Members, out NodeId dup))
                    {
                        sink.Report(P, $"{At(i, e)} ViewInstall at {e.Process} of g={e.Group} v{e.ViewId} lists {dup} twice: {List(e.Members)}");
                    }
                    goto case HistoryEventKind.LeaveCompleted;
                case HistoryEventKind.LeaveCompleted:
                case HistoryEventKind.JoinRequested:
                    if (e.Group == default)
                    {
                        sink.Report(P, $"{At(i, e)} {e.Kind} at {e.Process} names no group");
                    }
                    break;
                case HistoryEventKind.Crash:
                    crashedAt.TryAdd(e.Process, i);
                    break;
                case HistoryEventKind.End:
                    endIndex = i;
                    break;
            }
        }
    }

    private static bool HasDuplicate(NodeId[] members, out NodeId duplicate)
    {
        // Views are small; a quadratic scan beats allocating a set for each install.
        if (members.Length <= 32)
        {
            for (int a = 0; a < members.Length; a++)
            {
                for (int b = a + 1; b < members.Length; b++)
                {
                    if (members[a] == members[b])
                    {
                        duplicate = members[a];
                        return true;
                    }
                }
            }
        }
        else
        {
            var seen = new HashSet<NodeId>();
            foreach (NodeId m in members)
            {
                if (!seen.Add(m))
                {
                    duplicate = m;
                    return true;
                }
            }
        }
        duplicate = default;
        return false;
    }

    /// <summary>
    /// Every install of (group, view id) has the same member list, in the same order; each process
    /// installs strictly increasing view ids of a group; a process only installs views it is in.
    /// </summary>
    internal static void ViewAgreement(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(ViewAgreement);
        var firstInstall = new Dictionary<(GroupId, int), (NodeId[] Members, NodeId Process, int Index)>();
        var lastView = new Dictionary<(NodeId, GroupId), (int View, int Index)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.ViewInstall || e.Members is null) continue;

            ref var first = ref CollectionsMarshal.GetValueRefOrAddDefault(firstInstall, (e.Group, e.ViewId), out bool seen);
            if (!seen)
            {
                first = (e.Members, e.Process, i);
            }
            else if (!ReferenceEquals(first.Members, e.Members) && !first.Members.AsSpan().SequenceEqual(e.Members))
            {
                sink.Report(P, $"{e.Process} installed view v{e.ViewId} of g={e.Group} with members {List(e.Members)} at {At(i, e)}, "
                    + $"but {first.Process} installed it with {List(first.Members)} at event #{first.Index}");
            }

            ref var last = ref CollectionsMarshal.GetValueRefOrAddDefault(lastView, (e.Process, e.Group), out bool had);
            if (had && e.ViewId <= last.View)
            {
                sink.Report(P, $"{e.Process} installed view v{e.ViewId} of g={e.Group} at {At(i, e)} after already installing v{last.View} at event #{last.Index}; view ids must strictly increase");
            }
            last = (Math.Max(e.ViewId, had ? last.View : int.MinValue), i);

            if (!e.Members.AsSpan().Contains(e.Process))
            {
                sink.Report(P, $"{e.Process} installed view v{e.ViewId} of g={e.Group} at {At(i, e)} but is not among its members {List(e.Members)}");
            }
        }
    }

    /// <summary>
    /// At most one primary view sequence: the membership service never splits. Every membership
    /// replica applies the same decision at each position of its log (so no two sides of a
    /// partition decide on their own), and each view of a group descends from the one before: its
    /// members that were in the previous view come first, in their old order, and only joiners
    /// follow them (a view from a competing history would reorder or drop survivors).
    /// </summary>
    internal static void PrimaryViewSequence(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(PrimaryViewSequence);
        var decided = new Dictionary<long, (ulong Hash, NodeId Replica, int Index)>();
        var views = new Dictionary<(GroupId, int), NodeId[]>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind == HistoryEventKind.Decide)
            {
                if (!decided.TryGetValue(e.LogIndex, out var first)) decided[e.LogIndex] = (e.PayloadHash, e.Process, i);
                else if (first.Hash != e.PayloadHash)
                {
                    sink.Report(P, $"replica {e.Process} applied decision {e.PayloadHash:x16} at log position {e.LogIndex} ({At(i, e)}), "
                        + $"but replica {first.Replica} applied {first.Hash:x16} there at event #{first.Index}: the membership service split");
                }
            }
            else if (e.Kind == HistoryEventKind.ViewInstall && e.Members is not null)
            {
                views.TryAdd((e.Group, e.ViewId), e.Members);
            }
        }
        foreach (var ((group, viewId), members) in views)
        {
            if (!views.TryGetValue((group, viewId - 1), out NodeId[]? previous)) continue;
            NodeId[] survivors = members.Where(m => previous.Contains(m)).ToArray();
            bool prefix = members.AsSpan(0, survivors.Length).SequenceEqual(survivors);
            bool sameOrder = survivors.AsSpan().SequenceEqual(previous.Where(survivors.Contains).ToArray());
            if (!prefix || !sameOrder)
            {
                sink.Report(P, $"view v{viewId} of g={group} {List(members)} does not descend from v{viewId - 1} {List(previous)}: "
                    + "survivors must come first, in their old order, followed by joiners");
            }
        }
    }

    /// <summary>
    /// If p and q both install view v of a group and then both install the same next view, they
    /// delivered exactly the same set of messages while in v: the flush exchanged every unstable
    /// message before the new view was installed.
    /// </summary>
    internal static void VirtualSynchrony(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(VirtualSynchrony);
        var current = new Dictionary<(NodeId, GroupId), (int View, int Index, MessageSet Delivered)>();
        // The first process seen making each transition; every later one must match it.
        var reference = new Dictionary<(GroupId, int From, int To), (NodeId Process, MessageSet Delivered)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.ViewInstall:
                {
                    ref var state = ref CollectionsMarshal.GetValueRefOrAddDefault(current, (e.Process, e.Group), out bool inGroup);
                    if (inGroup)
                    {
                        ref var first = ref CollectionsMarshal.GetValueRefOrAddDefault(
                            reference, (e.Group, state.View, e.ViewId), out bool seen);
                        if (!seen)
                        {
                            first = (e.Process, state.Delivered);
                        }
                        else if (!first.Delivered.SetEquals(state.Delivered))
                        {
                            ReportDifference(sink, P, e, i, state.View, first.Process, first.Delivered, state.Delivered);
                        }
                    }
                    state = (e.ViewId, i, new MessageSet(e.Group));
                    break;
                }
                case HistoryEventKind.Deliver when !IsSubset(e): // a subset message is delivered at its destinations only: SubsetDelivery
                    if (current.TryGetValue((e.Process, e.Message.Group), out var s)) s.Delivered.Add(e.Message);
                    break;
                case HistoryEventKind.LeaveCompleted:
                    // A later rejoin starts afresh: the view it installs is not a successor of the old one.
                    current.Remove((e.Process, e.Group));
                    break;
            }
        }
    }

    private static void ReportDifference(
        ViolationSink sink, string property, HistoryEvent e, int index, int fromView,
        NodeId p, MessageSet pSet, MessageSet qSet)
    {
        if (!sink.Wants(property))
        {
            sink.Report(property, "");
            return;
        }
        NodeId q = e.Process;
        (long pOnly, List<MessageId> pEx) = pSet.Except(qSet);
        (long qOnly, List<MessageId> qEx) = qSet.Except(pSet);
        string text = $"{p} and {q} both went from view v{fromView} to v{e.ViewId} of g={e.Group} ({q} at {At(index, e)}) "
            + $"but delivered different messages in v{fromView}:";
        if (pOnly > 0) text += $" {pOnly} delivered by {p} but not by {q} (e.g. {List(pEx)});";
        if (qOnly > 0) text += $" {qOnly} delivered by {q} but not by {p} (e.g. {List(qEx)});";
        sink.Report(property, text);
    }

    /// <summary>
    /// Each process delivers the messages of each (sender, group, view) in sending order with no
    /// gap, per primitive: the Sends of a sender in the order it sent them, and likewise its
    /// OrderedSends, and its CausalSends (an OrderedSend waits for its place in the total order and a
    /// CausalSend for its causal predecessors, so a later Send of the same sender may overtake either). A suffix may be missing (the sender crashed), a middle one may
    /// not. Positions come from the sender's Send events; a delivery without one is NoCreation's.
    /// </summary>
    internal static void FifoPerSender(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(FifoPerSender);
        // Position of each message among its sender's messages of the same primitive in its view.
        var position = new Dictionary<MessageId, (Isis.Core.Groups.MessageKind Primitive, int Index)>();
        var sentSoFar = new Dictionary<(NodeId Sender, GroupId Group, int View, Isis.Core.Groups.MessageKind Primitive), int>();
        foreach (HistoryEvent e in events)
        {
            if (e.Kind != HistoryEventKind.Send || IsSubset(e)) continue; // per destination: SubsetDelivery
            ref int n = ref CollectionsMarshal.GetValueRefOrAddDefault(sentSoFar, (e.Message.Sender, e.Message.Group, e.Message.ViewId, e.Primitive), out _);
            position.TryAdd(e.Message, (e.Primitive, ++n));
        }
        var last = new Dictionary<(NodeId Process, NodeId Sender, GroupId Group, int View, Isis.Core.Groups.MessageKind Primitive), (int Index, long Seq)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.Deliver) continue;
            MessageId m = e.Message;
            if (!position.TryGetValue(m, out var pos)) continue;
            ref var prev = ref CollectionsMarshal.GetValueRefOrAddDefault(last, (e.Process, m.Sender, m.Group, m.ViewId, pos.Primitive), out _);
            if (pos.Index != prev.Index + 1)
            {
                string what = pos.Primitive switch
                {
                    Isis.Core.Groups.MessageKind.Send => "Send",
                    Isis.Core.Groups.MessageKind.Safe => "SafeSend",
                    Isis.Core.Groups.MessageKind.CausalSend => "CausalSend",
                    _ => "OrderedSend",
                };
                sink.Report(P, pos.Index > prev.Index + 1
                    ? $"{e.Process} delivered {m} at {At(i, e)} but had delivered only {prev.Index} earlier {what}s from {m.Sender} in v{m.ViewId} of g={m.Group} (last seq {prev.Seq}): {pos.Index - prev.Index - 1} skipped"
                    : $"{e.Process} delivered {m} at {At(i, e)} after already delivering {what} seq {prev.Seq} from {m.Sender} in v{m.ViewId} of g={m.Group}: out of FIFO order");
            }
            // Resynchronize after a gap so one skipped message yields one violation, not thousands.
            if (pos.Index > prev.Index) prev = (pos.Index, m.Seq);
        }
    }

    /// <summary>
    /// OrderedSend: every two processes that come through a view (they install the next view, leave
    /// after its flush, or are still in it at the end) deliver the ordered messages of that view
    /// that both deliver in the same relative order: one total order, which FifoPerSender makes
    /// consistent with each sender's order. Like Send, OrderedSend is not uniform: a process that
    /// fails during the view may have delivered in an order the survivors never learned (SafeSend
    /// is the uniform primitive).
    /// </summary>
    internal static void TotalOrder(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(TotalOrder);
        var failed = new HashSet<(NodeId, GroupId, int)>();
        var current = new Dictionary<(NodeId, GroupId), int>();
        foreach (HistoryEvent e in events)
        {
            if (e.Kind == HistoryEventKind.ViewInstall) current[(e.Process, e.Group)] = e.ViewId;
            else if (e.Kind == HistoryEventKind.LeaveCompleted) current.Remove((e.Process, e.Group));
            else if (e.Kind is HistoryEventKind.Crash or HistoryEventKind.Expel)
            {
                foreach (var ((process, group), view) in current)
                {
                    if (process == e.Process) failed.Add((process, group, view));
                }
            }
        }
        var sequences = new Dictionary<(GroupId Group, int View), Dictionary<NodeId, List<MessageId>>>();
        foreach (HistoryEvent e in events)
        {
            if (e.Kind != HistoryEventKind.Deliver || e.Primitive is Isis.Core.Groups.MessageKind.Send or Isis.Core.Groups.MessageKind.CausalSend or Isis.Core.Groups.MessageKind.Subset) continue;
            // SafeSend is uniform: a process that fails later must still have delivered safe messages
            // in the survivors' order, so only its OrderedSends are exempt.
            if (e.Primitive != Isis.Core.Groups.MessageKind.Safe && failed.Contains((e.Process, e.Message.Group, e.Message.ViewId))) continue;
            ref var byProcess = ref CollectionsMarshal.GetValueRefOrAddDefault(sequences, (e.Message.Group, e.Message.ViewId), out _);
            byProcess ??= new Dictionary<NodeId, List<MessageId>>();
            ref var list = ref CollectionsMarshal.GetValueRefOrAddDefault(byProcess, e.Process, out _);
            (list ??= new List<MessageId>()).Add(e.Message);
        }
        foreach (var ((group, view), byProcess) in sequences)
        {
            var processes = byProcess.Keys.OrderBy(n => n).ToArray();
            for (int a = 0; a < processes.Length; a++)
            {
                var positionAtA = new Dictionary<MessageId, int>();
                List<MessageId> seqA = byProcess[processes[a]];
                for (int k = 0; k < seqA.Count; k++) positionAtA.TryAdd(seqA[k], k);
                for (int b = a + 1; b < processes.Length; b++)
                {
                    int lastPosition = -1;
                    MessageId lastMessage = default;
                    foreach (MessageId m in byProcess[processes[b]])
                    {
                        if (!positionAtA.TryGetValue(m, out int at)) continue;
                        if (at < lastPosition)
                        {
                            sink.Report(P, $"{processes[a]} and {processes[b]} deliver ordered messages of v{view} of g={group} in different orders: " +
                                $"{processes[b]} delivers {lastMessage} before {m}, {processes[a]} the other way round");
                            break;
                        }
                        lastPosition = at;
                        lastMessage = m;
                    }
                }
            }
        }
    }

    /// <summary>
    /// Flush: once a process's Flush returned, every message it sent before calling Flush is held
    /// by every member of its view, so it survives the sender's crash: every member that survives
    /// that message's view (installs the next view) delivered it in that view. A Flush(k) promises
    /// k holders: a message it returned for survives any k - 1 failures, so the survivors must
    /// deliver it whenever fewer than k members of its view did not come through the view.
    /// </summary>
    internal static void FlushDurability(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(FlushDurability);
        var open = new Dictionary<(NodeId, GroupId), (int Request, int Holders)>();
        var completed = new Dictionary<(NodeId, GroupId), List<(int Request, int Holders)>>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind == HistoryEventKind.FlushRequested) open[(e.Process, e.Group)] = (i, e.Phi);
            else if (e.Kind == HistoryEventKind.FlushCompleted && open.Remove((e.Process, e.Group), out var request))
            {
                ref var list = ref System.Runtime.InteropServices.CollectionsMarshal.GetValueRefOrAddDefault(completed, (e.Process, e.Group), out _);
                (list ??= new()).Add(request);
            }
        }
        if (completed.Count == 0) return;

        // Per message: the strongest flush that returned for it (requested after it was sent), and where.
        var flushed = new Dictionary<MessageId, (int Request, int Holders)>();
        var delivered = new HashSet<(NodeId, MessageId)>();
        var subsetTo = new Dictionary<MessageId, NodeId[]>(); // a flushed subset message is owed to its destinations only
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.Send when e.Primitive != Isis.Core.Groups.MessageKind.Safe: // Flush covers the cheap primitives
                    if (!completed.TryGetValue((e.Process, e.Group), out var flushes)) break;
                    if (IsSubset(e)) subsetTo[e.Message] = e.Members ?? [];
                    foreach (var (request, holders) in flushes)
                    {
                        if (request < i) continue;
                        int strength = holders <= 0 ? int.MaxValue : holders;
                        if (!flushed.TryGetValue(e.Message, out var best) || strength > (best.Holders <= 0 ? int.MaxValue : best.Holders)) flushed[e.Message] = (request, holders);
                    }
                    break;
                case HistoryEventKind.Deliver:
                    if (flushed.ContainsKey(e.Message)) delivered.Add((e.Process, e.Message));
                    break;
            }
        }
        var views = ViewHistory.Of(events);
        foreach (var (m, (request, holders)) in flushed)
        {
            if (holders > 0 && views.MembersOf.TryGetValue((m.Group, m.ViewId), out NodeId[]? members) && members.Count(q => !views.Survived(q, m)) >= holders)
            {
                continue; // as many members as it had holders may have failed: the flush promised no more
            }
            foreach (NodeId q in views.SurvivorsWithout(m, delivered))
            {
                if (subsetTo.TryGetValue(m, out NodeId[]? to) && Array.IndexOf(to, q) < 0) continue;
                string flush = holders > 0 ? $"Flush({holders})" : "Flush";
                sink.Report(P, $"{m} was flushed by {m.Sender} ({flush} requested at event #{request} returned) but {q} survived v{m.ViewId} of g={m.Group} without delivering it");
            }
        }
    }

    /// <summary>
    /// Query(ALL): replies come from distinct members of the view in which the request was
    /// delivered; every member of that view still in the requester's view when the query completed
    /// replied (failed or departed members are not waited for, and nobody is skipped). With a Heal,
    /// every Query issued by a process that stays in the group to the end completes.
    /// </summary>
    internal static void QueryReplies(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(QueryReplies);
        var membersOf = new Dictionary<(GroupId, int), NodeId[]>();
        var current = new Dictionary<(NodeId, GroupId), NodeId[]>();
        var currentView = new Dictionary<(NodeId, GroupId), int>();
        var outstanding = new Dictionary<(NodeId, GroupId), int>(); // queries issued since the process last asked to join
        bool healed = false;
        var gone = new HashSet<NodeId>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.Heal:
                    healed = true;
                    break;
                case HistoryEventKind.Crash or HistoryEventKind.Expel:
                    gone.Add(e.Process);
                    break;
                case HistoryEventKind.ViewInstall:
                    membersOf.TryAdd((e.Group, e.ViewId), e.Members ?? []);
                    current[(e.Process, e.Group)] = e.Members ?? [];
                    currentView[(e.Process, e.Group)] = e.ViewId;
                    break;
                case HistoryEventKind.JoinRequested or HistoryEventKind.LeaveCompleted:
                    outstanding.Remove((e.Process, e.Group));
                    if (e.Kind == HistoryEventKind.LeaveCompleted) current.Remove((e.Process, e.Group));
                    break;
                case HistoryEventKind.QueryIssued:
                    outstanding[(e.Process, e.Group)] = outstanding.GetValueOrDefault((e.Process, e.Group)) + 1;
                    break;
                case HistoryEventKind.QueryCompleted:
                {
                    outstanding[(e.Process, e.Group)] = outstanding.GetValueOrDefault((e.Process, e.Group)) - 1;
                    NodeId[] repliers = e.Members ?? [];
                    if (repliers.Distinct().Count() != repliers.Length)
                    {
                        sink.Report(P, $"{e.Process}'s query completed at {At(i, e)} with two replies from one member: {List(repliers)}");
                    }
                    if (!membersOf.TryGetValue((e.Group, e.ViewId), out NodeId[]? view))
                    {
                        sink.Report(P, $"{e.Process}'s query completed at {At(i, e)} naming delivery view v{e.ViewId}, which nobody installed");
                        break;
                    }
                    foreach (NodeId r in repliers.Where(r => Array.IndexOf(view, r) < 0))
                    {
                        sink.Report(P, $"{e.Process}'s query completed at {At(i, e)} with a reply from {r}, not a member of its delivery view v{e.ViewId} {List(view)}");
                    }
                    // Members that stayed in every view from the delivery view to now must have replied;
                    // one that left or failed in between was rightly not waited for, even if it came back.
                    int nowView = currentView.GetValueOrDefault((e.Process, e.Group));
                    // A P2PQuery waits for the members it was addressed to only.
                    NodeId[] owed = e.Voters is { } to ? [.. view.Where(m => Array.IndexOf(to, m) >= 0)] : view;
                    foreach (NodeId r in repliers.Where(r => e.Voters is { } to && Array.IndexOf(to, r) < 0))
                    {
                        sink.Report(P, $"{e.Process}'s P2PQuery completed at {At(i, e)} with a reply from {r}, which it was not addressed to {List(e.Voters!)}");
                    }
                    foreach (NodeId m in owed.Where(m => Array.IndexOf(repliers, m) < 0))
                    {
                        bool stayed = true;
                        for (int v = e.ViewId + 1; v <= nowView && stayed; v++)
                        {
                            stayed = membersOf.TryGetValue((e.Group, v), out NodeId[]? later) && Array.IndexOf(later, m) >= 0;
                        }
                        if (stayed && nowView >= e.ViewId)
                        {
                            sink.Report(P, $"{e.Process}'s query (delivery view v{e.ViewId}) completed at {At(i, e)} without a reply from {m}, which stayed in its view");
                        }
                    }
                    break;
                }
            }
        }
        if (!healed) return;
        foreach (var ((process, group), count) in outstanding)
        {
            if (count > 0 && !gone.Contains(process) && current.ContainsKey((process, group)))
            {
                sink.Report(P, $"{process} issued {count} queries in g={group} that never completed, though it stayed in the group to the end");
            }
        }
    }

    /// <summary>A process delivers each message id at most once.</summary>
    internal static void NoDuplicates(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(NoDuplicates);
        var delivered = new Dictionary<(NodeId Process, NodeId Sender, GroupId Group, int View), SeqSet>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.Deliver) continue;
            MessageId m = e.Message;
            ref SeqSet? set = ref CollectionsMarshal.GetValueRefOrAddDefault(delivered, (e.Process, m.Sender, m.Group, m.ViewId), out _);
            set ??= new SeqSet();
            if (!set.Add(m.Seq))
            {
                sink.Report(P, $"{e.Process} delivered {m} again at {At(i, e)}");
            }
        }
    }

    /// <summary>
    /// Every delivered message was sent, earlier, with the same payload hash; message ids are
    /// never reused by two sends.
    /// </summary>
    internal static void NoCreation(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(NoCreation);
        var sends = new Dictionary<MessageId, (ulong Hash, int Index)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.Send) continue;
            if (!sends.TryAdd(e.Message, (e.PayloadHash, i)))
            {
                sink.Report(P, $"{e.Process} sent {e.Message} again at {At(i, e)}; first sent at event #{sends[e.Message].Index}");
            }
        }
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.Deliver) continue;
            if (!sends.TryGetValue(e.Message, out var send))
            {
                sink.Report(P, $"{e.Process} delivered {e.Message} at {At(i, e)} but no process ever sent it");
            }
            else if (send.Index > i)
            {
                sink.Report(P, $"{e.Process} delivered {e.Message} at {At(i, e)} before it was sent at event #{send.Index}");
            }
            else if (send.Hash != e.PayloadHash)
            {
                sink.Report(P, $"{e.Process} delivered {e.Message} at {At(i, e)} with payload hash {e.PayloadHash:x16} but it was sent with {send.Hash:x16} at event #{send.Index}");
            }
        }
    }

    /// <summary>
    /// A message is delivered in the view it was sent in: the delivering process's current view
    /// (its latest ViewInstall of the group, not undone by a LeaveCompleted) is the message's view,
    /// is the view the Deliver event names, and lists the process as a member.
    /// </summary>
    internal static void DeliveredInSendingView(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(DeliveredInSendingView);
        var current = new Dictionary<(NodeId, GroupId), (int View, bool IsMember)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.ViewInstall:
                    // Membership is decided once per install, not per delivery: views may be large.
                    current[(e.Process, e.Group)] = (e.ViewId, e.Members is not null && e.Members.AsSpan().Contains(e.Process));
                    break;
                case HistoryEventKind.LeaveCompleted:
                    current.Remove((e.Process, e.Group));
                    break;
                case HistoryEventKind.Deliver:
                {
                    MessageId m = e.Message;
                    if (!current.TryGetValue((e.Process, m.Group), out var view))
                    {
                        sink.Report(P, $"{e.Process} delivered {m} at {At(i, e)} while it had no view of g={m.Group} installed");
                        break;
                    }
                    if (m.ViewId != view.View)
                    {
                        sink.Report(P, $"{e.Process} delivered {m} at {At(i, e)} while in view v{view.View} of g={m.Group}; it was sent in v{m.ViewId}");
                    }
                    else if (e.ViewId != view.View)
                    {
                        sink.Report(P, $"{e.Process} delivered {m} at {At(i, e)} and recorded view v{e.ViewId}, but its installed view of g={m.Group} is v{view.View}");
                    }
                    if (!view.IsMember)
                    {
                        sink.Report(P, $"{e.Process} delivered {m} at {At(i, e)} in view v{view.View} of g={m.Group}, which does not list it as a member");
                    }
                    break;
                }
            }
        }
    }

    /// <summary>
    /// The sender delivers its own message at once: the event right after a Send at that process
    /// (ignoring other processes' events and its Expel) is its Deliver of the same message.
    /// (Send and CausalSend only: an OrderedSend is delivered when its place in the total order is
    /// known; a CausalSend's predecessors are all delivered at its sender already.)
    /// </summary>
    internal static void SenderDeliversOwn(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(SenderDeliversOwn);
        var pending = new Dictionary<NodeId, (MessageId Message, int Index)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            // Expel is recorded by the membership service, not by the process, so it may fall
            // between a Send and its local delivery in a merged real-run log.
            if (e.Process.IsNone || e.Kind == HistoryEventKind.Expel) continue;
            if (pending.Remove(e.Process, out var send))
            {
                if (e.Kind == HistoryEventKind.Deliver && e.Message == send.Message) continue;
                sink.Report(P, $"{e.Process} sent {send.Message} at event #{send.Index} but its next event, {At(i, e)}, is {e.Kind} {(e.Kind == HistoryEventKind.Deliver ? e.Message.ToString() : "")}, not its own delivery");
            }
            if (e.Kind == HistoryEventKind.Send && (e.Primitive is Isis.Core.Groups.MessageKind.Send or Isis.Core.Groups.MessageKind.CausalSend
                || (IsSubset(e) && Array.IndexOf(e.Members ?? [], e.Process) >= 0))) pending[e.Process] = (e.Message, i);
        }
        foreach ((NodeId process, var send) in pending)
        {
            sink.Report(P, $"{process} sent {send.Message} at event #{send.Index} and never delivered it");
        }
    }

    /// <summary>
    /// Once the membership service expels an incarnation, nothing it sends reaches anyone: it holds
    /// a membership lease shorter than the expulsion time, so it stops sending before it is expelled
    /// (no Send after its Expel), and every other process firewalls its traffic (no process other
    /// than the sender delivers a message it sent after its Expel). Messages it sent before the
    /// Expel may still be delivered, in their own view, by the flush.
    /// </summary>
    internal static void FirewallAfterExpulsion(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(FirewallAfterExpulsion);
        var expelledAt = new Dictionary<NodeId, int>();
        var sentAfterExpel = new Dictionary<MessageId, int>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.Expel:
                    expelledAt.TryAdd(e.Process, i);
                    break;
                case HistoryEventKind.Send:
                    if (expelledAt.Count > 0 && expelledAt.TryGetValue(e.Process, out int expel))
                    {
                        sentAfterExpel.TryAdd(e.Message, i);
                        sink.Report(P, $"{e.Process} sent {e.Message} at {At(i, e)}, after it was expelled at event #{expel}: its lease should have stopped it");
                    }
                    break;
                case HistoryEventKind.Deliver:
                    if (sentAfterExpel.Count > 0 && e.Process != e.Message.Sender && sentAfterExpel.TryGetValue(e.Message, out int sentAt))
                    {
                        sink.Report(P, $"{e.Process} delivered {e.Message} at {At(i, e)}; it was sent at event #{sentAt}, after {e.Message.Sender} was expelled at event #{expelledAt[e.Message.Sender]}");
                    }
                    break;
            }
        }
    }

    /// <summary>
    /// An expelled incarnation delivers nothing of others after its expulsion: its membership lease ran out
    /// before the service could expel it, and it is no survivor of any later flush. (So it never
    /// acts on a message after the view that expels it, even before it learns of its expulsion.)
    /// </summary>
    internal static void NoDeliveryAfterExpulsion(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(NoDeliveryAfterExpulsion);
        var expelledAt = new Dictionary<NodeId, int>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind == HistoryEventKind.Expel) expelledAt.TryAdd(e.Process, i);
            // Its own sends are FirewallAfterExpulsion's concern (and a merged real-run log may place
            // the service's Expel between a Send and the sender's own delivery of it).
            else if (e.Kind == HistoryEventKind.Deliver && e.Message.Sender != e.Process && expelledAt.TryGetValue(e.Process, out int at))
            {
                sink.Report(P, $"{e.Process} delivered {e.Message} at {At(i, e)}, after it was expelled at event #{at}");
            }
        }
    }

    private sealed class Membership
    {
        public int LastInstallIndex = -1;
        public int LastView;
        public NodeId[] Members = [];
        public int LastLeaveIndex = -1;
        public int LastJoinRequestIndex = -1;

        public bool InGroup => LastInstallIndex > LastLeaveIndex;
    }

    /// <summary>
    /// Only if the run healed (a Heal event): by End, the processes alive (no Crash, no Expel) and
    /// in group g (last installed a view of g, did not complete leaving) all have the same last view
    /// of g, its members are exactly them, and each delivered every message any of them sent in
    /// that view. A live process that requested to join g installed a view of g after the request.
    /// </summary>
    internal static void Liveness(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(Liveness);
        bool healed = false;
        var dead = new Dictionary<NodeId, HistoryEventKind>();
        var membership = new Dictionary<(NodeId Process, GroupId Group), Membership>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.Heal: healed = true; break;
                case HistoryEventKind.Crash:
                case HistoryEventKind.Expel: dead.TryAdd(e.Process, e.Kind); break;
                case HistoryEventKind.ViewInstall:
                {
                    Membership s = Get(membership, e);
                    s.LastInstallIndex = i;
                    s.LastView = e.ViewId;
                    s.Members = e.Members ?? [];
                    break;
                }
                case HistoryEventKind.LeaveCompleted: Get(membership, e).LastLeaveIndex = i; break;
                case HistoryEventKind.JoinRequested: Get(membership, e).LastJoinRequestIndex = i; break;
            }
        }
        if (!healed) return;

        // Live members per group, in first-seen order so reports are deterministic.
        var groups = new Dictionary<GroupId, List<(NodeId Process, Membership State)>>();
        foreach (((NodeId process, GroupId group), Membership s) in membership)
        {
            if (dead.ContainsKey(process)) continue;
            if (s.LastJoinRequestIndex > s.LastInstallIndex)
            {
                sink.Report(P, $"{process} asked to join g={group} at event #{s.LastJoinRequestIndex} and is alive at the end, but installed no view of g={group} after that");
            }
            if (!s.InGroup) continue;
            if (!groups.TryGetValue(group, out var list)) groups[group] = list = [];
            list.Add((process, s));
        }

        // The final view of each group: the highest view any live member reached.
        var finals = new Dictionary<GroupId, (int View, HashSet<NodeId> Holders, MessageSet Sent)>();
        foreach ((GroupId group, var live) in groups)
        {
            (NodeId Process, Membership State) top = live[0];
            foreach (var m in live)
            {
                if (m.State.LastView > top.State.LastView) top = m;
            }
            int finalView = top.State.LastView;
            var liveSet = new HashSet<NodeId>();
            var holders = new HashSet<NodeId>();
            foreach ((NodeId process, Membership s) in live)
            {
                liveSet.Add(process);
                if (s.LastView == finalView)
                {
                    holders.Add(process);
                }
                else
                {
                    sink.Report(P, $"{process} is alive and in g={group} at the end but stuck in view v{s.LastView} (installed at event #{s.LastInstallIndex}); {top.Process} reached v{finalView}");
                }
            }
            NodeId[] members = top.State.Members;
            foreach ((NodeId process, _) in live)
            {
                if (!members.AsSpan().Contains(process))
                {
                    sink.Report(P, $"{process} is alive and in g={group} at the end but not a member of its final view v{finalView} {List(members)}");
                }
            }
            foreach (NodeId m in members)
            {
                if (liveSet.Contains(m)) continue;
                string why = dead.TryGetValue(m, out HistoryEventKind k)
                    ? (k == HistoryEventKind.Crash ? "crashed" : "was expelled")
                    : membership.TryGetValue((m, group), out Membership? ms) && ms.LastInstallIndex >= 0 ? "left the group" : "never installed a view of it";
                sink.Report(P, $"final view v{finalView} of g={group} {List(members)} still lists {m}, which {why}");
            }
            finals[group] = (finalView, holders, new MessageSet(group));
        }
        if (finals.Count == 0) return;

        // Second pass: what was sent and delivered in each final view (a subset message is owed to its live destinations).
        var delivered = new Dictionary<(NodeId, GroupId), MessageSet>();
        var finalSubsets = new List<(MessageId Message, NodeId[] To)>();
        var subsetDelivered = new HashSet<(NodeId, MessageId)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind is not (HistoryEventKind.Send or HistoryEventKind.Deliver)) continue;
            MessageId m = e.Message;
            if (!finals.TryGetValue(m.Group, out var f) || m.ViewId != f.View || !f.Holders.Contains(m.Sender)) continue;
            if (e.Kind == HistoryEventKind.Send)
            {
                if (IsSubset(e)) finalSubsets.Add((m, e.Members ?? []));
                else f.Sent.Add(m);
            }
            else if (IsSubset(e))
            {
                subsetDelivered.Add((e.Process, m));
            }
            else if (f.Holders.Contains(e.Process))
            {
                ref MessageSet? set = ref CollectionsMarshal.GetValueRefOrAddDefault(delivered, (e.Process, m.Group), out _);
                (set ??= new MessageSet(m.Group)).Add(m);
            }
        }
        foreach ((GroupId group, var f) in finals)
        {
            foreach (NodeId process in f.Holders)
            {
                MessageSet got = delivered.TryGetValue((process, group), out MessageSet? d) ? d : new MessageSet(group);
                (long missing, List<MessageId> examples) = f.Sent.Except(got);
                if (missing > 0)
                {
                    sink.Report(P, $"{process} never delivered {missing} messages sent by live members in the final view v{f.View} of g={group} (e.g. {List(examples)})");
                }
            }
        }
        foreach (var (m, to) in finalSubsets)
        {
            foreach (NodeId q in to.Where(q => finals[m.Group].Holders.Contains(q) && !subsetDelivered.Contains((q, m))))
            {
                sink.Report(P, $"{q} never delivered {m}, a subset message a live member sent it in the final view v{m.ViewId} of g={m.Group}");
            }
        }
    }

    private static Membership Get(Dictionary<(NodeId, GroupId), Membership> map, HistoryEvent e)
    {
        ref Membership? s = ref CollectionsMarshal.GetValueRefOrAddDefault(map, (e.Process, e.Group), out _);
        return s ??= new Membership();
    }
}
