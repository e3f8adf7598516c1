using Isis.Core.Common;
using Isis.Core.Wire;

namespace Isis.Core.Bft;

/// <summary>
/// PBFT's view change: a backup that waits too long for a request it knows of to execute suspects
/// the primary and moves to the next view, whose primary is the next replica.
/// </summary>
/// <remarks>
/// <list type="number">
/// <item>The backup stops taking part in the old view's agreement and sends a signed VIEW-CHANGE:
/// its stable checkpoint, its later checkpoints, the requests it prepared (with the view, and the
/// request itself) and those it pre-prepared. Claims, not proofs: MACs cannot be passed on, so the
/// new view is computed from 2f+1 claims by rules that a faulty f of them cannot bend (Castro and
/// Liskov, TOCS 2002, section 4.5). The signature is what lets the new primary pass the claims on.</item>
/// <item>The new primary, once it holds 2f+1 view changes from which <see cref="Decide"/> can decide,
/// sends them as NEW-VIEW. Every replica recomputes the decision itself, so a faulty new primary can
/// only choose which 2f+1 claims to send, not what follows from them.</item>
/// <item>The decision: the checkpoint to start from (one f+1 claim with the same digest and that
/// 2f+1 are not beyond), then, for each later sequence number, the request that may have committed
/// there (one prepared in view v that 2f+1 claims do not contradict and f+1 pre-prepared in a view
/// of v or later), or the null request where 2f+1 prepared nothing.</item>
/// <item>Each replica then pre-prepares the decision in the new view and runs prepare and commit
/// again; what it executed already it does not execute twice.</item>
/// </list>
/// A replica that hears f+1 view changes for later views joins the smallest: f+1 include a correct
/// replica, so it is not led by faulty ones alone. A view that does not start in time gives way to
/// the next, with twice the time.
/// </remarks>
internal sealed partial class PbftReplica
{
    private bool _viewActive = true;
    private long _lastActiveView;
    private long _lastProgressAt;
    private long _viewChangeStartedAt;
    private readonly HashSet<(bool Completion, int Who, long Number)> _waitingRequests = new(); // known, not executed: what the timer watches
    private readonly Dictionary<long, (long View, byte[] Digest, byte[] Packet)> _prepared = new();
    private readonly Dictionary<long, List<(long View, byte[] Digest)>> _prePrepared = new();
    private readonly Dictionary<long, Dictionary<int, ViewChangeClaim>> _viewChanges = new();
    private byte[]? _newView; // the NEW-VIEW this replica sent as primary, for those that missed it
    private byte[]? _ownViewChange; // sent again while the view does not start
    private readonly PacketWriter _writer = new(); // the NEW-VIEW's, and the fetch replies

    /// <summary>View changes this replica started (timeouts and joins).</summary>
    public long ViewChangesStarted { get; private set; }

    /// <summary>One replica's signed claims in a view change.</summary>
    internal sealed record ViewChangeClaim(
        int Replica,
        long View,
        long Stable,
        byte[] StableDigest,
        List<(long Seq, byte[] Digest)> Checkpoints,
        List<(long Seq, long View, byte[] Digest, byte[] Packet)> Prepared,
        List<(long Seq, long View, byte[] Digest)> PrePrepared,
        byte[] Signed);

    /// <summary>The decision of a new view: the checkpoint to start from, then each sequence number's request (an empty packet: the null request).</summary>
    internal sealed record NewViewDecision(long Stable, byte[] StableDigest, List<(long Seq, byte[] Digest, byte[] Packet)> Requests);

    private long ViewChangeTimeout(long view) => _options.ViewChangeTimeout << (int)Math.Min(view - _lastActiveView, 6);

    /// <summary>When this replica gives up on the primary (a request waits) or on the view it moves to.</summary>
    private long ViewChangeDeadline =>
        !_viewActive ? _viewChangeStartedAt + ViewChangeTimeout(View)
        : !IsPrimary && _waitingRequests.Count > 0 ? _lastProgressAt + _options.ViewChangeTimeout
        : long.MaxValue;

    private void Waiting((bool, int, long) key)
    {
        if (_waitingRequests.Count == 0) _lastProgressAt = _outbox.StepTime; // the timer starts with the first request it watches
        _waitingRequests.Add(key);
    }

    private void PrePrepared(long seq, Slot slot)
    {
        if (!_prePrepared.TryGetValue(seq, out var list)) _prePrepared[seq] = list = new();
        list.RemoveAll(e => e.Digest.AsSpan().SequenceEqual(slot.Digest));
        list.Add((slot.View, slot.Digest!));
    }

