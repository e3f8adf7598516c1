using Isis.Core.Groups;
using Isis.Core.Node;
using System.Buffers;
using System.Runtime.InteropServices;
using System.Text;
using System.Text.Json;
using Isis.Core.Identity;

namespace Isis.Simulation;

// The folder is History/ but the namespace is Isis.Simulation: a namespace Isis.Simulation.History
// holding a type History would make "History" mean the namespace everywhere under Isis.Simulation.

/// <summary>
/// The append-only record of one run (simulated or real), in the order events happened. The
/// history checker relies on that order ("after" means later in the list),
/// so a merged multi-process log must be sorted by time first. Not thread-safe: the simulator
/// records from its single thread; real processes each write their own log.
/// </summary>
internal sealed class History
{
    private readonly List<HistoryEvent> _events;
    private readonly HashSet<NodeId> _expelled = new();

    public History() => _events = [];

    public History(int capacity) => _events = new List<HistoryEvent>(capacity);

    public IReadOnlyList<HistoryEvent> Events => _events;

    public int Count => _events.Count;

    public HistoryEvent this[int index] => _events[index];

    /// <summary>The events as a span, for the checker's tight loops.</summary>
    internal ReadOnlySpan<HistoryEvent> AsSpan() => CollectionsMarshal.AsSpan(_events);

    public void Add(HistoryEvent e)
    {
        ArgumentNullException.ThrowIfNull(e);
        _events.Add(e);
    }

    /// <summary>
    /// Records a Send. The caller records the sender's own Deliver right after it. A subset
    /// message's destinations (<paramref name="to"/>; null for the other primitives) go in <see cref="HistoryEvent.Members"/>.
    /// </summary>
    public void RecordSend(long time, MessageId message, ulong payloadHash, MessageKind primitive = MessageKind.Send, int phi = 0, bool query = false, NodeId[]? to = null) =>
        Add(new HistoryEvent(time, message.Sender, HistoryEventKind.Send)
        {
            Group = message.Group, ViewId = message.ViewId, Message = message, PayloadHash = payloadHash, Primitive = primitive, Phi = phi, IsQuery = query,
            Members = to == null ? null : [.. to],
        });

    public void RecordSafeAccepted(long time, NodeId acceptor, MessageId message) =>
        Add(new HistoryEvent(time, acceptor, HistoryEventKind.SafeAccepted) { Group = message.Group, ViewId = message.ViewId, Message = message });

