using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Durability;

/// <summary>
/// Where a history comes from: the member that founded it and the view it founded it in. Every
/// history recovered or copied from it keeps the same lineage, so a log of another lineage (a
/// history founded while this one's holders were away) is recognised and never mixed in.
/// </summary>
internal readonly record struct Lineage(NodeId Founder, int ViewId)
{
    public override string ToString() => $"{Founder}@v{ViewId}";
}

/// <summary>
/// A view as the durable history orders it: recoveries start a new epoch, because the membership
/// service that numbers views may itself have restarted and numbered from 1 again.
/// </summary>
internal readonly record struct HistoryViewKey(long Epoch, int ViewId) : IComparable<HistoryViewKey>
{
    public int CompareTo(HistoryViewKey other) => Epoch != other.Epoch ? Epoch.CompareTo(other.Epoch) : ViewId.CompareTo(other.ViewId);

    public static bool operator <(HistoryViewKey a, HistoryViewKey b) => a.CompareTo(b) < 0;

    public static bool operator >(HistoryViewKey a, HistoryViewKey b) => a.CompareTo(b) > 0;

    public static bool operator <=(HistoryViewKey a, HistoryViewKey b) => a.CompareTo(b) <= 0;

    public static bool operator >=(HistoryViewKey a, HistoryViewKey b) => a.CompareTo(b) >= 0;

    public override string ToString() => $"e{Epoch}/v{ViewId}";
}

/// <summary>
/// One SafeSend or SafeQuery of the group's durable history: its place (<see cref="Index"/>,
/// 1-based, no gaps), the id it was sent under (sender incarnation, view, sequence number), its
/// phi and its payload (a SafeQuery's starts with its 8-byte query id, as it was delivered).
/// </summary>
/// <param name="Index">Its place in the history, from 1.</param>
/// <param name="Sender">The incarnation that sent it.</param>
/// <param name="ViewId">The view it was sent in.</param>
/// <param name="Seq">Its sequence number in the sender's stream of that view.</param>
/// <param name="Phi">Its acceptor threshold.</param>
/// <param name="Payload">What was delivered.</param>
/// <param name="Query">A SafeQuery request: replayed to the query handlers, whose replies go nowhere (the query ended long ago).</param>
internal sealed record HistoryEntry(long Index, NodeId Sender, int ViewId, long Seq, int Phi, ReadOnlyMemory<byte> Payload, bool Query = false)
{
    /// <summary>The message kind it was delivered as.</summary>
    public MessageKind Kind => Query ? MessageKind.QuerySafe : MessageKind.Safe;
}

/// <summary>
/// "This member holds the whole history and is current in this view": written when a member that
/// holds the history installs a view, or when a member comes to hold it. Its members are the ones
/// that must come back before a group restarted after a total crash may deliver again.
/// </summary>
internal sealed record HistoryViewRecord(HistoryViewKey Key, Lineage Lineage, NodeId Me, NodeId[] Members);

/// <summary>
/// A digest of a history's prefix: a chain over the ids of its entries (sender incarnation, view,
/// sequence number), one step per index, so two histories of one lineage have the same digest at
/// index i only if (but for a 2^-64 chance) their entries 1..i are the same SafeSends. A persistent
/// checkpoint records the digest of the prefix it holds and is restored only where the history the
/// member now holds has that digest at that index: lineage and index alone do not say that, since
/// SafeSends that every acceptor delivered and then lost with its crash leave their indices to
/// others (docs/semantics.md). 0 is "unknown" (a log or checkpoint written before digests), which
/// every digest matches, as an unknown state lineage is accepted.
/// </summary>
internal static class HistoryDigest
{
    /// <summary>The digest of the empty prefix (index 0).</summary>
    public const ulong Empty = 0x6a09e667f3bcc908UL;

    /// <summary>Unknown: matches every digest.</summary>
    public const ulong Unknown = 0;