    private void TimeOut(long now)
    {
        if (_viewActive && IsPrimary) return;
        StartViewChange(View + 1, now);
    }

    private void StartViewChange(long view, long now)
    {
        if (view <= View) return;
        ViewChangesStarted++;
        View = view;
        _viewActive = false;
        _viewChangeStartedAt = now;
        _newView = null;
        foreach (long old in _viewChanges.Keys.Where(v => v < view).ToList()) _viewChanges.Remove(old);
        byte[] signed = ViewChangeBody(view);
        _ownViewChange = signed;
        Multicast(BftKind.ViewChange, signed);
        OnViewChangeClaim(ParseViewChange(signed)!);
    }

    private byte[] ViewChangeBody(long view) => EncodeViewChange(_keys, Index, view, StableCheckpoint, _stableDigest,
        [.. _ownCheckpoints.Where(c => c.Key >= StableCheckpoint).OrderBy(c => c.Key).Select(c => (c.Key, c.Value))],
        [.. _prepared.Where(p => p.Key > StableCheckpoint).OrderBy(p => p.Key).Select(p => (p.Key, p.Value.View, p.Value.Digest, p.Value.Packet))],
        [.. _prePrepared.Where(p => p.Key > StableCheckpoint).OrderBy(p => p.Key).SelectMany(p => p.Value.Select(e => (p.Key, e.View, e.Digest)))]);

    /// <summary>A replica's signed view change: its claims, then its signature over them.</summary>
    internal static byte[] EncodeViewChange(BftKeys keys, int replica, long view, long stable, byte[] stableDigest,
        List<(long Seq, byte[] Digest)> checkpoints, List<(long Seq, long View, byte[] Digest, byte[] Packet)> prepared, List<(long Seq, long View, byte[] Digest)> prePrepared)
    {
        PacketWriter w = new PacketWriter().BeginRecord().I32(replica).I64(view).I64(stable).Tail(stableDigest).I32(checkpoints.Count);
        foreach (var (seq, digest) in checkpoints) w.I64(seq).Tail(digest);
        w.I32(prepared.Count);
        foreach (var (seq, v, digest, packet) in prepared) w.I64(seq).I64(v).Tail(digest).Bytes(packet);
        w.I32(prePrepared.Count);
        foreach (var (seq, v, digest) in prePrepared) w.I64(seq).I64(v).Tail(digest);
        byte[] unsigned = w.FinishRecord();
        return [.. unsigned, .. keys.Sign(unsigned)];
    }

    private ViewChangeClaim? ParseViewChange(ReadOnlySpan<byte> signed) => DecodeViewChange(signed, _keys, _deployment, _service, _options.CheckpointInterval);

    /// <summary>A view change's claims, if it parses, its claims are well formed and its signature is its replica's; null otherwise.</summary>
    internal static ViewChangeClaim? DecodeViewChange(ReadOnlySpan<byte> signed, BftKeys keys, BftDeployment deployment, BftService service, int checkpointInterval)
    {
        if (signed.Length < BftKeys.SignatureSize) return null;
        ReadOnlySpan<byte> unsigned = signed[..^BftKeys.SignatureSize];
        var r = new WireReader(unsigned);
        int replica = r.I32();
        long view = r.I64(), stable = r.I64();
        byte[] stableDigest = Digest(ref r);
        var checkpoints = new List<(long, byte[])>();
        for (int i = 0, n = r.Count(8 + BftWire.DigestSize); i < n && r.Ok; i++) checkpoints.Add((r.I64(), Digest(ref r)));
        var prepared = new List<(long, long, byte[], byte[])>();
        for (int i = 0, n = r.Count(16 + BftWire.DigestSize + 4); i < n && r.Ok; i++)
        {
            long seq = r.I64(), v = r.I64();
            byte[] digest = Digest(ref r);
            byte[] packet = r.Bytes();
            // The request must be the one the digest names: the new primary takes it from here.
            if (!Proposal.TryReadBatch(packet, deployment, service, null, out BatchMeaning m) || !m.Digest.AsSpan().SequenceEqual(digest) || v >= view || seq <= stable) r.Fail(); // claims of earlier views, above its checkpoint
            prepared.Add((seq, v, digest, packet));
        }
        var prePrepared = new List<(long, long, byte[])>();
        for (int i = 0, n = r.Count(16 + BftWire.DigestSize); i < n && r.Ok; i++)
        {
            var entry = (Seq: r.I64(), View: r.I64(), Digest: Digest(ref r));
            if (entry.View >= view || entry.Seq <= stable) r.Fail();
            prePrepared.Add(entry);
        }
        if (!r.Complete || replica < 0 || replica >= service.N || stable < 0 || stable % checkpointInterval != 0) return null;
        if (!keys.VerifySignature(service.Replicas[replica], unsigned, signed[^BftKeys.SignatureSize..])) return null;
        return new ViewChangeClaim(replica, view, stable, stableDigest, checkpoints, prepared, prePrepared, signed.ToArray());
    }

