using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>What the replicated log needs from the membership replica that hosts it.</summary>
internal interface IReplicatedLogHost
{
    void SendToReplica(ulong endpoint, byte[] packet);

    /// <summary>Makes a record durable before any packet of this step leaves (the driver's contract).</summary>
    void Persist(byte[] record);

    /// <summary>A committed entry, in log order; after a restart the log is applied again from index 1.</summary>
    void Apply(long index, byte[] entry);

    /// <summary>This replica's own first entry of its term committed (true: it leads now), or it stopped leading (false).</summary>
    void LeadershipChanged(bool leading);
}

/// <summary>
/// The membership service's decision log, replicated by consensus among 1, 3 or 5 replicas
/// (Raft: terms, one leader per term, majority acceptance, the election restriction so a new leader
/// holds every committed entry). One replica is the same protocol with a quorum of one.
/// </summary>
/// <remarks>
/// <para>Two additions to plain Raft make the membership service safe against partitions:</para>
/// <list type="bullet">
/// <item><b>Leader lease.</b> A replica that heard from the leader (or granted a vote) less than the
/// minimum election timeout ago ignores vote requests, so no other leader can be elected until a
/// majority's contact has aged past that timeout. The leader therefore knows it is the only one
/// until <c>(send time of the majority's latest acknowledged append) + LeaseDuration</c>; it answers
/// process heartbeats only inside that lease and steps down when it lapses. Process leases are
/// granted from those answers, so no two leaders ever hold processes in the system at once.</item>
/// <item><b>Pre-vote.</b> A replica first asks whether it could win before raising its term, so a
/// replica returning from a partition cannot depose a working leader.</item>
/// </list>
/// The persistent state (term, vote, entries) goes out as records the driver makes durable before
/// the step's packets leave; <see cref="ReplicatedLog(int, ulong[], NodeId, ProtocolOptions, long, IReplicatedLogHost, IEnumerable{byte[]}?)"/>
/// replays them after a restart.
/// </remarks>
internal sealed class ReplicatedLog
{
    private const int MaxEntriesPerAppend = 64;
    private const int MaxAppendBytes = 64 * 1024;

    private enum Role { Follower, PreCandidate, Candidate, Leader }

    private enum RecordTag : byte { TermAndVote = 1, Append = 2, TruncateFrom = 3 }

    private readonly IReplicatedLogHost _host;
    private readonly ulong[] _replicas;
    private readonly int _self;
    private readonly NodeId _selfId;
    private readonly ProtocolOptions _options;
    private readonly PacketWriter _writer = new();
    private readonly DeterministicRandom _random;
    private readonly List<(long Term, byte[] Entry)> _log = new();
    private readonly long[] _nextIndex;
    private readonly long[] _matchIndex;
    private readonly long[] _ackedSentAt;
    private readonly bool[] _votes;

    // Persistent.
    private long _term;
    private int _votedFor = -1;

    // Volatile.
    private Role _role = Role.Follower;
    private long _commitIndex;
    private long _lastApplied;
    private long _leaderContactAt;
    private long _electionDeadline;
    private long _nextHeartbeatAt;
    private long _electionSentAt;
    private long _termStartIndex;
    private bool _ready;
    private bool _applying;

    public ReplicatedLog(int self, ulong[] replicas, NodeId selfId, ProtocolOptions options, long now, IReplicatedLogHost host, IEnumerable<byte[]>? durableRecords)
    {
        _self = self;
        _replicas = replicas;
        _selfId = selfId;
        _options = options;
        _host = host;
        _random = new DeterministicRandom(selfId.Endpoint * 1_000_003UL ^ selfId.Incarnation);
        _nextIndex = new long[replicas.Length];
        _matchIndex = new long[replicas.Length];
        _ackedSentAt = new long[replicas.Length];
        _votes = new bool[replicas.Length];
        if (durableRecords != null) Restore(durableRecords);
        // After a start or restart, behave as if a leader was just heard: a replica that forgot
        // when it last heard one must not help elect another inside a lease it may have granted.
        _leaderContactAt = now;
        ResetElectionTimer(now);
        if (replicas.Length == 1) _electionDeadline = now; // alone: lead at once
    }

