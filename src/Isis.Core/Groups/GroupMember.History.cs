using Isis.Core.Durability;
using Isis.Core.Node;

namespace Isis.Core.Groups;

/// <summary>
/// The durable history handed to the application: once this member holds it, the current view,
/// then the history (a checkpoint and the entries after it) in slices, then what waited.
/// </summary>
internal sealed partial class GroupMember
{
    /// <summary>
    /// This member now holds the history (<see cref="DurableHistory"/> made it durable): the
    /// application gets the current view, then the whole history in order, then whatever waited in
    /// this view; then this member acknowledges what it holds of the view and sends what it queued.
    /// </summary>
    /// <remarks>
    /// Views and deliveries of earlier views that waited are dropped: this member took no part in
    /// them, and the history it now holds (copied or recovered in this view) already has their
    /// SafeSends, so handing them over as well would deliver those twice. Queries among them get a
    /// null reply.
    /// With a persistent <paramref name="checkpoint"/>, the application restores it instead of
    /// replaying the entries it holds, and only the entries after them are replayed.
    /// </remarks>
    internal void OnHistoryCurrent(List<HistoryEntry> entries, long count, HistoryPlan plan, Lineage lineage, CheckpointMark? checkpoint, ulong digest = HistoryDigest.Unknown)
    {
        int current = View!.Id;
        foreach (NodeEvent e in _held)
        {
            // A query of an earlier view waits for our reply: this member had no part in that
            // view, so it answers with a null reply (as a handler that does not reply would).
            if (e is MessageDelivered { Kind: var kind } d && d.ViewId < current && kind.IsQuery() && d.Sender != Self)
            {
                Reply(d.Sender, MessageKinds.QueryIdOf(d.Payload.Span), ReplyKind.Null, []);
            }
        }
        _held.RemoveAll(e => e switch
        {
            ViewInstalled v => v.View.Id < current,
            MessageDelivered d => d.ViewId < current,
            _ => false,
        });
        int firstView = _held.FindIndex(e => e is ViewInstalled);
        for (int i = 0; i <= firstView; i++) _node.Emit(_held[i]);
        _held.RemoveRange(0, firstView + 1);
        long replayAfter = 0;
        if (checkpoint != null)
        {
            _node.Emit(new CheckpointRestored(Id, checkpoint));
            replayAfter = checkpoint.Index + ((Options.Mutations & ProtocolMutations.RestoreSkipsAnEntry) != 0 ? 1 : 0);
        }
        // The entries after the checkpoint (a trimmed history's entries start after the trim point,
        // which the checkpoint covers; indices are consecutive). A copy of the list: the history's
        // own is trimmed in place, and grows with this view's SafeSends.
        int from = entries.Count == 0 ? 0 : (int)Math.Clamp(replayAfter + 1 - entries[0].Index, 0, entries.Count);
        _replay = new HistoryReplay(entries.GetRange(from, entries.Count - from), count, plan.Mode, lineage) { Digest = digest };
        ContinueReplay(all: State == MemberState.Left); // a member that left gets no more ticks
    }

    /// <summary>
    /// The history's replay, handed to the application one slice per step
    /// (<see cref="ProtocolOptions.HistoryReplaySliceEntries"/>): a history of a million entries
    /// handed over in one step would hold the driver, and the heartbeats it sends, for seconds.
    /// </summary>
    /// <remarks>
    /// While it runs the member takes part (it holds the history, durably: it logs and acknowledges
    /// this view's SafeSends), but what it would hand the application (deliveries, views, query and
    /// flush completions, a leave) waits, in order, behind the replay's last slice, exactly as it
    /// waited behind the copy: the application sees the whole history before anything else, each
    /// entry once, in order, however many steps the replay takes.
    /// </remarks>
    private sealed class HistoryReplay(List<HistoryEntry> entries, long count, HistoryPlanMode how, Lineage lineage)
    {
        public List<HistoryEntry> Entries { get; } = entries;
        public long Count { get; } = count;
        public HistoryPlanMode How { get; } = how;
        public Lineage Lineage { get; } = lineage;
        public ulong Digest { get; init; } // of entries 1..Count: checkpoints made from here on record it (and what follows)
        public int Next;      // the next entry to hand over
        public long NextAt;   // when the next slice is due
    }

    private HistoryReplay? _replay;

    /// <summary>The replay still runs: this member holds the history, its application does not yet.</summary>
    internal bool Replaying => _replay != null;

    private bool LiveBeforeReplayEnds => (Options.Mutations & ProtocolMutations.LiveBeforeReplayEnds) != 0;

    /// <summary>
    /// Hands the next slice of the replay to the application (with <paramref name="all"/>, the rest
    /// of it); after the last one, that this member holds the history, then what waited, in order,
    /// and it sends what it queued.
    /// </summary>
    private void ContinueReplay(bool all)
    {
        HistoryReplay r = _replay!;
        int limit = all ? int.MaxValue : Math.Max(1, Options.HistoryReplaySliceEntries);
        long bytes = 0;
        int n = 0;
        while (r.Next < r.Entries.Count && n < limit && (all || n == 0 || bytes + r.Entries[r.Next].Payload.Length <= Options.HistoryReplaySliceBytes))
        {
            HistoryEntry e = r.Entries[r.Next++];
            bytes += e.Payload.Length;
            n++;
            _node.Emit(new HistoryReplayed(Id, e));
        }
        if (n > 0) _node.Counters.HistoryReplaySlices++;
        if (r.Next < r.Entries.Count)
        {
            // The next slice at the next tick: a driver ticks at most this soon (the runtime every
            // millisecond, at most), and takes its other inputs, the heartbeats' too, in between.
            r.NextAt = _node.Outbox.StepTime + 1;
            return;
        }
        _replay = null;
        _node.Emit(new HistoryReady(Id, r.Count, r.How, r.Lineage, r.Digest));
        foreach (NodeEvent e in _held) _node.Emit(e);
        _held.Clear();
        if (State == MemberState.Left) return;
        DeliverOrdered();
        SendPending();
    }
}