    /// <summary>The digest of a prefix extended by one entry (unknown stays unknown).</summary>
    public static ulong Next(ulong prefix, NodeId sender, int viewId, long seq)
    {
        if (prefix == Unknown) return Unknown;
        ulong h = prefix;
        h = Mix(h ^ sender.Endpoint);
        h = Mix(h ^ sender.Incarnation);
        h = Mix(h ^ (uint)viewId);
        h = Mix(h ^ (ulong)seq);
        return h == Unknown ? 1 : h;
    }

    /// <summary>The digest of a prefix extended by <paramref name="e"/>.</summary>
    public static ulong Next(ulong prefix, HistoryEntry e) => Next(prefix, e.Sender, e.ViewId, e.Seq);

    /// <summary>True unless both digests are known and differ.</summary>
    public static bool Agree(ulong a, ulong b) => a == Unknown || b == Unknown || a == b;

    // splitmix64's finaliser after a multiply-add: every input bit reaches every output bit.
    private static ulong Mix(ulong z)
    {
        z = (z + 0x9e3779b97f4a7c15UL) * 0xbf58476d1ce4e5b9UL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
        return z ^ (z >> 31);
    }
}

/// <summary>
/// The records of a member's durable history log, one per <c>DurableRecordFile</c> record:
/// Incarnation (written before the join request leaves, so every incarnation that is ever in a
/// view can later be recognised as this log's), View, Entry (a SafeSend; a SafeQuery has a kind
/// of its own, so logs written before SafeQueries were logged read the same), and Trim ("the
/// entries up to this point are held in a persistent checkpoint": appended where the member trims,
/// or at the head of a rewritten log; a reader leaves those entries out), Segment (a segment of a
/// log kept in segment files begins, restating what a reader starting there needs),
/// ForcedRecovery ("the operator allows this member's group to recover without the members of its
/// last view that have not come back": it counts until the member next holds the history, that is
/// until a View record follows it) and GaveUp (incarnations a forced recovery gave up: their logs
/// and checkpoints may hold SafeSends the history lost, so they are never taken as part of it).
/// Pure codec: never throws.
/// </summary>
internal static class HistoryLog
{
    /// <summary>A record's kind, its first byte (the reader and the drivers' segment bookkeeping read it too).</summary>
    internal const byte IncarnationKind = 1, ViewKind = 2, EntryKind = 3, QueryEntryKind = 4, TrimKind = 5, ForcedRecoveryKind = 6, GaveUpKind = 7, SegmentKind = 8;

    /// <summary>True if <paramref name="record"/> is a View record (the simulator's torn writes keep the records before a step's first one).</summary>
    public static bool IsViewRecord(ReadOnlySpan<byte> record) => record.Length > 0 && record[0] == ViewKind;

    public static byte[] Incarnation(PacketWriter w, NodeId self) => w.BeginRecord().U8(IncarnationKind).Node(self).FinishRecord();

    public static byte[] View(PacketWriter w, HistoryViewRecord v) => WriteViewBody(w.BeginRecord().U8(ViewKind), v).FinishRecord();

    /// <summary>A view's fields, as a View record and a member's status carry them.</summary>
    internal static PacketWriter WriteViewBody(PacketWriter w, HistoryViewRecord v) =>
        w.I64(v.Key.Epoch).I32(v.Key.ViewId).Node(v.Lineage.Founder).I32(v.Lineage.ViewId).Node(v.Me).Nodes(v.Members);

    /// <summary>Reads the fields <see cref="WriteViewBody"/> wrote; an epoch or view id below 1 fails the reader.</summary>
    internal static HistoryViewRecord ReadViewBody(ref WireReader r)
    {
        long epoch = r.I64();
        int viewId = r.I32();
        NodeId founder = r.Node();
        int foundedIn = r.I32();
        NodeId me = r.Node();
        NodeId[] members = r.Nodes();
        if (r.Ok && (epoch < 1 || viewId < 1)) r.Fail();
        return new HistoryViewRecord(new HistoryViewKey(epoch, viewId), new Lineage(founder, foundedIn), me, members);
    }