    /// <summary>Records a Deliver; <paramref name="viewId"/> is the view <paramref name="process"/> has installed.</summary>
    public void RecordDeliver(long time, NodeId process, int viewId, MessageId message, ulong payloadHash, MessageKind primitive = MessageKind.Send, bool atViewEnd = false, bool query = false) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.Deliver)
        {
            Group = message.Group, ViewId = viewId, Message = message, PayloadHash = payloadHash, Primitive = primitive, AtViewEnd = atViewEnd, IsQuery = query,
        });

    /// <summary>Records a ViewInstall. <paramref name="members"/> (oldest first) is copied.</summary>
    public void RecordViewInstall(long time, NodeId process, GroupId group, int viewId, ReadOnlySpan<NodeId> members) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.ViewInstall)
        {
            Group = group, ViewId = viewId, Members = members.ToArray(),
        });

    public void RecordCrash(long time, NodeId process) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.Crash));

    /// <summary>Records an expulsion the first time a replica reports it (the leader applies it first; followers later).</summary>
    public void RecordExpel(long time, NodeId process)
    {
        if (_expelled.Add(process)) Add(new HistoryEvent(time, process, HistoryEventKind.Expel));
    }

    public void RecordDecide(long time, NodeId replica, long logIndex, ulong entryHash, NodeId[]? configuration = null, ulong digest = 0) =>
        Add(new HistoryEvent(time, replica, HistoryEventKind.Decide) { LogIndex = logIndex, PayloadHash = entryHash, Members = configuration?.ToArray(), ConfigurationIndex = (long)digest });

    public void RecordReplicaSnapshot(long time, NodeId replica, long logIndex, ulong digest, bool installed) =>
        Add(new HistoryEvent(time, replica, HistoryEventKind.ReplicaSnapshot) { LogIndex = logIndex, ConfigurationIndex = (long)digest, Phi = installed ? 1 : 0 });

    public void RecordCommit(long time, NodeId leader, long logIndex, NodeId[] holders, NodeId[] voters, long configurationIndex) =>
        Add(new HistoryEvent(time, leader, HistoryEventKind.Commit)
        {
            LogIndex = logIndex, Members = holders.ToArray(), Voters = voters.ToArray(), ConfigurationIndex = configurationIndex,
        });

    public void RecordFounded(long time, NodeId replica, NodeId[] replicas) =>
        Add(new HistoryEvent(time, replica, HistoryEventKind.Founded) { Members = replicas.ToArray() });

    public void RecordLeaveCompleted(long time, NodeId process, GroupId group) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.LeaveCompleted) { Group = group });

    public void RecordJoinRequested(long time, NodeId process, GroupId group) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.JoinRequested) { Group = group });

    /// <summary>A Flush(<paramref name="holders"/>) was requested (0: every member), kept in <see cref="HistoryEvent.Phi"/>.</summary>
    public void RecordFlushRequested(long time, NodeId process, GroupId group, int viewId, int holders = 0) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.FlushRequested) { Group = group, ViewId = viewId, Phi = holders });

    public void RecordFlushCompleted(long time, NodeId process, GroupId group, int viewId) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.FlushCompleted) { Group = group, ViewId = viewId });

    public void RecordQueryIssued(long time, NodeId process, GroupId group) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.QueryIssued) { Group = group });

    /// <summary>A query ended normally: its delivery view, its repliers, and for a P2PQuery the members it was addressed to (<see cref="HistoryEvent.Voters"/>).</summary>
    public void RecordQueryCompleted(long time, NodeId process, GroupId group, int deliveryView, ReadOnlySpan<NodeId> repliers, NodeId[]? addressedTo = null) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.QueryCompleted) { Group = group, ViewId = deliveryView, Members = repliers.ToArray(), Voters = addressedTo == null ? null : [.. addressedTo] });

    /// <summary>
    /// Records what a protocol node reported, the same way for simulated and real runs: queries
    /// under their ordering primitive, SafeSends with their acceptor count, a process that stopped
    /// itself as a crashed incarnation. Events with no history counterpart are ignored.
    /// </summary>
    public void RecordCoreEvent(long time, NodeId process, NodeEvent e)
    {
        switch (e)
        {
            case MessageSent s:
                RecordSend(time, new MessageId(process, s.Group, s.ViewId, s.Seq), Simulator.PayloadHash(s.Payload.Span), s.Kind.Primitive(), s.Phi, s.Kind.IsQuery(), s.To);
                break;
            case MessageDelivered d:
                RecordDeliver(time, process, d.ViewId, new MessageId(d.Sender, d.Group, d.ViewId, d.Seq), Simulator.PayloadHash(d.Payload.Span), d.Kind.Primitive(), d.AtViewEnd, d.Kind.IsQuery());
                break;
            case SafeAccepted a:
                RecordSafeAccepted(time, process, new MessageId(a.Sender, a.Group, a.ViewId, a.Seq));
                break;
            case QueryCompleted q when q.Outcome == QueryOutcome.Completed:
                RecordQueryCompleted(time, process, q.Group, q.DeliveryViewId, q.Replies.Select(r => r.Replier).ToArray(), q.Only);
                break;
            case ViewInstalled v:
                RecordViewInstall(time, process, v.Group, v.View.Id, v.View.Members);
                break;
            case GroupLeft l:
                RecordLeaveCompleted(time, process, l.Group);
                break;
            case NodeShutDown:
                RecordCrash(time, process);
                break;
            case IncarnationExpelled x:
                RecordExpel(time, x.Node);
                break;
            case DecisionApplied d:
                RecordDecide(time, process, d.Index, Simulator.PayloadHash(d.Entry), Core.Membership.MembershipDecision.VotersOf(d.Entry), d.Digest);
                break;
            case ReplicaSnapshotMade m:
                RecordReplicaSnapshot(time, process, m.Index, m.Digest, m.Installed);
                break;
            case DecisionCommitted c:
                RecordCommit(time, process, c.Index, c.Holders, c.Voters, c.ConfigurationIndex);
                break;
            case GroupKeyRotated k:
                Add(new HistoryEvent(time, process, HistoryEventKind.KeyRotated) { Group = k.Group, ViewId = k.ViewId, PayloadHash = System.Buffers.Binary.BinaryPrimitives.ReadUInt64BigEndian(k.Fingerprint) });
                break;
            case HistoryRecoveredWithout f when f.Reason != Isis.Core.Durability.HistoryRecovery.ProvedComplete:
                // Only a forced recovery may lose SafeSends (the checker allows exactly that); one the rules proved complete must lose none.
                Add(new HistoryEvent(time, process, HistoryEventKind.ForcedRecovery) { Group = f.Group, LogIndex = f.Entries, Members = f.Missing });
                break;
            case HistoryNotice { Kind: Isis.Core.Node.HistoryNoticeKind.GivenUpLog } n:
                Add(new HistoryEvent(time, process, HistoryEventKind.LogGivenUp) { Group = n.Group });
                break;
            case HistoryReady h:
                Add(new HistoryEvent(time, process, HistoryEventKind.HistoryHeld) { Group = h.Group, LogIndex = h.Entries });
                break;
            case HistoryReplayed r:
                RecordReplay(time, process, r.Group, r.Entry.Index, new MessageId(r.Entry.Sender, r.Group, r.Entry.ViewId, r.Entry.Seq), Simulator.PayloadHash(r.Entry.Payload.Span), r.Entry.Query);
                break;
        }
    }

    /// <summary>Records the state <paramref name="process"/>'s application put in the checkpoint for the joiners of view <paramref name="cut"/>.</summary>
    public void RecordStateMade(long time, NodeId process, GroupId group, int cut, StateDigest state) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.StateMade) { Group = group, ViewId = cut, LogIndex = state.Count, PayloadHash = state.Hash });

    /// <summary>Records the state <paramref name="process"/>'s application loaded from the checkpoint made at the cut <paramref name="cut"/>.</summary>
    public void RecordStateLoaded(long time, NodeId process, GroupId group, int cut, StateDigest state) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.StateLoaded) { Group = group, ViewId = cut, LogIndex = state.Count, PayloadHash = state.Hash });

    /// <summary>Records that <paramref name="process"/> starts <paramref name="group"/>'s state empty at view <paramref name="cut"/>: no member held it any more.</summary>
    public void RecordStateReset(long time, NodeId process, GroupId group, int cut) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.StateReset) { Group = group, ViewId = cut });

    /// <summary>Records that <paramref name="process"/> joined <paramref name="group"/> with a log that <paramref name="earlier"/> (copied) also wrote.</summary>
    public void RecordLogOpened(long time, NodeId process, GroupId group, IEnumerable<NodeId> earlier) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.LogOpened) { Group = group, Members = earlier.ToArray() });

    /// <summary>Records that <paramref name="process"/> replayed entry <paramref name="index"/> of the group's SafeSend history.</summary>
    public void RecordReplay(long time, NodeId process, GroupId group, long index, MessageId message, ulong payloadHash, bool query = false) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.Replay)
        {
            Group = group, LogIndex = index, Message = message, PayloadHash = payloadHash, Primitive = MessageKind.Safe, IsQuery = query,
        });

    /// <summary>Records that <paramref name="process"/> restored entry <paramref name="index"/> of the group's SafeSend history from its persistent checkpoint.</summary>
    public void RecordRestore(long time, NodeId process, GroupId group, long index, MessageId message, ulong payloadHash) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.Restore)
        {
            Group = group, LogIndex = index, Message = message, PayloadHash = payloadHash, Primitive = MessageKind.Safe,
        });

    public void RecordEarlyTimer(long time, NodeId process, long reportedDeadline, string produced) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.EarlyTimer) { LogIndex = reportedDeadline, Description = produced });

    public void RecordStaleDeadline(long time, NodeId process, long reportedDeadline) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.StaleDeadline) { LogIndex = reportedDeadline });

    public void RecordCollectionFounded(long time, NodeId process, GroupId group, long lineage) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.CollectionFounded) { Group = group, ConfigurationIndex = lineage });

    public void RecordLockAcquired(long time, NodeId process, GroupId group, int viewId, string name, long token) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.LockAcquired) { Group = group, ViewId = viewId, Description = name, LogIndex = token });

    public void RecordLockReleased(long time, NodeId process, GroupId group, string name, long token) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.LockReleased) { Group = group, Description = name, LogIndex = token });

    public void RecordClientRequestIssued(long time, NodeId client, GroupId group, long number, MessageKind primitive) =>
        Add(new HistoryEvent(time, client, HistoryEventKind.ClientRequestIssued) { Group = group, LogIndex = number, Primitive = primitive, IsQuery = primitive.IsQuery() });

    public void RecordClientRequestRan(long time, NodeId member, GroupId group, int viewId, NodeId client, long number) =>
        Add(new HistoryEvent(time, member, HistoryEventKind.ClientRequestRan) { Group = group, ViewId = viewId, Members = [client], LogIndex = number });

    public void RecordClientRequestAnswered(long time, NodeId client, GroupId group, long number, string outcome) =>
        Add(new HistoryEvent(time, client, HistoryEventKind.ClientRequestAnswered) { Group = group, LogIndex = number, Description = outcome });

    public void RecordCollectionLoaded(long time, NodeId process, GroupId group, long lineage, long length, ulong chain) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.CollectionLoaded) { Group = group, ConfigurationIndex = lineage, LogIndex = length, PayloadHash = chain });

    public void RecordCollectionApplied(long time, NodeId process, GroupId group, int viewId, long lineage, long position, MessageId update, ulong chain, bool repaired) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.CollectionApplied)
        {
            Group = group, ViewId = viewId, ConfigurationIndex = lineage, LogIndex = position, Message = update, PayloadHash = chain, Phi = repaired ? 1 : 0,
        });

    public void RecordCollectionIssued(long time, NodeId process, GroupId group, int viewId, MessageId update) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.CollectionIssued) { Group = group, ViewId = viewId, Message = update });

    public void RecordCollectionDivergence(long time, NodeId process, GroupId group, string description) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.CollectionDivergence) { Group = group, Description = description });

    public void RecordCollectionFinal(long time, NodeId process, GroupId group, int firstView, long lineage, long length, ulong chain, int pending) =>
        Add(new HistoryEvent(time, process, HistoryEventKind.CollectionFinal) { Group = group, ViewId = firstView, ConfigurationIndex = lineage, LogIndex = length, PayloadHash = chain, Phi = pending });

    public void RecordHeal(long time) => Add(new HistoryEvent(time, NodeId.None, HistoryEventKind.Heal));

    public void RecordEnd(long time) => Add(new HistoryEvent(time, NodeId.None, HistoryEventKind.End));

    /// <summary>
    /// A fingerprint of the whole log: the first 16 hex digits of the SHA-256 of what
    /// <see cref="WriteJsonLines"/> writes. Two runs with equal fingerprints recorded the same events
    /// at the same times: a refactoring that must not change behaviour keeps every seed's.
    /// </summary>
    public string Fingerprint()
    {
        using var hash = System.Security.Cryptography.IncrementalHash.CreateHash(System.Security.Cryptography.HashAlgorithmName.SHA256);
        using (var writer = new StreamWriter(new HashingStream(hash), new UTF8Encoding(false), 64 * 1024)) WriteJsonLines(writer);
        return Convert.ToHexStringLower(hash.GetHashAndReset())[..16];
    }

    /// <summary>A write-only stream that feeds a hash.</summary>
    private sealed class HashingStream(System.Security.Cryptography.IncrementalHash hash) : Stream
    {
        public override bool CanRead => false;
        public override bool CanSeek => false;
        public override bool CanWrite => true;
        public override long Length => throw new NotSupportedException();
        public override long Position { get => throw new NotSupportedException(); set => throw new NotSupportedException(); }
        public override void Flush() { }
        public override int Read(byte[] buffer, int offset, int count) => throw new NotSupportedException();
        public override long Seek(long offset, SeekOrigin origin) => throw new NotSupportedException();
        public override void SetLength(long value) => throw new NotSupportedException();
        public override void Write(byte[] buffer, int offset, int count) => hash.AppendData(buffer, offset, count);
        public override void Write(ReadOnlySpan<byte> buffer) => hash.AppendData(buffer);
    }

    /// <summary>
    /// Writes one compact JSON object per line. Fields: t (time), p (process "s3#1" or
    /// "10.0.0.1:7000#2"), k (kind), g (group, 16 hex digits), v (view id), ms/mg/mv/mq (message
    /// sender, group if not g, view, seq), h (payload hash, 16 hex digits), mb (members).
    /// Fields holding their default value are omitted, except v and h where the kind uses them.
    /// </summary>
    public void WriteJsonLines(TextWriter writer)
    {
        ArgumentNullException.ThrowIfNull(writer);
        var buffer = new ArrayBufferWriter<byte>(256);
        using var json = new Utf8JsonWriter(buffer);
        char[] chars = new char[256];
        foreach (HistoryEvent e in _events)
        {
            buffer.ResetWrittenCount();
            json.Reset(buffer);
            HistoryJson.Write(json, e);
            json.Flush();
            int needed = Encoding.UTF8.GetMaxCharCount(buffer.WrittenCount);
            if (chars.Length < needed) chars = new char[needed];
            int n = Encoding.UTF8.GetChars(buffer.WrittenSpan, chars);
            writer.Write(chars, 0, n);
            writer.Write('\n');
        }
        writer.Flush();
    }

    /// <summary>
    /// Reads what <see cref="WriteJsonLines"/> wrote (blank lines are skipped, unknown fields are
    /// ignored so newer writers stay readable). Throws <see cref="HistoryFormatException"/> naming
    /// the line and the field on anything malformed.
    /// </summary>
    public static History ReadJsonLines(TextReader reader)
    {
        ArgumentNullException.ThrowIfNull(reader);
        var history = new History();
        byte[] bytes = new byte[256];
        int lineNumber = 0;
        string? line;
        while ((line = reader.ReadLine()) is not null)
        {
            lineNumber++;
            if (string.IsNullOrWhiteSpace(line)) continue;
            int needed = Encoding.UTF8.GetMaxByteCount(line.Length);
            if (bytes.Length < needed) bytes = new byte[needed];
            int n = Encoding.UTF8.GetBytes(line, bytes);
            try
            {
                history._events.Add(HistoryJson.Read(bytes.AsSpan(0, n)));
            }
            catch (JsonException ex)
            {
                throw new HistoryFormatException(lineNumber, $"malformed JSON: {ex.Message}", ex);
            }
            catch (FormatException ex) when (ex is not HistoryFormatException)
            {
                throw new HistoryFormatException(lineNumber, ex.Message, ex);
            }
        }
        return history;
    }
}

/// <summary>A history file line that could not be parsed.</summary>
internal sealed class HistoryFormatException : FormatException
{
    public HistoryFormatException(int lineNumber, string reason, Exception? inner = null)
        : base($"history line {lineNumber}: {reason}", inner)
    {
        LineNumber = lineNumber;
    }

    /// <summary>1-based line number in the input.</summary>
    public int LineNumber { get; }
}
