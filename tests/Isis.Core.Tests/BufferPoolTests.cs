using Isis.Core.Common;

namespace Isis.Core.Tests;

public sealed class BufferPoolTests
{
    [Theory]
    [InlineData(0, 64)]
    [InlineData(1, 64)]
    [InlineData(64, 64)]
    [InlineData(65, 128)]
    [InlineData(1000, 1024)]
    [InlineData(65536, 65536)]
    public void Rent_hands_out_the_smallest_power_of_two_that_fits(int asked, int length)
    {
        var pool = new BufferPool();
        Assert.Equal(length, pool.Rent(asked).Length);
    }

    [Fact]
    public void A_returned_array_is_handed_out_again_and_outstanding_counts_both_ways()
    {
        var pool = new BufferPool();
        byte[] first = pool.Rent(100);
        Assert.Equal(1, pool.Outstanding);
        pool.Return(first);
        Assert.Equal(0, pool.Outstanding);
        Assert.Same(first, pool.Rent(120));
    }

    [Fact]
    public void Requests_beyond_the_largest_size_are_plain_arrays_the_pool_never_keeps()
    {
        var pool = new BufferPool();
        byte[] big = pool.Rent(BufferPool.MaxLength + 1);
        Assert.Equal(BufferPool.MaxLength + 1, big.Length);
        pool.Return(big);
        Assert.NotSame(big, pool.Rent(BufferPool.MaxLength + 1));
        Assert.Equal(0, pool.Outstanding);
    }

    [Fact]
    public void Poison_overwrites_a_returned_array_so_a_use_after_return_reads_garbage()
    {
        var pool = new BufferPool { Poison = true };
        byte[] array = pool.Rent(64);
        array.AsSpan().Fill(7);
        pool.Return(array);
        Assert.DoesNotContain((byte)7, array);
    }

    [Fact]
    public void Each_size_keeps_a_bounded_number_of_free_arrays()
    {
        var pool = new BufferPool();
        var rented = Enumerable.Range(0, 200).Select(_ => pool.Rent(BufferPool.MaxLength)).ToList();
        foreach (byte[] a in rented) pool.Return(a);
        // 4 MiB of free 64 KiB arrays is 64 of them: renting 200 again reuses 64 and allocates the rest.
        var again = Enumerable.Range(0, 200).Select(_ => pool.Rent(BufferPool.MaxLength)).ToList();
        Assert.Equal(64, again.Count(a => rented.Contains(a)));
    }
}
