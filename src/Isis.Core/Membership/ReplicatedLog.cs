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

    /// <summary>
    /// A committed entry, in log order; after a restart the log is applied again from its snapshot
    /// on. <paramref name="digest"/> chains every entry applied up to it (<see cref="ReplicatedLog.ChainDigest"/>).
    /// </summary>
    void Apply(long index, byte[] entry, ulong digest);

    /// <summary>The state derived from every entry applied so far, for a snapshot.</summary>
    byte[] TakeSnapshot();

    /// <summary>Replaces the state by a snapshot's (at a restart or from the leader); false if it is malformed.</summary>
    bool RestoreSnapshot(long index, byte[] state);

    /// <summary>A snapshot was taken (the log behind it dropped), or installed or restored (<paramref name="installed"/>).</summary>
    void SnapshotMade(long index, ulong digest, bool installed);

    /// <summary>Replaces every record persisted before by <paramref name="records"/> (a compacted log), durable before the step's packets leave.</summary>
    void PersistCompacted(List<byte[]> records);

    /// <summary>This replica's own first entry of its term committed (true: it leads now), or it stopped leading (false).</summary>
    void LeadershipChanged(bool leading);

    /// <summary>
    /// The leader committed every entry up to <paramref name="index"/>: <paramref name="holders"/>
    /// (a majority of <paramref name="voters"/>, the configuration in force, appended at
    /// <paramref name="configurationIndex"/>) hold it. For monitoring and the simulator's checker.
    /// </summary>
    void Committed(long index, NodeId[] holders, NodeId[] voters, long configurationIndex);
}

/// <summary>
/// The membership service's decision log, replicated by consensus among its replicas (Raft: terms,
/// one leader per term, majority acceptance, the election restriction so a new leader holds every
/// committed entry). One replica is the same protocol with a quorum of one.
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
/// <para>The replicas can change while the service runs (Raft's single-server membership change;
/// docs/architecture.md gives the proof sketch). A configuration is a log entry
/// (<see cref="ConfigurationDecision"/>) and is in force at a replica as soon as the replica appends
/// it; truncating it away brings the previous one back. The leader proposes a change only when it
/// has committed an entry of its own term and the configuration before is committed, and each
/// change adds or removes exactly one replica, so a majority of the old configuration and a
/// majority of the new one always share a replica: no two leaders, and no decision without a
/// majority of the configuration in force. A replica to be added first follows the log as a
/// learner (it receives appends but has no vote) until it holds every committed entry. A leader
/// that leaves hands over first: it stops answering processes and tells the most up-to-date voter
/// to start an election at once (leadership transfer), whose vote requests the voters grant
/// despite their leader lease.</para>
/// The persistent state (term, vote, entries) goes out as records the driver makes durable before
/// the step's packets leave; the constructor replays them after a restart.
/// </remarks>
internal sealed partial class ReplicatedLog
{
    private const int MaxEntriesPerAppend = 64;
    private const int MaxAppendBytes = 64 * 1024;

    private enum Role { Follower, PreCandidate, Candidate, Leader }

    // TermAndVote (a vote as an index into the configured replica list) is what earlier versions wrote.
    private enum RecordTag : byte { TermAndVote = 1, Append = 2, TruncateFrom = 3, TermAndVoteFor = 4, Snapshot = 5 }

    private enum VoteKind : byte { Vote = 0, PreVote = 1, Transfer = 2 }

    /// <summary>What the leader (or a candidate) tracks of another replica.</summary>
    private sealed class Peer(long nextIndex)
    {
        public long NextIndex = nextIndex;
        public long MatchIndex;
        public long AckedSentAt = long.MinValue / 2;
        /// <summary>An append was acknowledged since the last rejection: the pipeline may run ahead of it.</summary>
        public bool MatchKnown;
        /// <summary>When the leader last rewound after a rejection: rejections of appends sent before are answered already.</summary>
        public long RewoundAt = long.MinValue / 2;
        /// <summary>When the leader last sent this peer its snapshot (resent at most once per heartbeat period).</summary>
        public long SnapshotSentAt = long.MinValue / 2;
    }

    private readonly IReplicatedLogHost _host;
    private readonly NodeId _self;
    private readonly ProtocolOptions _options;
    private readonly PacketWriter _writer = new();
    private readonly DeterministicRandom _random;
    // The entries after the snapshot (all of them without one): entry i is _log[i - _snapshotIndex - 1].
    private readonly List<(long Term, byte[] Entry)> _log = new();
    // The founding configuration at index 0, then every configuration entry of the log in order; the last is in force.
    private readonly List<(long Index, NodeId[] Voters)> _configs = new();
    private readonly Dictionary<NodeId, Peer> _peers = new();
    private readonly HashSet<NodeId> _learners = new();
    private readonly HashSet<NodeId> _votes = new();