    /// <summary>
    /// Entries 1..<paramref name="through"/> of the lineage of the View record before it are held in
    /// a checkpoint, not in this log; <paramref name="digest"/> is their <see cref="HistoryDigest"/>
    /// (a Trim record written before digests has none: unknown).
    /// </summary>
    public static byte[] Trim(PacketWriter w, long through, ulong digest) => w.BeginRecord().U8(TrimKind).I64(through).I64((long)digest).FinishRecord();

    /// <summary>
    /// The operator allows a recovery without <paramref name="without"/> (members of the last view;
    /// none named: whichever have not come back), until this member next holds the history.
    /// </summary>
    public static byte[] ForcedRecovery(PacketWriter w, IEnumerable<NodeId> without) => w.BeginRecord().U8(ForcedRecoveryKind).Nodes([.. without]).FinishRecord();

    /// <summary>Incarnations a forced recovery gave up: what their logs and checkpoints hold is never taken as the history.</summary>
    public static byte[] GaveUp(PacketWriter w, IEnumerable<NodeId> incarnations) => w.BeginRecord().U8(GaveUpKind).Nodes([.. incarnations]).FinishRecord();

    public static byte[] Entry(PacketWriter w, HistoryEntry e) => WriteEntry(w.BeginRecord().U8(e.Query ? QueryEntryKind : EntryKind), e).FinishRecord();

    /// <summary>An entry as a transfer chunk carries it: whether it is a SafeQuery, then its fields after its index.</summary>
    internal static PacketWriter WriteTransferred(PacketWriter w, HistoryEntry e) => WriteEntryBody(w.U8(e.Query ? (byte)1 : (byte)0), e);

    /// <summary>Reads an entry written by <see cref="WriteTransferred"/>; null (and the reader failed) if malformed.</summary>
    internal static HistoryEntry? ReadTransferred(ref WireReader r, long index)
    {
        byte query = r.U8();
        if (r.Ok && query > 1) r.Fail();
        return ReadEntryBody(ref r, index, query == 1);
    }

    /// <summary>An entry's fields after its index (the index is the record's or the chunk's).</summary>
    internal static PacketWriter WriteEntryBody(PacketWriter w, HistoryEntry e) =>
        w.Node(e.Sender).I32(e.ViewId).I64(e.Seq).I32(e.Phi).Bytes(e.Payload.Span);

    private static PacketWriter WriteEntry(PacketWriter w, HistoryEntry e) => WriteEntryBody(w.I64(e.Index), e);

    /// <summary>
    /// Reads an entry body written by <see cref="WriteEntryBody"/>; null (and the reader failed) if
    /// malformed. Without <paramref name="keepPayload"/> the payload is checked and skipped, not
    /// copied (the entry's is empty): a driver's bookkeeping needs only the entry's id.
    /// </summary>
    /// <param name="r">The reader, positioned at the body.</param>
    /// <param name="index">The entry's index (the record's or the chunk's).</param>
    /// <param name="query">Whether the entry is a SafeQuery.</param>
    /// <param name="keepPayload">Whether the entry keeps its payload.</param>
    /// <param name="owner">
    /// The array <paramref name="r"/> reads from its start, when the caller owns it and nothing
    /// writes it again (a log record): the payload is then a slice of it instead of a copy, so that
    /// a recovering member holds its log once, not twice. Null: the payload is copied (a packet's
    /// buffer is reused).
    /// </param>
    internal static HistoryEntry? ReadEntryBody(ref WireReader r, long index, bool query = false, bool keepPayload = true, byte[]? owner = null)
    {
        NodeId sender = r.Node();
        int viewId = r.I32();
        long seq = r.I64();
        int phi = r.I32();
        ReadOnlyMemory<byte> payload = ReadOnlyMemory<byte>.Empty;
        int length;
        if (keepPayload && owner == null)
        {
            byte[] copy = r.Bytes();
            payload = copy;
            length = copy.Length;
        }
        else
        {
            length = r.SkipBytes();
            if (keepPayload && r.Ok) payload = new ReadOnlyMemory<byte>(owner, r.Position - length, length);
        }
        if (!r.Ok || sender.IsNone || viewId <= 0 || seq <= 0 || phi < 0) { r.Fail(); return null; }
        if (query && length < 8) { r.Fail(); return null; } // a query request starts with its id
        return new HistoryEntry(index, sender, viewId, seq, phi, payload, query);
    }

