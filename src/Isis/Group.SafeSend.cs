using Isis.Diagnostics;
using System.Diagnostics;
using Isis.Core.Groups;
using Isis.Runtime;

namespace Isis;

// Group, part 2 of 3: SafeSend (durable, totally ordered multicast with phi acceptors) and its disk log.
public sealed partial class Group
{
    // ---------------------------------------------------------------- SafeSend

    /// <summary>
    /// Sets phi, the number of acceptors (the first phi members of the view) that must hold a
    /// SafeSend before any member delivers it. Defaults to every member. A SafeSend delivered
    /// anywhere is delivered by every member that survives into the next view, even if its sender
    /// and up to phi-1 acceptors crash.
    /// </summary>
    /// <param name="phi">At least 1, and at most the number of members when the SafeSend is issued.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="phi"/> is below 1, or above the current view's size.</exception>
    public void SetSafeSendThreshold(int phi)
    {
        if (phi < 1) throw new ArgumentOutOfRangeException(nameof(phi), phi, "The SafeSend threshold is a number of acceptors: at least 1.");
        if (_view is { } v && phi > v.Members.Length) throw ExceptionFactory.ThresholdAboveGroupSize(Name, phi, v.Members.Length);
        _safeThreshold = phi;
    }

    /// <summary>
    /// Chooses where this member keeps the group's SafeSend history. Call before <see cref="Join"/>,
    /// and choose the same at every member. With <see cref="SafeSendDurability.Disk"/>, every member
    /// keeps every SafeSend of the group in a log in <paramref name="directory"/> (appended and
    /// fsynced before an acceptor acknowledges it), so acknowledged SafeSends survive a crash of
    /// every member: when the group forms again, it rebuilds its history from the members' logs and
    /// replays it. A member that joins a running group copies the history from a member. Either
    /// way the member's handlers receive the whole history, in order, before anything else, and
    /// <see cref="Join"/> returns after that. docs/semantics.md says which members must come back.
    /// </summary>
    /// <param name="durability">Memory (the default) or Disk.</param>
    /// <param name="directory">For Disk: a directory of this member's own (each member needs its own, kept across restarts); created if missing.</param>
    /// <param name="maxLogBytes">For Disk: the bound on this member's log (default 256 MiB). The log holds the
    /// group's whole SafeSend history, so once it reaches the bound, <see cref="SafeSend"/> throws instead of
    /// sending; every log may pass the bound by the SafeSends already in flight. Choose the same at every member.</param>
    /// <exception cref="InvalidOperationException">The group is already joined.</exception>
    /// <exception cref="ArgumentException">Disk without a directory.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="maxLogBytes"/> is below 4096.</exception>
    public void SetSafeSendDurability(SafeSendDurability durability, string? directory = null, long maxLogBytes = DefaultMaxLogBytes)
    {
        if (maxLogBytes < MinMaxLogBytes)
        {
            throw new ArgumentOutOfRangeException(nameof(maxLogBytes), maxLogBytes, $"The SafeSend log bound is a size in bytes: at least {MinMaxLogBytes}.");
        }
        lock (_gate)
        {
            if (_state != GroupState.New) throw new InvalidOperationException($"Set the SafeSend durability of group '{Name}' before Join().");
            if (durability == SafeSendDurability.Disk && string.IsNullOrWhiteSpace(directory))
            {
                throw new ArgumentException("Disk durability needs a directory of this member's own, for example Path.Combine(dataRoot, memberName).", nameof(directory));
            }
            _durability = durability;
            _logDirectory = directory;
            _maxLogBytes = maxLogBytes;
        }
    }

    // 256 MiB: the history is also held in memory (it is replayed and copied to joiners), so the
    // bound is one of memory as much as of disk.
    private const long DefaultMaxLogBytes = 256L << 20;
    private const long MinMaxLogBytes = 4096;

    // What a SafeSend adds to the log besides its payload: the record frame (8 bytes) and the
    // entry's fields (kind, index, sender, view, seq, phi, length; HistoryLog.Entry) at their widest.
    private const int LogEntryOverhead = 64;

    private long _maxLogBytes = DefaultMaxLogBytes;

