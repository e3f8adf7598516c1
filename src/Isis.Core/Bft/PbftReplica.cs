using System.Buffers.Binary;
using System.Security.Cryptography;
using Isis.Core.Common;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Bft;

/// <summary>
/// One replica of a BFT service: PBFT's normal case (Castro and Liskov, OSDI 1999), sans-IO.
/// </summary>
/// <remarks>
/// <list type="number">
/// <item>A client's request reaches the primary of the current view (a backup relays it there).
/// The primary gathers what arrives into a batch and, while fewer than
/// <see cref="BftOptions.BatchesInFlight"/> batches are in agreement, assigns the batch the next
/// sequence number within its window and sends a pre-prepare. A lone request goes out at once;
/// under load one agreement round orders many inputs (PBFT's batching).</item>
/// <item>A backup accepts the first pre-prepare for a (view, seq) whose every input carries its
/// author's valid tag for it, and sends a prepare. A conflicting pre-prepare for the same
/// (view, seq) is refused and counted: the primary equivocates.</item>
/// <item>Prepared: the pre-prepare and 2f matching prepares from distinct backups. Two different
/// requests cannot both prepare at one (view, seq): their 2f+1 supporters would share a correct
/// replica, which prepares one only. The replica then sends a commit.</item>
/// <item>Committed: prepared and 2f+1 matching commits. Requests execute in sequence order; the
/// application gets each as a <see cref="BftRequestOrdered"/> and answers with <see cref="Reply"/>,
/// sent to the client alone (the client waits for f+1 matching replies).</item>
/// <item>Every K executed requests, a checkpoint: the digest of the history executed so far. With
/// 2f+1 matching votes it is stable: the log below it is dropped and the window moves on.</item>
/// </list>
/// Every message carries a MAC authenticator (<see cref="BftWire"/>). Messages are idempotent and
/// retransmitted until the window moves past them, so loss, duplication and replay are harmless.
/// A faulty or slow primary is replaced by the view change (PbftReplica.ViewChange.cs). Not yet
/// here: the transfer of the application's state to a replica that fell behind by more than the
/// requests the others keep (one window).
/// </remarks>
internal sealed partial class PbftReplica : IProtocolNode
{
    private readonly BftDeployment _deployment;
    private readonly BftService _service;
    private readonly BftKeys _keys;
    private readonly BftOptions _options;
    private readonly Outbox _outbox = new();
    private readonly int[] _others;
    private readonly Dictionary<long, Slot> _slots = new();
    private readonly Dictionary<int, ClientRecord> _clients = new();
    private readonly HashSet<(bool Completion, int Who, long Number)> _assigned = new();
    private readonly List<(byte[] Input, (bool Completion, int Who, long Number) Key)> _pending = new(); // the primary's inputs for the next batch, read once
    private readonly Dictionary<long, Dictionary<int, byte[]>> _checkpointVotes = new();
    private readonly Dictionary<long, byte[]> _ownCheckpoints = new();
    private byte[] _history = new byte[BftWire.DigestSize];
    private byte[] _stableDigest = new byte[BftWire.DigestSize];
    private readonly SortedDictionary<long, byte[]> _executedRequests = new(); // recent ones, for a replica that fell behind
    private (long Seq, byte[] Digest)? _certified; // a stable checkpoint of the others' beyond what this replica executed
    private readonly Dictionary<long, byte[]> _fetched = new();
    private long _lastAssigned;
    private long _position; // inputs handed over so far: the events' position in the order
    private long _retryAt;
    private int _idleRetries;

    public PbftReplica(BftDeployment deployment, string service, int index, BftKeys keys, BftOptions options, long now)
    {
        _deployment = deployment;
        _service = deployment.Service(service);
        Index = index;
        Principal = _service.Replicas[index];
        _keys = keys.Self == Principal ? keys : throw new ArgumentException($"replica {index} of {service} is principal {Principal}; the keys are principal {keys.Self}'s");
        _options = options;
        _others = [.. _service.Replicas.Where(p => p != Principal)];
        _retryAt = now + options.RetryInterval;
    }

    /// <summary>This replica's index in its service (0 to 3f).</summary>
    public int Index { get; }

    /// <summary>This replica's principal number in the deployment.</summary>
    public int Principal { get; }

    public ulong Endpoint => _deployment.EndpointOf(Principal);

