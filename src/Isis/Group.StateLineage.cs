using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Runtime;

namespace Isis;

/// <summary>
/// The state lineage of groups without disk durability: which start of the group's state this
/// member's state descends from, so that a persistent checkpoint holding data of another start is
/// never silently overwritten by a state that was started without it.
/// </summary>
/// <remarks>
/// <para>A lineage names the member that started the group's state and the view it started it in.
/// The member that starts the state (<see cref="OnStateReset"/>) adopts the lineage of the
/// checkpoint it restores, and gives the state a new lineage of its own when it starts empty (or
/// from a checkpoint of unknown lineage). State transfer hands the lineage to joiners (a header
/// part before the MakeChkpt parts, <see cref="StateTransferHeader"/>), and every save records it
/// in the checkpoint file, so it survives a restart of every member.</para>
/// <para>A joiner that holds a checkpoint of another known lineage than the state it receives keeps
/// that checkpoint aside (<c>.orphan-</c>) before it loads the state, and reports it as an error:
/// the running group was started without that checkpoint's data, and only the operator can tell
/// which of the two states is wanted. With disk durability the SafeSend history's lineage does this
/// (a log of another history is kept aside) and those groups transfer no checkpoints, so none of
/// this runs for them.</para>
/// </remarks>
public sealed partial class Group
{
    private readonly Lock _stateLineageGate = new();
    private Lineage? _stateLineage; // written on the delivery thread; read by saves and transfers there, and by tests

    // Set when a checkpoint of another lineage could not be kept aside: a save would overwrite it,
    // so saves are refused with this reason instead (delivery thread).
    private string? _savesRefusedBecause;

    /// <summary>
    /// The lineage of this member's state (groups without disk durability): null before the state
    /// is loaded, and when it came by transfer from a runtime that sends none.
    /// </summary>
    internal Lineage? StateLineage
    {
        get
        {
            lock (_stateLineageGate) return _stateLineage;
        }
        private set
        {
            lock (_stateLineageGate) _stateLineage = value;
        }
    }

    /// <summary>
    /// Delivery thread, when this member starts the group's state at view <paramref name="viewId"/>:
    /// the state continues the lineage of the checkpoint it restored, if that is known; otherwise it
    /// is a new start, named after this member and the view.
    /// </summary>
    private void StartStateLineage(NodeId self, int viewId, CheckpointFile.Checked? restored)
    {
        StateLineage = restored?.Lineage ?? new Lineage(self, viewId);
        RecordStateInRegistry();
    }

    /// <summary>
    /// Delivery thread, when this member would start the group's state empty: if this machine's
    /// registry of durable groups says a state of the group was held here (its members were all
    /// stopped, and the membership service forgot the group), it must not start a second, empty one
    /// that the returning members would copy. The join fails, saying where the state is, and this
    /// member leaves without saving.
    /// </summary>
    private bool RefuseToStartEmpty()
    {
        if (_checkpointDirectory == null || HistoryLog != null || _registryEntry is not { } entry) return false;
        bool mine = entry.Directories.Contains(Path.GetFullPath(_checkpointDirectory));
        var refused = new IsisException(
            $"Group '{Name}': this member has no whole checkpoint in {_checkpointDirectory} and would start the group's state empty, but this machine's registry of durable groups " +
            $"says a state of the group was kept before ({entry}). " +
            (mine ? "This member's own directory held it: its checkpoints there are missing or damaged (reported above). " : "") +
            "Start first a member whose checkpoint holds it, then this one (it then receives the state). " +
            $"If that state is lost for good, delete {entry.Path} and start this member again to start an empty state.");
        _runtime.ReportRuntimeError(refused.Message);
        _joined?.TrySetException(refused);
        if (_runtime.IsRunning)
        {
            try { _ = LeaveWithoutSaving(); }
            catch (IsisException) { /* already leaving or shut down */ }
        }
        return true;
    }

