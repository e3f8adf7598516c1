using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>
/// Log compaction (Raft, section 7): snapshots of the state machine, the log dropped behind them,
/// and the snapshot sent to a replica that needs entries the leader no longer holds.
/// </summary>
/// <remarks>
/// <list type="bullet">
/// <item><b>Taking one.</b> Once <see cref="ProtocolOptions.ReplicaSnapshotInterval"/> entries were
/// applied since the last snapshot, the replica snapshots its state at the last applied entry,
/// which is committed: a snapshot never holds an entry a new leader could still overwrite. The
/// snapshot keeps that entry's index and term (so the append after it can be checked as usual), the
/// configuration in force there (the log's own state: configurations are in force when appended),
/// and the digest of every entry applied up to it (<see cref="ChainDigest"/>, which the simulator's
/// checker compares with what every other replica applied there).</item>
/// <item><b>Dropping the log.</b> The entries up to the snapshot leave memory, and the record file is
/// replaced by one snapshot record (term, vote, the snapshot) and the entries after it
/// (<see cref="IReplicatedLogHost.PersistCompacted"/>; the driver writes it aside and renames it
/// over the file, so a crash finds the old log or the new one). A restart restores the snapshot and
/// applies only the entries after it.</item>
/// <item><b>Installing one.</b> A peer whose next entry is at or before the leader's snapshot gets the
/// snapshot, in chunks of <see cref="SnapshotChunkBytes"/> sent back to back, then the entries after
/// it, pipelined. The follower keeps the part of its log after the snapshot only if its entry at the
/// snapshot's index has the snapshot's term (then what follows is the leader's too, by the log
/// matching property); otherwise it discards its whole log (Raft, figure 13, steps 6 and 7).</item>
/// </list>
/// </remarks>
internal sealed partial class ReplicatedLog
{
    /// <summary>Most entries sent to a peer and not acknowledged yet (the pipeline's window: 16 full batches).</summary>
    internal const int MaxEntriesInFlight = 16 * MaxEntriesPerAppend;

    /// <summary>Bytes of snapshot per packet.</summary>
    internal const int SnapshotChunkBytes = 60 * 1024;

    /// <summary>Largest snapshot a follower assembles.</summary>
    private const int MaxSnapshotBytes = 1 << 30;

    private long _snapshotIndex;
    private long _snapshotTerm;
    private byte[]? _snapshotImage; // digest, configuration, state: what a follower installs
    private ulong _appliedDigest;
    private IncomingSnapshot? _incoming;

    /// <summary>
    /// A snapshot arriving in chunks (follower). The chunks are kept as they come and put together
    /// only once all have arrived, so what a packet makes a follower hold is what it carries, never
    /// the length it claims (a forged first chunk claiming a gigabyte costs one chunk).
    /// </summary>
    private sealed class IncomingSnapshot(long index, long term, int length)
    {
        public readonly long Index = index, Term = term;
        public readonly int Length = length;
        public readonly Dictionary<int, byte[]> Chunks = new();
        public int Received;

        public byte[] Assemble()
        {
            var image = new byte[Length];
            foreach (var (offset, chunk) in Chunks) chunk.CopyTo(image, offset);
            return image;
        }
    }

    /// <summary>Position of the last entry the snapshot covers (0: no snapshot).</summary>
    public long SnapshotIndex => _snapshotIndex;

    /// <summary>The digest of the applied entries: <see cref="ChainDigest"/> over each in log order.</summary>
    public ulong AppliedDigest => _appliedDigest;

    /// <summary>
    /// The digest of a log prefix, extended by one entry (FNV-1a, 64 bits, over the previous digest
    /// and the entry): equal digests at an index mean, but for collisions, equal prefixes.
    /// </summary>
    public static ulong ChainDigest(ulong previous, ReadOnlySpan<byte> entry)
    {
        const ulong Prime = 1099511628211UL;
        ulong h = 14695981039346656037UL;
        for (int i = 0; i < 8; i++) h = (h ^ (byte)(previous >> (8 * i))) * Prime;
        foreach (byte b in entry) h = (h ^ b) * Prime;
        return h;
    }

    private byte[] AppendRecord(long index, long term, byte[] entry) =>
        _writer.BeginRecord().U8((byte)RecordTag.Append).I64(index).I64(term).Bytes(entry).FinishRecord();

    /// <summary>Snapshots the state at the last applied entry and drops the log up to it.</summary>
    private void TakeSnapshot()
    {
        long index = _lastApplied;
        if ((_options.Mutations & ProtocolMutations.SnapshotPastCommit) != 0)
        {
            // The mutation: the snapshot claims every entry held, applied or not.
            index = LastIndex;
            _commitIndex = Math.Max(_commitIndex, index);
            _lastApplied = index;
        }
        Invariant.Check(index <= _commitIndex, $"a snapshot holds committed entries only (at {index}, committed {_commitIndex})");
        long term = TermAt(index);
        byte[] state = _host.TakeSnapshot();
        int inForce = _configs.FindLastIndex(c => c.Index <= index);
        Invariant.Check(inForce >= 0, $"a configuration is in force at every committed index, {index} included");
        _configs.RemoveRange(0, inForce); // the one in force at the snapshot becomes the first
        _log.RemoveRange(0, (int)(index - _snapshotIndex));
        _snapshotIndex = index;
        _snapshotTerm = term;
        _snapshotImage = Image(_appliedDigest, _configs[0], state);
        _host.PersistCompacted(CompactedRecords());
        _host.SnapshotMade(index, _appliedDigest, installed: false);
    }

    private static byte[] Image(ulong digest, (long Index, NodeId[] Voters) configuration, byte[] state) =>
        new PacketWriter().BeginRecord().I64((long)digest).I64(configuration.Index).Nodes(configuration.Voters).Bytes(state).FinishRecord();

