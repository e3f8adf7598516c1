using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Durability;

// The durable history, part 3: how a member that is not current comes to hold the history. It
// starts from its own checkpoint if one covers the source's trim point, else from a checkpoint it
// copies (the source's, or the plan's provider's), else from nothing; then it pulls the entries
// after that from the source, one chunk in flight, restarted in a new view.
internal sealed partial class DurableHistory
{
    /// <summary>A member's way to the history in one view: where it starts, what it restores, what it pulled or copies.</summary>
    private sealed class PullState
    {
        public long Base;                  // entries 1..Base come from Restore
        public CheckpointMark? Restore;    // the checkpoint that holds them (null: Base is 0)
        public CheckpointMark? BaseMark;   // the checkpoint at Base (Restore, or the one before it; null: Base is 0)
        public ulong BaseDigest = HistoryDigest.Empty; // the HistoryDigest of entries 1..Base (checked against the source's at the first chunk)
        public bool BaseChecked;           // the source's first chunk agreed with BaseDigest
        public List<HistoryEntry> Pulled = []; // entries Base+1.. pulled so far (this member's own log's where it holds the same ones)
        public CheckpointFetch? Fetch;     // a checkpoint being copied, before the entries
        public long NextAt;                // when to ask again

        // The copy is written aside in parts as it arrives (HistoryCopyPartBytes each), never whole at its end.
        public int StagedParts;            // parts written aside (the first carries the log's header)
        public int Staged;                 // of Pulled, the entries they hold
        public long Unstaged;              // record bytes of the pulled entries after those
        public (int ViewId, long Trimmed, int GaveUp) StagedHeader; // what the first part's header said

        public string Describe() => Fetch is { } f
            ? $"fetching checkpoint {f.Index} from {f.From} {f.Offset}/{f.Total}{(f.Complete ? " awaiting disk" : "")}"
            : $"pulled {Base}+{Pulled.Count}";

        public string DescribeAside() => StagedParts > 0 ? $" ({StagedParts} part(s) aside, {Staged} entries)" : "";
    }

    /// <summary>A checkpoint copied from another member, in chunks the driver writes to a file and then makes durable.</summary>
    private sealed class CheckpointFetch(NodeId from, long index, long total)
    {
        public NodeId From { get; } = from;
        public long Index { get; } = index;
        public long Total { get; } = total;
        public long Offset;
        public bool Complete; // every byte handed to the driver: waiting for CheckpointDurable
    }

    private PullState? _pull;

    // Checkpoints copied from another member that turned out not to hold a prefix of the history copied (lineage, index): not copied again.
    private readonly HashSet<(Lineage, long)> _notPrefixCopies = new();

    /// <summary>At most this many bytes per chunk of a checkpoint copied from another member (one chunk in flight; the driver writes each to the file it copies into).</summary>
    private const int CheckpointChunkBytes = 60 * 1024;

    /// <summary>Whether this member copies entries from the source (false: the source is this member, recovering from its own log).</summary>
    private bool FromOwnLog => _plan!.Source == _node.Self;

