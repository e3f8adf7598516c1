using Isis.Core.Durability;

namespace Isis.Core.Tests.Durability;

/// <summary>
/// The slabs a current member keeps its history's payloads in (<see cref="PayloadSlabs"/>): every
/// payload still in the history reads back as it was held, however the slabs are reused; the
/// slabs stop growing once the history's saw-tooth between trims has been seen; and the broken
/// rule (reusing a slab the trim point has not passed) is what a test sees.
/// </summary>
public class PayloadSlabsTests
{
    private static byte[] PayloadOf(long index, int size)
    {
        byte[] p = new byte[size];
        for (int i = 0; i < size; i++) p[i] = (byte)(index * 31 + i);
        return p;
    }

    /// <summary>A history of <paramref name="entries"/> payloads of varied size, trimmed every <paramref name="trimEvery"/> entries to the last <paramref name="keep"/>; every held payload is checked after each trim.</summary>
    private static (int MaxSlabs, int DistinctSlabs, int Mismatches) Run(PayloadSlabs slabs, int slabBytes, int entries, int trimEvery, int keep)
    {
        var held = new Queue<(long Index, ReadOnlyMemory<byte> Payload, int Size)>();
        var distinct = new HashSet<byte[]>(ReferenceEqualityComparer.Instance);
        int maxSlabs = 0, mismatches = 0;
        var sizes = new Random(7);
        for (long index = 1; index <= entries; index++)
        {
            int size = sizes.Next(0, slabBytes / 4 + 1);
            ReadOnlyMemory<byte> m = slabs.Hold(index, PayloadOf(index, size));
            if (System.Runtime.InteropServices.MemoryMarshal.TryGetArray(m, out ArraySegment<byte> segment) && segment.Array is { } array) distinct.Add(array);
            held.Enqueue((index, m, size));
            if (index % trimEvery == 0)
            {
                while (held.Count > keep) held.Dequeue();
                slabs.Trimmed(held.Peek().Index - 1);
                foreach (var (i, payload, s) in held)
                {
                    if (!payload.Span.SequenceEqual(PayloadOf(i, s))) mismatches++;
                }
            }
            maxSlabs = Math.Max(maxSlabs, slabs.InUse + slabs.Free);
        }
        return (maxSlabs, distinct.Count, mismatches);
    }

    [Fact]
    public void Every_payload_still_in_the_history_reads_back_intact_and_the_slabs_stop_growing()
    {
        const int slab = 4096;
        var slabs = new PayloadSlabs(slab);
        var (maxSlabs, distinct, mismatches) = Run(slabs, slab, entries: 20_000, trimEvery: 97, keep: 150);
        Assert.Equal(0, mismatches);
        // About 150 entries of up to a quarter of a slab are held at most: some tens of slabs, reused
        // (20,000 payloads averaging an eighth of a slab would fill some 2,500 slabs otherwise).
        Assert.True(distinct < 60, $"{distinct} slabs were allocated for 20,000 payloads");
        Assert.True(maxSlabs <= distinct);
    }

    [Fact]
    public void A_payload_larger_than_a_quarter_slab_is_held_in_its_own_array_and_an_empty_one_in_none()
    {
        var slabs = new PayloadSlabs(1024);
        byte[] big = PayloadOf(1, 300);
        ReadOnlyMemory<byte> held = slabs.Hold(1, big);
        Assert.True(held.Span.SequenceEqual(big));
        Assert.True(System.Runtime.InteropServices.MemoryMarshal.TryGetArray(held, out ArraySegment<byte> s) && s.Array!.Length == 300);
        Assert.Equal(0, slabs.InUse);
        Assert.True(slabs.Hold(2, []).IsEmpty);
        Assert.Equal(0, slabs.InUse);
    }

    [Fact]
    public void Clearing_gives_every_slab_back_for_the_next_history()
    {
        var slabs = new PayloadSlabs(1024);
        for (long i = 1; i <= 40; i++) slabs.Hold(i, PayloadOf(i, 200));
        int inUse = slabs.InUse;
        Assert.True(inUse >= 8);
        slabs.Clear();
        Assert.Equal(0, slabs.InUse);
        Assert.Equal(inUse, slabs.Free);
        // A new history's indices start again from 1: its payloads land in the kept slabs.
        for (long i = 1; i <= 40; i++) Assert.True(slabs.Hold(i, PayloadOf(i + 1000, 200)).Span.SequenceEqual(PayloadOf(i + 1000, 200)));
        Assert.Equal(inUse, slabs.InUse + slabs.Free);
    }

    [Fact]
    public void Reusing_slabs_the_trim_point_has_not_passed_overwrites_payloads_still_in_the_history()
    {
        const int slab = 4096;
        var (_, _, mismatches) = Run(new PayloadSlabs(slab, reuseBeforeTrim: true), slab, entries: 5_000, trimEvery: 97, keep: 150);
        Assert.True(mismatches > 100, $"only {mismatches} payloads were overwritten");
    }
}
