using Isis.Core.Common;
using Isis.Core.Groups;

namespace Isis.Core.Tests;

/// <summary>
/// What a member keeps of the others' digests: every row in a small group (stability is their
/// minimum), and in a large group only the tree neighbours' rows and per-sender summaries, so the
/// table stays a fixed number of rows however many members' gossip arrives.
/// </summary>
public class AcknowledgementTableTests
{
    private const int Members = 100;

    // Rank 9 of a tree of fan-out 8: parent 1, children 73..80.
    private static readonly int[] Neighbours = [1, 73, 74, 75, 76, 77, 78, 79, 80];

    private static long[] Digest(Func<int, long> held) => Enumerable.Range(0, Members).Select(i => held(i)).ToArray();

    [Fact]
    public void A_large_group_keeps_the_neighbours_rows_only_however_many_members_gossip_to_it()
    {
        var table = new AcknowledgementTable(Members, 9, Neighbours);
        Assert.True(table.Summarised);
        long empty = table.Entries;
        for (int round = 1; round <= 3; round++)
        {
            for (int from = 0; from < Members; from++)
            {
                if (from != 9) table.Record(from, Digest(i => round * 10 + (from == i ? 5 : 0)));
            }
        }
        // The shared zero row, the nine neighbours' rows, and three summaries (ours held, most held, by whom).
        Assert.Equal(13L * Members, table.Entries);
        Assert.Equal(4L * Members, empty);

        // Every member's digest counted for our own stream: 99 hold it up to 30, none up to 31.
        Assert.Equal(Members - 1, table.OthersHoldingOurs(30));
        Assert.Equal(0, table.OthersHoldingOurs(31));
        // Each sender holds 5 more of its own stream than anyone else: a repair of sender 42's stream asks it.
        Assert.Equal(42, table.MostHolding(42));
        // One member is ahead on sender 42's stream: the repair asks that one instead.
        table.Record(60, Digest(i => i == 42 ? 50 : 30));
        Assert.Equal(60, table.MostHolding(42));
        // Among the neighbours only (relaying): 74 gets ahead of the next hop 1.
        table.Record(74, Digest(i => i == 42 ? 40 : 30));
        Assert.Equal(74, table.MostHoldingAmong(42, 1, Neighbours));
        Assert.Equal(1, table.MostHoldingAmong(43, 1, Neighbours));
        // A row the table does not keep is never read as zeros.
        Assert.Throws<ProtocolInvariantException>(() => table.MostHoldingAmong(42, 60, Neighbours));
        Assert.Throws<ProtocolInvariantException>(() => table.MinimumOfOthers());
    }

    [Fact]
    public void A_large_group_recognises_a_repeated_digest_only_from_a_neighbour()
    {
        var table = new AcknowledgementTable(Members, 9, Neighbours);
        long[] digest = Digest(i => 7);
        table.Record(1, digest);
        table.Record(2, digest);
        byte[] bytes = Encoded(digest);
        Assert.True(Skips(table, 1, bytes), "a neighbour's unchanged digest is skipped");
        Assert.False(Skips(table, 2, bytes), "another member's is read in full: its row is not kept");
    }

    [Fact]
    public void A_small_group_keeps_every_row_and_the_minimum_of_the_others()
    {
        const int n = 5;
        var table = new AcknowledgementTable(n, 0, null);
        Assert.False(table.Summarised);
        Assert.Equal(new long[n], table.MinimumOfOthers());
        for (int from = 1; from < n; from++) table.Record(from, [10 * from, 10 * from, 10 * from, 10 * from, 10 * from]);
        Assert.Equal(new long[] { 10, 10, 10, 10, 10 }, table.MinimumOfOthers());
        // The last member at the minimum moves up: the column is recomputed.
        table.Record(1, [25, 25, 10, 10, 10]);
        Assert.Equal(new long[] { 20, 20, 10, 10, 10 }, table.MinimumOfOthers());
        Assert.Equal(2, table.OthersHoldingOurs(30));
        Assert.Equal(4, table.MostHolding(2));
        // The zero row, four members' rows, the minimums and their counts.
        Assert.Equal((1 + 4 + 2L) * n, table.Entries);
    }

    private static bool Skips(AcknowledgementTable table, int from, byte[] body)
    {
        var r = new Isis.Core.Wire.WireReader(body);
        return table.TrySkipUnchanged(from, ref r);
    }

    /// <summary>A digest's body as the packet writer lays it out: the count, then each sequence number, little-endian.</summary>
    private static byte[] Encoded(long[] digest)
    {
        var bytes = new byte[4 + 8 * digest.Length];
        System.Buffers.Binary.BinaryPrimitives.WriteInt32LittleEndian(bytes, digest.Length);
        for (int i = 0; i < digest.Length; i++) System.Buffers.Binary.BinaryPrimitives.WriteInt64LittleEndian(bytes.AsSpan(4 + 8 * i), digest[i]);
        return bytes;
    }
}