    /// <summary>
    /// A segment of a log begins (a driver keeps its log in segment files, and drops whole ones
    /// behind a Trim record): the segment's first entry is <paramref name="firstIndex"/>, and
    /// <paramref name="digestBefore"/> is the <see cref="HistoryDigest"/> of the entries before it.
    /// The records after it restate what a reader of the log from here on must know (incarnations,
    /// the last view, a pending forced recovery, the give-ups: <see cref="HistoryLogReader.SegmentHeader"/>).
    /// </summary>
    public static byte[] Segment(PacketWriter w, long firstIndex, ulong digestBefore) => w.BeginRecord().U8(SegmentKind).I64(firstIndex).I64((long)digestBefore).FinishRecord();

    /// <summary>True if <paramref name="record"/> begins a segment (<see cref="Segment"/>): a segment file that does not start with one starts a log.</summary>
    public static bool IsSegmentRecord(ReadOnlySpan<byte> record) => record.Length > 0 && record[0] == SegmentKind;

    /// <summary>The index of an Entry or SafeQuery entry record (0 for a record of another kind, or a malformed one).</summary>
    public static long EntryIndexOf(ReadOnlySpan<byte> record)
    {
        if (record.Length < 9 || record[0] is not (EntryKind or QueryEntryKind)) return 0;
        return new WireReader(record[1..]).I64();
    }

    /// <summary>
    /// Reads a log's records in order (<see cref="HistoryLogReader"/>). Reading stops at the first
    /// record that does not parse or does not fit (an entry out of place, an entry before any view,
    /// a Trim record past the entries read): what follows it is counted in
    /// <see cref="HistoryLogImage.Unreadable"/>, never taken as history.
    /// </summary>
    public static HistoryLogImage Read(IReadOnlyList<byte[]> records)
    {
        var reader = new HistoryLogReader(keepEntries: true);
        int i = 0;
        while (i < records.Count && reader.Accept(records[i])) i++;
        return reader.Image(records.Count - i);
    }
}

/// <summary>
/// Reads a history log record by record (<see cref="HistoryLog.Read"/> for a whole log; a driver
/// that keeps its log in segments follows its appends with one that keeps no entries, to know
/// what a new segment must restate and which segments a Trim record lets it drop).
/// </summary>
/// <remarks>
/// A Trim record may come anywhere after a view: the entries at or before its point leave the image
/// (a persistent checkpoint holds them), so a log trimmed by appending a Trim record reads as one
/// rewritten without them. A Segment record says where its segment's entries start: where that is
/// the next index it is checked and changes nothing; elsewhere (the log starts at that segment,
/// the ones before it dropped, or a segment left over from before a drop) the entries read so far
/// go and the entries before it count as trimmed. Records a segment header restates are accepted
/// again: an incarnation already known, the last view again (equal, not later), give-ups again.
/// </remarks>
internal sealed class HistoryLogReader(bool keepEntries)
{
    private readonly List<NodeId> _incarnations = [];
    private readonly List<HistoryEntry> _entries = [];
    private readonly List<NodeId> _gaveUp = [];
    private HistoryViewRecord? _last;
    private long _trimmed;
    private ulong _trimmedDigest = HistoryDigest.Empty;
    private long _count; // entries read after the trim point (kept in _entries with keepEntries)
    private ulong _digest = HistoryDigest.Empty; // of entries 1.._trimmed+_count
    private NodeId[]? _forcedWithout;

    /// <summary>How long the history read so far is (trimmed entries included).</summary>
    public long Count => _trimmed + _count;

    /// <summary>Entries 1..Trimmed are held in a checkpoint, not in the log.</summary>
    public long Trimmed => _trimmed;