    /// <summary>The whole persistent state as records: the snapshot (with term and vote), then every entry after it.</summary>
    private List<byte[]> CompactedRecords()
    {
        var records = new List<byte[]>(_log.Count + 1)
        {
            _writer.BeginRecord().U8((byte)RecordTag.Snapshot).I64(_term).Node(_votedFor).I64(_snapshotIndex).I64(_snapshotTerm)
                .Bytes(_snapshotImage!).FinishRecord(),
        };
        for (long i = _snapshotIndex + 1; i <= LastIndex; i++) records.Add(AppendRecord(i, EntryAt(i).Term, EntryAt(i).Entry));
        return records;
    }

    /// <summary>Restores a snapshot record at a restart; false if it is malformed (the records stop there).</summary>
    private bool RestoreSnapshotRecord(ref WireReader r)
    {
        long term = r.I64();
        NodeId vote = r.Node();
        long index = r.I64(), snapshotTerm = r.I64();
        byte[] image = r.Bytes();
        if (!r.Complete || index < 1 || snapshotTerm < 1) return false;
        _term = term;
        _votedFor = vote;
        _log.Clear();
        return Install(index, snapshotTerm, image, keepTail: false);
    }

    /// <summary>Replaces the state machine and the log up to <paramref name="index"/> by a snapshot image.</summary>
    private bool Install(long index, long term, byte[] image, bool keepTail)
    {
        var r = new WireReader(image);
        ulong digest = (ulong)r.I64();
        long configurationIndex = r.I64();
        NodeId[] voters = r.Nodes();
        byte[] state = r.Bytes();
        if (!r.Complete || configurationIndex > index || !_host.RestoreSnapshot(index, state)) return false;
        if (keepTail)
        {
            _log.RemoveRange(0, (int)(index - _snapshotIndex));
            _configs.RemoveAll(c => c.Index <= index);
        }
        else
        {
            _log.Clear();
            _configs.Clear();
        }
        _configs.Insert(0, (configurationIndex, voters));
        _snapshotIndex = index;
        _snapshotTerm = term;
        _snapshotImage = image;
        _appliedDigest = digest;
        _commitIndex = Math.Max(_commitIndex, index);
        _lastApplied = index;
        _host.SnapshotMade(index, digest, installed: true);
        return true;
    }

    /// <summary>Sends the snapshot to a peer that needs entries the log no longer holds, then the entries after it.</summary>
    private void SendSnapshot(NodeId to, Peer peer, long now)
    {
        // A snapshot still on its way is not sent again before a heartbeat period has passed.
        if (now - peer.SnapshotSentAt < _options.ReplicaHeartbeatInterval) return;
        peer.SnapshotSentAt = now;
        byte[] image = _snapshotImage!;
        for (int offset = 0; offset == 0 || offset < image.Length; offset += SnapshotChunkBytes)
        {
            int length = Math.Min(SnapshotChunkBytes, image.Length - offset);
            _host.SendToReplica(to.Endpoint, _writer.Begin(Header(PacketKind.ReplicaSnapshot, _term)).I64(_snapshotIndex).I64(_snapshotTerm)
                .I64(now).I32(image.Length).I32(offset).Bytes(image.AsSpan(offset, length)).Finish());
        }
        peer.NextIndex = _snapshotIndex + 1; // optimistic, like the appends: a lost chunk shows up as a rejection
        peer.MatchKnown = true; // the snapshot fixes the peer's log up to it: the tail may follow at once
        SendPipelined(to, peer, now);
    }

    private bool ReceiveSnapshotChunk(NodeId from, long term, ref WireReader r, long now)
    {
        long index = r.I64(), snapshotTerm = r.I64(), sentAt = r.I64();
        int length = r.I32(), offset = r.I32();
        byte[] chunk = r.Bytes();
        if (!r.Complete || index < 1 || snapshotTerm < 1 || snapshotTerm > term || length < 1 || length > MaxSnapshotBytes
            || offset < 0 || offset % SnapshotChunkBytes != 0 || chunk.Length != Math.Min(SnapshotChunkBytes, length - offset))
        {
            return false;
        }
        if (term < _term)
        {
            AppendReply(from, success: false, LastIndex, sentAt); // carries our term: the stale leader steps down
            return true;
        }
        if (term > _term || _role != Role.Follower) BecomeFollower(term);
        Leader = from;
        _leaderContactAt = now;
        LastLeaderContact = (from, now);
        ResetElectionTimer(now);
        if (index <= _commitIndex)
        {
            // Held already, committed: what the leader needs to know is where to go on from.
            AppendReply(from, success: true, index, sentAt);
            return true;
        }
        if (_incoming is not { } incoming || incoming.Index != index || incoming.Term != snapshotTerm || incoming.Length != length)
        {
            _incoming = incoming = new IncomingSnapshot(index, snapshotTerm, length);
        }
        if (!incoming.Chunks.TryAdd(offset, chunk)) return true;
        incoming.Received += chunk.Length;
        if (incoming.Received < length) return true;
        _incoming = null;
        byte[] image = incoming.Assemble();

        // Raft, figure 13: if the log holds the snapshot's last entry, it keeps what follows (the
        // leader's entries, by log matching); otherwise every entry goes.
        // (Install drops them only once the image has read back whole: a snapshot that fails to
        // install leaves the log as it was, entries this replica acknowledged included.)
        bool keepTail = index <= LastIndex && TermAt(index) == snapshotTerm;
        if (!Install(index, snapshotTerm, image, keepTail)) return false;
        _host.PersistCompacted(CompactedRecords());
        AppendReply(from, success: true, index, sentAt); // what follows it is not known to be the leader's
        ApplyCommitted();
        return true;
    }
}
