using System.Buffers.Binary;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Bft;

/// <summary>
/// Replicated services calling replicated services: the Perpetual algorithm (Pallemulle and
/// Goldman, WUCSE-2007-53, section 2.1), on PBFT.
/// </summary>
/// <remarks>
/// <list type="number">
/// <item>The application of every correct replica of the caller makes the same call at the same
/// point of its (agreed) history (<see cref="Call"/>): each replica sends its copy, tagged for every
/// target replica, to the target's primary (the one whose bundle of replies came last).</item>
/// <item>The target orders a call once f_c+1 identical copies from distinct caller replicas arrived
/// (at least one from a correct replica): its primary proposes the certificate, and every target
/// replica checks it for itself before it prepares it.</item>
/// <item>Every target replica executes it and sends its reply, tagged for every caller replica, to
/// its service's responder, the primary. The responder passes f_t+1 matching replies on, whole, to
/// every caller replica (<see cref="BftKind.ReplyBundle"/>), and reports the replies that differ.
/// So a call costs n_c copies, n_t replies and n_c bundles rather than n_c x n_t of each.</item>
/// <item>A caller replica with f_t+1 identical replies (each checked for its own tag) holds a
/// certificate; the caller's primary orders it, so every caller replica gets the result at the same
/// point of its order (<see cref="BftCallCompleted"/>). A backup hands its certificate to the primary
/// only if the call is still pending when its retry time comes.</item>
/// <item>A faulty target primary or responder cannot stall a call: a caller replica whose call is
/// not done when its retry time comes sends its copy to every target replica. The backups then hold
/// the call and change the view if it is not ordered; a replica that executed it answers that caller
/// replica directly. The retry time is twice the calls' smoothed completion time (at least the
/// retry interval, at most the view-change timeout), doubling at each retry up to the longest retry period.</item>
/// <item>A caller replica that waits past the call's timeout votes to abort it; f_c+1 votes are
/// ordered like a reply, and whichever of the reply and the abort is ordered first decides the call
/// at every caller replica. A compromised target (more than f_t faulty) can send different
/// certificates to different caller replicas, but only one is ordered: the caller stays consistent.</item>
/// </list>
/// </remarks>
internal sealed partial class PbftReplica
{
    private long _callsIssued;
    private readonly Dictionary<long, PendingCall> _calls = new(); // this service's calls not yet completed
    private readonly HashSet<(int Target, long Number)> _completedCalls = new();
    private readonly Dictionary<(int Caller, long Number), Dictionary<int, byte[]>> _callCopies = new(); // as target
    private readonly Dictionary<(int Target, long Number), Dictionary<int, byte[]>> _replyParts = new(); // as caller
    private readonly Dictionary<(int Target, long Number), Dictionary<int, byte[]>> _abortVotes = new();
    private readonly Dictionary<int, int> _targetPrimary = new(); // by target service: the index of the replica its last bundle came from
    private readonly Dictionary<(int Caller, long Number), Responding> _responding = new(); // as the target's responder
    private long _callTime; // the smoothed time from a call to its completion at this replica, microseconds

    private sealed class PendingCall(BftService target, byte[] packet, long deadline, long retryAt, long issuedAt)
    {
        public readonly BftService Target = target;
        public readonly byte[] Packet = packet;
        public readonly long Deadline = deadline;
        public readonly long IssuedAt = issuedAt;
        public long RetryAt = retryAt; // the copies go out again then, each time twice as late (a slow target is not flooded)
        public int Retries;
        public byte[]? Certificate; // the replies or abort votes handed to the primary, sent again until ordered
        public bool VotedAbort;
    }

    /// <summary>The replies to one call gathered by the responder, and the body f+1 of them agreed on once they did.</summary>
    private sealed class Responding(long since)
    {
        public readonly Dictionary<int, byte[]> Replies = new();
        public readonly long Since = since;
        public byte[]? Agreed;
    }

    /// <summary>
    /// When a call's copies go out again: twice its usual completion time, never sooner than the retry
    /// interval, and never later than the view-change timeout (a dead target primary costs at most
    /// that much more than a view change, whatever the completion times were while things were slow).
    /// </summary>
    private long CallRetry => Math.Clamp(2 * _callTime, _options.RetryInterval, Math.Max(_options.RetryInterval, _options.ViewChangeTimeout));

