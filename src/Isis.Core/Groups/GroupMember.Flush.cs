using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>Flush: the application's wait for its messages to be stable, and this member's part in a view change's flush.</summary>
internal sealed partial class GroupMember
{
    // Flush: application messages are numbered as they are issued (sent or queued); those sent
    // and not yet known settled are logged with their view and sequence number.
    private long _issued;
    private long _nextFlushPokeAt;
    private int _flushPokeRepeats; // relaying: pokes since the last Flush completed (each asks one member more)
    private long _sentCount;
    private readonly List<(long Issue, int View, long Seq)> _sentLog = new();
    private int _sentLogStart; // entries before it are stable: see TrimSentLog
    // A waiting Flush: its own messages up to Target, and the causal messages delivered here before
    // it (CausalHorizon, taken in view HorizonView), which the messages it covers may depend on.
    private readonly List<(long Token, long Target, int MinHolders, long[]? CausalHorizon, int HorizonView)> _flushWaiters = new();

    // ---------------------------------------------------------------- Flush

    public void RequestFlush(long token, int minHolders, long now)
    {
        _flushWaiters.Add((token, _issued, minHolders, View == null ? null : CausalHorizonForFlush(), View?.Id ?? 0));
        CompleteFlushes();
        if (_flushWaiters.Count == 0 || _wedged || MyRank < 0) return;
        PokeForFlush(now);
    }

    /// <summary>True while a Flush waits and this member asks for the digests that decide it (<see cref="PokeForFlush"/>).</summary>
    private bool PokesForFlush => _flushWaiters.Count > 0 && !_wedged && MyRank >= 0 && (!Relaying || FlushHoldersToAsk > 0);

    /// <summary>
    /// Relaying, the most other members a waiting Flush(k) counts (k - 1 of the largest k), or 0 when
    /// every waiting Flush wants every member: stability, which the tree declares.
    /// </summary>
    private int FlushHoldersToAsk
    {
        get
        {
            int members = View!.Members.Length, most = 0;
            foreach (var (_, _, minHolders, _, _) in _flushWaiters)
            {
                if (minHolders > 0 && minHolders < members) most = Math.Max(most, minHolders - 1);
            }
            return most;
        }
    }

    /// <summary>
    /// Asks the members whose holdings decide a waiting Flush for their digests at once, so it costs
    /// a round trip and not a digest period; again each NAK interval while it waits (a reply may be
    /// lost, or may have raced ahead of our data). In a small group that is every member. Relaying
    /// (a large TCP group), a member talks to its tree neighbours only and stability comes from the
    /// tree, which settles a Flush of every member; a Flush(k) asks k - 1 members only, its tree
    /// neighbours first (the data reaches them first), then the next ranks: k - 1 packets, whatever
    /// the group's size. Each repeat asks one member more, so one that crashed (and does not answer
    /// until the view change drops it) is made up for by the next.
    /// </summary>
    private void PokeForFlush(long now)
    {
        if (!PokesForFlush) return;
        _nextFlushPokeAt = now + Options.NakInterval;
        if (!Relaying)
        {
            SendDigest(now, askForReplies: true);
            return;
        }
        int members = View!.Members.Length;
        int ask = Math.Min(members - 1, FlushHoldersToAsk + _flushPokeRepeats++);
        var asked = new List<int>(ask);
        foreach (int neighbour in _tree!.Neighbours)
        {
            if (asked.Count < ask) asked.Add(neighbour);
        }
        for (int step = 1; asked.Count < ask && step < members; step++)
        {
            int rank = (MyRank + step) % members;
            if (!asked.Contains(rank)) asked.Add(rank);
        }
        foreach (int rank in asked) SendDigest(now, askForReplies: true, only: View.Members[rank]);
    }

    /// <summary>
    /// Completes every flush whose messages are all settled: sent, and either held by enough
    /// members of the current view (digests tell who holds what) or sent in an earlier view,
    /// whose flush settled them. Holding is a prefix property, so checking the last message of a
    /// flush suffices.
    /// </summary>
    private void CompleteFlushes()
    {
        if (_flushWaiters.Count == 0) return;
        TrimSentLog();
        bool atOnce = (Options.Mutations & ProtocolMutations.FlushReturnsAtOnce) != 0;
        for (int i = _flushWaiters.Count - 1; i >= 0; i--)
        {
            var (token, target, minHolders, horizon, horizonView) = _flushWaiters[i];
            if (!atOnce && !(FlushSettled(target, minHolders) && CausalPredecessorsStable(horizon, horizonView))) continue;
            _flushWaiters.RemoveAt(i);
            Publish(new FlushCompleted(Id, token));
        }
        if (_flushWaiters.Count == 0) _flushPokeRepeats = 0;
    }

    /// <summary>
    /// Forgets the sent messages that are stable here (settled for every Flush). Runs whenever our
    /// own stream's stability advances, Flush or not, so a sender that never flushes does not
    /// accumulate an entry per message; the list is compacted only when its settled head is the
    /// larger half, so trimming costs O(1) per message.
    /// </summary>
    private void TrimSentLog()
    {
        if (MyRank < 0 || View == null) return;
        long stable = _streams[MyRank].Stable;
        while (_sentLogStart < _sentLog.Count && _sentLog[_sentLogStart].View == View.Id && _sentLog[_sentLogStart].Seq <= stable) _sentLogStart++;
        if (_sentLogStart == _sentLog.Count)
        {
            _sentLog.Clear();
            _sentLogStart = 0;
        }
        else if (_sentLogStart > 1024 && _sentLogStart * 2 > _sentLog.Count)
        {
            _sentLog.RemoveRange(0, _sentLogStart);
            _sentLogStart = 0;
        }
    }

