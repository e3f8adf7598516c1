using Isis.Core.Groups;
using Isis.Runtime;
using Isis.Serialization;

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
    /// Chooses where this member, as a SafeSend acceptor, keeps what it acknowledges. Call before
    /// <see cref="Join"/>. With <see cref="SafeSendDurability.Disk"/>, acknowledged SafeSends
    /// survive a crash of every member, and are delivered again when the group is formed anew.
    /// </summary>
    /// <param name="durability">Memory (the default) or Disk.</param>
    /// <param name="directory">For Disk: a directory of this member's own (each member needs its own); created if missing.</param>
    /// <param name="replayAfter">
    /// For Disk: how long a member that founds the group again waits before replaying its log, so
    /// that the other restarted members can join and receive the replay (members joining later get
    /// the group's state by state transfer, not by the replay). Defaults to 2 seconds.
    /// </param>
    /// <exception cref="InvalidOperationException">The group is already joined.</exception>
    /// <exception cref="ArgumentException">Disk without a directory.</exception>
    public void SetSafeSendDurability(SafeSendDurability durability, string? directory = null, TimeSpan? replayAfter = null)
    {
        lock (_gate)
        {
            if (_state != GroupState.New) throw new InvalidOperationException($"Set the SafeSend durability of group '{Name}' before Join().");
            if (durability == SafeSendDurability.Disk && string.IsNullOrWhiteSpace(directory))
            {
                throw new ArgumentException("Disk durability needs a directory of this member's own, for example Path.Combine(dataRoot, memberName).", nameof(directory));
            }
            _durability = durability;
            _logDirectory = directory;
            _replayAfter = replayAfter ?? TimeSpan.FromSeconds(2);
        }
    }

    /// <summary>This member's acceptor log, with disk durability (written by the event loop).</summary>
    internal SafeSendLog? SafeSendLog { get; private set; }

    private string LogPath(string suffix) =>
        Path.Combine(_logDirectory!, string.Concat(Name.Select(c => char.IsLetterOrDigit(c) || c is '-' or '_' ? c : '_')) + suffix);

    /// <summary>
    /// Before joining with disk durability: what the last incarnation logged becomes the replay
    /// source (kept until replayed), and a fresh log starts.
    /// </summary>
    private void OpenSafeSendLog()
    {
        Directory.CreateDirectory(_logDirectory!);
        string log = LogPath(".safelog"), replay = LogPath(".safelog.replay");
        if (File.Exists(log))
        {
            // An unfinished earlier replay stays the source; otherwise the last log becomes it.
            if (!File.Exists(replay)) File.Move(log, replay);
            else File.Delete(log);
        }
        _replay = SafeSendLog.Read(replay);
        SafeSendLog = new SafeSendLog(log);
    }

    /// <summary>
    /// On the first view: if this member founds the group (every member of its first view joined
    /// with it, so every earlier member is gone, and it is the oldest of them), the group's history
    /// restarts from its log; otherwise the running group already has it.
    /// </summary>
    private void MaybeReplay(View first)
    {
        List<(int Phi, byte[] Payload)>? replay = _replay;
        _replay = null;
        if (replay == null) return;
        string source = LogPath(".safelog.replay");
        // Only when the group starts afresh (every member of our first view joined with it: the
        // whole group had stopped), and only its oldest member, so the log is replayed once even
        // when the restarted members' joins were batched into one view.
        bool founder = first.Joiners.Length == first.Members.Length && first.GetMyRank() == 0;
        if (!founder || replay.Count == 0)
        {
            File.Delete(source);
            return;
        }
        // Off the event loop: sending waits on flow control like any caller.
        _ = Task.Run(async () =>
        {
            await Task.Delay(_replayAfter).ConfigureAwait(false); // let the other restarted members join first
            var sent = new List<Task>(replay.Count);
            foreach (var (_, payload) in replay) sent.Add(SafeSendPayload(payload, nameof(SafeSend)));
            await Task.WhenAll(sent).ConfigureAwait(false);
            File.Delete(source); // replayed and acknowledged again: the new log holds them now
        });
    }

    /// <summary>
    /// Multicasts a durable message: in the same total order as OrderedSend, and no member delivers
    /// it until its acceptors (see <see cref="SetSafeSendThreshold"/>) all hold it. Returns once it
    /// is delivered here, so it is durable when this call returns.
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, the message is too large, or the threshold exceeds the group's size.</exception>
    public void SafeSend(int opcode, params object?[] args) => SafeSendAsync(opcode, args).GetAwaiter().GetResult();

    /// <summary>The asynchronous form of <see cref="SafeSend"/>: completes when the message is delivered here.</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <remarks>To stop waiting, use <c>WaitAsync(cancellationToken)</c> on the task; the message is still delivered.</remarks>
    public Task SafeSendAsync(int opcode, params object?[] args)
    {
        CheckThreshold();
        return SafeSendPayload(EncodeToArray(opcode, args), nameof(SafeSend));
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
        lock (_safeSends)
        {
            _safeSends.Enqueue(done);
            MulticastPayload(MessageKind.Safe, operation, payload, _safeThreshold);
        }
        return done.Task;
    }

    /// <summary>As <see cref="Query(int, object[])"/>, with the request delivered as a SafeSend.</summary>
    /// <param name="nreplies">How many replies to wait for: a count, <see cref="ALL"/> or <see cref="MAJORITY"/>.</param>
    /// <param name="requestAndReplyLists">Optionally a <see cref="Isis.QueryTimeout"/>, then the request code, its arguments, an <see cref="EOLMarker"/>, and one <c>List&lt;T&gt;</c> per reply value.</param>
    public int SafeQuery(int nreplies, params object?[] requestAndReplyLists)
    {
        CheckThreshold();
        return QueryIsis2(MessageKind.QuerySafe, nameof(SafeQuery), nreplies, requestAndReplyLists);
    }

    /// <summary>As <see cref="QueryAsync{TReply}(int, int, object[])"/>, with the request delivered as a SafeSend.</summary>
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