    /// <summary>The current view; its primary is replica view mod n.</summary>
    public long View { get; private set; }

    /// <summary>The last sequence number executed (each orders a batch of inputs).</summary>
    public long LastExecuted { get; private set; }

    /// <summary>The inputs (requests, calls, call completions) handed over so far: the last event's position in the order.</summary>
    public long InputsExecuted => _position;

    /// <summary>The last stable checkpoint (PBFT's low watermark h).</summary>
    public long StableCheckpoint { get; private set; }

    /// <summary>Packets dropped: malformed, badly authenticated, from a principal with no business sending them, or outside the window.</summary>
    public long Dropped { get; private set; }

    /// <summary>Pre-prepares refused because the primary already assigned that (view, seq) to another request.</summary>
    public long Equivocations { get; private set; }

    /// <summary>Pre-prepares refused because the primary's time was too far from this replica's clock.</summary>
    public long ClockRefusals { get; private set; }

    private long _agreedTime; // the agreed clock at the last proposal executed

    private bool IsPrimary => PrimaryIndex == Index;

    private int PrimaryIndex => (int)(View % _service.N);

    /// <summary>
    /// What a replica remembers of one client: which of its requests executed (a client may have
    /// many outstanding, and the primary orders them as they arrive) and the recent replies, to
    /// answer a retransmission.
    /// </summary>
    private sealed class ClientRecord
    {
        private const int RepliesKept = 256;
        private readonly HashSet<long> _above = new();
        private long _contiguous; // every request up to it executed
        public readonly Dictionary<long, byte[]?> Replies = new();

        public bool Executed(long number) => number <= _contiguous || _above.Contains(number);

        public void MarkExecuted(long number)
        {
            _above.Add(number);
            while (_above.Remove(_contiguous + 1)) _contiguous++;
            Replies[number] = null;
            if (Replies.Count > RepliesKept)
            {
                foreach (long old in Replies.Keys.Where(n => n <= _contiguous - RepliesKept).ToList()) Replies.Remove(old);
            }
        }
    }

    private ClientRecord ClientAt(int client)
    {
        if (!_clients.TryGetValue(client, out ClientRecord? c)) _clients[client] = c = new ClientRecord();
        return c;
    }

    private sealed class Slot
    {
        public long View = -1;
        public byte[]? Digest;
        public byte[]? Proposal;
        public readonly Dictionary<int, (long View, byte[] Digest)> Prepares = new();
        public readonly Dictionary<int, (long View, byte[] Digest)> Commits = new();
        public bool SentCommit;
        public bool Committed;
        public long SentAt; // when this replica last sent its message for the slot: retransmitted only once it is a retry interval old
    }

    /// <summary>A one-line summary, for a failed run's report.</summary>
    public string Describe() =>
        $"replica {Index}: view {View}{(_viewActive ? "" : " (changing)")}, executed {LastExecuted}, stable {StableCheckpoint}, assigned {_lastAssigned}, pending {_pending.Count}, " +
        $"slots [{string.Join(" ", _slots.OrderBy(s => s.Key).Select(s => $"{s.Key}:{(s.Value.Committed ? "C" : s.Value.SentCommit ? "P" : s.Value.Digest != null ? "p" : "-")}{s.Value.Prepares.Count}/{s.Value.Commits.Count}"))}], " +
        $"checkpoints [{string.Join(" ", _checkpointVotes.OrderBy(c => c.Key).Select(c => $"{c.Key}:{c.Value.Count}{(_ownCheckpoints.ContainsKey(c.Key) ? "*" : "")}"))}]";

    // ---------------------------------------------------------------- the node contract

    public bool HasReady => !_outbox.IsEmpty;

    public Ready TakeReady() => new(_outbox);

    public void Advance() => _outbox.Clear();

    public long NextDeadline => Math.Min(Math.Min(_retryAt, ViewChangeDeadline), CallDeadline);

