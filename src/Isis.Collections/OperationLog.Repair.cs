using System.Collections;
using Isis.Core.Collections;

namespace Isis.Collections;

// OperationLog, part 2 of 3: gossip reconciliation on a real group. Every GossipInterval the gossip
// task sends the model's pull (length, chain, and whether it wants entries) to a random peer, as a
// Query that only the named peer answers (its reply comes back point to point), and hands the reply
// to the model, which applies what extends the history. The application hears of each repair.
internal sealed partial class OperationLog<TOp>
{
    internal const int PullCode = 31_020;

    /// <summary>At most this many history entries travel in one repair reply (a reply stays well below the message size limit).</summary>
    internal const int MaxRepairBatch = 512;

    private readonly IOperationCodec<TOp> _codec;
    private int _repairLoopStarted;
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
                    Trailing = _log.Trailing,
                    Waiting = _waiters.Count,
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
            await Task.Delay(_options.GossipInterval).ConfigureAwait(false);
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

    /// <summary>One round: compare with a random peer, and pull from it while this member trails it (at most 64 batches; the next round goes on).</summary>
    private void GossipRound()
    {
        View? view = _group.GetView();
        if (view == null || view.GetMyRank() < 0) return;
        Address self = view.Members[view.GetMyRank()];
        Address[] peers = view.Members.Where(m => m != self).ToArray();
        if (peers.Length == 0) return;
        lock (_gate) _gossipRounds++;
        Address peer = peers[Random.Shared.Next(peers.Length)];
        for (int i = 0; i < 64 && Pull(peer); i++)
        {
        }
    }

    /// <summary>One exchange with <paramref name="peer"/>; true if entries came and the peer holds more.</summary>
    private bool Pull(Address peer)
    {
        PullRequest pull;
        string self;
        long askedAt = System.Diagnostics.Stopwatch.GetTimestamp();
        lock (_gate)
        {
            pull = _log.MakePull();
            self = _log.Self ?? "";
        }
        // The reply's values, in this order: the responder's length, whether its chain agrees, the
        // oldest position it keeps, the position of the first entry, the lengths it has heard of
        // (members, lengths), the entries' issuers and sequence numbers, then the updates in the codec's arrays.
        var header = new IList[]
        {
            new List<long>(), new List<bool>(), new List<long>(), new List<long>(), new List<string[]>(), new List<long[]>(), new List<string[]>(), new List<long[]>(),
        };
        IList[] ops = _codec.NewReplyLists();
        object?[] request =
        [
            new QueryTimeout(_options.GossipInterval * 4, QueryTimeoutAction.NullReply), PullCode, peer.ToString(), self, pull.Length, pull.Chain, pull.WantEntries,
            pull.Heard.Select(h => h.Member).ToArray(), pull.Heard.Select(h => h.Length).ToArray(), new EOLMarker(), .. header, .. ops,
        ];
        if (_group.Query(1, request) < 1) return false; // no answer in time: the next round asks a peer again

        string[] heardMembers = (string[])header[4][0]!;
        long[] heardLengths = (long[])header[5][0]!;
        string[] issuers = (string[])header[6][0]!;
        long[] sequences = (long[])header[7][0]!;
        TOp[]? entries = _codec.Decode(ops, 0);
        if (entries == null || entries.Length != issuers.Length || issuers.Length != sequences.Length || heardMembers.Length != heardLengths.Length)
        {
            throw new InvalidOperationException($"member {peer} sent a repair whose arrays do not line up");
        }
        var reply = new PullReply<TOp>((long)header[0][0]!, (bool)header[1][0]!, (long)header[2][0]!, (long)header[3][0]!,
            issuers.Select((issuer, i) => new UpdateId(issuer, sequences[i])).ToArray(), entries, Heard(heardMembers, heardLengths));

        RepairOutcome outcome;
        lock (_gate)
        {
            outcome = _log.OnPullReply(peer.ToString(), reply);
            if (reply.Agrees) PeerHeld(reply.Length, askedAt);
            if (outcome.Gained > 0)
            {
                _repairs++;
                _repairedEntries += outcome.Gained;
            }
            if (outcome.Divergence != null) _divergences++;
        }
        if (outcome.TooFarBehind != null) _group.Runtime.ReportRuntimeProblem($"group '{_group.Name}': {outcome.TooFarBehind}");
        if (outcome.Divergence != null) _group.Runtime.ReportRuntimeProblem($"group '{_group.Name}': {outcome.Divergence}; this is a bug in the replicated collection: please report it");
        if (outcome.Gained > 0) Repaired?.Invoke(new HistoryRepairedEventArgs(peer, outcome.Before, outcome.Gained));
        return outcome.More;
    }

    /// <summary>Delivery thread: a member's pull. Only the member it names answers; the others pass.</summary>
    private void OnPull(string target, string requester, long length, long chain, bool wantEntries, string[] heardMembers, long[] heardLengths)
    {
        PullReply<TOp>? reply = null;
        lock (_gate)
        {
            if (target == _log.Self && heardMembers.Length == heardLengths.Length)
            {
                reply = _log.AnswerPull(requester, new PullRequest(length, chain, wantEntries, Heard(heardMembers, heardLengths)), MaxRepairBatch);
            }
        }
        if (reply == null)
        {
            _group.NullReply();
            return;
        }
        _group.Reply(
        [
            reply.Length, reply.Agrees, reply.RetainedFrom, reply.First, reply.Heard.Select(h => h.Member).ToArray(), reply.Heard.Select(h => h.Length).ToArray(),
            reply.Ids.Select(i => i.Issuer).ToArray(), reply.Ids.Select(i => i.Sequence).ToArray(), .. _codec.Encode(reply.Ops),
        ]);
    }

    private static MemberLength[] Heard(string[] members, long[] lengths) => members.Select((m, i) => new MemberLength(m, lengths[i])).ToArray();
}
