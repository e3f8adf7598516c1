using Isis.Core.Identity;

namespace Isis.Core.Groups;

/// <summary>
/// The maker's side of one state transfer: the checkpoint made at the cut of view <see cref="Cut"/>,
/// streamed in numbered chunks to that view's joiners, each with its own window and acknowledgement.
/// </summary>
/// <remarks>
/// Chunks every receiver holds are released, so what the maker keeps is bounded by the window
/// plus what the application queued ahead of it (the driver waits while <see cref="BufferedBytes"/>
/// is large), whatever the checkpoint's size.
/// </remarks>
internal sealed class OutgoingState
{
    private readonly List<byte[]> _chunks = new(); // chunk numbers _first, _first + 1, ...
    private readonly List<long> _ends = new();      // bytes of the checkpoint through each of them
    private long _first = 1;
    private long _releasedEnd;                      // bytes of the checkpoint through chunk _first - 1

    public OutgoingState(int cut, IEnumerable<NodeId> joiners)
    {
        Cut = cut;
        foreach (NodeId j in joiners) Receivers[j] = new Receiver();
    }

    public int Cut { get; }

    public Dictionary<NodeId, Receiver> Receivers { get; } = new();

    /// <summary>The application marked its last chunk: nothing more will be added.</summary>
    public bool Ended { get; private set; }

    /// <summary>Chunks made so far (numbered 1 to Count).</summary>
    public long Count => _first - 1 + _chunks.Count;

    /// <summary>Checkpoint bytes held here: made, and not yet acknowledged by every receiver.</summary>
    public long BufferedBytes => (_ends.Count == 0 ? _releasedEnd : _ends[^1]) - _releasedEnd;

    public void Add(byte[] chunk, bool last)
    {
        long end = (_ends.Count == 0 ? _releasedEnd : _ends[^1]) + chunk.Length;
        _chunks.Add(chunk);
        _ends.Add(end);
        Ended = last;
    }

    public byte[] Chunk(long number) => _chunks[(int)(number - _first)];

    /// <summary>Bytes of the checkpoint through chunk <paramref name="number"/> (0 for none); never asked of a released chunk but the last.</summary>
    public long EndOf(long number) => number < _first ? _releasedEnd : _ends[(int)(number - _first)];

    /// <summary>Forgets the chunks every receiver acknowledged.</summary>
    public void ReleaseAcknowledged()
    {
        long through = long.MaxValue;
        foreach (Receiver r in Receivers.Values) through = Math.Min(through, r.Acked);
        if (Receivers.Count == 0) through = Count;
        int drop = (int)Math.Clamp(through - (_first - 1), 0, _chunks.Count);
        if (drop == 0) return;
        _releasedEnd = _ends[drop - 1];
        _chunks.RemoveRange(0, drop);
        _ends.RemoveRange(0, drop);
        _first += drop;
    }

    /// <summary>One joiner's progress.</summary>
    internal sealed class Receiver
    {
        /// <summary>Chunks it acknowledged (in order).</summary>
        public long Acked;

        /// <summary>Chunks sent to it; back to <see cref="Acked"/> when its acknowledgements stall.</summary>
        public long SentThrough;

        /// <summary>When its acknowledgement last advanced, or a send started after a quiet spell.</summary>
        public long LastProgressAt;
    }
}

/// <summary>The joiner's side: the checkpoint it waits for, made at the cut of view <see cref="Cut"/>.</summary>
internal sealed class IncomingState(int cut, NodeId maker)
{
    public int Cut { get; } = cut;

    /// <summary>The member making it; None until its first chunk names it (a joiner does not know which members hold the state).</summary>
    public NodeId Maker { get; set; } = maker;

    /// <summary>Chunks received in order.</summary>
    public long Received { get; set; }

    /// <summary>
    /// The last chunk arrived during a view change's flush, after this member reported that it still
    /// waits: it loads at the next install, unless the commit restarted it (see GroupMember.StateTransfer).
    /// </summary>
    public bool Complete { get; set; }

    /// <summary>An acknowledgement is owed (sent once per step, however many chunks came).</summary>
    public bool AckDue { get; set; }
}