    /// <summary>
    /// The plan says where the history is: start from this member's own checkpoint if one covers
    /// the source's trim point (and not past the history the plan copies), else copy a checkpoint
    /// if the source's log is trimmed, else start from nothing.
    /// </summary>
    private void StartPull(long now)
    {
        HistoryPlan plan = _plan!;
        _pull = new PullState();
        CheckpointMark? own = Usable(plan.Lineage, plan.Trimmed, plan.Target);
        while (own != null && own.Index == plan.Target && !PrefixUnchecked && !HistoryDigest.Agree(own.Digest, plan.TargetDigest))
        {
            // At the target itself nothing is pulled to check it against: the plan says the source's digest there.
            RejectCheckpoint(own, $"the history copied from {plan.Source} holds other SafeSends at {own.Index}");
            own = Usable(plan.Lineage, plan.Trimmed, plan.Target);
        }
        if (own != null)
        {
            // The newest is restored, but the log starts at the one before it where the source still
            // holds the entries after that one: as trimming leaves a log (rule 5), so that one damaged
            // checkpoint never leaves this member's log without a start. The source's first chunk
            // says what its history's digest is at the base, and the pulled entries what it is at
            // the restored one: a checkpoint that is not a prefix of the history is dropped then.
            CheckpointMark baseMark = Usable(plan.Lineage, plan.Trimmed, own.Index - 1) ?? own;
            _pull.Base = baseMark.Index;
            _pull.BaseMark = baseMark;
            _pull.BaseDigest = baseMark.Digest;
            _pull.Restore = own;
        }
        else if (plan.Trimmed > 0)
        {
            if (_notPrefixCopies.Contains((plan.Lineage, plan.ProviderCheckpoint)))
            {
                // Its copy was not a prefix of the source's history: copying it again would not be either. A later view plans anew.
                _pull = null;
                return;
            }
            // Nothing of ours covers what the source's log no longer holds: copy the provider's checkpoint first.
            _pull.Fetch = new CheckpointFetch(plan.Provider, plan.ProviderCheckpoint, -1);
            SendCheckpointPull(now);
            return;
        }
        ContinueAfterBase(now);
    }

    /// <summary>The recovery's source is this member: its own log is the history, from its own checkpoint or a copied one if its log is trimmed.</summary>
    private void RecoverFromOwnLog(long now)
    {
        HistoryPlan plan = _plan!;
        RejectNotPrefix(plan.Lineage, _image.DigestAt, _image.Trimmed, plan.Target);
        CheckpointMark? own = Usable(plan.Lineage, _image.Trimmed, plan.Target);
        if (_image.Trimmed > 0 && own == null)
        {
            _pull = new PullState { Fetch = new CheckpointFetch(plan.Provider, plan.ProviderCheckpoint, -1) };
            SendCheckpointPull(now);
            return;
        }
        List<HistoryEntry> entries = _image.Entries.GetRange(0, (int)(plan.Target - _image.Trimmed));
        BecomeCurrent(_image.Trimmed, entries, own, rewrite: _image.Count != plan.Target, baseDigest: _image.TrimmedDigest);
    }

    /// <summary>The start is settled (own checkpoint, copied one, or nothing): the entries after it come from the source, or from this member's own log.</summary>
    private void ContinueAfterBase(long now)
    {
        PullState pull = _pull!;
        HistoryPlan plan = _plan!;
        if (FromOwnLog)
        {
            // Our log holds entries after its trim point, which the copied checkpoint covers (if it holds a prefix of it).
            int skip = (int)(pull.Base - _image.Trimmed);
            ulong own = _image.DigestAt(pull.Base);
            if (!PrefixUnchecked && !HistoryDigest.Agree(pull.BaseDigest, own))
            {
                _notPrefixCopies.Add((plan.Lineage, pull.Base));
                if (pull.Restore != null) RejectCheckpoint(pull.Restore, $"it was copied from {plan.Provider}, and this member's log has other SafeSends at {pull.Base}");
                _pull = null; // a later view plans anew
                return;
            }
            BecomeCurrent(pull.Base, _image.Entries.GetRange(skip, (int)(plan.Target - pull.Base)), pull.Restore, rewrite: true, baseDigest: own != HistoryDigest.Unknown ? own : pull.BaseDigest);
            return;
        }
        // Nothing to pull: StartPull checked the checkpoint against the plan's digest at the target.
        if (pull.Base == plan.Target) BecomeCurrent(pull.Base, pull.Pulled, pull.Restore, rewrite: true, baseDigest: pull.BaseDigest);
        else SendPull(now);
    }