    private static byte[] Digest(ref WireReader r)
    {
        var d = new byte[BftWire.DigestSize];
        for (int i = 0; i < d.Length; i++) d[i] = r.U8();
        return d;
    }

    private bool OnViewChange(int from, ReadOnlySpan<byte> body)
    {
        if (ParseViewChange(body) is not { } claim || claim.Replica != from) return false;
        OnViewChangeClaim(claim);
        return true;
    }

    private void OnViewChangeClaim(ViewChangeClaim claim)
    {
        if (claim.View < View) return;
        if (claim.View == View && _viewActive)
        {
            // It missed this view's start: the primary sends it again.
            if (IsPrimary && _newView != null && claim.Replica != Index) Send(_service.Replicas[claim.Replica], _newView, BftKind.NewView);
            return;
        }
        if (!_viewChanges.TryGetValue(claim.View, out var claims)) _viewChanges[claim.View] = claims = new();
        claims[claim.Replica] = claim;

        // f+1 replicas want a later view: at least one is correct, so this replica goes too, to the smallest.
        var later = _viewChanges.Where(v => v.Key > View).SelectMany(v => v.Value.Keys.Select(r => (Replica: r, View: v.Key))).ToList();
        if (later.Select(l => l.Replica).Distinct().Count() >= _service.F + 1) StartViewChange(later.Min(l => l.View), _outbox.StepTime);
        TryStartNewView();
    }

    /// <summary>As the new view's primary: once 2f+1 claims decide, they go out as NEW-VIEW, and the view starts here.</summary>
    private void TryStartNewView()
    {
        if (_viewActive || !IsPrimary || !_viewChanges.TryGetValue(View, out var claims) || claims.Count < _service.Quorum) return;
        if (Decide([.. claims.Values]) is not { } decision) return;
        PacketWriter w = _writer.BeginRecord().I64(View).I32(claims.Count);
        foreach (ViewChangeClaim c in claims.Values.OrderBy(c => c.Replica)) w.Bytes(c.Signed);
        _newView = w.FinishRecord();
        Multicast(BftKind.NewView, _newView);
        Install(decision);
    }

    private bool OnNewView(int from, ReadOnlySpan<byte> body)
    {
        var r = new WireReader(body);
        long view = r.I64();
        var claims = new List<ViewChangeClaim>();
        for (int i = 0, n = r.Count(4); i < n && r.Ok; i++)
        {
            byte[] signed = r.Bytes();
            if (!r.Ok) break;
            if (ParseViewChange(signed) is not { } claim || claim.View != view) return false;
            claims.Add(claim);
        }
        if (!r.Complete || from != (int)(view % _service.N) || view < View || view == View && _viewActive) return true;
        if (claims.Select(c => c.Replica).Distinct().Count() != claims.Count || claims.Count < _service.Quorum) return false;
        // The decision follows from the claims alone: recomputed here, not taken from the primary.
        if (Decide(claims) is not { } decision) return false;
        View = view;
        Install(decision);
        return true;
    }