    /// <summary>
    /// With disk durability, refuses a SafeSend that would take this member's log past its bound.
    /// The check is made here, before the message leaves, because once sent it must be logged
    /// everywhere: so every log can exceed the bound by the SafeSends in flight when it was
    /// reached (every member logs the same messages, so every sender reaches it at about the same time).
    /// </summary>
    private void CheckLogBound(int payloadLength)
    {
        if (HistoryLog is not { } log) return;
        long length = log.Length;
        if (length + payloadLength + LogEntryOverhead > _maxLogBytes)
        {
            throw ExceptionFactory.SafeSendLogFull(Name, log.Path, length, payloadLength, _maxLogBytes);
        }
    }

    /// <summary>This member's history log, with disk durability (written by the event loop).</summary>
    internal HistoryLogFile? HistoryLog { get; private set; }

    private string LogPath(string suffix) => HistoryLogFile.PathFor(_logDirectory!, Name, suffix);

    /// <summary>
    /// The disk a trimmed SafeSend log keeps in segment files at least (an eighth of its bound: 32
    /// MiB by default), so that its footprint holds still through the swells of a restart or a slow
    /// checkpoint (docs/operations.md, "Disk of a durable member").
    /// </summary>
    internal static long ReserveFloorBytes(long maxLogBytes) => maxLogBytes / 8;

    /// <summary>Before joining with disk durability: opens the log and returns what it holds, for the core.</summary>
    private List<byte[]> OpenHistoryLog()
    {
        IDurableFiles files = _runtime.Options.StoreFiles ?? DurableFiles.System;
        files.CreateDirectory(_logDirectory!);
        (HistoryLogFile log, List<byte[]> records) = HistoryLogFile.Open(LogPath(".safelog"), files, HistoryLogFile.SegmentBytesFor(_maxLogBytes), ReserveFloorBytes(_maxLogBytes));
        HistoryLog = log;
        if (log.Damage != null) _runtime.ReportHistoryProblem(Name, log.Damage, error: true);
        if (log.StaleCopyBytes > 0)
        {
            _runtime.ReportHistoryProblem(Name, $"an unfinished replacement of the SafeSend log ({log.StaleCopyBytes} bytes aside, a copy of the history cut short by a stop) " +
                $"was deleted; the log {log.Path} is as it was before it, and the history is copied again", error: false);
        }
        return records;
    }

    /// <summary>A history entry replayed here (event loop): delivered like the SafeSend or SafeQuery it was (a SafeQuery's replies go nowhere).</summary>
    internal void OnReplayed(Core.Durability.HistoryEntry entry) => OnDelivered(entry.Sender, entry.Kind, entry.Payload.Span, entry.ViewId, entry.Seq, replayed: true);

    /// <summary>
    /// This member holds the history and replayed it (event loop): the machine's registry of durable
    /// groups records it, the runtime gives back the memory a long recovery took, and the join
    /// completes once the handlers have run.
    /// </summary>
    internal void OnHistoryReady(Core.Durability.Lineage lineage) => _delivery!.Enqueue(() =>
    {
        if (_registryFolder != null && DurableGroupRegistry.Record(_registryFolder, Name, lineage.ToString(), _logDirectory!, DateTime.UtcNow) is { } problem)
        {
            _runtime.ReportRuntimeProblem($"group '{Name}': {problem}; if every process stops, one that starts first without a log may found a second history");
        }
        _runtime.CompactAfterRecovery(HistoryLog?.Length ?? 0);
        JoinCompleted();
    });

    // Disk durability: the folder of this machine's registry of durable groups, and what it held for this group at join.
    private string? _registryFolder;
    private DurableGroupRegistry.Entry? _registryEntry;

    /// <summary>A notice that the group waits for its history, with what this machine's registry says of it.</summary>
    internal string DescribeWaiting(string notice) =>
        _registryEntry is { } entry ? $"{notice}. This machine's registry of durable groups names the history: {entry}" : notice;