    public void Receive(ulong source, ReadOnlySpan<byte> packet, long now)
    {
        _outbox.StepTime = now;
        if (!BftWire.TryOpen(_keys, packet, out BftKind kind, out int sender, out ReadOnlySpan<byte> body)) { Dropped++; return; }
        int from = _service.IndexOf(sender);
        bool ok = kind switch
        {
            BftKind.Request => OnRequest(packet, sender, body),
            // In a view change the replica takes part in no agreement until the new view starts.
            BftKind.PrePrepare => from >= 0 && (!_viewActive || OnPrePrepare(from, body)),
            BftKind.Prepare or BftKind.Commit => from >= 0 && (!_viewActive || OnVote(kind, from, body)),
            BftKind.ViewChange => from >= 0 && OnViewChange(from, body),
            BftKind.NewView => from >= 0 && OnNewView(from, body),
            BftKind.Call => OnCall(packet, sender, body),
            BftKind.CallReply => OnCallReply(packet, sender, body),
            BftKind.ReplyBundle => OnReplyBundle(sender, body),
            BftKind.CallAbort => from >= 0 && OnAbortVote(packet, from, body),
            BftKind.Submit => from >= 0 && OnSubmit(body),
            BftKind.Checkpoint => from >= 0 && OnCheckpoint(from, body),
            BftKind.Fetch => from >= 0 && OnFetch(from, body),
            BftKind.FetchReply => from >= 0 && OnFetchReply(body),
            _ => false,
        };
        if (!ok)
        {
            Dropped++;
            DroppedByKind[(int)kind & 15]++;
        }
        while (_replayEarly) ReplayEarly();
    }

    /// <summary><see cref="Dropped"/> by message kind (<see cref="BftKind"/>'s value), where the envelope opened: which rule refuses them.</summary>
    public long[] DroppedByKind { get; } = new long[16];

    public void Tick(long now)
    {
        _outbox.StepTime = now;
        if (now >= ViewChangeDeadline) TimeOut(now);
        CheckCallDeadlines(now);
        while (_replayEarly) ReplayEarly();
        if (now < _retryAt) return;
        // Everything above the stable checkpoint may still be missing somewhere: send it again,
        // less and less often while nothing moves (a quiet service settles at the longest period).
        Retransmit();
        _idleRetries = Math.Min(_idleRetries + 1, 6);
        _retryAt = now + (_options.RetryInterval << _idleRetries);
    }

    private void Progressed(long now)
    {
        _idleRetries = 0;
        _retryAt = Math.Min(_retryAt, now + _options.RetryInterval);
    }

    // ---------------------------------------------------------------- requests

    private bool OnRequest(ReadOnlySpan<byte> packet, int sender, ReadOnlySpan<byte> body)
    {
        if (!BftWire.TryReadRequest(body, out int client, out long number, out _) || client != sender || client < 0 || _deployment.IsReplica(client)) return false;
        ClientRecord record = ClientAt(client);
        if (record.Executed(number))
        {
            // Executed already: the client lost our reply (or it is a replay, which this answers harmlessly).
            if (record.Replies.TryGetValue(number, out byte[]? result) && result != null) SendReply(client, number, result);
            return true;
        }
        Waiting((false, client, number));
        if (!IsPrimary)
        {
            Send(_service.Replicas[PrimaryIndex], packet.ToArray()); // relayed as it is: the primary checks the client's tag itself
            return true;
        }
        byte[] proposal = Proposal.OfRequest(packet);
        Invariant.Check(Proposal.TryRead(proposal, _deployment, _service, null, out ProposalMeaning meaning), "a checked request reads as a proposal");
        Propose(proposal, meaning);
        return true;
    }

    /// <summary>As primary: orders input <paramref name="proposal"/> in the next batch, unless it is ordered or done already.</summary>
    private void Propose(byte[] proposal, ProposalMeaning meaning)
    {
        if (!IsPrimary || !_viewActive || AlreadyDone(meaning) || !_assigned.Add(meaning.Key)) return;
        _pending.Add((proposal, meaning.Key));
        AssignPending();
    }

    /// <summary>
    /// As primary: sends what is pending as batches, while fewer than <see cref="BftOptions.BatchesInFlight"/>
    /// are in agreement and the window has room. Called when an input arrives, a batch executes, the
    /// window moves.
    /// </summary>
    private void AssignPending()
    {
        while (IsPrimary && _viewActive && _pending.Count > 0 && _lastAssigned < StableCheckpoint + _options.Window
               && _lastAssigned - LastExecuted < _options.BatchesInFlight)
        {
            var batch = new List<byte[]>();
            int bytes = 0, taken = 0;
            for (; taken < _pending.Count && batch.Count < Math.Min(_options.MaxBatch, Proposal.MaxBatchItems); taken++)
            {
                var (input, key) = _pending[taken];
                if (batch.Count > 0 && bytes + input.Length > _options.MaxBatchBytes) break;
                if (AlreadyDone(key)) continue; // executed meanwhile (a batch of a view change ordered it)
                batch.Add(input);
                bytes += input.Length;
            }
            _pending.RemoveRange(0, taken);
            if (batch.Count > 0) Assign(Proposal.Batch(batch));
        }
    }