    /// <summary>
    /// Takes the next record; false if it does not parse or does not fit (the reader is then
    /// unchanged, and the records from it on are not the log's).
    /// </summary>
    public bool Accept(byte[] record)
    {
        var r = new WireReader(record);
        byte kind = r.U8();
        switch (kind)
        {
            case HistoryLog.IncarnationKind:
            {
                NodeId node = r.Node();
                if (!r.Complete || node.IsNone) return false;
                if (!_incarnations.Contains(node)) _incarnations.Add(node);
                return true;
            }
            case HistoryLog.ViewKind:
            {
                HistoryViewRecord view = HistoryLog.ReadViewBody(ref r);
                if (!r.Complete || Array.IndexOf(view.Members, view.Me) < 0) return false;
                if (_last != null && view.Key == _last.Key)
                {
                    // A segment header restates the last view: the same record, nothing changes.
                    return view.Lineage == _last.Lineage && view.Me == _last.Me && view.Members.AsSpan().SequenceEqual(_last.Members);
                }
                if (_last != null && view.Key < _last.Key) return false;
                _last = view;
                _forcedWithout = null; // this member held the history again: an earlier permission is spent
                return true;
            }
            case HistoryLog.EntryKind or HistoryLog.QueryEntryKind:
            {
                long index = r.I64();
                HistoryEntry? e = HistoryLog.ReadEntryBody(ref r, index, kind == HistoryLog.QueryEntryKind, keepEntries, keepEntries ? record : null);
                if (e == null || !r.Complete || _last == null || index != Count + 1) return false;
                if (keepEntries) _entries.Add(e);
                _count++;
                _digest = HistoryDigest.Next(_digest, e);
                return true;
            }
            case HistoryLog.TrimKind:
            {
                long through = r.I64();
                ulong digest = r.Ok && r.Remaining >= 8 ? (ulong)r.I64() : HistoryDigest.Unknown;
                if (!r.Complete || through < 1 || _last == null) return false;
                if (Count == 0)
                {
                    // At the head of a log rewritten at a trim: the entries start after it.
                    _trimmed = through;
                    _trimmedDigest = _digest = digest;
                    return true;
                }
                if (through > Count) return false;
                if (through <= _trimmed) return true; // restated, or older than a later segment's start
                if (through == Count && !HistoryDigest.Agree(digest, _digest)) return false;
                int drop = (int)(through - _trimmed);
                if (keepEntries) _entries.RemoveRange(0, drop);
                _count -= drop;
                _trimmed = through;
                _trimmedDigest = digest;
                return true;
            }
            case HistoryLog.SegmentKind:
            {
                long first = r.I64();
                ulong digestBefore = (ulong)r.I64();
                if (!r.Complete || first < 1) return false;
                if (first == Count + 1) return HistoryDigest.Agree(digestBefore, _digest);
                // The log starts here (earlier segments were dropped behind a Trim record at or past
                // this point), or an earlier segment outlived its drop: this segment's entries are the log's.
                if (keepEntries) _entries.Clear();
                _count = 0;
                _trimmed = first - 1;
                _trimmedDigest = _digest = first == 1 ? HistoryDigest.Empty : digestBefore;
                return true;
            }
            case HistoryLog.ForcedRecoveryKind:
            {
                NodeId[] without = r.Nodes();
                if (!r.Complete || without.Any(n => n.IsNone)) return false;
                _forcedWithout = without;
                return true;
            }
            case HistoryLog.GaveUpKind:
            {
                NodeId[] nodes = r.Nodes();
                if (!r.Complete || nodes.Any(n => n.IsNone)) return false;
                foreach (NodeId n in nodes)
                {
                    if (!_gaveUp.Contains(n)) _gaveUp.Add(n);
                }
                return true;
            }
            default:
                return false;
        }
    }

    /// <summary>
    /// The records a new segment starts with, so that a reader of the log from that segment on
    /// reads what a reader of the whole log reads: a Segment record (the next entry's index and
    /// the digest before it), then every incarnation, the last view, a pending forced recovery and
    /// the give-ups.
    /// </summary>
    public List<byte[]> SegmentHeader(PacketWriter w)
    {
        var records = new List<byte[]>(_incarnations.Count + 4) { HistoryLog.Segment(w, Count + 1, _digest) };
        foreach (NodeId n in _incarnations) records.Add(HistoryLog.Incarnation(w, n));
        if (_last != null) records.Add(HistoryLog.View(w, _last));
        if (_forcedWithout != null) records.Add(HistoryLog.ForcedRecovery(w, _forcedWithout));
        if (_gaveUp.Count > 0) records.Add(HistoryLog.GaveUp(w, _gaveUp));
        return records;
    }