    public long Term => _term;

    public long CommitIndex => _commitIndex;

    public long LastIndex => _log.Count;

    /// <summary>Index of the replica this one believes leads, or -1.</summary>
    public int LeaderIndex { get; private set; } = -1;

    public bool IsLeader => _role == Role.Leader;

    private int Majority => (_options.Mutations & ProtocolMutations.MinorityCommits) != 0 ? 1 : _replicas.Length / 2 + 1;

    private long LeaseDuration => _options.ReplicaElectionTimeout * 9 / 10;

    /// <summary>
    /// True while this replica leads, its own first entry is committed and its lease holds: the only
    /// state in which it may answer processes.
    /// </summary>
    public bool IsActiveLeader(long now) => _role == Role.Leader && _ready && now < LeaseEnd(now);

    private long LeaseEnd(long now)
    {
        if ((_options.Mutations & ProtocolMutations.MinorityCommits) != 0) return now + LeaseDuration;
        Span<long> acked = stackalloc long[_replicas.Length];
        for (int i = 0; i < acked.Length; i++) acked[i] = i == _self ? now : _ackedSentAt[i];
        acked.Sort();
        return acked[acked.Length - Majority] + LeaseDuration;
    }

    private long TermAt(long index) => index <= 0 || index > _log.Count ? 0 : _log[(int)index - 1].Term;

    private long LastTerm => TermAt(_log.Count);

    private void ResetElectionTimer(long now) =>
        _electionDeadline = now + _options.ReplicaElectionTimeout + _random.NextInRange(0, _options.ReplicaElectionTimeout);

    // ---------------------------------------------------------------- commands

    /// <summary>Appends a decision (leader only); it is applied everywhere once a majority holds it.</summary>
    public void Propose(byte[] entry, long now)
    {
        Invariant.Check(_role == Role.Leader, "only the leader proposes");
        Append(_term, entry);
        for (int i = 0; i < _replicas.Length; i++)
        {
            if (i != _self) SendAppend(i, now);
        }
        AdvanceCommit();
    }

    public void Tick(long now)
    {
        if (_role == Role.Leader)
        {
            if (now >= LeaseEnd(now))
            {
                // Cut off from a majority for a whole lease: another leader may be elected from now
                // on, so stop acting at once (and allow voting for it).
                BecomeFollower(_term);
                _leaderContactAt = long.MinValue / 2;
                ResetElectionTimer(now);
                return;
            }
            if (now >= _nextHeartbeatAt)
            {
                _nextHeartbeatAt = now + _options.ReplicaHeartbeatInterval;
                for (int i = 0; i < _replicas.Length; i++)
                {
                    if (i != _self) SendAppend(i, now);
                }
            }
            return;
        }
        if (now >= _electionDeadline) StartPreVote(now);
    }

    // ---------------------------------------------------------------- elections

    private void StartPreVote(long now)
    {
        _role = Role.PreCandidate;
        LeaderIndex = -1;
        Array.Clear(_votes);
        _votes[_self] = true;
        _electionSentAt = now;
        ResetElectionTimer(now);
        if (CountVotes() >= Majority)
        {
            StartElection(now);
            return;
        }
        BroadcastVoteRequest(preVote: true, _term + 1, now);
    }

    private void StartElection(long now)
    {
        _role = Role.Candidate;
        _term++;
        _votedFor = _self;
        PersistTermAndVote();
        Array.Clear(_votes);
        _votes[_self] = true;
        Array.Fill(_ackedSentAt, long.MinValue / 2);
        _electionSentAt = now;
        ResetElectionTimer(now);
        if (CountVotes() >= Majority)
        {
            BecomeLeader(now);
            return;
        }
        BroadcastVoteRequest(preVote: false, _term, now);
    }

