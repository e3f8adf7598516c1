using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Diagnostics;
using Isis.Runtime;

namespace Isis;

/// <summary>
/// Persistent checkpoints: the same MakeChkpt and LoadChkpt handlers that give joiners the group's
/// state also keep it on this member's disk, so the group's state survives a restart of every member.
/// </summary>
/// <remarks>
/// <para><b>Writing.</b> On a schedule, on <see cref="SaveCheckpointAsync"/>, and when this member
/// leaves cleanly (<see cref="Leave"/>, or the runtime's shutdown), the MakeChkpt handlers run on the
/// delivery thread, between two deliveries, and their parts go to a file in the directory given to
/// <see cref="PersistCheckpoints"/>: written aside, fsynced, then renamed into place with a SHA-256,
/// the previous checkpoint kept beside it. With a group key (<see cref="SetKey"/>) the key is stored
/// in the file, which only this account can read, so whoever may read the file may join the group.</para>
/// <para><b>Restoring.</b> A member that starts the group's state itself loads its newest checkpoint
/// that is whole (a damaged one is reported and the previous one used): the oldest member of a group
/// that forms, and a member whose transfer's every possible maker left. The others then receive
/// that state by state transfer, so every member starts from one checkpoint. Each checkpoint records
/// the lineage of the state it holds (which start of the group's state it descends from): a member
/// whose checkpoint is of another lineage than the state it receives keeps that checkpoint aside
/// (<c>.orphan-</c>) and reports it, rather than overwrite it later (see the state lineage part of
/// this class). With disk durability
/// (<see cref="SetSafeSendDurability"/>) each member restores its own newest checkpoint that belongs
/// to the group's SafeSend history and replays only the SafeSends after it, so the handlers see the
/// checkpoint and then the rest of the history, in order.</para>
/// </remarks>
public sealed partial class Group
{
    private string? _checkpointDirectory;
    private TimeSpan _checkpointInterval = Timeout.InfiniteTimeSpan;
    private List<CheckpointFile.Checked> _restorable = []; // checked at join, newest first; released once the join completes
    private Timer? _checkpointTimer;
    private int _scheduledSavePending;

    // Event loop: where the SafeSend history stands in what was handed to the delivery thread (disk durability).
    private Lineage? _historyLineage;
    private long _safeHanded;
    private ulong _safeDigest = HistoryDigest.Unknown; // the HistoryDigest of those _safeHanded entries (recorded with each checkpoint)

    /// <summary>
    /// Keeps this member's checkpoint of the group's state on disk, so the state survives a restart
    /// of every member. Call before <see cref="Join"/>. The checkpoint is made by the
    /// <see cref="MakeChkpt"/> handlers (or <see cref="UseCheckpoint{TPart}"/>) every
    /// <paramref name="interval"/>, on <see cref="SaveCheckpointAsync"/>, and when this member leaves
    /// cleanly; it is loaded by the <see cref="LoadChkpt"/> handlers when this member starts the group's
    /// state (see the remarks of this class's persistence part, and docs/semantics.md).
    /// </summary>
    /// <param name="directory">A directory of this member's own, kept across restarts; created if missing.</param>
    /// <param name="interval">How often to save while joined (default: every minute); <see cref="Timeout.InfiniteTimeSpan"/> saves only on request and at a clean leave.</param>
    /// <exception cref="ArgumentException">No directory.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="interval"/> is under 100 ms and not infinite.</exception>
    /// <exception cref="InvalidOperationException">The group is already joined.</exception>
    public void PersistCheckpoints(string directory, TimeSpan? interval = null)
    {
        if (string.IsNullOrWhiteSpace(directory))
        {
            throw new ArgumentException("Persistent checkpoints need a directory of this member's own, for example Path.Combine(dataRoot, memberName).", nameof(directory));
        }
        TimeSpan every = interval ?? TimeSpan.FromMinutes(1);
        if (every != Timeout.InfiniteTimeSpan && every < TimeSpan.FromMilliseconds(100))
        {
            throw new ArgumentOutOfRangeException(nameof(interval), every, "Checkpoints are saved at most every 100 ms; pass Timeout.InfiniteTimeSpan to save only on request and when leaving.");
        }
        lock (_gate)
        {
            if (_state != GroupState.New) throw new InvalidOperationException($"Call PersistCheckpoints before Join(): group '{Name}' is already {_state.ToString().ToLowerInvariant()}, and its state was started without a checkpoint.");
            _checkpointDirectory = directory;
            _checkpointInterval = every;
        }
    }