    private bool AlreadyDone(in ProposalMeaning m) => AlreadyDone(m.Key);

    /// <summary>A request or call (who, number) executed, or a completion of call (target, number) ordered.</summary>
    private bool AlreadyDone((bool Completion, int Who, long Number) key) =>
        key.Completion ? _completedCalls.Contains((key.Who, key.Number)) : _clients.TryGetValue(key.Who, out ClientRecord? c) && c.Executed(key.Number);

    /// <summary>Stamps batch <paramref name="unstamped"/> with this primary's clock and sends its pre-prepare.</summary>
    private void Assign(byte[] unstamped)
    {
        // The agreed clock never goes back, even if this primary's is behind its predecessor's.
        byte[] proposal = Proposal.Stamp(unstamped, Math.Max(_outbox.StepTime, _agreedTime + 1));
        Invariant.Check(Proposal.TryReadBatch(proposal, _deployment, _service, null, out BatchMeaning meaning), "a stamped batch reads");
        byte[] digest = meaning.Digest;
        long seq = ++_lastAssigned;
        Slot slot = SlotAt(seq);
        slot.View = View;
        slot.Digest = digest;
        slot.Proposal = proposal;
        PrePrepared(seq, slot);
        slot.SentAt = _outbox.StepTime;
        Multicast(BftKind.PrePrepare, BftWire.PrePrepare(View, seq, proposal));
        Progressed(_outbox.StepTime);
        TryAdvance(seq, slot);
    }

    private bool OnPrePrepare(int from, ReadOnlySpan<byte> body)
    {
        if (!BftWire.TryReadPrePrepare(body, out long view, out long seq, out ReadOnlySpan<byte> proposal)) return false;
        if (view != View || from != PrimaryIndex || IsPrimary) return false;
        if (!InWindow(seq)) return Early(BftKind.PrePrepare, from, view, seq, body);
        // Every input must carry its authors' valid tags for this replica: a primary cannot invent requests, calls or replies.
        if (!Proposal.TryReadBatch(proposal, _deployment, _service, _keys, out BatchMeaning meaning, _options.Mutations)) return false;
        // The primary's clock becomes everyone's: a backup prepares only a time close to its own.
        if (Math.Abs(meaning.Time - _outbox.StepTime) > _options.MaxClockSkew)
        {
            ClockRefusals++;
            return true;
        }
        byte[] digest = meaning.Digest;
        Slot slot = SlotAt(seq);
        if (slot.View == view && slot.Digest != null)
        {
            if (!slot.Digest.AsSpan().SequenceEqual(digest))
            {
                Equivocations++;
                return true;
            }
            Send(_service.Replicas[from], BftWire.Vote(view, seq, digest), BftKind.Prepare); // a retransmission: our prepare may have been lost
            return true;
        }
        slot.View = view;
        slot.Digest = digest;
        slot.Proposal = proposal.ToArray();
        PrePrepared(seq, slot);
        foreach (ProposalMeaning input in meaning.Items) Waiting(input.Key);
        slot.Prepares[Index] = (view, digest);
        slot.SentAt = _outbox.StepTime;
        Multicast(BftKind.Prepare, BftWire.Vote(view, seq, digest));
        Progressed(_outbox.StepTime);
        TryAdvance(seq, slot);
        return true;
    }

    private bool OnVote(BftKind kind, int from, ReadOnlySpan<byte> body)
    {
        if (!BftWire.TryReadVote(body, out long view, out long seq, out ReadOnlySpan<byte> digest)) return false;
        if (view != View) return false;
        if (kind == BftKind.Prepare && from == PrimaryIndex) return false; // the primary's pre-prepare is its prepare
        if (!InWindow(seq)) return Early(kind, from, view, seq, body);
        Slot slot = SlotAt(seq);
        var votes = kind == BftKind.Prepare ? slot.Prepares : slot.Commits;
        if (votes.TryGetValue(from, out var had) && had.View == view && had.Digest.AsSpan().SequenceEqual(digest)) return true; // a repeat
        votes[from] = (view, digest.ToArray());
        TryAdvance(seq, slot);
        return true;
    }