    /// <summary>Delivery thread: this machine's registry of durable groups records the state's lineage and this member's checkpoint directory.</summary>
    private void RecordStateInRegistry()
    {
        if (_registryFolder == null || HistoryLog != null || _checkpointDirectory == null || StateLineage is not { } lineage) return;
        if (DurableGroupRegistry.Record(_registryFolder, Name, lineage.ToString(), _checkpointDirectory, DateTime.UtcNow) is { } problem)
        {
            _runtime.ReportRuntimeProblem($"group '{Name}': {problem}; if every process stops, one that starts first without a checkpoint may start an empty state");
        }
    }

    /// <summary>The part that goes before the MakeChkpt parts of a transfer: the lineage the joiners' state will have.</summary>
    private byte[] StateTransferHeaderPart() => StateTransferHeader.Encode(StateLineage);

    /// <summary>
    /// Delivery thread, once a transferred checkpoint is whole and before its parts load: this
    /// member's state becomes the group's, of lineage <paramref name="running"/> (null: unknown,
    /// which is accepted). Its own checkpoints of another known lineage are kept aside first.
    /// </summary>
    private void TakeTransferredLineage(Lineage? running)
    {
        if (running is { } lineage) KeepForeignCheckpointsAside(lineage);
        StateLineage = running;
        RecordStateInRegistry();
    }

    /// <summary>
    /// Renames this member's checkpoints (newest and previous) whose lineage is known and is not
    /// <paramref name="running"/> out of the way of later saves, and reports it as an error. A
    /// checkpoint of unknown lineage (format 1) cannot be told apart, so it is left to be replaced
    /// as before. If one cannot be renamed, saves are refused: they would overwrite it.
    /// </summary>
    private void KeepForeignCheckpointsAside(Lineage running)
    {
        var foreign = new List<(CheckpointFile.Checked Checkpoint, Lineage Lineage)>();
        foreach (CheckpointFile.Checked c in _restorable)
        {
            if (c.Lineage is { } l && l != running) foreign.Add((c, l));
        }
        if (foreign.Count == 0) return;
        var kept = new List<(string Path, string Was, string Aside)>();
        var stuck = new List<(string Path, string Was, string Problem)>();
        foreach ((CheckpointFile.Checked c, Lineage lineage) in foreign)
        {
            _restorable.Remove(c);
            c.Dispose(); // closed before the rename: some systems refuse to rename an open file
            string was = $"written {c.WrittenUtc:u}, lineage {lineage}";
            try
            {
                kept.Add((c.Path, was, CheckpointFile.KeepAside(c.Path)));
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                stuck.Add((c.Path, was, e.Message));
            }
        }

        string text = $"group '{Name}': the running group's state is of lineage {running}, which was started without this member's checkpoint " +
                      "(the group's state was started empty or from another checkpoint while the members holding this one were stopped; " +
                      "a lineage names the member that started a state and the view it did so in, as member@view), and this member took that state by transfer. ";
        if (kept.Count > 0)
        {
            text += "Kept aside instead of being overwritten: " +
                    string.Join("; ", kept.Select(k => $"{k.Path} ({k.Was}) is now {k.Aside}")) + ". " +
                    "To go on from the data kept aside instead of the running group's state: stop every member of the group, rename " +
                    string.Join(" and ", kept.Select(k => $"{k.Aside} back to {k.Path}")) +
                    $", and start this member first; members that hold checkpoints of lineage {running} then keep theirs aside in turn. ";
        }
        if (stuck.Count > 0)
        {
            _savesRefusedBecause = $"Group '{Name}': checkpoints are not saved, because the checkpoint of another lineage at " +
                                   string.Join(" and ", stuck.Select(s => s.Path)) + " could not be kept aside and a save would overwrite it; " +
                                   "move it away and restart this member.";
            text += "Could not be kept aside: " +
                    string.Join("; ", stuck.Select(s => $"{s.Path} ({s.Was}): {s.Problem}")) +
                    ". This member saves no checkpoint until it restarts, so it is not overwritten: move it away (or stop every member and start this one first to go on from it).";
        }
        _runtime.ReportRuntimeError(text.TrimEnd());
    }
}
