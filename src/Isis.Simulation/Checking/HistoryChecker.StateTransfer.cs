using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

// The checker, part 4: state transfer. A replica's state is what its application applied: the
// messages it delivered in the group, plus the checkpoint it loaded when it joined. The history
// carries each checkpoint's digest as made and as loaded (StateMade, StateLoaded), so the checker
// can tell whether joiners start where the members they join stand.
internal static partial class HistoryChecker
{
    /// <summary>
    /// In a group whose application transfers state (the history has StateMade or StateLoaded for it):
    /// <list type="number">
    /// <item>a joiner loads exactly what the maker put in the checkpoint of that cut (same digest), and
    /// there is one checkpoint per cut;</item>
    /// <item>a joiner sees nothing of the group before its state: no view and no delivery of the group
    /// precede its StateLoaded;</item>
    /// <item>replicas agree at every cut: every process that installs view w of the group has the same
    /// state then, the messages it delivered in the group plus the checkpoint it loaded. So a joiner's
    /// first state equals the members' state at the join's cut, and stays equal after.</item>
    /// </list>
    /// A member that waited when every holder of the state left starts from an empty state (StateReset);
    /// the others then load from it. Groups whose members replay a SafeSend history from disk (Replay events) take their state from
    /// that history instead and are not judged here. A process that leaves the group starts over if
    /// it joins again.
    /// </summary>
    internal static void StateTransfer(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(StateTransfer);
        var transferring = new HashSet<GroupId>();
        var replaying = new HashSet<GroupId>();
        foreach (HistoryEvent e in events)
        {
            if (e.Kind is HistoryEventKind.StateMade or HistoryEventKind.StateLoaded or HistoryEventKind.StateReset) transferring.Add(e.Group);
            else if (e.Kind is HistoryEventKind.Replay or HistoryEventKind.Restore) replaying.Add(e.Group);
        }
        transferring.ExceptWith(replaying);
        if (transferring.Count == 0) return;

        var made = new Dictionary<(GroupId, int), (NodeId Maker, StateDigest State, int Index)>();
        var state = new Dictionary<(NodeId, GroupId), StateDigest>();
        var seen = new Dictionary<(NodeId, GroupId), int>(); // the first view or delivery of the group at the process
        var atInstall = new Dictionary<(GroupId, int), (NodeId Process, StateDigest State, int Index)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            if (!transferring.Contains(e.Group)) continue;
            var key = (e.Process, e.Group);
            var digest = new StateDigest(e.LogIndex, e.PayloadHash);
            switch (e.Kind)
            {
                case HistoryEventKind.StateMade:
                    if (made.TryGetValue((e.Group, e.ViewId), out var other))
                    {
                        if (other.State != digest)
                        {
                            sink.Report(P, $"{At(i, e)} {e.Process} made a checkpoint of g={e.Group} at cut v{e.ViewId} with {digest}, but {other.Maker} made one at the same cut at event #{other.Index} with {other.State}");
                        }
                        break;
                    }
                    made[(e.Group, e.ViewId)] = (e.Process, digest, i);
                    break;
                case HistoryEventKind.StateLoaded:
                    if (seen.TryGetValue(key, out int first))
                    {
                        sink.Report(P, $"{At(i, e)} {e.Process} loaded its state of g={e.Group} (cut v{e.ViewId}) after it had seen the group at event #{first}: a joiner applies nothing before its state");
                    }
                    if (!made.TryGetValue((e.Group, e.ViewId), out var source))
                    {
                        sink.Report(P, $"{At(i, e)} {e.Process} loaded a checkpoint of g={e.Group} at cut v{e.ViewId} that no member made");
                    }
                    else if (source.State != digest)
                    {
                        sink.Report(P, $"{At(i, e)} {e.Process} loaded {digest} from the checkpoint of g={e.Group} at cut v{e.ViewId}, but {source.Maker} made it with {source.State} at event #{source.Index}");
                    }
                    state[key] = state.GetValueOrDefault(key).Plus(digest);
                    break;
                case HistoryEventKind.StateReset:
                    // The state is gone with every member that held it: this member starts empty, and
                    // must not have applied anything of the group before (it was waiting for a checkpoint).
                    if (seen.TryGetValue(key, out int earlier))
                    {
                        sink.Report(P, $"{At(i, e)} {e.Process} reset its state of g={e.Group} at v{e.ViewId} after it had seen the group at event #{earlier}");
                    }
                    state[key] = StateDigest.Empty;
                    break;
                case HistoryEventKind.Deliver:
                    seen.TryAdd(key, i);
                    // A subset message is each destination's own, not the group's replicated state.
                    if (!IsSubset(e)) state[key] = state.GetValueOrDefault(key).With(e.Message);
                    break;
                case HistoryEventKind.ViewInstall:
                    seen.TryAdd(key, i);
                    StateDigest mine = state.GetValueOrDefault(key);
                    if (!atInstall.TryGetValue((e.Group, e.ViewId), out var firstInstall))
                    {
                        atInstall[(e.Group, e.ViewId)] = (e.Process, mine, i);
                    }
                    else if (firstInstall.State != mine)
                    {
                        sink.Report(P, $"{At(i, e)} {e.Process} installed v{e.ViewId} of g={e.Group} with a state of {mine}, but {firstInstall.Process} installed it at event #{firstInstall.Index} with {firstInstall.State}");
                    }
                    break;
                case HistoryEventKind.LeaveCompleted:
                    state.Remove(key);
                    seen.Remove(key);
                    break;
            }
        }
    }
}
