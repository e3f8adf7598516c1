using System.Buffers;

namespace Isis.Transport.Framing;

/// <summary>
/// Rebuilds fragmented packets, keyed by (source endpoint, fragment id), within strict
/// <see cref="ReassemblyLimits"/>. Hostile input is counted in <see cref="FramingCounters"/> and
/// dropped, never thrown. Time is whatever monotonic microsecond clock the caller passes in.
/// </summary>
/// <remarks>
/// Fragments are copied into pooled buffers as they arrive and concatenated once the last one is
/// in, so memory is charged for bytes received rather than for the size a fragment claims.
/// Not thread-safe: one parsing thread owns it.
/// </remarks>
internal sealed class FragmentReassembler
{
    /// <summary>Bookkeeping charged per fragment slot, so a claimed count cannot exhaust memory.</summary>
    private const int SlotOverheadBytes = 12;

    /// <summary>How many completed packets we remember, so late duplicates do not start new reassemblies.</summary>
    private const int RecentlyCompletedCapacity = 1024;

    private readonly ReassemblyLimits _limits;
    private readonly FramingCounters _counters;
    private readonly Dictionary<Key, Reassembly> _inFlight = [];
    private readonly Dictionary<ulong, int> _inFlightPerSource = [];
    private readonly HashSet<Key> _recentlyCompleted = [];
    private readonly Key[] _recentRing = new Key[RecentlyCompletedCapacity];
    private readonly List<Key> _scratch = [];
    private int _recentNext;
    private long _bufferedBytes;
    private long _nextSweepMicros = long.MinValue;

    private readonly record struct Key(ulong Source, ulong FragmentId);

    private sealed class Reassembly(ulong source, uint count, uint total, long createdMicros)
    {
        public readonly ulong Source = source;
        public readonly uint Count = count;
        public readonly uint Total = total;
        public readonly long CreatedMicros = createdMicros;
        public readonly byte[]?[] Slots = new byte[]?[count];
        public readonly int[] Lengths = new int[count];
        public uint Received;
        public long ReceivedBytes;
        public long Charged;
    }

    public FragmentReassembler(ReassemblyLimits limits, FramingCounters counters)
    {
        ArgumentNullException.ThrowIfNull(limits);
        ArgumentNullException.ThrowIfNull(counters);
        limits.Validate();
        _limits = limits;
        _counters = counters;
    }

    public ReassemblyLimits Limits => _limits;

    /// <summary>Incomplete packets currently held.</summary>
    public int InFlight => _inFlight.Count;

    /// <summary>Bytes charged to incomplete packets.</summary>
    public long BufferedBytes => _bufferedBytes;

    /// <summary>
    /// Takes one fragment. Returns the whole packet, a fresh array the caller now owns, when this
    /// fragment completes it; otherwise null (incomplete, duplicate or dropped).
    /// </summary>
    public byte[]? Accept(ulong source, ulong fragmentId, uint index, uint count, uint total, ReadOnlySpan<byte> bytes, long nowMicros)
    {
        MaybeEvictExpired(nowMicros);

        if (total > (uint)_limits.MaxPacketSize)
        {
            _counters.OversizePackets++;
            return null;
        }
        // Every fragment carries at least one byte, so count <= total.
        if (count == 0 || count > (uint)_limits.MaxFragmentsPerPacket || count > total || index >= count
            || bytes.IsEmpty || (uint)bytes.Length > total)
        {
            _counters.FragmentsOutOfBounds++;
            return null;
        }

        var key = new Key(source, fragmentId);
        if (!_inFlight.TryGetValue(key, out Reassembly? r))
        {
            if (_recentlyCompleted.Contains(key))
            {
                _counters.DuplicateFragments++;
                return null;
            }
            r = Start(key, count, total, nowMicros);
            if (r is null) return null;
        }
        else if (r.Count != count || r.Total != total)
        {
            _counters.FragmentsOutOfBounds++;
            return null;
        }

        if (r.Slots[index] is not null)
        {
            _counters.DuplicateFragments++;
            return null;
        }
        // The bytes still missing must cover at least one byte per missing fragment.
        long bytesLeftAfter = r.Total - r.ReceivedBytes - bytes.Length;
        if (bytesLeftAfter < r.Count - r.Received - 1)
        {
            _counters.FragmentsOutOfBounds++;
            return null;
        }
        if (!EnsureRoom(bytes.Length, nowMicros, keep: r))
        {
            Remove(key, r);
            _counters.ReassembliesEvicted++;
            return null;
        }

        byte[] slot = ArrayPool<byte>.Shared.Rent(bytes.Length);
        bytes.CopyTo(slot);
        r.Slots[index] = slot;
        r.Lengths[index] = bytes.Length;
        r.Received++;
        r.ReceivedBytes += bytes.Length;
        r.Charged += bytes.Length;
        _bufferedBytes += bytes.Length;

        if (r.Received < r.Count) return null;
        return Complete(key, r);
    }