    /// <summary>
    /// Calls service <paramref name="target"/> with <paramref name="operation"/>: its number, which the
    /// <see cref="BftCallCompleted"/> names. Every correct replica must call in the same order at
    /// the same point of its history (from the handling of an ordered event): the application is
    /// deterministic. <paramref name="timeout"/> (microseconds; 0: never) bounds the wait, after which
    /// the replicas agree to abort it.
    /// </summary>
    public long Call(string target, byte[] operation, long timeout, long now)
    {
        _outbox.StepTime = now;
        BftService service = _deployment.Service(target);
        if (service == _service) throw new ArgumentException($"service {target} calls itself: order the work in its own loop instead");
        long number = ++_callsIssued;
        byte[] packet = BftWire.Seal(_keys, BftKind.Call, Proposal.CallBody(_deployment.ServiceId(_service), number, operation), service.Replicas);
        _calls[number] = new PendingCall(service, packet, timeout > 0 ? now + timeout : long.MaxValue, now + CallRetry, now);
        int primary = _targetPrimary.GetValueOrDefault(_deployment.ServiceId(service));
        Send(service.Replicas[primary], packet);
        Progressed(now);
        return number;
    }

    /// <summary>As target: one caller replica's copy of a call.</summary>
    private bool OnCall(ReadOnlySpan<byte> packet, int sender, ReadOnlySpan<byte> body)
    {
        if (_deployment.ServiceOf(sender) is not { } caller || caller == _service
            || !BftWire.TryReadRequest(body, out int callerId, out long number, out _) || callerId != _deployment.ServiceId(caller)) return false;
        ClientRecord record = ClientAt(callerId);
        if (record.Executed(number))
        {
            // Executed already: that replica's call is overdue (a reply or bundle lost, or a faulty responder): it gets our reply directly.
            if (record.Replies.TryGetValue(number, out byte[]? result) && result != null) Send(sender, CallReplyPacket(callerId, number, result));
            return true;
        }
        if (!_callCopies.TryGetValue((callerId, number), out var copies)) _callCopies[(callerId, number)] = copies = new();
        copies[sender] = packet.ToArray();
        ProposeCertificate(ProposalKind.Call, copies.Values, matchingNeeded: caller.F + 1);
        return true;
    }

    /// <summary>As caller: one target replica's reply to a call of ours.</summary>
    private bool OnCallReply(ReadOnlySpan<byte> packet, int sender, ReadOnlySpan<byte> body)
    {
        if (_deployment.ServiceOf(sender) is not { } target || target == _service || body.Length < 16
            || BinaryPrimitives.ReadInt32LittleEndian(body) != _deployment.ServiceId(_service)) return false;
        int targetId = _deployment.ServiceId(target);
        long number = BinaryPrimitives.ReadInt64LittleEndian(body[8..]);
        if (_completedCalls.Contains((targetId, number))) return true;
        if (!_replyParts.TryGetValue((targetId, number), out var parts)) _replyParts[(targetId, number)] = parts = new();
        parts[sender] = packet.ToArray();
        ProposeCertificate(ProposalKind.CallReply, parts.Values, matchingNeeded: target.F + 1);
        return true;
    }

    /// <summary>A reply to a call from this service, tagged for every caller replica.</summary>
    private byte[] CallReplyPacket(int caller, long number, byte[] result) =>
        BftWire.Seal(_keys, BftKind.CallReply, Proposal.ReplyBody(caller, _deployment.ServiceId(_service), number, result), _deployment.ServiceById(caller)!.Replicas);

    private static byte[] WriteBundle(IReadOnlyCollection<byte[]> replies)
    {
        PacketWriter w = new PacketWriter().BeginRecord().I32(replies.Count);
        foreach (byte[] reply in replies) w.Bytes(reply);
        return w.FinishRecord();
    }

    /// <summary>
    /// Replies passed on whole: as the responder, one from a replica of this service; as a caller,
    /// f+1 from the target's responder, each checked for its own tag as if it came directly.
    /// </summary>
    private bool OnReplyBundle(int sender, ReadOnlySpan<byte> body)
    {
        if (_deployment.ServiceOf(sender) is not { } from) return false;
        var r = new WireReader(body);
        int n = r.Count(4);
        if (!r.Ok || n < 1 || n > from.N) return false;
        var replies = new List<byte[]>(n);
        for (int i = 0; i < n && r.Ok; i++) replies.Add(r.Bytes());
        if (!r.Complete) return false;
        if (from == _service)
        {
            byte[] reply = replies[0];
            return n == 1 && IsPrimary && reply.Length > 1 && reply[1] == (byte)BftKind.CallReply && BftWire.ClaimedSender(reply) == sender && Respond(reply, sender);
        }
        bool allValid = true;
        foreach (byte[] reply in replies)
        {
            if (BftWire.TryOpen(_keys, reply, out BftKind kind, out int replica, out ReadOnlySpan<byte> replyBody) && kind == BftKind.CallReply && _deployment.ServiceOf(replica) == from)
                allValid &= OnCallReply(reply, replica, replyBody);
            else allValid = false;
        }
        // Its sender is the target's responder, so its primary: the next calls go there first. Only a
        // whole bundle says so (f+1 valid replies, which only the replica they were sent to holds), so a
        // faulty replica cannot draw the first copies to itself with bundles of its own.
        if (allValid && n >= from.F + 1) _targetPrimary[_deployment.ServiceId(from)] = from.IndexOf(sender);
        return allValid;
    }

