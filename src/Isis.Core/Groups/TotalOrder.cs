using System.Buffers.Binary;
using Isis.Core.Common;

namespace Isis.Core.Groups;

/// <summary>
/// The total order of OrderedSend and SafeSend within one view, by a fixed sequencer: the oldest
/// member (rank 0) assigns positions 1, 2, 3, ... in the order it receives such messages (FIFO per
/// sender, so the total order respects each sender's order) and announces them in its own stream.
/// Every member delivers the message at the next position once it holds it, and, for a SafeSend,
/// once every one of its acceptors (the first phi members of the view) has acknowledged holding
/// every position up to it.
/// </summary>
/// <remarks>
/// Cost: one multicast per message plus one announcement per sequencer step (many positions
/// each); SafeSend adds one small acknowledgement per acceptor step. Latency: two hops for
/// OrderedSend (sender to sequencer, sequencer to all), about three for SafeSend (plus the
/// acceptors' acknowledgements). When members fail, the view-change flush gives every survivor the
/// same messages, announcements and acknowledgements; what is left is placed deterministically
/// (<see cref="DrainAtViewEnd"/>), and the next view's oldest member becomes the sequencer.
/// </remarks>
internal sealed class TotalOrder
{
    public const int SequencerRank = 0;

    private readonly List<(int Rank, long Seq, StreamMessage Message)> _newlyAccepted = new();
    private readonly Dictionary<(int Rank, long Seq), StreamMessage> _waiting = new();
    private readonly List<(int Rank, long Seq)> _positions = new();
    private readonly List<(int Rank, long Seq)> _toAnnounce = new();
    private int _next; // index in _positions of the next position to deliver
    private long[] _acceptedThrough = [];
    private long _myAccepted;
    private long _lastAnnouncedAccept;
    private int _viewSize;
    private int _acceptorsNeeded; // the largest phi among SafeSends of this view: ranks below it acknowledge

    /// <summary>Broken on purpose by <c>ProtocolMutations.SafeDeliversOneAcceptorShort</c>.</summary>
    public bool OneAcceptorShort { get; init; }

    public void Reset(int viewSize)
    {
        _waiting.Clear();
        _positions.Clear();
        _toAnnounce.Clear();
        _next = 0;
        _acceptedThrough = new long[viewSize];
        _myAccepted = 0;
        _lastAnnouncedAccept = 0;
        _viewSize = viewSize;
        _acceptorsNeeded = 0;
    }

    /// <summary>How many acceptors a SafeSend with <paramref name="phi"/> needs in this view.</summary>
    public int Acceptors(int phi) => phi <= 0 ? _viewSize : Math.Min(phi, _viewSize);

    /// <summary>An ordered or safe message reached the head of its stream; the sequencer also gives it the next position.</summary>
    public void Add(int rank, long seq, StreamMessage message, bool announce)
    {
        Invariant.Check(_waiting.TryAdd((rank, seq), message), $"a message enters the total order once: rank {rank}, seq {seq} is already waiting");
        if (message.Kind.IsSafe()) _acceptorsNeeded = Math.Max(_acceptorsNeeded, Acceptors(message.Phi));
        if (announce) _toAnnounce.Add((rank, seq));
    }

    /// <summary>Reads an announcement: a count, then (rank, seq) pairs.</summary>
    public bool TryAddPositions(ReadOnlySpan<byte> span, int ranks)
    {
        if (span.Length < 4) return false;
        int count = BinaryPrimitives.ReadInt32LittleEndian(span);
        if (count < 0 || (long)count * 12 != span.Length - 4) return false;
        // Validate every pair before taking any, so a malformed announcement changes nothing.
        for (int i = 0; i < count; i++)
        {
            int rank = BinaryPrimitives.ReadInt32LittleEndian(span[(4 + i * 12)..]);
            long seq = BinaryPrimitives.ReadInt64LittleEndian(span[(8 + i * 12)..]);
            if (rank < 0 || rank >= ranks || seq <= 0) return false;
        }
        for (int i = 0; i < count; i++)
        {
            _positions.Add((BinaryPrimitives.ReadInt32LittleEndian(span[(4 + i * 12)..]), BinaryPrimitives.ReadInt64LittleEndian(span[(8 + i * 12)..])));
        }
        return true;
    }

    /// <summary>An acceptor's acknowledgement arrived (through its stream).</summary>
    public bool TryAddAcceptance(int rank, ReadOnlySpan<byte> payload)
    {
        if (payload.Length != 8 || rank < 0 || rank >= _acceptedThrough.Length) return false;
        long through = BinaryPrimitives.ReadInt64LittleEndian(payload);
        if (through < 0) return false;
        _acceptedThrough[rank] = Math.Max(_acceptedThrough[rank], through);
        return true;
    }