    private void BroadcastVoteRequest(bool preVote, long term, long now)
    {
        for (int i = 0; i < _replicas.Length; i++)
        {
            if (i == _self) continue;
            _host.SendToReplica(_replicas[i], _writer.Begin(Header(PacketKind.ReplicaVote, term))
                .U8(preVote ? (byte)1 : (byte)0).I64(_log.Count).I64(LastTerm).I64(now).Finish());
        }
    }

    private int CountVotes()
    {
        int n = 0;
        foreach (bool v in _votes) if (v) n++;
        return n;
    }

    private void BecomeLeader(long now)
    {
        _role = Role.Leader;
        LeaderIndex = _self;
        _ready = false;
        for (int i = 0; i < _replicas.Length; i++)
        {
            _nextIndex[i] = _log.Count + 1;
            _matchIndex[i] = 0;
        }
        _nextHeartbeatAt = now + _options.ReplicaHeartbeatInterval;
        _termStartIndex = _log.Count + 1;
        Propose(new LeaderTermDecision(_term).Encode(_writer), now);
    }

    private void BecomeFollower(long term)
    {
        bool wasLeading = _role == Role.Leader;
        if (term > _term)
        {
            _term = term;
            _votedFor = -1;
            PersistTermAndVote();
            LeaderIndex = -1;
        }
        _role = Role.Follower;
        if (wasLeading)
        {
            LeaderIndex = -1;
            bool wasReady = _ready;
            _ready = false;
            if (wasReady) _host.LeadershipChanged(false);
        }
    }

    // ---------------------------------------------------------------- packets

    /// <summary>Handles a packet from another replica; false if it is malformed.</summary>
    public bool Receive(in PacketHeader h, ReadOnlySpan<byte> body, long now)
    {
        int from = Array.IndexOf(_replicas, h.Sender.Endpoint);
        if (from < 0 || from == _self) return false;
        var r = new WireReader(body);
        switch (h.Kind)
        {
            case PacketKind.ReplicaVote:
            {
                bool pre = r.U8() != 0;
                long lastIndex = r.I64(), lastTerm = r.I64(), sentAt = r.I64();
                if (!r.Complete) return false;
                OnVoteRequest(from, h.Number, pre, lastIndex, lastTerm, sentAt, now);
                return true;
            }
            case PacketKind.ReplicaVoteReply:
            {
                bool pre = r.U8() != 0, granted = r.U8() != 0;
                long sentAt = r.I64();
                if (!r.Complete) return false;
                OnVoteReply(from, h.Number, pre, granted, sentAt, now);
                return true;
            }
            case PacketKind.ReplicaAppend:
            {
                long prevIndex = r.I64(), prevTerm = r.I64(), commit = r.I64(), sentAt = r.I64();
                int count = r.Count(12);
                var entries = new (long Term, byte[] Entry)[count];
                for (int i = 0; i < count; i++) entries[i] = (r.I64(), r.Bytes());
                if (!r.Complete || prevIndex < 0 || commit < 0) return false;
                foreach (var (term, entry) in entries)
                {
                    if (term <= 0 || term > h.Number || MembershipDecision.Decode(entry, _options.MaxGroupNameBytes) == null) return false;
                }
                OnAppend(from, h.Number, prevIndex, prevTerm, commit, sentAt, entries, now);
                return true;
            }
            case PacketKind.ReplicaAppendReply:
            {
                bool success = r.U8() != 0;
                long match = r.I64(), sentAt = r.I64();
                if (!r.Complete || match < 0) return false;
                OnAppendReply(from, h.Number, success, match, sentAt, now);
                return true;
            }
        }
        return false;
    }

    private PacketHeader Header(PacketKind kind, long term) => new(kind, _selfId, default, 0, term);

