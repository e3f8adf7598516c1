namespace Isis.Core.Durability;

/// <summary>
/// Where a current member keeps the payloads of the history entries it holds in memory: copied
/// into large slabs, filled in history order and reused once the history is trimmed past them.
/// </summary>
/// <remarks>
/// <para>The history is a queue: entries join at its end and leave at its start, at checkpoints
/// seconds later. Held as one array each, every payload outlives the young generations of the
/// garbage collector and dies in the oldest, which grows by the write rate until a full collection
/// comes, and a process that goes a minute without one grows by a hundred MiB. Slabs keep that
/// memory still: a slab the trim point has passed is reused for new payloads, as the log's spare
/// segments reuse its files (HistoryLogFile), and the oldest generation receives nothing new.</para>
/// <para>A slab is reused only once every entry in it is behind the trim point, and no payload
/// held here leaves <see cref="DurableHistory"/>: what reads one (the log record, a chunk sent to
/// a member that copies the history) copies it at once. Entries replayed to the application come
/// from the log or from a copy, never from here.</para>
/// <para>The slabs kept are the most in use over the last <see cref="Window"/> slabs started, as
/// the log keeps its segments: enough for the peaks a restarting member or a slow checkpoint
/// brings, and a burst's given back once it has passed. A payload larger than a quarter of a slab
/// is held in its own array.</para>
/// </remarks>
internal sealed class PayloadSlabs(int slabBytes = PayloadSlabs.DefaultSlabBytes, bool reuseBeforeTrim = false)
{
    /// <summary>The size of a slab unless the protocol options say otherwise.</summary>
    public const int DefaultSlabBytes = 1 << 20;

    private readonly int _slabBytes = slabBytes >= 16 ? slabBytes : throw new ArgumentOutOfRangeException(nameof(slabBytes), slabBytes, "a slab holds at least 16 bytes");

    /// <summary>How many slab starts the count of slabs kept remembers its high-water mark for (a GiB of payloads).</summary>
    public const int Window = 1024;

    private readonly Queue<(byte[] Slab, long LastIndex)> _full = new(); // filled, in history order, with the last entry each holds
    private byte[]? _current;
    private int _used; // bytes of _current taken
    private long _currentLast; // the last entry with a payload in _current
    private readonly Stack<byte[]> _free = new();
    private readonly Common.HighWaterMark _recentInUse = new(Window);

    /// <summary>Slabs holding payloads now.</summary>
    public int InUse => _full.Count + (_current == null ? 0 : 1);

    /// <summary>Slabs kept for reuse now.</summary>
    public int Free => _free.Count;

    /// <summary>Copies the payload of entry <paramref name="index"/> (entries come in history order) and returns where it is held.</summary>
    public ReadOnlyMemory<byte> Hold(long index, ReadOnlySpan<byte> payload)
    {
        if (payload.Length == 0) return ReadOnlyMemory<byte>.Empty;
        if (payload.Length > _slabBytes / 4) return payload.ToArray();
        if (_current == null || _used + payload.Length > _slabBytes) StartSlab();
        payload.CopyTo(_current.AsSpan(_used));
        var held = new ReadOnlyMemory<byte>(_current, _used, payload.Length);
        _used += payload.Length;
        _currentLast = index;
        return held;
    }

    private void StartSlab()
    {
        if (_current != null) _full.Enqueue((_current, _currentLast));
        _current = _free.Count > 0 ? _free.Pop() : new byte[_slabBytes];
        _used = 0;
        _recentInUse.Note(InUse);
    }

    /// <summary>The history was trimmed through entry <paramref name="trimmed"/>: the filled slabs wholly behind it are reused.</summary>
    public void Trimmed(long trimmed)
    {
        while (_full.Count > 0 && _full.Peek().LastIndex <= trimmed) Release(_full.Dequeue().Slab);
        while (reuseBeforeTrim && _full.Count > 0) _free.Push(_full.Dequeue().Slab); // deliberately broken: their entries are still held
        if (_current != null && _currentLast <= trimmed)
        {
            // Everything held is behind the trim point: the current slab starts over.
            _used = 0;
        }
    }

    /// <summary>The member holds another history now (or none): every payload held here is dropped.</summary>
    public void Clear()
    {
        byte[]? current = _current;
        _current = null;
        _used = 0;
        while (_full.Count > 0) Release(_full.Dequeue().Slab);
        if (current != null) Release(current);
    }

    /// <summary>A slab no longer in use: kept while the slabs in use and kept are fewer than the recent high-water mark, else left to the collector.</summary>
    private void Release(byte[] slab)
    {
        if (InUse + _free.Count < _recentInUse.Value) _free.Push(slab);
    }
}