    /// <summary>Saves this member's checkpoint now (see <see cref="PersistCheckpoints"/>); returns once it is on disk.</summary>
    /// <exception cref="InvalidOperationException">Checkpoints are not persisted, or called from a handler (it would wait for itself).</exception>
    /// <exception cref="IsisException">The group is not joined, a MakeChkpt handler threw, or the file could not be written (the earlier checkpoints are then kept).</exception>
    public void SaveCheckpoint()
    {
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, nameof(SaveCheckpoint));
        SaveCheckpointAsync().GetAwaiter().GetResult();
    }

    /// <summary>The asynchronous form of <see cref="SaveCheckpoint"/>: completes once the checkpoint is on disk.</summary>
    public Task SaveCheckpointAsync()
    {
        if (_checkpointDirectory == null)
        {
            throw new InvalidOperationException($"Group '{Name}' keeps no checkpoint on disk: call PersistCheckpoints(directory) before Join().");
        }
        if (_state != GroupState.Joined) throw NotJoinedError(nameof(SaveCheckpoint));
        return RequestSave();
    }

    /// <summary>
    /// Asks for a checkpoint at this point of the delivery order: through the event loop, which
    /// knows where the history stands in it. <paramref name="finished"/> runs once it is saved or
    /// failed (on the delivery thread, or the event loop if it never got there), without waiting
    /// for a thread of the pool as a continuation of the task would.
    /// </summary>
    private Task RequestSave(Action? finished = null)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        if (!_runtime.IsRunning)
        {
            done.SetException(ExceptionFactory.NotJoined(Name, nameof(SaveCheckpoint)));
            finished?.Invoke();
            return done.Task;
        }
        EventLoop loop = _runtime.RunningLoop();
        loop.Post(() =>
        {
            CheckpointFile.HistoryPosition? position = _historyLineage is { } lineage ? new(lineage, _safeHanded, _safeDigest) : null;
            bool queued = _delivery?.Enqueue(() =>
            {
                SaveNow(position, done);
                finished?.Invoke();
            }) == true;
            if (queued) return;
            done.TrySetException(NotJoinedError(nameof(SaveCheckpoint)));
            finished?.Invoke();
        });
        return done.Task;
    }

    /// <summary>Delivery thread: makes the checkpoint into a file and puts it in place.</summary>
    private void SaveNow(CheckpointFile.HistoryPosition? position, TaskCompletionSource done)
    {
        if (_joined?.Task.IsCompletedSuccessfully != true || (HistoryLog != null && position == null))
        {
            done.TrySetException(new IsisException($"Group '{Name}': this member has not loaded the group's state yet, so it has no checkpoint to save."));
            return;
        }
        if (_savesRefusedBecause != null)
        {
            done.TrySetException(new IsisException(_savesRefusedBecause)); // reported once, when it happened
            return;
        }
        try
        {
            // With disk durability the history position names the state's lineage, and StateLineage is null.
            using CheckpointFile.Writer writer = CheckpointFile.Create(_checkpointDirectory!, Name, position, StateLineage, _key, DateTime.UtcNow);
            Exception? failed = RunMakers(new FileSink(writer));
            if (failed != null)
            {
                _runtime.CountHandlerException();
                Log.HandlerThrew(_runtime.Logger, failed, Name, "a MakeChkpt handler threw while saving the checkpoint to disk; the earlier checkpoints are kept");
                done.TrySetException(new IsisException($"Group '{Name}': a MakeChkpt handler threw while saving the checkpoint; the earlier checkpoints are kept.", failed));
                return;
            }
            writer.Commit();
            Log.CheckpointSaved(_runtime.Logger, Name, CheckpointFile.NewestPath(_checkpointDirectory!, Name), writer.Parts, writer.Bytes);
            if (position is { } p) ReportCheckpointDurable(p); // the log may be trimmed behind it
            done.TrySetResult();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _runtime.ReportRuntimeProblem($"group '{Name}': the checkpoint could not be saved in {_checkpointDirectory} ({e.Message}); the earlier checkpoints are kept");
            done.TrySetException(new IsisException($"Group '{Name}': the checkpoint could not be saved in {_checkpointDirectory}: {e.Message}", e));
        }
    }

    /// <summary>A checkpoint being saved: the parts go to the file.</summary>
    private sealed class FileSink(CheckpointFile.Writer writer) : CheckpointSink
    {
        public override void Add(byte[] part) => writer.Add(part);

        public override void End()
        {
        }
    }

    // ---------------------------------------------------------------- join: what this member kept

    /// <summary>
    /// Before joining: checks this member's checkpoints (newest, then previous), reports the damaged
    /// ones, takes the group key from the newest whole one if none was set, and returns the ones the
    /// core may restore with disk durability.
    /// </summary>
    private List<CheckpointMark>? OpenCheckpoints()
    {
        if (CheckpointDirectory is not { } directory) return null;
        Directory.CreateDirectory(directory);
        var marks = new List<CheckpointMark>();
        foreach (string path in new[] { CheckpointFile.NewestPath(directory, Name), CheckpointFile.PreviousPath(directory, Name) })
        {
            CheckpointFile.Checked? c = CheckpointFile.Open(path, Name, out string? problem);
            if (problem != null)
            {
                _runtime.ReportRuntimeProblem($"group '{Name}': {problem}; it is not loaded" +
                                              (path == CheckpointFile.NewestPath(directory, Name) ? " (the previous checkpoint is used if it is whole)" : ""));
            }
            if (c == null) continue;
            _restorable.Add(c);
            if (c.Position is { } p) marks.Add(p.Mark);
        }
        if (_key == null && _restorable.FirstOrDefault(c => c.Key != null) is { } keyed) _key = keyed.Key;
        return marks;
    }

    /// <summary>Delivery thread, once the join completed: the checkpoints not restored are closed.</summary>
    private void ReleaseRestorable()
    {
        foreach (CheckpointFile.Checked c in _restorable) c.Dispose();
        _restorable = [];
    }

    /// <summary>Once joined: saves on the schedule (a save still waiting is not queued twice).</summary>
    private void StartCheckpointSchedule()
    {
        if (_checkpointDirectory == null || _checkpointInterval == Timeout.InfiniteTimeSpan) return;
        _checkpointTimer = new Timer(_ =>
        {
            if (_state != GroupState.Joined || Interlocked.Exchange(ref _scheduledSavePending, 1) == 1) return;
            try
            {
                _ = RequestSave(() => Volatile.Write(ref _scheduledSavePending, 0)).ContinueWith(t => _ = t.Exception, TaskScheduler.Default); // reported where it failed
            }
            catch (IsisException)
            {
                Volatile.Write(ref _scheduledSavePending, 0); // the runtime is stopping
            }
        }, null, _checkpointInterval, _checkpointInterval);
    }

    private void StopCheckpointSchedule() => Interlocked.Exchange(ref _checkpointTimer, null)?.Dispose();

    /// <summary>Before a clean leave: the last checkpoint (errors are reported where they happen; the leave goes on).</summary>
    internal Task SaveBeforeLeavingAsync()
    {
        if (_checkpointDirectory == null || _state != GroupState.Joined || _delivery?.IsCurrentThread == true) return Task.CompletedTask;
        try
        {
            return RequestSave().ContinueWith(t => _ = t.Exception, TaskScheduler.Default);
        }
        catch (IsisException)
        {
            return Task.CompletedTask;
        }
    }

    // ---------------------------------------------------------------- events (event loop thread; the work runs on the delivery thread, in order)

    /// <summary>
    /// Nobody can give this member the group's state: it restores its newest whole checkpoint, if it
    /// kept one, or starts empty. After every holder left, what happened since is lost: reported.
    /// </summary>
    internal void OnStateReset(int viewId, StateOrigin origin)
    {
        NodeId self = _runtime.Address!.Node; // the runtime has an address from its start on, and events come only after it
        _delivery?.Enqueue(() => StartState(self, viewId, origin));
    }

    /// <summary>Delivery thread: see <see cref="OnStateReset"/>.</summary>
    private void StartState(NodeId self, int viewId, StateOrigin origin)
    {
        _spool?.Dispose();
        _spool = null;
        CheckpointFile.Checked? newest = _restorable.FirstOrDefault();
        if (newest == null && RefuseToStartEmpty()) return;
        StartStateLineage(self, viewId, newest);
        if (newest != null) Restore(newest);
        if (origin == StateOrigin.HoldersLost)
        {
            _runtime.ReportRuntimeProblem($"group '{Name}': every member that held the group's state left before this member's checkpoint arrived; the group's state is lost and starts at view {viewId} " +
                                          (newest != null ? $"from this member's checkpoint {newest}" : "empty"));
        }
    }

    /// <summary>Disk durability: the core chose this member's checkpoint; the replay that follows starts after it.</summary>
    internal void OnCheckpointRestored(CheckpointMark mark)
    {
        _safeHanded = mark.Index;
        _safeDigest = mark.Digest;
        _delivery?.Enqueue(() =>
        {
            if (_restorable.FirstOrDefault(c => c.Position?.MarkName == mark.Name) is { } c) Restore(c);
        });
    }

    /// <summary>Disk durability: the history is held here; checkpoints record it, and how many of its SafeSends the handlers had.</summary>
    internal void OnHistoryPosition(Lineage lineage, long entries, ulong digest)
    {
        _historyLineage = lineage;
        _safeHanded = entries;
        _safeDigest = digest;
    }

    /// <summary>A SafeSend (delivered or replayed) handed to the delivery thread: the history position and its digest move past it.</summary>
    private void CountSafeHanded(NodeId sender, int viewId, long seq)
    {
        _safeHanded++;
        _safeDigest = HistoryDigest.Next(_safeDigest, sender, viewId, seq);
    }

    private void Restore(CheckpointFile.Checked checkpoint)
    {
        try
        {
            LoadParts(checkpoint.ReadParts().Select(p => (ReadOnlyMemory<byte>)p));
            Log.CheckpointRestored(_runtime.Logger, Name, checkpoint.ToString());
        }
        catch (IOException e)
        {
            // Part of it is loaded: this replica is not the group's state, so it leaves (as after a handler threw).
            _runtime.ReportRuntimeProblem($"group '{Name}': checkpoint {checkpoint.Path} could not be read to the end while it was loaded ({e.Message}); " +
                                          "this member's state is partial, so it leaves the group");
            if (_runtime.IsRunning)
            {
                try { _ = LeaveWithoutSaving(); }
                catch (IsisException) { /* already leaving or shut down */ }
            }
        }
    }
}