    /// <summary>
    /// The new view that 2f+1 claims determine (Castro and Liskov's rules A and B), or null if
    /// some sequence number cannot be decided from them yet.
    /// </summary>
    internal NewViewDecision? Decide(List<ViewChangeClaim> claims)
    {
        int f = _service.F, quorum = _service.Quorum;
        bool dropPrepared = (_options.Mutations & BftMutations.NewViewDropsPrepared) != 0;
        // The checkpoint: the latest one f+1 claim with the same digest (a correct replica among
        // them) and 2f+1 are not beyond (their logs cover what follows it).
        (long Seq, byte[] Digest)? start = null;
        foreach (var (seq, digest) in claims.SelectMany(c => c.Checkpoints.Append((c.Stable, c.StableDigest))).OrderByDescending(c => c.Item1))
        {
            if (claims.Count(c => c.Stable == seq && c.StableDigest.AsSpan().SequenceEqual(digest)
                    || c.Checkpoints.Any(k => k.Seq == seq && k.Digest.AsSpan().SequenceEqual(digest))) >= f + 1
                && claims.Count(c => c.Stable <= seq) >= quorum)
            {
                start = (seq, digest);
                break;
            }
        }
        if (start is not { } h) return null;
        long last = claims.SelectMany(c => c.Prepared.Select(p => p.Seq)).DefaultIfEmpty(h.Seq).Max();
        var requests = new List<(long, byte[], byte[])>();
        for (long n = h.Seq + 1; n <= last; n++)
        {
            (byte[] Digest, byte[] Packet)? chosen = null;
            foreach (var (_, v, d, packet) in claims.SelectMany(c => c.Prepared.Where(p => p.Seq == n && !dropPrepared)).OrderByDescending(p => p.View))
            {
                // A1: 2f+1 claims do not contradict it; A2: f+1 pre-prepared it in view v or later.
                int consistent = claims.Count(c => c.Stable < n && c.Prepared.Where(p => p.Seq == n).All(p => p.View < v || p.View == v && p.Digest.AsSpan().SequenceEqual(d)));
                int prePrepared = claims.Count(c => c.PrePrepared.Any(p => p.Seq == n && p.View >= v && p.Digest.AsSpan().SequenceEqual(d)));
                bool skipA2 = (_options.Mutations & BftMutations.NewViewWithoutPrePrepareQuorum) != 0;
                if (consistent >= quorum && (prePrepared >= f + 1 || skipA2))
                {
                    chosen = (d, packet);
                    break;
                }
            }
            if (chosen is null)
            {
                // B: 2f+1 prepared nothing here, so nothing committed here: the null request fills it.
                if (!dropPrepared && claims.Count(c => c.Stable < n && c.Prepared.All(p => p.Seq != n)) < quorum) return null;
                chosen = (BftWire.NullDigest, []);
            }
            requests.Add((n, chosen.Value.Digest, chosen.Value.Packet));
        }
        return new NewViewDecision(h.Seq, h.Digest, requests);
    }

    /// <summary>Starts the new view from its decision: catches up to its checkpoint if behind, then pre-prepares its requests and runs agreement on them again.</summary>
    private void Install(NewViewDecision decision)
    {
        _viewActive = true;
        _lastActiveView = View;
        _lastProgressAt = _outbox.StepTime;
        foreach (long old in _viewChanges.Keys.Where(v => v <= View).ToList()) _viewChanges.Remove(old);
        _slots.Clear();
        _pending.Clear();
        _assigned.Clear();
        if (decision.Stable > LastExecuted)
        {
            _certified = (decision.Stable, decision.StableDigest);
            Fetch();
        }
        else if (decision.Stable > StableCheckpoint && _ownCheckpoints.TryGetValue(decision.Stable, out byte[]? own))
        {
            Invariant.Check(own.AsSpan().SequenceEqual(decision.StableDigest), $"a new view starts from the history a correct replica holds: view {View}, checkpoint {decision.Stable}");
            MakeStable(decision.Stable, own);
        }
        long highest = decision.Stable;
        foreach (var (seq, digest, packet) in decision.Requests)
        {
            highest = seq;
            if (seq <= StableCheckpoint) continue;
            if (seq <= LastExecuted && _executedRequests.TryGetValue(seq, out byte[]? executed))
            {
                Invariant.Check(Proposal.TryReadBatch(executed, _deployment, _service, null, out BatchMeaning had) && had.Digest.AsSpan().SequenceEqual(digest), $"a new view keeps what a correct replica executed: view {View}, seq {seq}");
            }
            Slot slot = SlotAt(seq);
            slot.View = View;
            slot.Digest = digest;
            slot.Proposal = packet;
            PrePrepared(seq, slot);
            if (Proposal.TryReadBatch(packet, _deployment, _service, null, out BatchMeaning meaning))
            {
                foreach (ProposalMeaning input in meaning.Items) _assigned.Add(input.Key);
            }
            if (!IsPrimary)
            {
                slot.Prepares[Index] = (View, digest);
                slot.SentAt = _outbox.StepTime;
                Multicast(BftKind.Prepare, BftWire.Vote(View, seq, digest));
            }
        }
        _lastAssigned = Math.Max(highest, Math.Max(StableCheckpoint, LastExecuted));
        foreach (var (seq, slot) in _slots.ToList()) TryAdvance(seq, slot);
        Progressed(_outbox.StepTime);
    }
}
