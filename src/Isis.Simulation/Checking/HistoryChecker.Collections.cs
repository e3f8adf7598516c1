using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

internal static partial class HistoryChecker
{
    /// <summary>
    /// Replicated collections (runs whose application holds one: Collection events). Each history
    /// has a lineage (it starts when the group forms, or when every holder of its state left):
    /// <list type="number">
    /// <item><b>One sequence.</b> Within a lineage, every process that holds history position i holds
    /// the same update there with the same chain hash: a member's history (what pessimistic reads
    /// see) is a prefix of one sequence, so nothing it shows is later ordered differently, repairs
    /// included. This binds what a process applied in view v once it comes through v (installs a
    /// later view, or is a live member at the end), as virtual synchrony does: a member that fails
    /// in v may have delivered a list no survivor received (the sequencer delivers its own list
    /// first). A process appends positions one after another from where it started (0, or the end
    /// of the checkpoint it loaded), and a loaded checkpoint ends with the chain the sequence has
    /// there.</item>
    /// <item><b>Issuer order.</b> An issuer's updates stand in the sequence in the order it issued them.</item>
    /// <item><b>Convergence.</b> At the end (faults stopped long before), every live member holds the
    /// same lineage, as far, with the same chain, and nothing pending.</item>
    /// <item><b>Nothing of a survivor lost.</b> Every update issued by a collection that is still a live
    /// member's at the end (the same process, never left since), after the final lineage began, is in
    /// the final history. (A member that leaves loses what it issued while the view change that
    /// drops it ran: those Sends wait for a view it is not in.)</item>
    /// <item><b>No divergence seen.</b> Gossip never found two members' chains different at one position.</item>
    /// </list>
    /// </summary>
    internal static void Collections(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(Collections);
        var at = new Dictionary<(long Lineage, long Position), (MessageId Update, ulong Chain, NodeId By, int Index)>();
        var next = new Dictionary<NodeId, (long Lineage, long Position)>();
        var foundedAt = new Dictionary<long, long>();
        var issued = new List<(MessageId Update, long Time, int Index)>();
        var finals = new List<(HistoryEvent Event, int Index)>();
        var lastView = new Dictionary<NodeId, int>();
        var final = new HashSet<NodeId>();
        foreach (HistoryEvent e in events)
        {
            if (e.Kind == HistoryEventKind.ViewInstall) lastView[e.Process] = Math.Max(lastView.GetValueOrDefault(e.Process, -1), e.ViewId);
            else if (e.Kind == HistoryEventKind.CollectionFinal) final.Add(e.Process);
        }
        bool any = false;
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.CollectionFounded:
                    any = true;
                    foundedAt.TryAdd(e.ConfigurationIndex, e.Time);
                    next[e.Process] = (e.ConfigurationIndex, 0);
                    break;
                case HistoryEventKind.CollectionLoaded:
                    any = true;
                    next[e.Process] = (e.ConfigurationIndex, e.LogIndex);
                    if (e.LogIndex > 0 && at.TryGetValue((e.ConfigurationIndex, e.LogIndex - 1), out var end) && end.Chain != e.PayloadHash)
                    {
                        sink.Report(P, $"{At(i, e)} {e.Process} loaded a checkpoint of lineage {e.ConfigurationIndex} ending at position {e.LogIndex} with chain {e.PayloadHash:x16}, " +
                            $"but the sequence has chain {end.Chain:x16} there ({end.By} at event #{end.Index})");
                    }
                    break;
                case HistoryEventKind.CollectionApplied:
                    any = true;
                    if (!next.TryGetValue(e.Process, out var expected)) expected = (e.ConfigurationIndex, 0);
                    if (expected != (e.ConfigurationIndex, e.LogIndex))
                    {
                        sink.Report(P, $"{At(i, e)} {e.Process} appended {e.Message} at position {e.LogIndex} of lineage {e.ConfigurationIndex}, " +
                            $"but its history stood at position {expected.Position} of lineage {expected.Lineage}");
                    }
                    next[e.Process] = (e.ConfigurationIndex, e.LogIndex + 1);
                    if (!final.Contains(e.Process) && lastView.GetValueOrDefault(e.Process, -1) <= e.ViewId) break; // it failed in that view: not binding
                    if (at.TryGetValue((e.ConfigurationIndex, e.LogIndex), out var first))
                    {
                        if (first.Update != e.Message || first.Chain != e.PayloadHash)
                        {
                            sink.Report(P, $"{At(i, e)} {e.Process} holds {e.Message} at position {e.LogIndex} of lineage {e.ConfigurationIndex}{(e.Phi == 1 ? " (by repair)" : "")}, " +
                                $"but {first.By} holds {first.Update} there (event #{first.Index}): two histories");
                        }
                    }
                    else
                    {
                        at[(e.ConfigurationIndex, e.LogIndex)] = (e.Message, e.PayloadHash, e.Process, i);
                    }
                    break;
                case HistoryEventKind.CollectionIssued:
                    any = true;
                    issued.Add((e.Message, e.Time, i));
                    break;
                case HistoryEventKind.CollectionDivergence:
                    sink.Report(P, $"{At(i, e)} {e.Process}: {e.Description}");
                    break;
                case HistoryEventKind.CollectionFinal:
                    finals.Add((e, i));
                    break;
            }
        }
        if (!any) return;

        // Issuer order, within each lineage's sequence.
        foreach (var lineage in at.GroupBy(kv => kv.Key.Lineage))
        {
            var lastSeq = new Dictionary<NodeId, (long Seq, long Position)>();
            foreach (var kv in lineage.OrderBy(kv => kv.Key.Position))
            {
                MessageId u = kv.Value.Update;
                if (lastSeq.TryGetValue(u.Sender, out var last) && last.Seq >= u.Seq)
                {
                    sink.Report(P, $"lineage {lineage.Key}: {u.Sender}'s update {u.Seq} stands at position {kv.Key.Position}, after its update {last.Seq} at position {last.Position}: not in the order it issued them");
                }
                lastSeq[u.Sender] = (u.Seq, kv.Key.Position);
            }
        }

        if (finals.Count == 0) return;
        var (reference, referenceIndex) = finals[0];
        foreach (var (e, i) in finals)
        {
            if (e.Phi != 0) sink.Report(P, $"{At(i, e)} {e.Process} ends with {e.Phi} updates pending: every update must be merged once faults stop");
            if (e.ConfigurationIndex != reference.ConfigurationIndex || e.LogIndex != reference.LogIndex || e.PayloadHash != reference.PayloadHash)
            {
                sink.Report(P, $"{At(i, e)} {e.Process} ends with lineage {e.ConfigurationIndex} to position {e.LogIndex} (chain {e.PayloadHash:x16}), " +
                    $"but {reference.Process} ends with lineage {reference.ConfigurationIndex} to position {reference.LogIndex} (chain {reference.PayloadHash:x16}, event #{referenceIndex}): the replicas did not converge");
            }
        }

        // Nothing of a surviving issuer lost: its updates issued since the final lineage began are in the final history.
        long finalLineage = reference.ConfigurationIndex;
        long since = foundedAt.GetValueOrDefault(finalLineage, long.MinValue);
        var survivors = finals.Select(f => (f.Event.Process, f.Event.ViewId)).ToHashSet(); // the process and its collection's first view
        var merged = at.Where(kv => kv.Key.Lineage == finalLineage && kv.Key.Position < reference.LogIndex).Select(kv => kv.Value.Update).ToHashSet();
        foreach (var (update, time, index) in issued)
        {
            if (!survivors.Contains((update.Sender, update.ViewId)) || time < since) continue;
            if (!merged.Contains(update))
            {
                sink.Report(P, $"event #{index} (t={time}) {update.Sender} issued update {update.Seq}, and it is a live member at the end, but the update is not in the final history of lineage {finalLineage}");
            }
        }
    }
}