    /// <summary>
    /// The entry this member keeps for index <paramref name="index"/> of a copy: a member coming
    /// back to a running group still holds most of what it pulls in its own log (the entries after
    /// its checkpoint, up to where it stopped), read at start. Where its log's entry there is the
    /// very one the source sent (the same id, phi and payload), that one is kept and the pulled one
    /// dropped at once, so a recovering member holds each entry once and not a second copy beside
    /// its log's. Where it differs (its log holds SafeSends the group lost: all their acceptors
    /// delivered them and failed, and the indices went to others), the pulled one is kept.
    /// </summary>
    private HistoryEntry OwnCopyOr(long index, HistoryEntry pulled)
    {
        if (index <= _image.Trimmed || index > _image.Count) return pulled;
        HistoryEntry own = _image.Entries[(int)(index - _image.Trimmed - 1)];
        bool same = own.Sender == pulled.Sender && own.ViewId == pulled.ViewId && own.Seq == pulled.Seq && own.Phi == pulled.Phi
            && own.Query == pulled.Query && own.Payload.Span.SequenceEqual(pulled.Payload.Span);
        if (!same && !OwnEntryUnchecked) return pulled; // (deliberately broken if taken anyway)
        _node.Counters.HistoryEntriesFromOwnLog++;
        return own;
    }

    private void RetryPull(long now)
    {
        PullState pull = _pull!;
        if (pull.Fetch is { } f)
        {
            // A copy the driver never confirmed (it found it damaged) starts over.
            if (f.Complete) pull.Fetch = new CheckpointFetch(f.From, f.Index, -1);
            SendCheckpointPull(now);
        }
        else
        {
            SendPull(now);
        }
    }