    private void OnVoteRequest(int from, long term, bool pre, long lastIndex, long lastTerm, long sentAt, long now)
    {
        // Leader stickiness: while a leader's lease may hold, no vote (and no term change) for anyone.
        bool leaderRecent = _role == Role.Leader || now - _leaderContactAt < _options.ReplicaElectionTimeout;
        bool upToDate = lastTerm > LastTerm || (lastTerm == LastTerm && lastIndex >= _log.Count);
        bool granted;
        if (pre)
        {
            granted = !leaderRecent && term > _term && upToDate;
            Reply(from, term, pre, granted, sentAt);
            return;
        }
        if (leaderRecent)
        {
            Reply(from, _term, pre, granted: false, sentAt);
            return;
        }
        if (term > _term) BecomeFollower(term);
        granted = term == _term && (_votedFor == -1 || _votedFor == from) && upToDate;
        if (granted)
        {
            _votedFor = from;
            PersistTermAndVote();
            _leaderContactAt = now;
            ResetElectionTimer(now);
        }
        Reply(from, _term, pre, granted, sentAt);
    }

    private void Reply(int to, long term, bool pre, bool granted, long sentAt) =>
        _host.SendToReplica(_replicas[to], _writer.Begin(Header(PacketKind.ReplicaVoteReply, term))
            .U8(pre ? (byte)1 : (byte)0).U8(granted ? (byte)1 : (byte)0).I64(sentAt).Finish());

    private void OnVoteReply(int from, long term, bool pre, bool granted, long sentAt, long now)
    {
        if (!pre && term > _term)
        {
            BecomeFollower(term);
            return;
        }
        if (!granted || sentAt != _electionSentAt) return;
        if (pre && _role == Role.PreCandidate && term == _term + 1)
        {
            _votes[from] = true;
            if (CountVotes() >= Majority) StartElection(now);
        }
        else if (!pre && _role == Role.Candidate && term == _term)
        {
            _votes[from] = true;
            _ackedSentAt[from] = sentAt;
            if (CountVotes() >= Majority) BecomeLeader(now);
        }
    }

    private void SendAppend(int to, long now)
    {
        long prevIndex = _nextIndex[to] - 1;
        PacketWriter w = _writer.Begin(Header(PacketKind.ReplicaAppend, _term)).I64(prevIndex).I64(TermAt(prevIndex)).I64(_commitIndex).I64(now);
        int count = 0, bytes = 0;
        for (long i = prevIndex + 1; i <= _log.Count && count < MaxEntriesPerAppend && (count == 0 || bytes < MaxAppendBytes); i++)
        {
            count++;
            bytes += _log[(int)i - 1].Entry.Length;
        }
        w.I32(count);
        for (long i = prevIndex + 1; i <= prevIndex + count; i++) w.I64(_log[(int)i - 1].Term).Bytes(_log[(int)i - 1].Entry);
        _host.SendToReplica(_replicas[to], w.Finish());
        _nextIndex[to] = prevIndex + count + 1; // optimistic: a loss shows up as a mismatch and rewinds
    }

    private void OnAppend(int from, long term, long prevIndex, long prevTerm, long commit, long sentAt, (long Term, byte[] Entry)[] entries, long now)
    {
        if (term < _term)
        {
            AppendReply(from, success: false, _log.Count, sentAt); // carries our term: the stale leader steps down
            return;
        }
        if (term > _term || _role != Role.Follower) BecomeFollower(term);
        LeaderIndex = from;
        _leaderContactAt = now;
        ResetElectionTimer(now);
        if (prevIndex > _log.Count || TermAt(prevIndex) != prevTerm)
        {
            AppendReply(from, success: false, Math.Min(_log.Count, prevIndex - 1), sentAt);
            return;
        }
        for (int k = 0; k < entries.Length; k++)
        {
            long index = prevIndex + 1 + k;
            if (index <= _log.Count)
            {
                if (TermAt(index) == entries[k].Term) continue;
                Invariant.Check(index > _commitIndex, $"a committed entry ({index}) is never overwritten");
                _log.RemoveRange((int)index - 1, _log.Count - (int)index + 1);
                _host.Persist(_writer.BeginRecord().U8((byte)RecordTag.TruncateFrom).I64(index).FinishRecord());
            }
            Append(entries[k].Term, entries[k].Entry);
        }
        long lastNew = prevIndex + entries.Length;
        if (commit > _commitIndex) _commitIndex = Math.Max(_commitIndex, Math.Min(commit, lastNew));
        AppendReply(from, success: true, lastNew, sentAt);
        ApplyCommitted();
    }