    /// <summary>What the records read so far hold (with <paramref name="unreadable"/> records after them ignored).</summary>
    public HistoryLogImage Image(int unreadable = 0) =>
        new([.. _incarnations], _last, _trimmed, keepEntries ? [.. _entries] : [], unreadable)
        {
            ForcedWithout = _forcedWithout,
            GaveUp = [.. _gaveUp],
            TrimmedDigest = _trimmedDigest,
        };
}

/// <summary>
/// A persistent checkpoint a member kept on disk, as the driver names it to the core at join: the
/// history it was made in and how many of that history's entries the application had applied then
/// (the checkpoint holds their effects, so a restart replays only the entries after them).
/// </summary>
/// <param name="Lineage">The history the checkpoint was made in.</param>
/// <param name="Index">Entries 1..Index are in it.</param>
/// <param name="Name">The driver's name for it (a file), handed back in <see cref="Node.CheckpointRestored"/>.</param>
/// <param name="Digest">The <see cref="HistoryDigest"/> of entries 1..Index as the member applied them (<see cref="HistoryDigest.Unknown"/>: a checkpoint written before digests).</param>
internal sealed record CheckpointMark(Lineage Lineage, long Index, string Name, ulong Digest = HistoryDigest.Unknown);

/// <summary>What a member's durable history log held when it joined.</summary>
/// <param name="Incarnations">Every incarnation that joined with this log (the ones its View records can name).</param>
/// <param name="LastView">The last view in which this log's member held the whole history, if it ever did.</param>
/// <param name="Trimmed">Entries 1..Trimmed are not in the log: they are held in a persistent checkpoint (0: none trimmed).</param>
/// <param name="Entries">The history it held then after the trimmed ones, in order, indices Trimmed+1..n.</param>
/// <param name="Unreadable">Records after the first damaged or misplaced one, ignored.</param>
internal sealed record HistoryLogImage(List<NodeId> Incarnations, HistoryViewRecord? LastView, long Trimmed, List<HistoryEntry> Entries, int Unreadable)
{
    public static HistoryLogImage Empty => new([], null, 0, [], 0);

    /// <summary>
    /// The operator allowed a forced recovery after this log's member last held the history: without
    /// these members of the last view (empty: whichever have not come back); null if not allowed.
    /// </summary>
    public NodeId[]? ForcedWithout { get; init; }

    /// <summary>Incarnations a forced recovery of this history gave up (see <see cref="HistoryLog.GaveUp"/>).</summary>
    public List<NodeId> GaveUp { get; init; } = [];

    /// <summary>
    /// The driver knows that a history of this group was founded (a registry of durable groups on
    /// this machine names it) though this log holds none of it: this member must never found a
    /// new one over it, even as the oldest member of the group's first view (a membership service
    /// that restarted and forgot the group numbers its views from 1 again).
    /// </summary>
    public bool FoundedElsewhere { get; init; }

    /// <summary>The <see cref="HistoryDigest"/> of entries 1..Trimmed, from the Trim record (unknown if it predates digests).</summary>
    public ulong TrimmedDigest { get; init; } = HistoryDigest.Empty;

    /// <summary>How long the history it held is (trimmed entries included).</summary>
    public long Count => Trimmed + Entries.Count;

    /// <summary>The digest of entries 1..<paramref name="index"/> of this log's history (unknown below its trim point or past its end).</summary>
    public ulong DigestAt(long index)
    {
        if (index < Trimmed || index > Count) return HistoryDigest.Unknown;
        ulong d = TrimmedDigest;
        for (long i = Trimmed; i < index; i++) d = HistoryDigest.Next(d, Entries[(int)(i - Trimmed)]);
        return d;
    }
}