    /// <summary>
    /// A pre-prepare or vote of this view outside the window. Below it: stale, a retransmission of
    /// what this replica checkpointed (ignored). Within a window above it: the others moved their
    /// window before this replica (which executes later), and the message is kept until this
    /// replica's window moves (<see cref="MakeStable"/>) rather than dropped and waited for again.
    /// Further above, or beyond the bound on what is kept: dropped.
    /// </summary>
    private bool Early(BftKind kind, int from, long view, long seq, ReadOnlySpan<byte> body)
    {
        if (seq <= StableCheckpoint) return true;
        // At most what one correct replica sends in a window (a pre-prepare or two votes per seq), per sender:
        // a faulty replica cannot crowd out the others' early messages.
        if (seq > StableCheckpoint + 2 * _options.Window || _early.Count(e => e.From == from) >= 3 * _options.Window) return false;
        _early.Add((kind, from, view, seq, body.ToArray()));
        return true;
    }

    private List<(BftKind Kind, int From, long View, long Seq, byte[] Body)> _early = new();
    private bool _replayEarly;

    /// <summary>After the window moved, at the end of the input that moved it: what arrived early and is now within it, as if it arrived now.</summary>
    private void ReplayEarly()
    {
        _replayEarly = false;
        if (_early.Count == 0) return;
        var early = _early;
        _early = new();
        foreach (var (kind, from, view, seq, body) in early)
        {
            if (view != View || seq <= StableCheckpoint) continue;
            bool ok = kind == BftKind.PrePrepare ? _viewActive && OnPrePrepare(from, body) : !_viewActive || OnVote(kind, from, body);
            if (!ok)
            {
                Dropped++;
                DroppedByKind[(int)kind]++;
            }
        }
    }

    private void TryAdvance(long seq, Slot slot)
    {
        if (slot.Digest == null || slot.Committed) return;
        bool crashQuorums = (_options.Mutations & BftMutations.CrashQuorums) != 0;
        bool prepared = Matching(slot.Prepares, slot) >= (crashQuorums ? _service.F : 2 * _service.F);
        if (!prepared) return;
        if (!slot.SentCommit)
        {
            _prepared[seq] = (slot.View, slot.Digest, slot.Proposal!);
            slot.SentCommit = true;
            slot.SentAt = _outbox.StepTime;
            slot.Commits[Index] = (slot.View, slot.Digest);
            Multicast(BftKind.Commit, BftWire.Vote(slot.View, seq, slot.Digest));
        }
        if (Matching(slot.Commits, slot) < (crashQuorums ? _service.F + 1 : _service.Quorum)) return;
        slot.Committed = true;
        Progressed(_outbox.StepTime);
        ExecuteReady();
    }

    private static int Matching(Dictionary<int, (long View, byte[] Digest)> votes, Slot slot)
    {
        int n = 0;
        foreach (var (view, digest) in votes.Values)
        {
            if (view == slot.View && digest.AsSpan().SequenceEqual(slot.Digest)) n++;
        }
        return n;
    }

    private void ExecuteReady()
    {
        while (_slots.TryGetValue(LastExecuted + 1, out Slot? slot) && slot.Committed)
        {
            Invariant.Check(slot.Proposal != null && slot.Digest != null, $"a committed slot holds its request: seq {LastExecuted + 1}");
            Execute(slot.Proposal!, slot.Digest!);
        }
        AssignPending(); // a batch left agreement: the next may go
    }

    /// <summary>Executes the next sequence number's batch: hands its inputs over in order, chains it into the history, checkpoints every K.</summary>
    private void Execute(byte[] proposal, byte[] digest)
    {
        long seq = LastExecuted + 1;
        Invariant.Check(Proposal.TryReadBatch(proposal, _deployment, _service, null, out BatchMeaning batch), $"a committed batch reads: seq {seq}");
        foreach (ProposalMeaning input in batch.Items) ExecuteInput(input, batch.Time);
        _lastProgressAt = _outbox.StepTime;
        _history = ChainDigest(_history, seq, digest);
        _executedRequests[seq] = proposal;
        LastExecuted = seq;
        if (seq % _options.CheckpointInterval == 0) TakeCheckpoint(seq);
    }