    /// <summary>
    /// Multicasts a durable message: in the same total order as OrderedSend, and no member delivers
    /// it until its acceptors (see <see cref="SetSafeSendThreshold"/>) all hold it. Returns once it
    /// is delivered here, so it is durable when this call returns.
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, the message is too large, the threshold exceeds the group's size, or (disk durability) the message would take the log past its bound.</exception>
    public void SafeSend(int opcode, params object?[] args) => SafeSendAsync(opcode, args).GetAwaiter().GetResult();

    /// <summary>The asynchronous form of <see cref="SafeSend"/>: completes when the message is delivered here.</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <remarks>To stop waiting, use <c>WaitAsync(cancellationToken)</c> on the task; the message is still delivered.</remarks>
    public Task SafeSendAsync(int opcode, params object?[] args)
    {
        CheckThreshold();
        byte[] payload = EncodeToArray(opcode, args);
        CheckLogBound(payload.Length);
        return SafeSendPayload(payload, nameof(SafeSend));
    }

    /// <summary>As <see cref="SafeSendAsync(int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the message is still delivered).</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task SafeSendAsync(int opcode, object?[] args, CancellationToken cancellationToken) =>
        StopWaitingWhenCancelled(SafeSendAsync(opcode, args), cancellationToken);

    private Task SafeSendPayload(byte[] payload, string operation)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        // Our SafeSends are delivered here in the order we issue them (FIFO, resends included), so
        // a queue pairs each delivery with its caller. Enqueue under the same order as the posts.
        using (Activity? a = _runtime.Instruments.Activities.StartActivity("isis.safesend"))
        {
            a?.SetTag("isis.group", Name);
            a?.SetTag("isis.safesend.phi", _safeThreshold);
            lock (_safeSends)
            {
                _safeSends.Enqueue(done);
                MulticastPayload(MessageKind.Safe, operation, payload, _safeThreshold);
            }
        }
        IsisInstruments.Time(_runtime.Instruments.SafeSendDuration, done.Task, Name);
        return done.Task;
    }

    /// <summary>
    /// As <see cref="Query(int, object[])"/>, with the request delivered as a SafeSend: in the total
    /// order, once its acceptors hold it, and (disk durability) in the durable history, so a restart
    /// or a joiner replays it to the query handlers in its place among the SafeSends (their replies
    /// then go nowhere).
    /// </summary>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="requestAndReplyLists">Optionally a <see cref="Isis.QueryTimeout"/>, then the request code, its arguments, an <see cref="EOLMarker"/>, and one <c>List&lt;T&gt;</c> per reply value.</param>
    public int SafeQuery(int nreplies, params object?[] requestAndReplyLists)
    {
        CheckThreshold();
        return QueryIsis2(MessageKind.QuerySafe, nameof(SafeQuery), nreplies, requestAndReplyLists);
    }

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with the request delivered as a SafeSend (durable and replayed like one; see <see cref="SafeQuery"/>).</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    public async Task<IReadOnlyList<TReply>> SafeQueryAsync<TReply>(int nreplies, int opcode, params object?[] args)
    {
        CheckThreshold();
        return (await QueryCore(MessageKind.QuerySafe, nameof(SafeQueryAsync), nreplies, QueryTimeout, opcode, args).ConfigureAwait(false))
            .Select(r => (TReply)Values(r, [typeof(TReply)])[0]!).ToList();
    }

    /// <summary>As <see cref="SafeQueryAsync{TReply}(int, int, object[])"/>, and stops waiting when <paramref name="cancellationToken"/> is cancelled (the query itself still completes or times out).</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task<IReadOnlyList<TReply>> SafeQueryAsync<TReply>(int nreplies, int opcode, object?[] args, CancellationToken cancellationToken) =>
        StopWaitingWhenCancelled(SafeQueryAsync<TReply>(nreplies, opcode, args), cancellationToken);

    private void CheckThreshold()
    {
        if (_safeThreshold > 0 && _view is { } v && _safeThreshold > v.Members.Length)
        {
            throw ExceptionFactory.ThresholdAboveGroupSize(Name, _safeThreshold, v.Members.Length);
        }
    }

    /// <summary>One of our SafeSends was delivered here (event loop).</summary>
    internal void OnOwnSafeDelivered()
    {
        if (_safeSends.TryDequeue(out TaskCompletionSource? done)) done.TrySetResult();
    }
}