    private void SendPull(long now)
    {
        PullState pull = _pull!;
        pull.NextAt = now + 2 * _node.Options.NakInterval;
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryPull, _node.Self, _member.Id, _view!.Id, pull.Base + pull.Pulled.Count + 1)).I64(_plan!.Target);
        _node.SendTo(_plan.Source.Endpoint, w.Finish());
    }

    private void OnPull(NodeId from, long first, ref WireReader r)
    {
        long target = r.I64();
        if (!r.Complete || first < 1 || target < first) { r.Fail(); return; }
        if (!Current || target > Count) { _node.Counters.DroppedNotForMe++; return; }
        if (first <= _trimmed)
        {
            // Our log starts later: offer the puller the checkpoint that covers our trim point (within what it copies).
            if (Usable(_lineage, _trimmed, target) is { } offer) RequestCheckpointRead(from, offer, 0);
            else _node.Counters.DroppedNotForMe++;
            return;
        }
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryChunk, _node.Self, _member.Id, _view!.Id, first));
        int count = 0;
        long bytes = 0;
        int at = (int)(first - _trimmed - 1);
        int chunkBytes = _node.Options.HistoryChunkBytes;
        for (long i = first; i <= target && (count == 0 || bytes + _entries[at + count].Payload.Length <= chunkBytes); i++)
        {
            bytes += _entries[at + count].Payload.Length;
            count++;
        }
        w.I32(count);
        for (int k = 0; k < count; k++) HistoryLog.WriteTransferred(w, _entries[at + k]);
        w.I64((long)DigestAt(first - 1)); // the puller checks the checkpoint it starts from against it
        _node.SendTo(from.Endpoint, w.Finish());
    }

    private void OnChunk(NodeId from, long first, ref WireReader r, long now)
    {
        int count = r.Count(32);
        var entries = new List<HistoryEntry>(count);
        for (int k = 0; k < count && r.Ok; k++)
        {
            if (HistoryLog.ReadTransferred(ref r, first + k) is { } e) entries.Add(e);
        }
        ulong digest = (ulong)r.I64();
        if (!r.Complete || first < 1) { r.Fail(); return; }
        if (Current || _pull is not { Fetch: null } pull || from != _plan!.Source || first != pull.Base + pull.Pulled.Count + 1) { _node.Counters.Duplicates++; return; }
        if (!pull.BaseChecked)
        {
            if (!PrefixUnchecked && !HistoryDigest.Agree(pull.BaseDigest, digest))
            {
                // The checkpoint this member starts from holds other SafeSends than the source's history at its index.
                _notPrefixCopies.Add((_plan.Lineage, pull.Base)); // if it was a copy, the provider's is no better
                if (pull.BaseMark is { } bad && _kept.Contains(bad)) RejectCheckpoint(bad, $"{from}'s history holds other SafeSends at {bad.Index}");
                StartPull(now); // from the next checkpoint that may hold a prefix, or a copy, or nothing
                return;
            }
            pull.BaseChecked = true;
            if (pull.BaseDigest == HistoryDigest.Unknown) pull.BaseDigest = digest;
        }
        foreach (HistoryEntry e in entries)
        {
            if (pull.Base + pull.Pulled.Count >= _plan.Target) break;
            pull.Pulled.Add(OwnCopyOr(pull.Base + pull.Pulled.Count + 1, e));
            pull.Unstaged += e.Payload.Length + EntryRecordOverhead;
        }
        if (pull.Base + pull.Pulled.Count == _plan.Target)
        {
            CheckpointMark? restore = pull.Restore;
            if (restore != null && restore != pull.BaseMark && !PrefixUnchecked)
            {
                // The restored checkpoint is past the base: the pulled entries say whether it holds a prefix.
                ulong d = pull.BaseDigest;
                for (long i = pull.Base; i < restore.Index; i++) d = HistoryDigest.Next(d, pull.Pulled[(int)(i - pull.Base)]);
                if (!HistoryDigest.Agree(restore.Digest, d))
                {
                    RejectCheckpoint(restore, $"{from}'s history holds other SafeSends at {restore.Index}");
                    restore = pull.BaseMark; // checked at the first chunk
                }
            }
            BecomeCurrent(pull.Base, pull.Pulled, restore, rewrite: true, baseDigest: pull.BaseDigest, staged: pull);
            return;
        }
        if (pull.Unstaged >= _node.Options.HistoryCopyPartBytes) StagePart(pull);
        SendPull(now);
    }

    // What an entry's log record adds to its payload (HistoryLog.Entry: kind, index, sender, view,
    // seq, phi, length; the driver's frame), about: it only sizes the parts of a copy.
    private const int EntryRecordOverhead = 48;

    /// <summary>
    /// Writes the entries pulled since the last part aside, as the next part of the new log (the
    /// first part starts with the log's header: incarnations, this view, the trim point), durable in
    /// this step (<see cref="HistoryStage"/>). The log itself is untouched: the copy replaces it only
    /// with its last part (<see cref="RewriteLog"/>), so a crash before leaves the old log, and the
    /// copy aside, which no reader takes for a log, is discarded at the next start. Without this the
    /// step that completes a long copy would encode and write the whole history at once, holding the
    /// driver (and the heartbeats it sends) for as long as that takes.
    /// </summary>
    private void StagePart(PullState pull)
    {
        HistoryPlan plan = _plan!;
        bool first = pull.StagedParts == 0;
        List<byte[]> records = first ? LogHeader(plan.Epoch, plan.Lineage, pull.Base, pull.BaseDigest, pull.Pulled.Count) : new List<byte[]>(pull.Pulled.Count - pull.Staged);
        for (int k = pull.Staged; k < pull.Pulled.Count; k++) records.Add(HistoryLog.Entry(_node.Writer, pull.Pulled[k]));
        if (first) pull.StagedHeader = HeaderKey(pull.Base);
        HistoryWrite write = CopyOverLogInPlace
            ? new HistoryWrite(_member.Id, records, Rewrite: first, KeepOldAside: false) // deliberately broken: the log is overwritten by a part
            : new HistoryWrite(_member.Id, records, Rewrite: false, KeepOldAside: false, first ? HistoryStage.Begin : HistoryStage.Continue);
        _node.Outbox.HistoryWrites.Add(write);
        pull.StagedParts++;
        pull.Staged = pull.Pulled.Count;
        pull.Unstaged = 0;
        _node.Counters.HistoryCopyParts++;
    }

    // ---------------------------------------------------------------- copying a checkpoint

    private void SendCheckpointPull(long now)
    {
        PullState pull = _pull!;
        CheckpointFetch f = pull.Fetch!;
        pull.NextAt = now + 2 * _node.Options.NakInterval;
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryCheckpointPull, _node.Self, _member.Id, _view!.Id, f.Index))
            .Node(_plan!.Lineage.Founder).I32(_plan.Lineage.ViewId).I64(f.Offset);
        _node.SendTo(f.From.Endpoint, w.Finish());
    }

    /// <summary>A member asks for part of a checkpoint this member keeps (it need not be current: a recovery's provider is not yet).</summary>
    private void OnCheckpointPull(NodeId from, long index, ref WireReader r)
    {
        NodeId founder = r.Node();
        int foundedIn = r.I32();
        long offset = r.I64();
        if (!r.Complete || index < 1 || offset < 0) { r.Fail(); return; }
        var lineage = new Lineage(founder, foundedIn);
        CheckpointMark? mark = _kept.FirstOrDefault(k => k.Lineage == lineage && k.Index == index && !_setAside.Contains(k));
        if (mark == null) { _node.Counters.DroppedNotForMe++; return; }
        RequestCheckpointRead(from, mark, offset);
    }

    /// <summary>The driver reads the checkpoint's bytes from its disk and answers with <see cref="AnswerCheckpointRead"/>.</summary>
    private void RequestCheckpointRead(NodeId requester, CheckpointMark mark, long offset) =>
        _node.Emit(new CheckpointReadRequested(_member.Id, requester, mark, offset, CheckpointChunkBytes));

    /// <summary>The driver read part of a checkpoint a member asked for (null: it could not, and says why).</summary>
    public void AnswerCheckpointRead(NodeId requester, CheckpointMark mark, long offset, byte[]? bytes, long total, string? problem)
    {
        if (_view == null) return;
        if (bytes == null)
        {
            _node.Emit(new HistoryNotice(_member.Id, HistoryNoticeKind.CheckpointNotServed,
                $"a member asked for this member's persistent checkpoint {mark.Name} ({mark.Lineage}, {mark.Index} entries) to copy the history, and it could not be read: {problem}"));
            return;
        }
        PacketWriter w = _node.Writer.Begin(new PacketHeader(PacketKind.HistoryCheckpointChunk, _node.Self, _member.Id, _view.Id, mark.Index))
            .Node(mark.Lineage.Founder).I32(mark.Lineage.ViewId).I64(offset).I64(total).Bytes(bytes);
        _node.SendTo(requester.Endpoint, w.Finish());
    }

    private void OnCheckpointChunk(NodeId from, long index, ref WireReader r, long now)
    {
        NodeId founder = r.Node();
        int foundedIn = r.I32();
        long offset = r.I64();
        long total = r.I64();
        byte[] bytes = r.Bytes();
        if (!r.Complete || index < 1 || offset < 0 || total < 1 || offset + bytes.Length > total || (bytes.Length == 0 && offset < total)) { r.Fail(); return; }
        HistoryPlan? plan = _plan;
        if (Current || _pull is not { } pull || plan == null || new Lineage(founder, foundedIn) != plan.Lineage
            || (from != plan.Source && from != plan.Provider) || index > plan.Target || index < plan.Trimmed)
        {
            _node.Counters.Duplicates++;
            return;
        }
        if (pull.Fetch is not { } f || f.Index != index || f.From != from || f.Total != total)
        {
            // A copy starts at its first byte: the source's offer after a pull of entries it trimmed, or the answer to our own first request.
            if (offset != 0) { _node.Counters.Duplicates++; return; }
            f = pull.Fetch = new CheckpointFetch(from, index, total);
        }
        if (offset != f.Offset || f.Complete) { _node.Counters.Duplicates++; return; }
        _node.Emit(new CheckpointChunkReceived(_member.Id, plan.Lineage, index, offset, total, bytes));
        f.Offset += bytes.Length;
        if (f.Offset == total)
        {
            f.Complete = true;
            pull.NextAt = now + _node.Options.RetryInterval;
        }
        else
        {
            SendCheckpointPull(now);
        }
    }

    /// <summary>The copied checkpoint is durable as this member's own (the driver checked and wrote it): continue with the entries after it.</summary>
    private void OnFetchedCheckpointDurable(CheckpointMark mark, long now)
    {
        PullState pull = _pull!;
        pull.Base = mark.Index;
        pull.Restore = mark;
        pull.BaseMark = mark;
        pull.BaseDigest = mark.Digest;
        pull.BaseChecked = false;
        pull.Fetch = null;
        pull.Pulled = [];
        ContinueAfterBase(now);
    }
}
