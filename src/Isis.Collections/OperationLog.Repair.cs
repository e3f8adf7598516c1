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
    private readonly Dictionary<string, long> _known = new(StringComparer.Ordinal); // members' history lengths, as last heard
    private int _repairLoopStarted;
    private long _behindTarget; // a peer's length, seen last round, that this member had not reached then
    private long _lateDuplicates, _repairedEntries, _repairs, _gossipRounds, _divergences, _tooFarBehind;

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
                    HistoryLength = _history.Length,
                    Pending = _pendingById.Count,
                    Repairs = _repairs,
                    RepairedEntries = _repairedEntries,
                    LateDuplicates = _lateDuplicates,
                    GossipRounds = _gossipRounds,
                    RetainedEntries = _history.Count,
                    RetainedFrom = _history.Start,
                    Divergences = _divergences,
                    Trailing = _behindTarget > _history.Length,
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
            length = _history.Length;
            chain = _history.Chain;
            want = _behindTarget > length;
        }
        // A reply carries, in this order: the responder's history length, whether its chain agrees
        // with this member's at this member's length, the oldest position it keeps, the position of
        // the first entry, the entries' issuers and sequence numbers, then the updates in the codec's arrays.
        var header = new IList[] { new List<long>(), new List<bool>(), new List<long>(), new List<long>(), new List<string[]>(), new List<long[]>() };
        IList[] ops = _codec.NewReplyLists();
        object?[] request = [new QueryTimeout(_options.GossipInterval * 4, QueryTimeoutAction.NullReply), PullCode, peer.ToString(), _self ?? "", length, chain, want, new EOLMarker(), .. header, .. ops];
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
        string? problem = null;
        lock (_gate)
        {
            _known[peer.ToString()] = peerLength;
            long before = _history.Length;
            if (!agrees)
            {
                _divergences++;
                problem = $"member {peer} holds another history than this member at position {length} (their chain hashes differ); this is a bug in the replicated collection: please report it";
            }
            else if (first == _history.Length)
            {
                // (If this member's own deliveries moved its history on since it asked, the entries start too early and wait for the next round.)
                for (int i = 0; i < entries.Length; i++)
                {
                    var id = new OperationId(issuers[i], sequences[i]);
                    if (IsApplied(id))
                    {
                        _divergences++;
                        problem = $"member {peer} has update {id} at history position {_history.Length}, which this member holds earlier; this is a bug in the replicated collection: please report it";
                        break;
                    }
                    Apply(id, entries[i]);
                }
            }
            else if (want && first < peerRetainedFrom && peerLength > _history.Length)
            {
                _tooFarBehind++;
                problem = $"member {peer} no longer keeps history position {first}, which this member lacks (it keeps from {peerRetainedFrom}); " +
                    "gossip cannot repair this member, but its own deliveries still bring the updates";
            }
            long gained = _history.Length - before;
            if (gained > 0)
            {
                _repairs++;
                _repairedEntries += gained;
                repaired = new HistoryRepairedEventArgs(peer, before, gained);
                ApplyMerged(); // lists waiting on an update the repair brought move on
            }
            _behindTarget = peerLength > _history.Length ? Math.Max(_behindTarget, peerLength) : 0;
            more = gained > 0 && peerLength > _history.Length;
            _history.DropBelow(Floor());
        }
        if (problem != null) _group.Runtime.ReportRuntimeProblem($"group '{_group.Name}': {problem}");
        if (repaired != null) Repaired?.Invoke(repaired);
        return true;
    }

    /// <summary>Delivery thread: a member's pull. Only the member it names answers; the others pass.</summary>
    private void OnPull(string target, string requester, long length, long chain, bool wantEntries)
    {
        if (target != _self)
        {
            _group.NullReply();
            return;
        }
        object?[] reply;
        lock (_gate)
        {
            if (requester.Length > 0) _known[requester] = Math.Max(_known.GetValueOrDefault(requester), length);
            bool agrees = !_history.TryChainAt(length, out long mine) || mine == chain;
            ReadOnlySpan<RetainedHistory<TOp>.Entry> entries = wantEntries && agrees ? _history.Range(length, MaxRepairBatch) : [];
            var issuers = new string[entries.Length];
            var sequences = new long[entries.Length];
            var ops = new TOp[entries.Length];
            for (int i = 0; i < entries.Length; i++)
            {
                issuers[i] = entries[i].Id.Issuer;
                sequences[i] = entries[i].Id.Sequence;
                ops[i] = entries[i].Op;
            }
            reply = [_history.Length, agrees, _history.Start, length, issuers, sequences, .. _codec.Encode(ops)];
            _history.DropBelow(Floor());
        }
        _group.Reply(reply);
    }

    /// <summary>
    /// The oldest history position a member of the view may still lack: the least length heard from
    /// each (a member not heard from yet counts from where everyone stood when it joined).
    /// </summary>
    private long Floor()
    {
        long floor = _history.Length;
        foreach (long length in _known.Values) floor = Math.Min(floor, length);
        return floor;
    }

    /// <summary>View install: forget departed members; a joiner holds at least what everyone held then (its state came from one of them).</summary>
    private void OnMembersChanged(View view)
    {
        // A leaver's updates can no longer arrive (a message is delivered in its view or nowhere).
        foreach (Address leaver in view.Leavers) _appliedThrough.Remove(leaver.ToString());
        var members = view.Members.Select(m => m.ToString()).ToHashSet(StringComparer.Ordinal);
        foreach (string gone in _known.Keys.Where(k => !members.Contains(k)).ToList()) _known.Remove(gone);
        long floor = Floor();
        foreach (string member in members)
        {
            if (member != _self && !_known.ContainsKey(member)) _known[member] = floor;
        }
    }
}