    // Persistent.
    private long _term;
    private NodeId _votedFor;

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
    private VoteKind _electionKind;
    private NodeId _transferTo;
    private long _transferUntil;

    /// <param name="self">This replica.</param>
    /// <param name="founding">The configuration before the log's first configuration entry: the configured replicas, the one replica that founds a service, or empty for a replica that waits to be added.</param>
    /// <param name="options">Protocol options.</param>
    /// <param name="now">The driver's clock.</param>
    /// <param name="host">The membership replica.</param>
    /// <param name="durableRecords">Records this replica made durable before it stopped; null for a fresh one.</param>
    public ReplicatedLog(NodeId self, NodeId[] founding, ProtocolOptions options, long now, IReplicatedLogHost host, IEnumerable<byte[]>? durableRecords)
    {
        _self = self;
        _options = options;
        _host = host;
        _random = new DeterministicRandom(self.Endpoint * 1_000_003UL ^ self.Incarnation);
        _configs.Add((0, founding));
        if (durableRecords != null) Restore(durableRecords);
        // After a start or restart, behave as if a leader was just heard: a replica that forgot
        // when it last heard one must not help elect another inside a lease it may have granted.
        _leaderContactAt = now;
        ResetElectionTimer(now);
        if (Voters is [var only] && only == self) _electionDeadline = now; // alone: lead at once
    }

    public long Term => _term;

    public long CommitIndex => _commitIndex;

    public long LastIndex => _snapshotIndex + _log.Count;

    /// <summary>The replica this one believes leads, or <see cref="NodeId.None"/>.</summary>
    public NodeId Leader { get; private set; }

    /// <summary>
    /// The last leader this replica followed and when it last heard from it; unlike
    /// <see cref="Leader"/>, kept through an election, so a new leader knows how long its
    /// predecessor has been silent.
    /// </summary>
    public (NodeId Leader, long HeardAt) LastLeaderContact { get; private set; }

    public bool IsLeader => _role == Role.Leader;

    /// <summary>The configuration in force: the last one this replica appended.</summary>
    public NodeId[] Voters => _configs[^1].Voters;

    /// <summary>Log position of the configuration in force (0: the founding one).</summary>
    public long ConfigurationIndex => _configs[^1].Index;

    public bool IsVoter(NodeId replica) => Array.IndexOf(Voters, replica) >= 0;

    /// <summary>
    /// True when the leader may propose the next configuration: it committed an entry of its own
    /// term (so no configuration of an earlier leader can still be decided behind it) and the
    /// configuration in force is committed (one change at a time).
    /// </summary>
    public bool CanReconfigure => _role == Role.Leader && _ready && ConfigurationIndex <= _commitIndex && _transferTo.IsNone;

    /// <summary>True if a learner (or voter) holds every committed entry, so adding it as a voter cannot stall commitment.</summary>
    public bool HoldsCommitted(NodeId replica) => _peers.TryGetValue(replica, out Peer? p) && p.MatchIndex >= _commitIndex;

    /// <summary>
    /// True if <paramref name="replica"/> is this one, or acknowledged an append sent in the last
    /// two replica heartbeat periods (leader only): it is reachable now.
    /// </summary>
    public bool IsResponsive(NodeId replica, long now) =>
        replica == _self || (_peers.TryGetValue(replica, out Peer? p) && now - p.AckedSentAt <= 2 * _options.ReplicaHeartbeatInterval);

    /// <summary>
    /// True if a majority of <paramref name="voters"/> is responsive (leader only). A configuration
    /// is in force from the moment it is appended: one whose majority cannot be reached would stop
    /// this leader at once (its lease counts the new voters) and leave nobody able to decide.
    /// </summary>
    public bool QuorumResponsive(NodeId[] voters, long now)
    {
        int responsive = 0;
        foreach (NodeId v in voters) if (IsResponsive(v, now)) responsive++;
        return responsive >= voters.Length / 2 + 1;
    }

    private int MajorityOf(int voters) => (_options.Mutations & ProtocolMutations.MinorityCommits) != 0 ? 1 : voters / 2 + 1;

    private int Majority => MajorityOf(Voters.Length);

    private long LeaseDuration => _options.ReplicaElectionTimeout * 9 / 10;

