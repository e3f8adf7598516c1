using System.IO.Hashing;
using System.Runtime.InteropServices;
using System.Text;

namespace Isis.Core.Collections;

/// <summary>
/// The tail of one member's history that a peer may still ask for: each entry's update and the
/// chain hash of the history through it. Entries are dropped in whole epochs of
/// <see cref="EpochLength"/> once every member of the view holds them, so what a member keeps (and
/// what a repair can carry) stays bounded by how far the slowest member trails.
/// </summary>
/// <remarks>
/// The chain hash names a history prefix in 8 bytes: two members whose chains agree at a position
/// hold the same updates in the same order up to it. Gossip compares them to find divergence, which
/// the protocol rules out; seeing one is reported as a bug.
/// </remarks>
internal sealed class RetainedHistory<TOp>
{
    /// <summary>Entries are kept and dropped in epochs of this many positions.</summary>
    public const int EpochLength = 1_024;

    public readonly record struct Entry(UpdateId Id, TOp Op, long ChainAfter);

    private readonly List<Entry> _entries = new();
    private long _startChain;

    /// <summary>The position of the oldest entry kept (what a peer may ask from).</summary>
    public long Start { get; private set; }

    /// <summary>The history's length: the position the next entry takes.</summary>
    public long Length => Start + _entries.Count;

    /// <summary>The chain hash of the whole history.</summary>
    public long Chain => _entries.Count == 0 ? _startChain : _entries[^1].ChainAfter;

    public int Count => _entries.Count;

    /// <summary>Starts over at <paramref name="length"/> with chain <paramref name="chain"/> (a checkpoint was loaded), keeping nothing.</summary>
    public void Reset(long length, long chain)
    {
        _entries.Clear();
        Start = length;
        _startChain = chain;
    }

    /// <summary>Appends the next entry of the history and returns the chain through it.</summary>
    public long Append(UpdateId id, TOp op)
    {
        long chain = Next(Chain, id);
        _entries.Add(new Entry(id, op, chain));
        return chain;
    }

    /// <summary>The chain hash of the first <paramref name="length"/> entries, if this member can still tell.</summary>
    public bool TryChainAt(long length, out long chain)
    {
        chain = 0;
        if (length < Start || length > Length) return false;
        chain = length == Start ? _startChain : _entries[(int)(length - Start - 1)].ChainAfter;
        return true;
    }

    /// <summary>Up to <paramref name="max"/> entries from position <paramref name="from"/> (none if it is not kept).</summary>
    public ReadOnlySpan<Entry> Range(long from, int max)
    {
        if (from < Start || from >= Length) return [];
        int offset = (int)(from - Start);
        return CollectionsMarshal.AsSpan(_entries).Slice(offset, Math.Min(max, _entries.Count - offset));
    }

    /// <summary>Drops the whole epochs below <paramref name="floor"/> (every member of the view holds them).</summary>
    public void DropBelow(long floor)
    {
        long newStart = Math.Min(floor - floor % EpochLength, Length);
        if (newStart <= Start) return;
        int drop = (int)(newStart - Start);
        _startChain = _entries[drop - 1].ChainAfter;
        _entries.RemoveRange(0, drop);
        Start = newStart;
    }

    /// <summary>The chain hash after <paramref name="id"/> follows a prefix whose chain is <paramref name="chain"/>.</summary>
    public static long Next(long chain, UpdateId id)
    {
        int issuerBytes = Encoding.UTF8.GetByteCount(id.Issuer);
        Span<byte> buffer = issuerBytes <= 256 ? stackalloc byte[16 + issuerBytes] : new byte[16 + issuerBytes];
        MemoryMarshal.Write(buffer, in chain);
        long sequence = id.Sequence;
        MemoryMarshal.Write(buffer[8..], in sequence);
        Encoding.UTF8.GetBytes(id.Issuer, buffer[16..]);
        // The one use of System.IO in the core, which bans the namespace: XxHash64 is a pure function.
#pragma warning disable RS0030
        return unchecked((long)XxHash64.HashToUInt64(buffer));
#pragma warning restore RS0030
    }
}