    /// <summary>Hands one input of a batch over (unless it executed already), at the agreed clock just after the last input's.</summary>
    private void ExecuteInput(in ProposalMeaning m, long stamp)
    {
        long time = Math.Max(_agreedTime + 1, stamp);
        switch (m.Kind)
        {
            case ProposalKind.Request or ProposalKind.Call:
                // A request the primary ordered twice (a faulty primary may) executes once: the later copy is a no-op.
                ClientRecord record = ClientAt(m.From);
                if (!record.Executed(m.Number))
                {
                    if (m.Kind == ProposalKind.Call) ReportDivergence(_callCopies.GetValueOrDefault((m.From, m.Number)), m, asReply: false);
                    record.MarkExecuted(m.Number);
                    _position++;
                    _outbox.Add(new BftRequestOrdered(_service.Name, _position, m.From, m.Number, m.Payload, time, AgreedSeed()));
                }
                break;
            case ProposalKind.CallReply or ProposalKind.CallAbort:
                // The first of the reply and the abort ordered decides the call, the same at every replica.
                if (_completedCalls.Add((m.Target, m.Number)))
                {
                    if (m.Kind == ProposalKind.CallReply) ReportDivergence(_replyParts.GetValueOrDefault((m.Target, m.Number)), m, asReply: true);
                    if (_calls.Remove(m.Number, out PendingCall? done) && m.Kind == ProposalKind.CallReply)
                    {
                        long took = _outbox.StepTime - done.IssuedAt;
                        _callTime = _callTime == 0 ? took : (7 * _callTime + took) / 8;
                    }
                    _position++;
                    _outbox.Add(new BftCallCompleted(_service.Name, _position, _deployment.ServiceById(m.Target)!.Name, m.Number, m.Kind == ProposalKind.CallReply ? m.Payload : null,
                        time, AgreedSeed()));
                }
                break;
        }
        // The agreed clock: the batch's stamp, or just after the last input if a faulty or lagging primary stamped an earlier time.
        _agreedTime = time;
        _assigned.Remove(m.Key);
        _waitingRequests.Remove(m.Key);
    }

    /// <summary>
    /// A seed every correct replica computes alike and no client chooses: from the history executed
    /// so far, and distinct for each input handed over (the inputs of one batch share the history).
    /// </summary>
    private ulong AgreedSeed() => BinaryPrimitives.ReadUInt64LittleEndian(_history) ^ ((ulong)_position * 0x9E3779B97F4A7C15UL);

    private static byte[] ChainDigest(byte[] history, long seq, byte[] digest)
    {
        Span<byte> input = stackalloc byte[BftWire.DigestSize + 8 + BftWire.DigestSize];
        history.CopyTo(input);
        BinaryPrimitives.WriteInt64LittleEndian(input[BftWire.DigestSize..], seq);
        digest.CopyTo(input[(BftWire.DigestSize + 8)..]);
        return SHA256.HashData(input);
    }

    // ---------------------------------------------------------------- replies

    /// <summary>The application's answer to request <paramref name="number"/> of <paramref name="client"/>, sent to that client alone.</summary>
    public void Reply(int client, long number, byte[] result, long now)
    {
        _outbox.StepTime = now;
        if (!_clients.TryGetValue(client, out ClientRecord? record) || !record.Replies.TryGetValue(number, out byte[]? had) || had != null)
            throw new InvalidOperationException($"request {number} of client {client} was not handed over, or was answered already: answer each BftRequestOrdered once");
        record.Replies[number] = result;
        SendReply(client, number, result);
    }