    /// <summary>
    /// True while this replica leads, its own first entry is committed, its lease holds and it is
    /// not handing over: the only state in which it may answer processes.
    /// </summary>
    public bool IsActiveLeader(long now) => _role == Role.Leader && _ready && _transferTo.IsNone && now < LeaseEnd(now);

    /// <summary>
    /// How much longer this replica leads for certain (leader only): no other leader can be elected
    /// before then. Process leases granted now must end by then too.
    /// </summary>
    public long LeaseRemaining(long now) => Math.Max(0, LeaseEnd(now) - now);

    private long LeaseEnd(long now)
    {
        if ((_options.Mutations & ProtocolMutations.MinorityCommits) != 0) return now + LeaseDuration;
        NodeId[] voters = Voters;
        Span<long> acked = stackalloc long[voters.Length];
        for (int i = 0; i < voters.Length; i++)
        {
            acked[i] = voters[i] == _self ? now : _peers.TryGetValue(voters[i], out Peer? p) ? p.AckedSentAt : long.MinValue / 2;
        }
        acked.Sort();
        return acked[acked.Length - Majority] + LeaseDuration;
    }

    /// <summary>The term of the entry at <paramref name="index"/>: the snapshot's at its index, 0 where unknown (before the snapshot, past the end).</summary>
    private long TermAt(long index) =>
        index == _snapshotIndex ? _snapshotTerm : index < _snapshotIndex || index > LastIndex ? 0 : _log[(int)(index - _snapshotIndex - 1)].Term;

    /// <summary>The entry at <paramref name="index"/>, which must be after the snapshot.</summary>
    private (long Term, byte[] Entry) EntryAt(long index) => _log[(int)(index - _snapshotIndex - 1)];

    private long LastTerm => TermAt(LastIndex);

    private void ResetElectionTimer(long now) =>
        _electionDeadline = now + _options.ReplicaElectionTimeout + _random.NextInRange(0, _options.ReplicaElectionTimeout);

    // ---------------------------------------------------------------- commands

    /// <summary>Appends a decision (leader only); it is applied everywhere once a majority holds it.</summary>
    public void Propose(byte[] entry, long now)
    {
        Invariant.Check(_role == Role.Leader, "only the leader proposes");
        if (MembershipDecision.VotersOf(entry) is { } next)
        {
            Invariant.Check(CanReconfigure, "a configuration is proposed only after the leader's first entry and the configuration before it are committed");
            Invariant.Check((_options.Mutations & ProtocolMutations.ReconfigureSeveralAtOnce) != 0 || SafeStep(Voters, next),
                "a configuration adds or removes exactly one replica, or grows a single replica to three that keep it");
        }
        Append(_term, entry);
        foreach (NodeId peer in _peers.Keys) SendAppend(peer, now);
        AdvanceCommit();
    }

    /// <summary>
    /// True if configuration <paramref name="b"/> may directly follow <paramref name="a"/>: either
    /// one replica is added or removed (a majority of either shares a replica with a majority of the
    /// other), or a single replica grows to three that keep it. The second is safe although a
    /// majority of the three ({B, C}) need not contain the old one: the old configuration's only
    /// majority is its one replica, which counts the new configuration from the moment it appends it,
    /// and the new replicas vote only once they hold that entry, and so (logs match by prefix) every
    /// entry decided before it. No decision can then be made by the old configuration alone, nor
    /// by a majority of the new one that lacks what the old one decided. It spares the growth a
    /// configuration of two, which needs both replicas to decide: losing the second one in it would
    /// leave nobody able to decide, and the service would have to be founded anew.
    /// </summary>
    public static bool SafeStep(NodeId[] a, NodeId[] b) =>
        OneStepApart(a, b) || (a.Length == 1 && b.Length == 3 && Array.IndexOf(b, a[0]) >= 0 && b.Distinct().Count() == 3);

    /// <summary>True if <paramref name="b"/> is <paramref name="a"/> with exactly one replica added or removed.</summary>
    public static bool OneStepApart(NodeId[] a, NodeId[] b)
    {
        int added = b.Count(x => Array.IndexOf(a, x) < 0), removed = a.Count(x => Array.IndexOf(b, x) < 0);
        return added + removed == 1;
    }

    /// <summary>Starts sending the log to a replica that is not a voter yet (leader only), so it catches up before it is added.</summary>
    public void AddLearner(NodeId replica, long now)
    {
        if (_role != Role.Leader || replica == _self || _peers.ContainsKey(replica)) return;
        _learners.Add(replica);
        _peers[replica] = new Peer(LastIndex + 1);
        SendAppend(replica, now);
    }