    /// <summary>Drops every incomplete packet older than the timeout.</summary>
    public void EvictExpired(long nowMicros)
    {
        _nextSweepMicros = nowMicros + Math.Max(1, _limits.TimeoutMicros / 4);
        _scratch.Clear();
        foreach (KeyValuePair<Key, Reassembly> e in _inFlight)
        {
            if (nowMicros - e.Value.CreatedMicros >= _limits.TimeoutMicros) _scratch.Add(e.Key);
        }
        foreach (Key key in _scratch)
        {
            Remove(key, _inFlight[key]);
            _counters.ReassembliesExpired++;
        }
        _scratch.Clear();
    }

    /// <summary>Drops all incomplete packets and returns their buffers (no counters change).</summary>
    public void Clear()
    {
        _scratch.Clear();
        _scratch.AddRange(_inFlight.Keys);
        foreach (Key key in _scratch) Remove(key, _inFlight[key]);
        _scratch.Clear();
    }

    // Sweeping at most four times per timeout keeps the per-datagram cost constant.
    private void MaybeEvictExpired(long nowMicros)
    {
        if (nowMicros >= _nextSweepMicros) EvictExpired(nowMicros);
    }

    private Reassembly? Start(Key key, uint count, uint total, long nowMicros)
    {
        // A source over its own quota loses its own oldest packet, so it cannot push out others'.
        _inFlightPerSource.TryGetValue(key.Source, out int fromSource);
        if (fromSource >= _limits.MaxInFlightPerSource) EvictOldest(key.Source, except: null);
        if (_inFlight.Count >= _limits.MaxInFlight) EvictOldest(source: null, except: null);

        long overhead = (long)count * SlotOverheadBytes;
        if (!EnsureRoom(overhead, nowMicros, keep: null))
        {
            _counters.ReassembliesEvicted++;
            return null;
        }
        var r = new Reassembly(key.Source, count, total, nowMicros) { Charged = overhead };
        _bufferedBytes += overhead;
        _inFlight.Add(key, r);
        _inFlightPerSource[key.Source] = _inFlightPerSource.GetValueOrDefault(key.Source) + 1;
        return r;
    }

    private byte[]? Complete(Key key, Reassembly r)
    {
        byte[]? packet = null;
        if (r.ReceivedBytes == r.Total)
        {
            packet = GC.AllocateUninitializedArray<byte>((int)r.Total);
            int offset = 0;
            for (int i = 0; i < r.Slots.Length; i++)
            {
                r.Slots[i].AsSpan(0, r.Lengths[i]).CopyTo(packet.AsSpan(offset));
                offset += r.Lengths[i];
            }
            _counters.PacketsReassembled++;
        }
        else
        {
            _counters.FragmentsOutOfBounds++; // all fragments in, yet they do not add up to the total
        }
        Remove(key, r);
        RememberCompleted(key);
        return packet;
    }

    private void RememberCompleted(Key key)
    {
        if (_recentlyCompleted.Count == RecentlyCompletedCapacity) _recentlyCompleted.Remove(_recentRing[_recentNext]);
        _recentlyCompleted.Add(key);
        _recentRing[_recentNext] = key;
        _recentNext = (_recentNext + 1) % RecentlyCompletedCapacity;
    }

    /// <summary>Frees memory for <paramref name="needed"/> more bytes: expired packets first, then the oldest.</summary>
    private bool EnsureRoom(long needed, long nowMicros, Reassembly? keep)
    {
        if (_bufferedBytes + needed <= _limits.MaxBufferedBytes) return true;
        EvictExpired(nowMicros);
        while (_bufferedBytes + needed > _limits.MaxBufferedBytes)
        {
            if (!EvictOldest(source: null, except: keep)) return false;
        }
        return true;
    }

    private bool EvictOldest(ulong? source, Reassembly? except)
    {
        Key oldestKey = default;
        Reassembly? oldest = null;
        foreach (KeyValuePair<Key, Reassembly> e in _inFlight)
        {
            Reassembly r = e.Value;
            if (ReferenceEquals(r, except) || (source.HasValue && r.Source != source.Value)) continue;
            if (oldest is null || r.CreatedMicros < oldest.CreatedMicros)
            {
                oldest = r;
                oldestKey = e.Key;
            }
        }
        if (oldest is null) return false;
        Remove(oldestKey, oldest);
        _counters.ReassembliesEvicted++;
        return true;
    }

    private void Remove(Key key, Reassembly r)
    {
        _inFlight.Remove(key);
        int left = _inFlightPerSource[r.Source] - 1;
        if (left == 0) _inFlightPerSource.Remove(r.Source);
        else _inFlightPerSource[r.Source] = left;
        for (int i = 0; i < r.Slots.Length; i++)
        {
            if (r.Slots[i] is { } slot) ArrayPool<byte>.Shared.Return(slot);
            r.Slots[i] = null;
        }
        _bufferedBytes -= r.Charged;
        r.Charged = 0;
    }
}