    private void SendReply(int client, long number, byte[] result)
    {
        if (client >= 0)
        {
            _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(client), BftWire.Seal(_keys, BftKind.Reply, BftWire.Reply(View, number, result), [client])));
            return;
        }
        // A call's reply is tagged for every replica of the calling service (each checks the f+1 that
        // vouch for it) and goes to this service's responder, which passes f+1 matching ones on.
        byte[] packet = CallReplyPacket(client, number, result);
        if (IsPrimary) Respond(packet, Principal);
        else Send(_service.Replicas[PrimaryIndex], WriteBundle([packet]), BftKind.ReplyBundle);
    }

    // ---------------------------------------------------------------- checkpoints

    private void TakeCheckpoint(long seq)
    {
        _ownCheckpoints[seq] = _history;
        VotesAt(seq)[Index] = _history;
        Multicast(BftKind.Checkpoint, BftWire.Vote(0, seq, _history));
        CheckStable(seq);
    }

    private const long Answer = 1; // a checkpoint vote's "view" field: 1 answers a vote, and is never answered back

    private bool OnCheckpoint(int from, ReadOnlySpan<byte> body)
    {
        if (!BftWire.TryReadVote(body, out long answer, out long seq, out ReadOnlySpan<byte> digest) || seq % _options.CheckpointInterval != 0 || answer > Answer) return false;
        if (seq <= StableCheckpoint)
        {
            // The sender still votes for a checkpoint this replica saw become stable: it lacks votes, so ours goes back.
            if (answer != Answer && StableCheckpoint > 0) Send(_service.Replicas[from], BftWire.Vote(Answer, StableCheckpoint, _stableDigest), BftKind.Checkpoint);
            return true;
        }
        VotesAt(seq)[from] = digest.ToArray();
        CheckStable(seq);
        if (seq > LastExecuted) CheckCertified(seq);
        return true;
    }

    /// <summary>
    /// 2f+1 others agree on the history at a checkpoint this replica has not executed to: it fell
    /// behind, and the others may have dropped the log it misses. It fetches the requests from them
    /// and checks them against the certified digest (at least one correct replica vouches for it).
    /// </summary>
    private void CheckCertified(long seq)
    {
        if (_certified is { } known && known.Seq >= seq) return;
        foreach (byte[] digest in _checkpointVotes[seq].Values)
        {
            if (_checkpointVotes[seq].Values.Count(d => d.AsSpan().SequenceEqual(digest)) < _service.Quorum) continue;
            _certified = (seq, digest);
            Fetch();
            return;
        }
    }

    private void Fetch()
    {
        if (_certified is not { } target || target.Seq <= LastExecuted) return;
        var body = new byte[16];
        BinaryPrimitives.WriteInt64LittleEndian(body, LastExecuted + 1);
        BinaryPrimitives.WriteInt64LittleEndian(body.AsSpan(8), target.Seq);
        Multicast(BftKind.Fetch, body);
    }

    private bool OnFetch(int from, ReadOnlySpan<byte> body)
    {
        if (body.Length != 16) return false;
        long first = BinaryPrimitives.ReadInt64LittleEndian(body), last = BinaryPrimitives.ReadInt64LittleEndian(body[8..]);
        if (first < 1 || last < first) return false;
        PacketWriter reply = _writer.BeginRecord();
        int count = 0;
        foreach (var (seq, proposal) in _executedRequests)
        {
            if (seq < first || seq > last) continue;
            reply.I64(seq).Bytes(proposal);
            count++;
        }
        if (count > 0) Send(_service.Replicas[from], reply.FinishRecord(), BftKind.FetchReply);
        return true;
    }

    private bool OnFetchReply(ReadOnlySpan<byte> body)
    {
        if (_certified is not { } target) return true;
        var r = new WireReader(body);
        while (r.Ok && r.Remaining > 0)
        {
            long seq = r.I64();
            byte[] proposal = r.Bytes();
            if (r.Ok && seq > LastExecuted && seq <= target.Seq) _fetched[seq] = proposal;
        }
        if (!r.Complete) return false;
        CatchUp(target);
        return true;
    }

    /// <summary>Executes the fetched requests up to the certified checkpoint, if they chain to its digest; otherwise a responder lied, and they go.</summary>
    private void CatchUp((long Seq, byte[] Digest) target)
    {
        for (long s = LastExecuted + 1; s <= target.Seq; s++)
        {
            if (!_fetched.ContainsKey(s)) return;
        }
        byte[] history = _history;
        var digests = new List<byte[]>();
        for (long s = LastExecuted + 1; s <= target.Seq; s++)
        {
            if (!Proposal.TryReadBatch(_fetched[s], _deployment, _service, null, out BatchMeaning m)) { _fetched.Clear(); return; }
            digests.Add(m.Digest);
            history = ChainDigest(history, s, digests[^1]);
        }
        if (!history.AsSpan().SequenceEqual(target.Digest))
        {
            _fetched.Clear();
            return;
        }
        for (int i = 0; LastExecuted < target.Seq; i++) Execute(_fetched[LastExecuted + 1], digests[i]);
        _fetched.Clear();
        _certified = null;
        Invariant.Check(_history.AsSpan().SequenceEqual(target.Digest), $"a replica that caught up holds the certified history at {target.Seq}");
        Progressed(_outbox.StepTime);
        ExecuteReady(); // what committed above the checkpoint meanwhile
    }

    private Dictionary<int, byte[]> VotesAt(long seq)
    {
        if (!_checkpointVotes.TryGetValue(seq, out var votes)) _checkpointVotes[seq] = votes = new();
        return votes;
    }

    private void CheckStable(long seq)
    {
        if (!_ownCheckpoints.TryGetValue(seq, out byte[]? own)) return;
        int matching = _checkpointVotes[seq].Values.Count(d => d.AsSpan().SequenceEqual(own));
        if (matching < _service.Quorum) return;
        MakeStable(seq, own);
    }

    private void MakeStable(long seq, byte[] own)
    {
        Invariant.Check(seq > StableCheckpoint && seq <= LastExecuted, $"a checkpoint becomes stable once, after its requests executed: seq {seq}, stable {StableCheckpoint}, executed {LastExecuted}");
        StableCheckpoint = seq;
        _stableDigest = own;
        foreach (long s in _slots.Keys.Where(s => s <= seq).ToList()) _slots.Remove(s);
        foreach (long s in _prepared.Keys.Where(s => s <= seq).ToList()) _prepared.Remove(s);
        foreach (long s in _prePrepared.Keys.Where(s => s <= seq).ToList()) _prePrepared.Remove(s);
        // The requests of the last window stay, for a replica that fell behind to fetch.
        foreach (long s in _executedRequests.Keys.Where(s => s <= seq - _options.Window).ToList()) _executedRequests.Remove(s);
        foreach (long s in _checkpointVotes.Keys.Where(s => s <= seq).ToList()) _checkpointVotes.Remove(s);
        foreach (long s in _ownCheckpoints.Keys.Where(s => s < seq).ToList()) _ownCheckpoints.Remove(s);
        Progressed(_outbox.StepTime);
        _replayEarly = true; // once this input is handled: here it would execute in the middle of a catch-up or an execution
        if ((_options.Mutations & BftMutations.ReplayEarlyInPlace) != 0) ReplayEarly();
        AssignPending(); // the window moved: the primary sends what waited
    }

    // ---------------------------------------------------------------- sending

    private bool InWindow(long seq) => seq > StableCheckpoint && seq <= StableCheckpoint + _options.Window;

    private Slot SlotAt(long seq)
    {
        if (!_slots.TryGetValue(seq, out Slot? slot)) _slots[seq] = slot = new Slot();
        return slot;
    }

    private void Multicast(BftKind kind, byte[] body)
    {
        if (_others.Length == 0) return;
        byte[] packet = BftWire.Seal(_keys, kind, body, _others);
        foreach (int p in _others) _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(p), packet));
    }

    private void Send(int principal, byte[] body, BftKind kind) =>
        _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(principal), BftWire.Seal(_keys, kind, body, [principal])));

    private void Send(int principal, byte[] packet) => _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(principal), packet));

    /// <summary>
    /// Sends again what may have been lost: this replica's messages of every slot above the stable
    /// checkpoint that it sent a retry interval ago or more (a slot in agreement right now is not
    /// sent twice while its first copies are on their way), its view change, checkpoints and calls.
    /// </summary>
    private void Retransmit()
    {
        long now = _outbox.StepTime;
        if (!_viewActive && _ownViewChange != null) Multicast(BftKind.ViewChange, _ownViewChange);
        RetransmitCalls();
        foreach (var (seq, slot) in _slots)
        {
            if (slot.Digest == null || !_viewActive || now - slot.SentAt < _options.RetryInterval) continue;
            slot.SentAt = now;
            if (IsPrimary && slot.View == View && slot.Proposal is { Length: > 0 }) Multicast(BftKind.PrePrepare, BftWire.PrePrepare(View, seq, slot.Proposal));
            else if (slot.Prepares.ContainsKey(Index)) Multicast(BftKind.Prepare, BftWire.Vote(slot.View, seq, slot.Digest));
            if (slot.SentCommit) Multicast(BftKind.Commit, BftWire.Vote(slot.View, seq, slot.Digest));
        }
        foreach (var (seq, digest) in _ownCheckpoints)
        {
            if (seq > StableCheckpoint) Multicast(BftKind.Checkpoint, BftWire.Vote(0, seq, digest));
        }
        Fetch();
    }
}