    /// <summary>
    /// Advances this member's own acceptance over every position whose message it holds, in order.
    /// Returns the newly accepted safe messages (for the history). A delivered position was held by
    /// every acceptor already, so positions before <see cref="_next"/> count as held.
    /// </summary>
    /// <remarks>The list is reused: it is valid until the next call (no allocation per ordered delivery).</remarks>
    public List<(int Rank, long Seq, StreamMessage Message)> AdvanceMyAcceptance()
    {
        List<(int Rank, long Seq, StreamMessage Message)> accepted = _newlyAccepted;
        accepted.Clear();
        while (_myAccepted < _positions.Count)
        {
            int index = (int)_myAccepted;
            var key = _positions[index];
            if (index >= _next && !_waiting.ContainsKey(key)) break;
            _myAccepted++;
            if (index >= _next && _waiting[key] is { } m && m.Kind.IsSafe()) accepted.Add((key.Rank, key.Seq, m));
        }
        return accepted;
    }

    /// <summary>This member's acknowledgement to send, if it is an acceptor and accepted more since the last one.</summary>
    public bool TryTakeAcceptance(int myRank, out long acceptedThrough)
    {
        acceptedThrough = 0;
        if (myRank >= _acceptorsNeeded || _myAccepted <= _lastAnnouncedAccept) return false;
        _lastAnnouncedAccept = _myAccepted;
        acceptedThrough = _myAccepted;
        return true;
    }

    private bool Accepted(long position, int phi)
    {
        int needed = Acceptors(phi);
        if (OneAcceptorShort) needed = Math.Max(1, needed - 1);
        for (int r = 0; r < needed; r++)
        {
            if (_acceptedThrough[r] < position) return false;
        }
        return true;
    }

    /// <summary>The next message in the total order, if it is here and (for SafeSend) its acceptors all hold it.</summary>
    public bool TryTakeNext(out int rank, out long seq, out StreamMessage message)
    {
        (rank, seq, message) = (0, 0, default);
        if (_next >= _positions.Count) return false;
        var head = _positions[_next];
        if (!_waiting.TryGetValue(head, out StreamMessage m)) return false;
        if (m.Kind.IsSafe() && !Accepted(_next + 1, m.Phi)) return false;
        _waiting.Remove(head);
        _next++;
        (rank, seq, message) = (head.Rank, head.Seq, m);
        return true;
    }

    /// <summary>The sequencer's pending positions as one announcement, if any.</summary>
    /// <summary>Bytes of the announcement <see cref="TakeAnnouncement"/> would write (0: nothing to announce).</summary>
    public int AnnouncementLength => _toAnnounce.Count == 0 ? 0 : 4 + 12 * _toAnnounce.Count;

    /// <summary>Writes the positions announced since the last call (a count, then (rank, seq) pairs) into <paramref name="into"/>, <see cref="AnnouncementLength"/> bytes.</summary>
    public void TakeAnnouncement(Span<byte> into)
    {
        BinaryPrimitives.WriteInt32LittleEndian(into, _toAnnounce.Count);
        for (int i = 0; i < _toAnnounce.Count; i++)
        {
            BinaryPrimitives.WriteInt32LittleEndian(into[(4 + i * 12)..], _toAnnounce[i].Rank);
            BinaryPrimitives.WriteInt64LittleEndian(into[(8 + i * 12)..], _toAnnounce[i].Seq);
        }
        _toAnnounce.Clear();
    }

    /// <summary>
    /// At the end of a view, when every survivor holds the same messages and announcements:
    /// every announced position whose message survivors hold, in order (a position whose message no
    /// survivor holds is skipped: no member can have delivered past it). A SafeSend delivered
    /// anywhere was held by all its acceptors, so if any acceptor survives, every survivor holds it
    /// now and delivers it here: that is SafeSend's durability. Survivors cannot tell whether a
    /// crashed acceptor had it, so they deliver every announced SafeSend they hold. Then the
    /// unannounced OrderedSends by (rank, seq); unannounced SafeSends were delivered nowhere and
    /// are dropped (their senders send them again in the next view). Deterministic, so identical
    /// at every survivor.
    /// </summary>
    /// <remarks><c>Accepted</c>: this member had already accepted (held in order) the position, so a durable history holds it already.</remarks>
    public IEnumerable<(int Rank, long Seq, StreamMessage Message, bool Accepted)> DrainAtViewEnd()
    {
        for (; _next < _positions.Count; _next++)
        {
            var head = _positions[_next];
            if (_waiting.Remove(head, out StreamMessage message)) yield return (head.Rank, head.Seq, message, _next < _myAccepted);
        }
        foreach (var key in _waiting.Keys.OrderBy(k => k.Rank).ThenBy(k => k.Seq).ToList())
        {
            StreamMessage message = _waiting[key];
            _waiting.Remove(key);
            if (!message.Kind.IsSafe()) yield return (key.Rank, key.Seq, message, false);
        }
        _toAnnounce.Clear();
    }
}