    private bool FlushSettled(long target, int minHolders)
    {
        if (target > _sentCount) return false; // some of its messages still wait to be sent
        int last = _sentLog.Count - 1;
        while (last >= _sentLogStart && _sentLog[last].Issue > target) last--;
        if (last < _sentLogStart) return true;
        long seq = _sentLog[last].Seq;
        if (_streams[MyRank].Stable >= seq) return true; // every member holds it
        int members = View!.Members.Length;
        int need = minHolders <= 0 ? members : Math.Min(minHolders, members);
        return 1 + _acks.OthersHoldingOurs(seq) >= need; // this member and the others known to hold it
    }


    // ---------------------------------------------------------------- flush participant

    /// <summary>
    /// A coordinator asks us to wedge and report. From now on this member sends nothing new in
    /// this view and delivers only what a commit tells it to. The report carries every message we
    /// hold above stability, so the coordinator can give each survivor what it lacks even if the
    /// original sender is gone.
    /// </summary>
    private void OnWedge(int from, long attempt, NodeId[]? arrivedAlong)
    {
        // Only the coordinator the membership service picks (the oldest member not expelled) may
        // wedge us. Until we hear of an expulsion we refuse its successor; it retransmits.
        int coordinator = 0;
        while (coordinator < View!.Members.Length && _node.IsExpelled(View.Members[coordinator])) coordinator++;
        if (from != coordinator) { _node.Counters.DroppedNotMember++; return; }
        if (attempt < _reportedAttempt) return; // an older attempt of the same coordinator
        _wedged = true;
        _reportedAttempt = attempt;
        var messages = new List<HeldMessage>();
        var vector = new long[_streams.Length];
        for (int r = 0; r < _streams.Length; r++)
        {
            SenderStream s = _streams[r];
            vector[r] = s.Contiguous;
            for (long seq = s.Stable + 1; seq <= s.Contiguous; seq++) messages.Add(new HeldMessage(r, seq, s.Held[seq]));
        }
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.FlushReport, Self, Id, View!.Id, attempt)).Longs(vector);
        HeldMessage.WriteList(w, messages);
        WriteStateStatus(w);
        SendBack(View.Members[from], w.Finish(), arrivedAlong); // relaying, along the survivors' tree the wedge came by
    }

    /// <summary>
    /// The coordinator's cut: for each sender, deliver exactly up to cut[r]. The commit carries the
    /// messages we lacked. Every survivor gets the same cut, which is what makes the delivered sets
    /// of the old view equal (virtual synchrony).
    /// </summary>
    private void OnCommit(int from, long attempt, ref WireReader r, NodeId[]? arrivedAlong)
    {
        long[] cut = r.Longs();
        List<HeldMessage> messages = HeldMessage.ReadList(ref r, _streams.Length);
        var waiting = new Dictionary<NodeId, NodeId>();
        for (int i = 0, n = r.Count(2 * 12); i < n && r.Ok; i++) waiting[r.Node()] = r.Node();
        if (!r.Complete || cut.Length != _streams.Length) { r.Fail(); return; }
        if (attempt != _reportedAttempt) return; // stale, or for an attempt we never reported to
        // Without our lease the service may have expelled us and abandoned this attempt: deliver
        // nothing. The coordinator retransmits; a member whose lease merely lapsed commits later.
        if (!_node.LeaseHeld) return;
        if (attempt != _committedAttempt)
        {
            foreach (HeldMessage m in messages)
            {
                if (m.Seq <= _streams[m.Rank].Contiguous + MaxAhead) _streams[m.Rank].Add(m.Seq, m.Message);
            }
            // A correct coordinator's cut never undoes a delivery and comes with every message up to
            // it; a commit that does not is corrupt, and is refused before anything is delivered.
            for (int rank = 0; rank < _streams.Length; rank++)
            {
                if (_streams[rank].Delivered > cut[rank] || _streams[rank].Contiguous < cut[rank]) { r.Fail(); return; }
            }
            for (int rank = 0; rank < _streams.Length; rank++)
            {
                SenderStream s = _streams[rank];
                while (s.Delivered < cut[rank])
                {
                    long seq = s.DeliverNext();
                    _stabilityDirty = true;
                    OnStreamDelivered(rank, seq, s.Held[seq]);
                }
            }
            // Virtual synchrony's cut, exactly: no delivery above it on any stream (a delivery
            // that triggers another must not run past the cut of the other's sender).
            for (int rank = 0; rank < _streams.Length; rank++)
            {
                Common.Invariant.Check(_streams[rank].Delivered == cut[rank], $"a flush commit delivers exactly up to the cut: rank {rank}, delivered {_streams[rank].Delivered}, cut {cut[rank]}");
            }
            _committedAttempt = attempt;
            _waitingAtCut = waiting; // who still waits for a checkpoint, and from whom: the next view's state transfer starts from it
        }
        SendBack(View!.Members[from], _node.Writer.Begin(new PacketHeader(PacketKind.CommitAck, Self, Id, View.Id, attempt)).Finish(), arrivedAlong);
    }

    /// <summary>
    /// The holdings this member reports for a flush it coordinates: used when the coordinator is also
    /// a survivor, through the same path as everyone else (it sends itself a Wedge).
    /// </summary>
    public int RankCount => _streams.Length;
}