    /// <summary>
    /// As the responder: one target replica's reply (its tags are for the caller's replicas, which
    /// check them). Once f+1 replies match, they go to every caller replica in one bundle; replies
    /// that differ, before or after, are reported (<see cref="BftDivergence"/>).
    /// </summary>
    private bool Respond(byte[] reply, int from)
    {
        ReadOnlySpan<byte> body = BftWire.BodyOf(reply);
        if (body.Length < 16) return false;
        int callerId = BinaryPrimitives.ReadInt32LittleEndian(body);
        long number = BinaryPrimitives.ReadInt64LittleEndian(body[8..]);
        if (BinaryPrimitives.ReadInt32LittleEndian(body[4..]) != _deployment.ServiceId(_service) || number <= 0
            || _deployment.ServiceById(callerId) is not { } caller || caller == _service) return false;
        if (!_responding.TryGetValue((callerId, number), out Responding? call)) _responding[(callerId, number)] = call = new Responding(_outbox.StepTime);
        if (call.Agreed != null)
        {
            if (!body.SequenceEqual(call.Agreed)) ReportReplyDivergence(from, number);
            return true;
        }
        call.Replies[from] = reply;
        byte[] mine = body.ToArray();
        byte[][] matching = [.. call.Replies.Values.Where(p => BftWire.BodyOf(p).SequenceEqual(mine))];
        if (matching.Length < _service.F + 1) return true;
        call.Agreed = mine;
        foreach (var (replica, other) in call.Replies)
        {
            if (!BftWire.BodyOf(other).SequenceEqual(body)) ReportReplyDivergence(replica, number);
        }
        byte[] bundle = BftWire.Seal(_keys, BftKind.ReplyBundle, WriteBundle(matching[..(_service.F + 1)]), caller.Replicas);
        foreach (int p in caller.Replicas) Send(p, bundle);
        return true;
    }

    private void ReportReplyDivergence(int replica, long number)
    {
        DivergentMessages++;
        _outbox.Add(new BftDivergence(_service.Name, _service.Name, _service.IndexOf(replica), number, AsReply: true));
    }

    /// <summary>An abort vote of another replica of this service.</summary>
    private bool OnAbortVote(ReadOnlySpan<byte> packet, int from, ReadOnlySpan<byte> body)
    {
        if (body.Length < 16) return false;
        int targetId = BinaryPrimitives.ReadInt32LittleEndian(body[4..]);
        long number = BinaryPrimitives.ReadInt64LittleEndian(body[8..]);
        if (_completedCalls.Contains((targetId, number))) return true;
        if (!_abortVotes.TryGetValue((targetId, number), out var votes)) _abortVotes[(targetId, number)] = votes = new();
        votes[_service.Replicas[from]] = packet.ToArray();
        ProposeCertificate(ProposalKind.CallAbort, votes.Values, matchingNeeded: _service.F + 1);
        return true;
    }

    /// <summary>A backup's certificate for its primary to order.</summary>
    private bool OnSubmit(ReadOnlySpan<byte> proposal)
    {
        if (!Proposal.TryRead(proposal, _deployment, _service, _keys, out ProposalMeaning meaning) || meaning.Kind is not (ProposalKind.CallReply or ProposalKind.CallAbort)) return false;
        Propose(proposal.ToArray(), meaning);
        return true;
    }

    /// <summary>
    /// Once f+1 of the packets gathered for one call have identical bodies, they are a certificate:
    /// the primary orders it; a backup watches it (its timer) and, for a reply or an abort of its own
    /// service's call, hands it to the primary, which may not have it.
    /// </summary>
    private void ProposeCertificate(ProposalKind kind, IEnumerable<byte[]> packets, int matchingNeeded)
    {
        foreach (var group in packets.GroupBy(p => Convert.ToHexString(BftWire.BodyOf(p))))
        {
            if (group.Count() < matchingNeeded) continue;
            byte[] proposal = Proposal.OfPackets(kind, [.. group.Take(matchingNeeded)]);
            if (!Proposal.TryRead(proposal, _deployment, _service, null, out ProposalMeaning meaning) || AlreadyDone(meaning)) return;
            Waiting(meaning.Key);
            if (kind != ProposalKind.Call && _calls.TryGetValue(meaning.Number, out PendingCall? call) && _deployment.ServiceId(call.Target) == meaning.Target && call.Certificate == null)
            {
                call.Certificate = proposal;
                (call.Retries, call.RetryAt) = (0, _outbox.StepTime + CallRetry); // the certificate's own retries start short
            }
            if (IsPrimary) Propose(proposal, meaning);
            // A reply's certificate: the primary had the same bundle, and gets ours only if the call is still pending at its retry time.
            else if (kind == ProposalKind.CallAbort) Send(_service.Replicas[PrimaryIndex], proposal, BftKind.Submit);
            return;
        }
    }

