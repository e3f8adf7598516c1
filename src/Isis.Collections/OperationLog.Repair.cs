using System.Collections;

namespace Isis.Collections;

// OperationLog, part 2 of 2: gossip reconciliation. Every member compares its history with a random
// peer's now and then (length and chain hash); one that has trailed a peer for a whole round pulls
// the entries it lacks in bulk, off its delivery thread. Only the epochs a member of the view may
// still lack are kept, and the application hears of each repair.
internal sealed partial class OperationLog<TOp>
{
    internal const int PullCode = 31_020;

    /// <summary>At most this many history entries travel in one repair reply (a reply stays well below the message size limit).</summary>
    internal const int MaxRepairBatch = 512;

    private readonly IOperationCodec<TOp> _codec;
    private readonly SemaphoreSlim _kick = new(0, 1);
    private int _repairLoopStarted;
    private long _behindTarget; // a peer's length, seen last round, that this member had not reached then
    private long _repairedEntries, _repairs, _gossipRounds, _divergences;

    /// <summary>Raised on the gossip task after a repair put entries into this member's history.</summary>
    public event Action<HistoryRepairedEventArgs>? Repaired;

    public ReplicatedCollectionStatistics Statistics
    {
        get
        {
            lock (_gate)
            {
                return new ReplicatedCollectionStatistics
                {
                    HistoryLength = _log.History.Length,
                    Pending = _log.PendingCount,
                    Repairs = _repairs,
                    RepairedEntries = _repairedEntries,
                    LateDuplicates = _log.LateDuplicates,
                    GossipRounds = _gossipRounds,
                    RetainedEntries = _log.History.Count,
                    RetainedFrom = _log.History.Start,
                    Divergences = _divergences,
                    Trailing = _behindTarget > _log.History.Length,
                };
            }
        }
    }

    private void StartRepairLoop()
    {
        if (Interlocked.Exchange(ref _repairLoopStarted, 1) == 0) _ = Task.Run(RepairLoop);
    }

    private async Task RepairLoop()
    {
        while (_group.IsActive)
        {
            await _kick.WaitAsync(_options.GossipInterval).ConfigureAwait(false);
            try
            {
                GossipRound();
            }
            catch (IsisException) when (!_group.IsActive)
            {
                return; // left the group, or the runtime stopped
            }
            catch (Exception e) when (e is IsisException or InvalidOperationException)
            {
                // A peer's reply did not fit (another version?) or the view moved under the query: the next round tries again.
                _group.Runtime.ReportRuntimeProblem($"group '{_group.Name}': a gossip round of its replicated collection failed ({e.Message}); the next round tries again");
            }
        }
    }

    /// <summary>One round: compare with a random peer, and pull from it while this member trails it.</summary>
    private void GossipRound()
    {
        View? view = _group.GetView();
        if (view == null || view.GetMyRank() < 0) return;
        Address self = view.Members[view.GetMyRank()];
        Address[] peers = view.Members.Where(m => m != self).ToArray();
        if (peers.Length == 0) return;
        lock (_gate) _gossipRounds++;
        Address peer = peers[Random.Shared.Next(peers.Length)];
        // Bounded: a round moves at most 64 batches; the next round goes on.
        for (int i = 0; i < 64 && Pull(peer, out bool more) && more; i++)
        {
        }
    }