    /// <summary>Stops sending the log to a learner that will not be added after all.</summary>
    public void DropLearner(NodeId replica)
    {
        if (_learners.Remove(replica) && !IsVoter(replica)) _peers.Remove(replica);
    }

    /// <summary>
    /// Hands leadership to <paramref name="successor"/> (a voter): this replica stops answering
    /// processes now, brings the successor's log up to date, and tells it to start an election at
    /// once. Gives up after an election timeout (the voters then elect as usual).
    /// </summary>
    public void TransferLeadership(NodeId successor, long now)
    {
        if (_role != Role.Leader || successor == _self || !IsVoter(successor) || !_peers.ContainsKey(successor)) return;
        _transferTo = successor;
        _transferUntil = now + _options.ReplicaElectionTimeout;
        SendAppend(successor, now);
    }

    /// <summary>
    /// The earliest time at which <see cref="Tick"/> may act, seen at <paramref name="now"/>: the
    /// next heartbeat, the end of a handover or of the lease, the moment a peer stops counting as
    /// responsive (reconfiguration depends on it), or the election timer.
    /// </summary>
    public long NextDeadline(long now)
    {
        if (_role == Role.Leader)
        {
            long d = Math.Min(_nextHeartbeatAt, LeaseEnd(now)); // our own acknowledgement only moves the lease later
            if (!_transferTo.IsNone) d = Math.Min(d, _transferUntil);
            foreach (Peer p in _peers.Values)
            {
                long unresponsiveAt = p.AckedSentAt + 2 * _options.ReplicaHeartbeatInterval + 1;
                if (unresponsiveAt > now) d = Math.Min(d, unresponsiveAt);
            }
            return d;
        }
        if (!IsVoter(_self)) return long.MaxValue; // the append that makes it a voter resets the election timer
        return _role is Role.PreCandidate or Role.Candidate ? Math.Min(_electionDeadline, _nextHeartbeatAt) : _electionDeadline;
    }