    /// <summary>
    /// At the execution of a call or of its reply: the packets gathered from the other service whose
    /// payload differs from the one ordered. Each is reported (<see cref="BftDivergence"/>) and counted.
    /// </summary>
    private void ReportDivergence(Dictionary<int, byte[]>? packets, in ProposalMeaning ordered, bool asReply)
    {
        if (packets == null) return;
        foreach (var (sender, packet) in packets)
        {
            ReadOnlySpan<byte> body = BftWire.BodyOf(packet);
            ReadOnlySpan<byte> payload = asReply ? (body.Length >= 16 ? body[16..] : body)
                : BftWire.TryReadRequest(body, out _, out _, out ReadOnlySpan<byte> operation) ? operation : body;
            if (payload.SequenceEqual(ordered.Payload)) continue;
            BftService peer = _deployment.ServiceOf(sender)!;
            DivergentMessages++;
            _outbox.Add(new BftDivergence(_service.Name, peer.Name, peer.IndexOf(sender), ordered.Number, asReply));
        }
    }

    /// <summary>Calls or replies from another service's replicas that differed from what f+1 of them agreed on (<see cref="BftDivergence"/>).</summary>
    public long DivergentMessages { get; private set; }

    /// <summary>Calls past their timeout: this replica votes to abort each, once.</summary>
    private void CheckCallDeadlines(long now)
    {
        foreach (var (number, call) in _calls)
        {
            if (call.VotedAbort || now < call.Deadline) continue;
            call.VotedAbort = true;
            int targetId = _deployment.ServiceId(call.Target);
            byte[] vote = BftWire.Seal(_keys, BftKind.CallAbort, Proposal.AbortBody(targetId, number), _others);
            foreach (int p in _others) _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(p), vote));
            if (!_abortVotes.TryGetValue((targetId, number), out var votes)) _abortVotes[(targetId, number)] = votes = new();
            votes[Principal] = vote;
            ProposeCertificate(ProposalKind.CallAbort, votes.Values, matchingNeeded: _service.F + 1);
        }
    }

    private long CallDeadline => _calls.Values.Where(c => !c.VotedAbort).Select(c => c.Deadline).DefaultIfEmpty(long.MaxValue).Min();

    /// <summary>
    /// Sends again what a pending call still needs, once its retry time came: its copies to the
    /// target, its certificate to the primary, its abort vote. The retry time doubles each time (up
    /// to the longest retry period), so a call that is slow at the target is not sent over and over.
    /// </summary>
    private void RetransmitCalls()
    {
        long now = _outbox.StepTime;
        foreach (var (number, call) in _calls)
        {
            if (now < call.RetryAt) continue;
            call.Retries = Math.Min(call.Retries + 1, 6);
            call.RetryAt = now + Math.Min(CallRetry << call.Retries, _options.RetryInterval << 6);
            // Not done yet: to every target replica now (its primary or responder may be faulty), unless the target already answered.
            if (call.Certificate == null)
            {
                if ((_options.Mutations & BftMutations.CallRetryToPrimaryOnly) != 0) Send(call.Target.Replicas[_targetPrimary.GetValueOrDefault(_deployment.ServiceId(call.Target))], call.Packet);
                else
                {
                    foreach (int p in call.Target.Replicas) _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(p), call.Packet));
                }
            }
            if (call.Certificate != null && !IsPrimary) Send(_service.Replicas[PrimaryIndex], call.Certificate, BftKind.Submit);
            if (call.VotedAbort && _abortVotes.TryGetValue((_deployment.ServiceId(call.Target), number), out var votes) && votes.TryGetValue(Principal, out byte[]? vote))
            {
                foreach (int p in _others) _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(p), vote));
            }
        }
        // GC: what completed no longer needs its parts.
        foreach (var key in _replyParts.Keys.Where(_completedCalls.Contains).ToList()) _replyParts.Remove(key);
        foreach (var key in _abortVotes.Keys.Where(_completedCalls.Contains).ToList()) _abortVotes.Remove(key);
        foreach (var key in _callCopies.Keys.Where(k => ClientAt(k.Caller).Executed(k.Number)).ToList()) _callCopies.Remove(key);
        // A responder's replies: kept a while after they agreed, to report late ones that differ.
        foreach (var key in _responding.Where(c => now - c.Value.Since > _options.RetryInterval << 7).Select(c => c.Key).ToList()) _responding.Remove(key);
    }
}