    /// <summary>
    /// One exchange with <paramref name="peer"/>: this member's length and chain go; the peer's
    /// length comes back, with entries from this member's length on if this member asked for them
    /// (it had not reached, by this round, what a peer held a round ago: its own deliveries would
    /// bring those entries too, but it trails). False if the peer did not answer; <paramref name="more"/>
    /// is true if entries came and the peer still holds more.
    /// </summary>
    private bool Pull(Address peer, out bool more)
    {
        more = false;
        long length, chain;
        bool want;
        lock (_gate)
        {
            length = _log.History.Length;
            chain = _log.History.Chain;
            want = _behindTarget > length;
        }
        // A reply carries, in this order: the responder's history length, whether its chain agrees
        // with this member's at this member's length, the oldest position it keeps, the position of
        // the first entry, the entries' issuers and sequence numbers, then the updates in the codec's arrays.
        var header = new IList[] { new List<long>(), new List<bool>(), new List<long>(), new List<long>(), new List<string[]>(), new List<long[]>() };
        IList[] ops = _codec.NewReplyLists();
        object?[] request = [new QueryTimeout(_options.GossipInterval * 4, QueryTimeoutAction.NullReply), PullCode, peer.ToString(), _log.Self ?? "", length, chain, want, new EOLMarker(), .. header, .. ops];
        if (_group.Query(1, request) < 1) return false;

        long peerLength = (long)header[0][0]!;
        bool agrees = (bool)header[1][0]!;
        long peerRetainedFrom = (long)header[2][0]!, first = (long)header[3][0]!;
        string[] issuers = (string[])header[4][0]!;
        long[] sequences = (long[])header[5][0]!;
        TOp[]? entries = _codec.Decode(ops, 0);
        if (entries == null || entries.Length != issuers.Length || issuers.Length != sequences.Length)
        {
            throw new InvalidOperationException($"member {peer} sent a repair whose arrays do not line up");
        }

        HistoryRepairedEventArgs? repaired = null;
        string? problem = null, tooFarBehind = null;
        lock (_gate)
        {
            _log.NoteLength(peer.ToString(), peerLength);
            long before = _log.History.Length;
            if (!agrees)
            {
                problem = $"member {peer} holds another history than this member at position {length} (their chain hashes differ)";
            }
            else
            {
                // (If this member's own deliveries moved its history on since it asked, nothing applies and the next round asks again.)
                long gained = _log.ApplyRepair(peer.ToString(), first, issuers.Select((issuer, i) => new OperationId(issuer, sequences[i])).ToList(), entries, out problem);
                if (gained > 0)
                {
                    _repairs++;
                    _repairedEntries += gained;
                    repaired = new HistoryRepairedEventArgs(peer, before, gained);
                }
                else if (want && first < peerRetainedFrom && peerLength > before)
                {
                    // Cannot happen while members report their lengths (nothing a member of the view lacks is dropped); said if it does.
                    tooFarBehind = $"member {peer} no longer keeps history position {first}, which this member lacks (it keeps from {peerRetainedFrom}); " +
                        "gossip cannot repair this member, but its own deliveries still bring the updates";
                }
            }
            if (problem != null) _divergences++;
            long now = _log.History.Length;
            _behindTarget = peerLength > now ? Math.Max(_behindTarget, peerLength) : 0;
            more = now > before && peerLength > now;
            _log.DropHeldEpochs();
        }
        if (tooFarBehind != null) _group.Runtime.ReportRuntimeProblem($"group '{_group.Name}': {tooFarBehind}");
        if (problem != null) problem = $"{problem}; this is a bug in the replicated collection: please report it";
        if (problem != null) _group.Runtime.ReportRuntimeProblem($"group '{_group.Name}': {problem}");
        if (repaired != null) Repaired?.Invoke(repaired);
        return true;
    }

    /// <summary>Delivery thread: a member's pull. Only the member it names answers; the others pass.</summary>
    private void OnPull(string target, string requester, long length, long chain, bool wantEntries)
    {
        if (target != _log.Self)
        {
            _group.NullReply();
            return;
        }
        object?[] reply;
        lock (_gate)
        {
            _log.NoteLength(requester, length);
            bool agrees = _log.Agrees(length, chain);
            ReadOnlySpan<RetainedHistory<TOp>.Entry> entries = wantEntries && agrees ? _log.History.Range(length, MaxRepairBatch) : [];
            var issuers = new string[entries.Length];
            var sequences = new long[entries.Length];
            var ops = new TOp[entries.Length];
            for (int i = 0; i < entries.Length; i++)
            {
                issuers[i] = entries[i].Id.Issuer;
                sequences[i] = entries[i].Id.Sequence;
                ops[i] = entries[i].Op;
            }
            reply = [_log.History.Length, agrees, _log.History.Start, length, issuers, sequences, .. _codec.Encode(ops)];
            _log.DropHeldEpochs();
        }
        _group.Reply(reply);
    }
}
