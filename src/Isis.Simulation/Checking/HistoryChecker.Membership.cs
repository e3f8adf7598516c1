using Isis.Core.Identity;
using Isis.Core.Membership;

namespace Isis.Simulation.Checking;

// The checker, part 3: the membership service's own configuration. The replicas that run the
// service may change while it runs (the embedded service moves them between member processes);
// the service stays one service only if every change is a single step and every decision had a
// majority of the configuration in force.
internal static partial class HistoryChecker
{
    /// <summary>
    /// One service, one sequence of configurations: every replica that founded the service founded
    /// it with the same replicas; each configuration the service decided differs from the one
    /// before it (or the founding one) by exactly one replica added or removed, so a majority of
    /// either shares a replica with a majority of the other, or grows a single replica to three that
    /// keep it (<see cref="ReplicatedLog.SafeStep"/>); and every commit a leader reported was
    /// held by a majority of the configuration it counted, which is the one the log holds at that
    /// position.
    /// </summary>
    internal static void ServiceQuorums(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(ServiceQuorums);
        NodeId[]? founding = null;
        int foundingIndex = -1;
        var decided = new SortedDictionary<long, NodeId[]>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind == HistoryEventKind.Founded && e.Members is not null)
            {
                if (founding is null) (founding, foundingIndex) = (e.Members, i);
                else if (!SameSet(founding, e.Members))
                {
                    sink.Report(P, $"replica {e.Process} founded the service with {List(e.Members)} at {At(i, e)}, "
                        + $"but it was founded with {List(founding)} at event #{foundingIndex}: two services");
                }
            }
            else if (e.Kind == HistoryEventKind.Decide && e.Members is not null)
            {
                decided.TryAdd(e.LogIndex, e.Members);
            }
        }

        NodeId[]? previous = founding;
        long previousIndex = 0;
        foreach (var (index, voters) in decided)
        {
            if (previous is not null && !ReplicatedLog.SafeStep(previous, voters))
            {
                sink.Report(P, $"the configuration decided at log position {index}, {List(voters)}, changes more than one replica of "
                    + $"the one before it at position {previousIndex}, {List(previous)} (and is not the growth of a single replica to three that keep it): "
                    + "majorities of the two need not intersect");
            }
            (previous, previousIndex) = (voters, index);
        }

        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.Commit || e.Members is null || e.Voters is null) continue;
            int held = e.Members.Count(m => e.Voters.Contains(m));
            if (held < e.Voters.Length / 2 + 1 || held != e.Members.Length)
            {
                sink.Report(P, $"leader {e.Process} committed log position {e.LogIndex} at {At(i, e)} held by {List(e.Members)}, "
                    + $"not a majority of the configuration in force {List(e.Voters)}");
            }
            NodeId[]? inLog = e.ConfigurationIndex == 0 ? founding : decided.GetValueOrDefault(e.ConfigurationIndex);
            if (inLog is not null && !SameSet(inLog, e.Voters))
            {
                sink.Report(P, $"leader {e.Process} committed log position {e.LogIndex} at {At(i, e)} counting {List(e.Voters)} as the configuration "
                    + $"of position {e.ConfigurationIndex}, but the service decided {List(inLog)} there");
            }
        }
    }

    /// <summary>
    /// Snapshots hold exactly the committed decisions they claim. Every replica that applied the
    /// decision at a log position reached the same digest of the decisions up to it (so no replica
    /// skipped, repeated or invented one, through a snapshot or otherwise), and every snapshot a
    /// replica took, installed or restored at a position carries that same digest: it covers
    /// exactly the decisions committed up to there.
    /// </summary>
    internal static void ServiceSnapshots(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(ServiceSnapshots);
        var applied = new Dictionary<long, (long Digest, NodeId Replica, int Index)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.Decide || e.ConfigurationIndex == 0) continue;
            if (!applied.TryGetValue(e.LogIndex, out var first)) applied[e.LogIndex] = (e.ConfigurationIndex, e.Process, i);
            else if (first.Digest != e.ConfigurationIndex)
            {
                sink.Report(P, $"replica {e.Process} applied log position {e.LogIndex} reaching digest {e.ConfigurationIndex:x16} at {At(i, e)}, "
                    + $"but replica {first.Replica} reached {first.Digest:x16} there at event #{first.Index}: their states hold different decisions");
            }
        }
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind != HistoryEventKind.ReplicaSnapshot || !applied.TryGetValue(e.LogIndex, out var decided) || decided.Digest == e.ConfigurationIndex) continue;
            string how = e.Phi == 0 ? "took" : "installed";
            sink.Report(P, $"replica {e.Process} {how} a snapshot of log position {e.LogIndex} at {At(i, e)} with digest {e.ConfigurationIndex:x16}, "
                + $"but the decisions committed up to there chain to {decided.Digest:x16} (replica {decided.Replica}, event #{decided.Index}): "
                + "the snapshot does not hold exactly the committed decisions");
        }
    }

    /// <summary>
    /// The eras of an embedded service that was founded more than once (every process restarted
    /// and the service was founded again): era k begins at the k-th Founded event, and each process
    /// incarnation and replica belongs to the era of its first event that needs a service (anything
    /// but a join request, the log it opens for it, or a crash; a founding replica to the era it founds). OneServiceAtATime: once era k begins, nothing of an earlier
    /// era installs a view, delivers, decides or commits: two services never run at once. Events of
    /// no process (the heal, the end) belong to every era; the last era is the one Liveness judges
    /// at the end (the earlier ones' processes are all dead by then). With one Founded event (or
    /// none), the whole history is one era.
    /// </summary>
    internal static List<HistoryEvent[]> ServiceEras(ReadOnlySpan<HistoryEvent> events, ViolationSink sink) => ServiceEras(events, sink, out _);

    /// <summary>
    /// As <see cref="ServiceEras(ReadOnlySpan{HistoryEvent}, ViolationSink)"/>, and the era of each
    /// event (a global event, Heal or End, is in the era current at it).
    /// </summary>
    internal static List<HistoryEvent[]> ServiceEras(ReadOnlySpan<HistoryEvent> events, ViolationSink sink, out int[] eraOfEvent)
    {
        eraOfEvent = new int[events.Length];
        const string P = "OneServiceAtATime";
        var foundedAt = new List<int>();
        var eraOf = new Dictionary<NodeId, int>();
        var startedIn = new Dictionary<NodeId, int>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (e.Kind == HistoryEventKind.Founded) foundedAt.Add(i);
            if (e.Process.IsNone) continue;
            bool needsService = e.Kind is not (HistoryEventKind.JoinRequested or HistoryEventKind.LogOpened or HistoryEventKind.Crash or HistoryEventKind.EarlyTimer or HistoryEventKind.StaleDeadline);
            // A founding replica belongs to the service it founds, even with events recorded just
            // before its Founded event (a real process records the founding after its replica's first commit).
            if (e.Kind == HistoryEventKind.Founded) eraOf[e.Process] = foundedAt.Count - 1;
            else if (needsService) eraOf.TryAdd(e.Process, Math.Max(0, foundedAt.Count - 1));
            startedIn.TryAdd(e.Process, Math.Max(0, foundedAt.Count - 1));
        }
        if (foundedAt.Count <= 1) return [events.ToArray()]; // every event in era 0
        var eras = foundedAt.Select(_ => new List<HistoryEvent>()).ToList();
        int current = 0;
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            while (current + 1 < foundedAt.Count && foundedAt[current + 1] <= i) current++;
            if (e.Process.IsNone)
            {
                foreach (List<HistoryEvent> all in eras) all.Add(e);
                eraOfEvent[i] = current;
                continue;
            }
            // A process that never got as far as a service goes with the era it started in.
            int era = eraOf.TryGetValue(e.Process, out int known) ? known : startedIn[e.Process];
            eraOfEvent[i] = era;
            if (era < current && e.Kind is HistoryEventKind.ViewInstall or HistoryEventKind.Deliver or HistoryEventKind.Decide or HistoryEventKind.Commit)
            {
                sink.Report(P, $"{e.Process}, of the service founded at event #{foundedAt[era]}, did {e.Kind} at {At(i, e)}, after another service was founded at event #{foundedAt[current]}: two services at once");
            }
            eras[era].Add(e);
        }
        return eras.Select(x => x.ToArray()).ToList();
    }

    private static bool SameSet(NodeId[] a, NodeId[] b) => a.Length == b.Length && a.All(b.Contains);
}
