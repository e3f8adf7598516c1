using Isis.Core.Durability;
using Isis.Core.Node;
using Isis.Runtime;

namespace Isis;

/// <summary>
/// Disk durability with persistent checkpoints: the driver's part in trimming the SafeSend log
/// (docs/architecture.md, "The durable history", rules 5 and 6). Every checkpoint saved is
/// reported to the core, which trims the log behind the older of the two newest; a member that
/// copies a trimmed history copies a checkpoint file from another member first, and this member
/// serves its own files to such members. Checkpoints are also saved when the log has grown by a
/// share of its bound since the last one, so the log stays small however fast SafeSends come.
/// </summary>
public sealed partial class Group
{
    // The checkpoint file being read for a member that copies the history (event loop only): kept
    // open so a save that moves it meanwhile does not change the bytes that member receives.
    private (CheckpointFile.HistoryPosition Position, FileStream File)? _served;

    // Log bytes appended since the last checkpoint was requested (event loop only).
    private long _loggedSinceCheckpoint;

    /// <summary>
    /// Where this member's checkpoints are: the directory given to <see cref="PersistCheckpoints"/>;
    /// with disk durability and no such directory, the log's (a copied checkpoint must go somewhere).
    /// </summary>
    private string? CheckpointDirectory => _checkpointDirectory ?? (_durability == SafeSendDurability.Disk ? _logDirectory : null);

    /// <summary>Delivery thread, after a save: the core learns of the checkpoint (and may trim the log behind it).</summary>
    private void ReportCheckpointDurable(CheckpointFile.HistoryPosition position)
    {
        if (!_runtime.IsRunning) return;
        EventLoop loop = _runtime.RunningLoop();
        CheckpointMark mark = position.Mark;
        loop.Post(() => loop.Node.CheckpointDurable(Id, mark, loop.Now));
    }

    /// <summary>
    /// Event loop, after appending to the log: once it grew by a share of its bound since the last
    /// checkpoint, a checkpoint is saved now, so that the log is trimmed long before the bound.
    /// </summary>
    internal void OnHistoryAppended(long bytes)
    {
        if (_checkpointDirectory == null || _state != GroupState.Joined) return;
        _loggedSinceCheckpoint += bytes;
        if (_loggedSinceCheckpoint < CheckpointEveryLogBytes || Interlocked.Exchange(ref _scheduledSavePending, 1) == 1) return;
        _loggedSinceCheckpoint = 0;
        _ = RequestSave(() => Volatile.Write(ref _scheduledSavePending, 0)).ContinueWith(t => _ = t.Exception, TaskScheduler.Default); // reported where it failed
    }

    /// <summary>
    /// A sixteenth of the log's bound, at most 8 MiB: the log is trimmed to the older of the two
    /// newest checkpoints, so it holds two or three such shares (and what arrived while a save ran).
    /// </summary>
    private long CheckpointEveryLogBytes => Math.Min(_maxLogBytes / 16, 8L << 20);

    /// <summary>Event loop: a member copying the history asks for part of one of this member's checkpoints.</summary>
    internal void OnCheckpointReadRequested(CheckpointReadRequested r, EventLoop loop)
    {
        byte[]? bytes = null;
        long total = 0;
        string? problem = null;
        try
        {
            FileStream? file = OpenServed(r.Mark);
            if (file == null)
            {
                problem = $"no checkpoint of that history position is kept in {CheckpointDirectory} any more";
            }
            else
            {
                total = file.Length;
                file.Position = Math.Min(r.Offset, total);
                bytes = new byte[(int)Math.Min(r.MaxBytes, total - file.Position)];
                file.ReadExactly(bytes);
            }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            bytes = null;
            problem = e.Message;
            CloseServed();
        }
        // After this batch's events: the core is not re-entered while it hands them over.
        loop.Post(() => loop.Node.AnswerCheckpointRead(Id, r.Requester, r.Mark, r.Offset, bytes, total, problem, loop.Now));
    }

    /// <summary>The open file of the checkpoint at <paramref name="mark"/>'s history position: the newest or the previous one.</summary>
    private FileStream? OpenServed(CheckpointMark mark)
    {
        var wanted = new CheckpointFile.HistoryPosition(mark.Lineage, mark.Index, mark.Digest);
        if (_served is { } open && open.Position == wanted) return open.File;
        CloseServed();
        if (CheckpointDirectory is not { } directory) return null;
        foreach (string path in new[] { CheckpointFile.NewestPath(directory, Name), CheckpointFile.PreviousPath(directory, Name) })
        {
            if (!File.Exists(path)) continue;
            var file = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.Read | FileShare.Delete, 1 << 16);
            if (CheckpointFile.ReadPosition(file, Name) == wanted)
            {
                _served = (wanted, file);
                return file;
            }
            file.Dispose();
        }
        return null;
    }

    private void CloseServed()
    {
        _served?.File.Dispose();
        _served = null;
    }

    /// <summary>
    /// Event loop: the next bytes of a checkpoint this member copies from another to hold the
    /// history. Whole, the file is checked (its hash, its group, its history position), made this
    /// member's newest checkpoint, and reported durable, so the copy of the history goes on.
    /// </summary>
    internal void OnCheckpointChunk(CheckpointChunkReceived c, EventLoop loop)
    {
        if (CheckpointDirectory is not { } directory) return;
        string path = CheckpointFile.CopyPath(directory, Name);
        IDurableFiles files = _runtime.Options.StoreFiles ?? DurableFiles.System;
        try
        {
            files.CreateDirectory(directory);
            // A copy cut short by a restart (Stale): the core starts it over.
            if (CheckpointFile.AppendCopyChunk(files, path, c.Offset, c.Bytes, c.Total) != CheckpointFile.CopyProgress.Whole) return;
            CheckpointFile.Checked? copy = CheckpointFile.Open(path, Name, out string? problem, files);
            var wanted = new CheckpointFile.HistoryPosition(c.Lineage, c.Index);
            // Its digest is the provider's: the core checks it against the history it copies.
            if (copy == null || copy.Position is not { } got || got.Lineage != wanted.Lineage || got.Index != wanted.Index)
            {
                copy?.Dispose();
                files.Delete(path);
                _runtime.ReportHistoryProblem(Name, $"the checkpoint copied from another member to hold the history is not whole or not the one asked for " +
                                                    $"({problem ?? $"it holds {copy?.Position?.MarkName ?? "no history position"}, not {wanted.MarkName}"}); it is copied again", error: true);
                return;
            }
            copy.Dispose();
            CheckpointFile.Install(directory, Name, path, files);
            CheckpointFile.Checked? installed = CheckpointFile.Open(CheckpointFile.NewestPath(directory, Name), Name, out problem, files);
            if (installed == null) throw new IOException(problem ?? "the installed checkpoint cannot be read back");
            _restorable.Insert(0, installed); // the core restores it once the entries after it arrived
            CheckpointMark mark = installed.Position!.Value.Mark; // with the digest it records
            loop.Post(() => loop.Node.CheckpointDurable(Id, mark, loop.Now));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _runtime.ReportHistoryProblem(Name, $"the checkpoint copied from another member could not be written to {path} ({e.Message}); it is copied again", error: true);
        }
    }
}