    public void Tick(long now)
    {
        if (_role == Role.Leader)
        {
            if (!_transferTo.IsNone && now >= _transferUntil) _transferTo = default;
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
                foreach (var (id, peer) in _peers)
                {
                    // Appends in flight for a whole heartbeat period without an acknowledgement
                    // are taken as lost: send them again from the last acknowledged one.
                    if (peer.MatchKnown && peer.NextIndex - 1 > peer.MatchIndex && now - peer.AckedSentAt >= _options.ReplicaHeartbeatInterval)
                    {
                        peer.NextIndex = Math.Max(peer.MatchIndex + 1, 1);
                        peer.RewoundAt = now;
                    }
                    SendAppend(id, now);
                }
            }
            return;
        }
        // Only a voter of the configuration in force stands for election: a replica waiting to be
        // added, or one that was removed, never does.
        if (!IsVoter(_self))
        {
            ResetElectionTimer(now);
            return;
        }
        if (now >= _electionDeadline)
        {
            StartPreVote(now);
        }
        else if ((_role is Role.PreCandidate or Role.Candidate) && now >= _nextHeartbeatAt)
        {
            // A lost request must not cost a whole election timeout: ask again every replica
            // heartbeat period (a reply to any request of this election counts; each carries its
            // own send time, from which a granted vote extends the lease).
            _nextHeartbeatAt = now + _options.ReplicaHeartbeatInterval;
            if (_role == Role.PreCandidate) BroadcastVoteRequest(VoteKind.PreVote, _term + 1, now);
            else BroadcastVoteRequest(_electionKind, _term, now);
        }
    }

    // ---------------------------------------------------------------- elections

    private void StartPreVote(long now)
    {
        _role = Role.PreCandidate;
        Leader = default;
        _votes.Clear();
        _votes.Add(_self);
        _electionSentAt = now;
        _nextHeartbeatAt = now + _options.ReplicaHeartbeatInterval;
        ResetElectionTimer(now);
        if (CountVotes() >= Majority)
        {
            StartElection(now, VoteKind.Vote);
            return;
        }
        BroadcastVoteRequest(VoteKind.PreVote, _term + 1, now);
    }

    private void StartElection(long now, VoteKind kind)
    {
        _role = Role.Candidate;
        _term++;
        _votedFor = _self;
        PersistTermAndVote();
        _votes.Clear();
        _votes.Add(_self);
        _peers.Clear();
        _learners.Clear();
        foreach (NodeId v in Voters)
        {
            if (v != _self) _peers[v] = new Peer(LastIndex + 1);
        }
        _electionSentAt = now;
        _electionKind = kind;
        _nextHeartbeatAt = now + _options.ReplicaHeartbeatInterval;
        ResetElectionTimer(now);
        if (CountVotes() >= Majority)
        {
            BecomeLeader(now);
            return;
        }
        BroadcastVoteRequest(kind, _term, now);
    }

    private void BroadcastVoteRequest(VoteKind kind, long term, long now)
    {
        foreach (NodeId v in Voters)
        {
            if (v == _self) continue;
            _host.SendToReplica(v.Endpoint, _writer.Begin(Header(PacketKind.ReplicaVote, term))
                .U8((byte)kind).I64(LastIndex).I64(LastTerm).I64(now).Finish());
        }
    }

    /// <summary>Votes from voters of the configuration in force (a vote from anyone else counts for nothing).</summary>
    private int CountVotes()
    {
        int n = 0;
        foreach (NodeId v in Voters) if (_votes.Contains(v)) n++;
        return n;
    }

    private void BecomeLeader(long now)
    {
        _role = Role.Leader;
        Leader = _self;
        _ready = false;
        _transferTo = default;
        foreach (NodeId v in Voters)
        {
            if (v == _self) continue;
            if (!_peers.TryGetValue(v, out Peer? p)) _peers[v] = p = new Peer(0);
            p.NextIndex = LastIndex + 1;
            p.MatchIndex = 0;
            p.MatchKnown = false;
        }
        _nextHeartbeatAt = now + _options.ReplicaHeartbeatInterval;
        _termStartIndex = LastIndex + 1;
        Propose(new LeaderTermDecision(_term).Encode(_writer), now);
    }

    private void BecomeFollower(long term)
    {
        bool wasLeading = _role == Role.Leader;
        if (term > _term)
        {
            _term = term;
            _votedFor = default;
            PersistTermAndVote();
            Leader = default;
        }
        _role = Role.Follower;
        _transferTo = default;
        if (wasLeading)
        {
            Leader = default;
            _learners.Clear();
            bool wasReady = _ready;
            _ready = false;
            if (wasReady) _host.LeadershipChanged(false);
        }
    }

    // ---------------------------------------------------------------- packets

    /// <summary>Handles a packet from another replica; false if it is malformed.</summary>
    public bool Receive(in PacketHeader h, ReadOnlySpan<byte> body, long now)
    {
        NodeId from = h.Sender;
        if (from == _self) return false;
        var r = new WireReader(body);
        switch (h.Kind)
        {
            case PacketKind.ReplicaVote:
            {
                byte kind = r.U8();
                long lastIndex = r.I64(), lastTerm = r.I64(), sentAt = r.I64();
                if (!r.Complete || kind > (byte)VoteKind.Transfer) return false;
                OnVoteRequest(from, h.Number, (VoteKind)kind, lastIndex, lastTerm, sentAt, now);
                return true;
            }
            case PacketKind.ReplicaVoteReply:
            {
                byte kind = r.U8();
                bool granted = r.U8() != 0;
                long sentAt = r.I64();
                if (!r.Complete || kind > (byte)VoteKind.Transfer) return false;
                OnVoteReply(from, h.Number, (VoteKind)kind == VoteKind.PreVote, granted, sentAt, now);
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
            case PacketKind.ReplicaSnapshot:
                return ReceiveSnapshotChunk(from, h.Number, ref r, now);
            case PacketKind.ReplicaTimeoutNow:
                if (!r.Complete) return false;
                // Only from the leader of this replica's own term, to a voter: start the election now.
                if (h.Number == _term && from == Leader && _role == Role.Follower && IsVoter(_self)) StartElection(now, VoteKind.Transfer);
                return true;
        }
        return false;
    }

    private PacketHeader Header(PacketKind kind, long term) => new(kind, _self, default, 0, term);

    private void OnVoteRequest(NodeId from, long term, VoteKind kind, long lastIndex, long lastTerm, long sentAt, long now)
    {
        // Leader stickiness: while a leader's lease may hold, no vote (and no term change) for
        // anyone, except a candidate the leader itself handed over to (it stopped acting first).
        bool leaderRecent = kind != VoteKind.Transfer && (_role == Role.Leader || now - _leaderContactAt < _options.ReplicaElectionTimeout);
        bool upToDate = lastTerm > LastTerm || (lastTerm == LastTerm && lastIndex >= LastIndex);
        bool granted;
        if (kind == VoteKind.PreVote)
        {
            granted = !leaderRecent && term > _term && upToDate;
            Reply(from, term, kind, granted, sentAt);
            return;
        }
        if (term == _term && _votedFor == from && kind != VoteKind.PreVote)
        {
            // A candidate asking again (its request or our reply was lost): the same vote, again.
            _leaderContactAt = now;
            Reply(from, _term, kind, granted: true, sentAt);
            return;
        }
        if (leaderRecent)
        {
            Reply(from, _term, kind, granted: false, sentAt);
            return;
        }
        if (term > _term) BecomeFollower(term);
        granted = term == _term && (_votedFor.IsNone || _votedFor == from) && upToDate;
        if (granted)
        {
            _votedFor = from;
            PersistTermAndVote();
            _leaderContactAt = now;
            ResetElectionTimer(now);
        }
        Reply(from, _term, kind, granted, sentAt);
    }

    private void Reply(NodeId to, long term, VoteKind kind, bool granted, long sentAt) =>
        _host.SendToReplica(to.Endpoint, _writer.Begin(Header(PacketKind.ReplicaVoteReply, term))
            .U8((byte)kind).U8(granted ? (byte)1 : (byte)0).I64(sentAt).Finish());

    private void OnVoteReply(NodeId from, long term, bool pre, bool granted, long sentAt, long now)
    {
        if (!pre && term > _term)
        {
            BecomeFollower(term);
            return;
        }
        if (!granted || sentAt < _electionSentAt || !IsVoter(from)) return;
        if (pre && _role == Role.PreCandidate && term == _term + 1)
        {
            _votes.Add(from);
            if (CountVotes() >= Majority) StartElection(now, VoteKind.Vote);
        }
        else if (!pre && _role == Role.Candidate && term == _term)
        {
            _votes.Add(from);
            if (_peers.TryGetValue(from, out Peer? p)) p.AckedSentAt = Math.Max(p.AckedSentAt, sentAt);
            if (CountVotes() >= Majority) BecomeLeader(now);
        }
    }

    /// <summary>
    /// Replicates to <paramref name="to"/> (a proposal, a heartbeat, a rejection to repair): at
    /// least one packet, an empty append if there is nothing new (or the snapshot, if the peer
    /// needs entries the log no longer holds), then as many more as the pipeline allows.
    /// </summary>
    private void SendAppend(NodeId to, long now)
    {
        Peer peer = _peers[to];
        if (peer.NextIndex <= _snapshotIndex)
        {
            SendSnapshot(to, peer, now);
            return;
        }
        SendOneAppend(to, peer, now);
        SendPipelined(to, peer, now);
    }

    /// <summary>
    /// Pipelined appends: once a peer's position is known, the leader sends the batches after it
    /// without waiting for each one's acknowledgement (Raft's optimistic nextIndex), up to
    /// <see cref="MaxEntriesInFlight"/> unacknowledged entries, and sends more as acknowledgements
    /// come back. Catching up is then bounded by bandwidth, not by one batch per heartbeat.
    /// </summary>
    private void SendPipelined(NodeId to, Peer peer, long now)
    {
        while (peer.MatchKnown && peer.NextIndex > _snapshotIndex && peer.NextIndex <= LastIndex
            && peer.NextIndex - 1 - peer.MatchIndex < MaxEntriesInFlight)
        {
            SendOneAppend(to, peer, now);
        }
    }

    private void SendOneAppend(NodeId to, Peer peer, long now)
    {
        long prevIndex = peer.NextIndex - 1;
        PacketWriter w = _writer.Begin(Header(PacketKind.ReplicaAppend, _term)).I64(prevIndex).I64(TermAt(prevIndex)).I64(_commitIndex).I64(now);
        int count = 0, bytes = 0;
        for (long i = prevIndex + 1; i <= LastIndex && count < MaxEntriesPerAppend && (count == 0 || bytes < MaxAppendBytes); i++)
        {
            count++;
            bytes += EntryAt(i).Entry.Length;
        }
        w.I32(count);
        for (long i = prevIndex + 1; i <= prevIndex + count; i++) w.I64(EntryAt(i).Term).Bytes(EntryAt(i).Entry);
        _host.SendToReplica(to.Endpoint, w.Finish());
        peer.NextIndex = prevIndex + count + 1; // optimistic: a loss shows up as a mismatch and rewinds
    }

    private void OnAppend(NodeId from, long term, long prevIndex, long prevTerm, long commit, long sentAt, (long Term, byte[] Entry)[] entries, long now)
    {
        if (term < _term)
        {
            AppendReply(from, success: false, LastIndex, sentAt); // carries our term: the stale leader steps down
            return;
        }
        if (term > _term || _role != Role.Follower) BecomeFollower(term);
        Leader = from;
        _leaderContactAt = now;
        LastLeaderContact = (from, now);
        ResetElectionTimer(now);
        if (prevIndex < _snapshotIndex)
        {
            // Entries up to the snapshot are committed, so they are the leader's too: skip them.
            int skip = (int)Math.Min(entries.Length, _snapshotIndex - prevIndex);
            entries = entries[skip..];
            prevIndex += skip;
            if (prevIndex < _snapshotIndex)
            {
                AppendReply(from, success: true, prevIndex, sentAt);
                return;
            }
            prevTerm = _snapshotTerm;
        }
        if (prevIndex > LastIndex || TermAt(prevIndex) != prevTerm)
        {
            AppendReply(from, success: false, Math.Min(LastIndex, prevIndex - 1), sentAt);
            return;
        }
        for (int k = 0; k < entries.Length; k++)
        {
            long index = prevIndex + 1 + k;
            if (index <= LastIndex)
            {
                if (TermAt(index) == entries[k].Term) continue;
                Invariant.Check(index > _commitIndex, $"a committed entry ({index}) is never overwritten");
                TruncateFrom(index);
                _host.Persist(_writer.BeginRecord().U8((byte)RecordTag.TruncateFrom).I64(index).FinishRecord());
            }
            Append(entries[k].Term, entries[k].Entry);
        }
        long lastNew = prevIndex + entries.Length;
        if (commit > _commitIndex) _commitIndex = Math.Max(_commitIndex, Math.Min(commit, lastNew));
        AppendReply(from, success: true, lastNew, sentAt);
        ApplyCommitted();
    }

    private void AppendReply(NodeId to, bool success, long match, long sentAt) =>
        _host.SendToReplica(to.Endpoint, _writer.Begin(Header(PacketKind.ReplicaAppendReply, _term))
            .U8(success ? (byte)1 : (byte)0).I64(Math.Max(0, match)).I64(sentAt).Finish());

    private void OnAppendReply(NodeId from, long term, bool success, long match, long sentAt, long now)
    {
        if (term > _term)
        {
            BecomeFollower(term);
            return;
        }
        if (_role != Role.Leader || term != _term || !_peers.TryGetValue(from, out Peer? peer)) return;
        peer.AckedSentAt = Math.Max(peer.AckedSentAt, sentAt);
        if (success)
        {
            peer.MatchIndex = Math.Max(peer.MatchIndex, Math.Min(match, LastIndex));
            peer.NextIndex = Math.Max(peer.NextIndex, peer.MatchIndex + 1);
            peer.MatchKnown = true;
            AdvanceCommit();
            if (_role != Role.Leader || !_peers.ContainsKey(from)) return;
            if (from == _transferTo && peer.MatchIndex == LastIndex)
            {
                _host.SendToReplica(from.Endpoint, _writer.Begin(Header(PacketKind.ReplicaTimeoutNow, _term)).Finish());
            }
            // The acknowledgement opened the pipeline's window: send what is next.
            if (peer.NextIndex <= _snapshotIndex) SendSnapshot(from, peer, now);
            else SendPipelined(from, peer, now);
        }
        else
        {
            // The batches sent behind a lost one are all rejected: one rewind answers them all.
            if (sentAt < peer.RewoundAt) return;
            peer.RewoundAt = now;
            peer.MatchKnown = false;
            peer.NextIndex = Math.Max(1, Math.Min(peer.NextIndex - 1, match + 1));
            SendAppend(from, now);
        }
    }

    // ---------------------------------------------------------------- log, configurations and commit

    private void Append(long term, byte[] entry)
    {
        // Raft's log rules: terms never decrease along the log, and no entry is from a term after the replica's own.
        Invariant.Check(term >= TermAt(LastIndex) && term <= _term, $"entry {LastIndex + 1} of term {term} follows one of term {TermAt(LastIndex)}, at term {_term}");
        AddToLog(term, entry);
        _host.Persist(AppendRecord(LastIndex, term, entry));
    }

    private void AddToLog(long term, byte[] entry)
    {
        _log.Add((term, entry));
        if (MembershipDecision.VotersOf(entry) is { } voters)
        {
            Invariant.Check(_configs.Count == 0 || _configs[^1].Index < LastIndex, $"configurations follow each other along the log: the last at {_configs[^1].Index}, a new one at {LastIndex}");
            _configs.Add((LastIndex, voters));
            OnConfigurationChanged();
        }
    }

    private void TruncateFrom(long index)
    {
        Invariant.Check(index > _snapshotIndex, $"the log is never truncated into its snapshot (at {_snapshotIndex}, truncating from {index})");
        _log.RemoveRange((int)(index - _snapshotIndex - 1), (int)(LastIndex - index + 1));
        int before = _configs.Count;
        Invariant.Check(_configs[0].Index < index, $"a truncation keeps the configuration in force at the snapshot (at {_configs[0].Index}, truncating from {index})");
        while (_configs[^1].Index >= index) _configs.RemoveAt(_configs.Count - 1);
        if (_configs.Count != before) OnConfigurationChanged();
    }

    /// <summary>The leader replicates to the voters of the configuration in force and its learners.</summary>
    private void OnConfigurationChanged()
    {
        if (_role != Role.Leader) return;
        foreach (NodeId v in Voters)
        {
            if (v == _self) continue;
            _learners.Remove(v);
            if (!_peers.ContainsKey(v)) _peers[v] = new Peer(LastIndex + 1);
        }
        foreach (NodeId p in _peers.Keys.ToArray())
        {
            if (!IsVoter(p) && !_learners.Contains(p)) _peers.Remove(p);
        }
    }

    private void AdvanceCommit()
    {
        // Only an entry of the leader's own term is committed by counting (Raft's rule); earlier
        // entries commit with it. The majority is of the configuration in force, in which the
        // leader counts itself only if it is one of the voters.
        NodeId[] voters = Voters;
        for (long n = LastIndex; n > _commitIndex && TermAt(n) == _term; n--)
        {
            int holders = 0;
            foreach (NodeId v in voters)
            {
                if (v == _self || (_peers.TryGetValue(v, out Peer? p) && p.MatchIndex >= n)) holders++;
            }
            if (holders >= Majority)
            {
                _commitIndex = n;
                _host.Committed(n, voters.Where(v => v == _self || (_peers.TryGetValue(v, out Peer? p) && p.MatchIndex >= n)).ToArray(), voters, ConfigurationIndex);
                break;
            }
        }
        ApplyCommitted();
        if (_role == Role.Leader && !IsVoter(_self) && ConfigurationIndex <= _commitIndex)
        {
            // The configuration that removes this leader is committed: it stops leading, and
            // (not being a voter) never stands for election again.
            BecomeFollower(_term);
        }
    }

    private void ApplyCommitted()
    {
        if (_applying) return; // the outer loop picks up entries committed while applying
        _applying = true;
        try
        {
            Invariant.Check(_commitIndex <= LastIndex, $"only entries the log holds are committed: commit {_commitIndex}, last {LastIndex}");
            while (_lastApplied < _commitIndex)
            {
                _lastApplied++;
                byte[] entry = EntryAt(_lastApplied).Entry;
                _appliedDigest = ChainDigest(_appliedDigest, entry);
                _host.Apply(_lastApplied, entry, _appliedDigest);
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
        if (_lastApplied - _snapshotIndex >= Math.Max(1, _options.ReplicaSnapshotInterval)) TakeSnapshot();
    }

    // ---------------------------------------------------------------- durability

    private void PersistTermAndVote() =>
        _host.Persist(_writer.BeginRecord().U8((byte)RecordTag.TermAndVoteFor).I64(_term).Node(_votedFor).FinishRecord());

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
                    NodeId[] founding = _configs[0].Voters;
                    _votedFor = vote >= 0 && vote < founding.Length ? founding[vote] : default;
                    break;
                }
                case RecordTag.TermAndVoteFor:
                {
                    long term = r.I64();
                    NodeId vote = r.Node();
                    if (!r.Complete) return;
                    _term = term;
                    _votedFor = vote;
                    break;
                }
                case RecordTag.Append:
                {
                    long index = r.I64(), term = r.I64();
                    byte[] entry = r.Bytes();
                    if (!r.Complete || index != LastIndex + 1) return;
                    AddToLog(term, entry);
                    break;
                }
                case RecordTag.TruncateFrom:
                {
                    long index = r.I64();
                    if (!r.Complete || index <= _snapshotIndex || index > LastIndex + 1) return;
                    TruncateFrom(index);
                    break;
                }
                case RecordTag.Snapshot:
                    if (!RestoreSnapshotRecord(ref r)) return;
                    break;
                default:
                    return;
            }
        }
    }
}