    private void AppendReply(int to, bool success, long match, long sentAt) =>
        _host.SendToReplica(_replicas[to], _writer.Begin(Header(PacketKind.ReplicaAppendReply, _term))
            .U8(success ? (byte)1 : (byte)0).I64(Math.Max(0, match)).I64(sentAt).Finish());

    private void OnAppendReply(int from, long term, bool success, long match, long sentAt, long now)
    {
        if (term > _term)
        {
            BecomeFollower(term);
            return;
        }
        if (_role != Role.Leader || term != _term) return;
        _ackedSentAt[from] = Math.Max(_ackedSentAt[from], sentAt);
        if (success)
        {
            _matchIndex[from] = Math.Max(_matchIndex[from], Math.Min(match, _log.Count));
            _nextIndex[from] = Math.Max(_nextIndex[from], _matchIndex[from] + 1);
            AdvanceCommit();
        }
        else
        {
            _nextIndex[from] = Math.Max(1, Math.Min(_nextIndex[from] - 1, match + 1));
            SendAppend(from, now);
        }
    }

    // ---------------------------------------------------------------- log and commit

    private void Append(long term, byte[] entry)
    {
        _log.Add((term, entry));
        _host.Persist(_writer.BeginRecord().U8((byte)RecordTag.Append).I64(_log.Count).I64(term).Bytes(entry).FinishRecord());
    }

    private void AdvanceCommit()
    {
        // Only an entry of the leader's own term is committed by counting (Raft's rule); earlier
        // entries commit with it.
        for (long n = _log.Count; n > _commitIndex && TermAt(n) == _term; n--)
        {
            int holders = 0;
            for (int i = 0; i < _replicas.Length; i++)
            {
                if (i == _self || _matchIndex[i] >= n) holders++;
            }
            if (holders >= Majority)
            {
                _commitIndex = n;
                break;
            }
        }
        ApplyCommitted();
    }

    private void ApplyCommitted()
    {
        if (_applying) return; // the outer loop picks up entries committed while applying
        _applying = true;
        try
        {
            while (_lastApplied < _commitIndex)
            {
                _lastApplied++;
                _host.Apply(_lastApplied, _log[(int)_lastApplied - 1].Entry);
                if (_role == Role.Leader && !_ready && _lastApplied >= _termStartIndex)
                {
                    _ready = true;
                    _host.LeadershipChanged(true);
                }
            }
        }
        finally
        {
            _applying = false;
        }
    }

    // ---------------------------------------------------------------- durability

    private void PersistTermAndVote() =>
        _host.Persist(_writer.BeginRecord().U8((byte)RecordTag.TermAndVote).I64(_term).I32(_votedFor).FinishRecord());

    /// <summary>Replays durable records; stops at the first damaged one (a write torn by the crash).</summary>
    private void Restore(IEnumerable<byte[]> records)
    {
        foreach (byte[] record in records)
        {
            var r = new WireReader(record);
            switch ((RecordTag)r.U8())
            {
                case RecordTag.TermAndVote:
                {
                    long term = r.I64();
                    int vote = r.I32();
                    if (!r.Complete) return;
                    _term = term;
                    _votedFor = vote;
                    break;
                }
                case RecordTag.Append:
                {
                    long index = r.I64(), term = r.I64();
                    byte[] entry = r.Bytes();
                    if (!r.Complete || index != _log.Count + 1) return;
                    _log.Add((term, entry));
                    break;
                }
                case RecordTag.TruncateFrom:
                {
                    long index = r.I64();
                    if (!r.Complete || index < 1 || index > _log.Count + 1) return;
                    _log.RemoveRange((int)index - 1, _log.Count - (int)index + 1);
                    break;
                }
                default:
                    return;
            }
        }
    }
}
