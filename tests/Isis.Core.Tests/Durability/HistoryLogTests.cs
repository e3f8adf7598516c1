using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Tests.Durability;

/// <summary>
/// The durable history log's record codec (<see cref="HistoryLog"/>): what it writes reads back,
/// and reading stops at the first record that does not parse or is out of place, counting it and
/// everything after it as unreadable, and never throws.
/// </summary>
public class HistoryLogTests
{
    private static readonly NodeId A = new(1, 1), B = new(2, 1), C = new(3, 4);

    private static HistoryViewRecord View(long epoch, int viewId, NodeId me, params NodeId[] members) =>
        new(new HistoryViewKey(epoch, viewId), new Lineage(A, 1), me, members);

    private static HistoryEntry Entry(long index, string text = "") =>
        new(index, B, 3, index + 10, 2, System.Text.Encoding.UTF8.GetBytes(text.Length > 0 ? text : $"payload {index}"));

    private static byte[] Inc(NodeId n) => HistoryLog.Incarnation(new PacketWriter(), n);

    private static byte[] Vw(HistoryViewRecord v) => HistoryLog.View(new PacketWriter(), v);

    private static byte[] En(HistoryEntry e) => HistoryLog.Entry(new PacketWriter(), e);

    /// <summary>Incarnation, View, then entries 1..n: a log as a member writes it.</summary>
    private static List<byte[]> ValidLog(int entries)
    {
        var records = new List<byte[]> { Inc(A), Vw(View(1, 2, A, A, B)) };
        for (int i = 1; i <= entries; i++) records.Add(En(Entry(i)));
        return records;
    }

    private static void AssertSameEntry(HistoryEntry expected, HistoryEntry actual)
    {
        Assert.Equal(expected.Index, actual.Index);
        Assert.Equal(expected.Sender, actual.Sender);
        Assert.Equal(expected.ViewId, actual.ViewId);
        Assert.Equal(expected.Seq, actual.Seq);
        Assert.Equal(expected.Phi, actual.Phi);
        Assert.Equal(expected.Payload, actual.Payload);
        Assert.Equal(expected.Query, actual.Query);
    }

    private static void AssertSameView(HistoryViewRecord expected, HistoryViewRecord? actual)
    {
        Assert.NotNull(actual);
        Assert.Equal(expected.Key, actual.Key);
        Assert.Equal(expected.Lineage, actual.Lineage);
        Assert.Equal(expected.Me, actual.Me);
        Assert.Equal(expected.Members, actual.Members);
    }

    /// <summary>Entries must be Trimmed+1..n in order, and exist only after a View record.</summary>
    private static void AssertWellFormed(HistoryLogImage image, int records)
    {
        Assert.InRange(image.Unreadable, 0, records);
        Assert.True(image.Trimmed >= 0);
        for (int i = 0; i < image.Entries.Count; i++) Assert.Equal(image.Trimmed + i + 1, image.Entries[i].Index);
        if (image.Entries.Count > 0) Assert.NotNull(image.LastView);
        Assert.All(image.Incarnations, n => Assert.False(n.IsNone));
        if (image.LastView != null) Assert.Contains(image.LastView.Me, image.LastView.Members);
    }

    // ---------------------------------------------------------------- round trip

    [Fact]
    public void Every_record_kind_reads_back_as_it_was_written()
    {
        var view = new HistoryViewRecord(new HistoryViewKey(7, 42), new Lineage(C, 9), B, [A, B, C]);
        var first = new HistoryEntry(1, C, 41, 5, 3, new byte[] { 1, 2, 3, 0, 255 });
        var empty = new HistoryEntry(2, A, 42, long.MaxValue, 0, Array.Empty<byte>());
        var large = new HistoryEntry(3, B, int.MaxValue, 1, int.MaxValue, Enumerable.Range(0, 70_000).Select(i => (byte)i).ToArray());

        HistoryLogImage image = HistoryLog.Read([Inc(A), Inc(new NodeId(ulong.MaxValue, uint.MaxValue)), Vw(view), En(first), En(empty), En(large)]);

        Assert.Equal([A, new NodeId(ulong.MaxValue, uint.MaxValue)], image.Incarnations);
        AssertSameView(view, image.LastView);
        Assert.Equal(3, image.Entries.Count);
        AssertSameEntry(first, image.Entries[0]);
        AssertSameEntry(empty, image.Entries[1]);
        AssertSameEntry(large, image.Entries[2]);
        Assert.Equal(0, image.Unreadable);
    }

    [Fact]
    public void A_SafeQuery_entry_reads_back_as_a_query_from_the_log_and_from_a_transfer_chunk()
    {
        var view = new HistoryViewRecord(new HistoryViewKey(1, 1), new Lineage(A, 1), A, [A, B]);
        var send = new HistoryEntry(1, A, 1, 1, 0, new byte[] { 9 });
        var query = new HistoryEntry(2, B, 1, 1, 0, new byte[] { 1, 0, 0, 0, 0, 0, 0, 0, 42 }, Query: true);

        HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(view), En(send), En(query)]);
        Assert.Equal(2, image.Entries.Count);
        AssertSameEntry(send, image.Entries[0]);
        AssertSameEntry(query, image.Entries[1]);
        Assert.Equal(Isis.Core.Groups.MessageKind.QuerySafe, image.Entries[1].Kind);

        var w = new PacketWriter().BeginRecord();
        HistoryLog.WriteTransferred(w, send);
        HistoryLog.WriteTransferred(w, query);
        var r = new WireReader(w.FinishRecord());
        AssertSameEntry(send, HistoryLog.ReadTransferred(ref r, 1)!);
        AssertSameEntry(query, HistoryLog.ReadTransferred(ref r, 2)!);
        Assert.True(r.Complete);
    }

    [Fact]
    public void Reading_a_log_holds_each_payload_in_its_record_while_a_transfer_chunk_is_copied_out_of_its_reused_buffer()
    {
        // A recovering member holds its log once: the entries' payloads are slices of the records read from disk.
        List<byte[]> records = ValidLog(3);
        HistoryLogImage image = HistoryLog.Read(records);
        Assert.Equal(3, image.Entries.Count);
        for (int i = 0; i < 3; i++)
        {
            Assert.True(System.Runtime.InteropServices.MemoryMarshal.TryGetArray(image.Entries[i].Payload, out ArraySegment<byte> held));
            Assert.Same(records[2 + i], held.Array);
            AssertSameEntry(Entry(i + 1), image.Entries[i]);
        }

        // A chunk arrives in a packet buffer that is reused for the next packet: its entries must not point into it.
        var w = new PacketWriter().BeginRecord();
        HistoryLog.WriteTransferred(w, Entry(1));
        byte[] buffer = w.FinishRecord();
        var r = new WireReader(buffer);
        HistoryEntry copied = HistoryLog.ReadTransferred(ref r, 1)!;
        Array.Fill(buffer, (byte)0xEE);
        AssertSameEntry(Entry(1), copied);
    }

    [Fact]
    public void A_SafeQuery_entry_too_short_to_hold_its_query_id_ends_the_readable_log()
    {
        var view = new HistoryViewRecord(new HistoryViewKey(1, 1), new Lineage(A, 1), A, [A]);
        HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(view), En(new HistoryEntry(1, A, 1, 1, 0, new byte[] { 1, 2, 3 }, Query: true))]);
        Assert.Empty(image.Entries);
        Assert.Equal(1, image.Unreadable);
    }

    private static byte[] Tr(long through, ulong digest = 0x1234) => HistoryLog.Trim(new PacketWriter(), through, digest);

    [Fact]
    public void A_Trim_record_carries_the_digest_of_the_trimmed_prefix_and_one_written_before_digests_reads_as_unknown()
    {
        HistoryViewRecord view = View(2, 7, A, A, B);
        HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(view), Tr(40, 0xfeedUL), En(Entry(41))]);
        Assert.Equal(0xfeedUL, image.TrimmedDigest);
        Assert.Equal(HistoryDigest.Next(0xfeedUL, image.Entries[0]), image.DigestAt(41));
        Assert.Equal(HistoryDigest.Unknown, image.DigestAt(39));

        byte[] old = new PacketWriter().BeginRecord().U8(5).I64(40).FinishRecord(); // a Trim record of the format before digests
        HistoryLogImage before = HistoryLog.Read([Inc(A), Vw(view), old, En(Entry(41))]);
        Assert.Equal(40, before.Trimmed);
        Assert.Equal(0, before.Unreadable);
        Assert.Equal(HistoryDigest.Unknown, before.TrimmedDigest);
        Assert.Equal(HistoryDigest.Unknown, before.DigestAt(41));

        HistoryLogImage untrimmed = HistoryLog.Read([Inc(A), Vw(view), En(Entry(1))]);
        Assert.Equal(HistoryDigest.Empty, untrimmed.DigestAt(0));
        Assert.True(HistoryDigest.Agree(HistoryDigest.Unknown, 7) && !HistoryDigest.Agree(6, 7));
    }

    [Fact]
    public void A_trimmed_log_reads_as_the_entries_after_its_trim_point()
    {
        HistoryViewRecord view = View(2, 7, A, A, B);
        HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(view), Tr(40), En(Entry(41)), En(Entry(42))]);
        Assert.Equal(40, image.Trimmed);
        Assert.Equal(42, image.Count);
        Assert.Equal([41L, 42L], image.Entries.Select(e => e.Index));
        AssertSameView(view, image.LastView);
        Assert.Equal(0, image.Unreadable);

        // Trimmed to its last entry: nothing left in the log, the count stays.
        HistoryLogImage empty = HistoryLog.Read([Inc(A), Vw(view), Tr(42)]);
        Assert.Equal(42, empty.Count);
        Assert.Empty(empty.Entries);
    }

    [Fact]
    public void A_forced_recovery_permission_counts_until_the_next_view_record_and_given_up_incarnations_accumulate()
    {
        byte[] force = HistoryLog.ForcedRecovery(new PacketWriter(), []);
        byte[] gaveUpB = HistoryLog.GaveUp(new PacketWriter(), [B]);
        byte[] gaveUpBC = HistoryLog.GaveUp(new PacketWriter(), [B, C]);

        // Allowed after the member last held the history (the permission is in force at the next join).
        HistoryLogImage allowed = HistoryLog.Read([.. ValidLog(2), force, Inc(C)]);
        Assert.Equal([], allowed.ForcedWithout!);
        Assert.Equal(2, allowed.Count);
        Assert.Equal(0, allowed.Unreadable);

        // Once the member holds the history again (a View record follows), the permission is spent.
        HistoryLogImage spent = HistoryLog.Read([Inc(A), force, Vw(View(1, 2, A, A, B)), En(Entry(1))]);
        Assert.Null(spent.ForcedWithout);
        Assert.Equal(1, spent.Count);

        // Given-up incarnations: read anywhere, each once, in the order first given up.
        HistoryLogImage gave = HistoryLog.Read([Inc(A), Vw(View(1, 2, A, A, B)), gaveUpB, En(Entry(1)), gaveUpBC]);
        Assert.Equal([B, C], gave.GaveUp);
        Assert.Equal(1, gave.Count);
        Assert.Equal(0, gave.Unreadable);

        // A GaveUp record naming no incarnation (None) is damage: reading stops there.
        byte[] bad = HistoryLog.GaveUp(new PacketWriter(), [NodeId.None]);
        HistoryLogImage stopped = HistoryLog.Read([.. ValidLog(1), bad, En(Entry(2))]);
        Assert.Equal(1, stopped.Count);
        Assert.Equal(2, stopped.Unreadable);
    }

    [Theory]
    [InlineData("before any view")]
    [InlineData("after an entry")]
    [InlineData("twice")]
    [InlineData("at zero")]
    [InlineData("entry not right after it")]
    public void A_trim_record_out_of_place_ends_the_readable_log(string where)
    {
        HistoryViewRecord view = View(1, 1, A, A);
        List<byte[]> records = where switch
        {
            "before any view" => [Inc(A), Tr(5), Vw(view), En(Entry(6))],
            "after an entry" => [Inc(A), Vw(view), En(Entry(1)), Tr(5), En(Entry(6))],
            "twice" => [Inc(A), Vw(view), Tr(5), Tr(6), En(Entry(7))],
            "at zero" => [Inc(A), Vw(view), Tr(0), En(Entry(1))],
            _ => [Inc(A), Vw(view), Tr(5), En(Entry(5))],
        };
        HistoryLogImage image = HistoryLog.Read(records);
        int goodUpTo = where switch { "before any view" => 1, "after an entry" => 3, "twice" => 3, "at zero" => 2, _ => 3 };
        Assert.Equal(records.Count - goodUpTo, image.Unreadable);
        AssertWellFormed(image, records.Count);
    }

    [Fact]
    public void An_empty_log_reads_as_an_empty_image()
    {
        HistoryLogImage image = HistoryLog.Read([]);
        Assert.Empty(image.Incarnations);
        Assert.Null(image.LastView);
        Assert.Empty(image.Entries);
        Assert.Equal(0, image.Unreadable);
    }

    [Fact]
    public void The_last_of_several_increasing_views_is_the_image_view_and_entries_continue_across_views()
    {
        HistoryViewRecord v1 = View(1, 1, A, A), v2 = View(1, 5, A, A, B), v3 = View(2, 1, A, A, C);
        HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(v1), En(Entry(1)), Vw(v2), En(Entry(2)), En(Entry(3)), Inc(A with { Incarnation = 2 }), Vw(v3), En(Entry(4))]);
        AssertSameView(v3, image.LastView);
        Assert.Equal([1L, 2, 3, 4], image.Entries.Select(e => e.Index));
        Assert.Equal([A, A with { Incarnation = 2 }], image.Incarnations);
        Assert.Equal(0, image.Unreadable);
    }

    [Fact]
    public void Records_built_by_one_reused_writer_read_back_the_same_as_fresh_ones()
    {
        var w = new PacketWriter();
        var records = new List<byte[]> { HistoryLog.Incarnation(w, A), HistoryLog.View(w, View(1, 2, A, A, B)) };
        for (int i = 1; i <= 50; i++) records.Add(HistoryLog.Entry(w, Entry(i, new string('x', i * 37))));
        HistoryLogImage image = HistoryLog.Read(records);
        Assert.Equal(50, image.Entries.Count);
        for (int i = 1; i <= 50; i++) AssertSameEntry(Entry(i, new string('x', i * 37)), image.Entries[i - 1]);
        Assert.Equal(0, image.Unreadable);
    }

    // ---------------------------------------------------------------- where reading stops

    [Fact]
    public void Reading_stops_at_a_truncated_entry_and_counts_it_and_the_rest_as_unreadable()
    {
        List<byte[]> records = ValidLog(5);
        records[4] = records[4][..^1]; // entry 3 lost its last byte
        HistoryLogImage image = HistoryLog.Read(records);
        Assert.Equal([1L, 2], image.Entries.Select(e => e.Index));
        Assert.Equal(3, image.Unreadable); // entries 3, 4 and 5
        Assert.NotNull(image.LastView);
    }

    [Fact]
    public void Every_truncation_of_every_record_kind_stops_reading_at_that_record()
    {
        HistoryViewRecord view = View(3, 9, B, A, B, C);
        byte[][] kinds = [Inc(A), Vw(view), En(Entry(1, "some payload"))];
        foreach (byte[] whole in kinds)
        {
            for (int length = 0; length < whole.Length; length++)
            {
                // A complete prefix (so an entry would fit), the cut record, then one that would fit after it.
                var records = new List<byte[]> { Inc(C), Vw(View(1, 1, C, C)), whole[..length], Inc(B) };
                HistoryLogImage image = HistoryLog.Read(records);
                Assert.Equal(2, image.Unreadable);
                Assert.Equal([C], image.Incarnations);
                Assert.Empty(image.Entries);
                Assert.Equal(new HistoryViewKey(1, 1), image.LastView!.Key);
            }
        }
    }

    [Fact]
    public void A_record_with_bytes_after_its_fields_stops_reading()
    {
        foreach (byte[] record in new[] { Inc(A), Vw(View(1, 3, A, A)), En(Entry(1)) })
        {
            List<byte[]> records = ValidLog(0);
            records.Add([.. record, 0]);
            HistoryLogImage image = HistoryLog.Read(records);
            Assert.Equal(1, image.Unreadable);
            Assert.Empty(image.Entries);
            Assert.Equal(new HistoryViewKey(1, 2), image.LastView!.Key);
        }
    }

    [Fact]
    public void Reading_stops_at_garbage_bytes_and_ignores_valid_records_after_them()
    {
        List<byte[]> records = ValidLog(3);
        var random = new Random(11);
        byte[] garbage = new byte[57];
        random.NextBytes(garbage);
        garbage[0] = 0xEE; // not a record kind, whatever the seed gives
        records.Insert(3, garbage); // after entry 1
        HistoryLogImage image = HistoryLog.Read(records);
        Assert.Equal([1L], image.Entries.Select(e => e.Index));
        Assert.Equal(3, image.Unreadable); // the garbage and entries 2 and 3, although they are intact
    }

    [Fact]
    public void Reading_stops_at_an_empty_record()
    {
        List<byte[]> records = ValidLog(2);
        records.Insert(2, []);
        HistoryLogImage image = HistoryLog.Read(records);
        Assert.Empty(image.Entries);
        Assert.Equal(3, image.Unreadable);
        Assert.NotNull(image.LastView);
    }

    [Theory]
    [InlineData(3)]  // skips index 2
    [InlineData(1)]  // repeats index 1
    [InlineData(0)]  // an index before the first
    [InlineData(-1)]
    [InlineData(long.MaxValue)]
    public void Reading_stops_at_an_entry_whose_index_is_not_the_next_one(long badIndex)
    {
        var records = new List<byte[]> { Inc(A), Vw(View(1, 2, A, A, B)), En(Entry(1)), En(Entry(badIndex)), En(Entry(2)), En(Entry(3)) };
        HistoryLogImage image = HistoryLog.Read(records);
        Assert.Equal([1L], image.Entries.Select(e => e.Index));
        Assert.Equal(3, image.Unreadable);
    }

    [Fact]
    public void Reading_stops_at_an_entry_before_any_view()
    {
        HistoryLogImage image = HistoryLog.Read([Inc(A), En(Entry(1)), Vw(View(1, 2, A, A)), En(Entry(1))]);
        Assert.Equal([A], image.Incarnations);
        Assert.Empty(image.Entries);
        Assert.Null(image.LastView); // the view after the misplaced entry is not read either
        Assert.Equal(3, image.Unreadable);
    }

    [Theory]
    [InlineData(1, 5)] // the same key again (with other members: a segment header restates the last view only as it was)
    [InlineData(1, 4)] // an earlier view of the same epoch
    [InlineData(0, 9)] // an earlier epoch, whatever its view id (and epochs start at 1)
    public void Reading_stops_at_a_view_whose_key_does_not_increase(long epoch, int viewId)
    {
        HistoryViewRecord first = View(1, 5, A, A, B);
        var records = new List<byte[]> { Inc(A), Vw(first), En(Entry(1)), Vw(View(epoch, viewId, A, A)), En(Entry(2)) };
        HistoryLogImage image = HistoryLog.Read(records);
        AssertSameView(first, image.LastView);
        Assert.Equal([1L], image.Entries.Select(e => e.Index));
        Assert.Equal(2, image.Unreadable);
    }

    [Fact]
    public void A_view_of_a_later_epoch_with_a_lower_view_id_is_an_increase()
    {
        HistoryViewRecord later = View(2, 1, A, A);
        HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(View(1, 5, A, A, B)), En(Entry(1)), Vw(later), En(Entry(2))]);
        AssertSameView(later, image.LastView);
        Assert.Equal(2, image.Entries.Count);
        Assert.Equal(0, image.Unreadable);
    }

    [Fact]
    public void Reading_stops_at_a_view_that_does_not_name_its_writer_among_its_members_or_has_no_valid_key()
    {
        HistoryViewRecord[] bad =
        [
            View(1, 3, C, A, B),      // "me" is not a member
            View(1, 3, A),            // no members at all
            View(0, 3, A, A),         // epoch 0
            View(-5, 3, A, A),
            View(1, 0, A, A),         // view id 0
            View(1, int.MinValue, A, A),
        ];
        foreach (HistoryViewRecord v in bad)
        {
            HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(v), En(Entry(1))]);
            Assert.Null(image.LastView);
            Assert.Empty(image.Entries);
            Assert.Equal(2, image.Unreadable);
        }
    }

    [Fact]
    public void Reading_stops_at_an_entry_with_an_impossible_field_or_an_incarnation_record_naming_nobody()
    {
        HistoryEntry[] bad =
        [
            new(1, NodeId.None, 3, 1, 0, new byte[] { 1 }),  // no sender
            new(1, A, 0, 1, 0, new byte[] { 1 }),            // view 0
            new(1, A, 3, 0, 0, new byte[] { 1 }),            // sequence number 0
            new(1, A, 3, -7, 0, new byte[] { 1 }),
            new(1, A, 3, 1, -1, new byte[] { 1 }),           // negative phi
        ];
        foreach (HistoryEntry e in bad)
        {
            HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(View(1, 1, A, A)), En(e), En(Entry(1))]);
            Assert.Empty(image.Entries);
            Assert.Equal(2, image.Unreadable);
        }
        HistoryLogImage none = HistoryLog.Read([Inc(A), Inc(NodeId.None), Inc(B)]);
        Assert.Equal([A], none.Incarnations);
        Assert.Equal(2, none.Unreadable);
    }

    [Theory]
    [InlineData(0)]
    [InlineData(4)]
    [InlineData(99)]
    [InlineData(255)]
    public void Reading_stops_at_an_unknown_record_kind(byte kind)
    {
        List<byte[]> records = ValidLog(2);
        byte[] unknown = En(Entry(3));
        unknown[0] = kind; // a well-formed entry body under a kind nobody writes
        records.Insert(3, unknown); // after entry 1
        HistoryLogImage image = HistoryLog.Read(records);
        Assert.Equal([1L], image.Entries.Select(e => e.Index));
        Assert.Equal(2, image.Unreadable);
    }

    [Fact]
    public void Counts_in_a_record_larger_than_the_record_stop_reading_without_allocating_them()
    {
        // A View record whose member count claims int.MaxValue members, and an entry whose payload claims 2 GB.
        byte[] view = new PacketWriter().BeginRecord().U8(2).I64(1).I32(1).Node(A).I32(1).Node(A).I32(int.MaxValue).Node(A).FinishRecord();
        byte[] entry = new PacketWriter().BeginRecord().U8(3).I64(1).Node(A).I32(1).I64(1).I32(0).I32(int.MaxValue).U8(1).FinishRecord();
        byte[] negative = new PacketWriter().BeginRecord().U8(2).I64(1).I32(1).Node(A).I32(1).Node(A).I32(-1).FinishRecord();
        Assert.Equal(1, HistoryLog.Read([Inc(A), view]).Unreadable);
        Assert.Equal(1, HistoryLog.Read([Inc(A), negative]).Unreadable);
        HistoryLogImage image = HistoryLog.Read([Inc(A), Vw(View(1, 1, A, A)), entry]);
        Assert.Empty(image.Entries);
        Assert.Equal(1, image.Unreadable);
    }

    // ---------------------------------------------------------------- hostile bytes

    [Fact]
    public void Reading_random_records_never_throws_and_yields_a_well_formed_image()
    {
        var random = new Random(20250917);
        for (int round = 0; round < 3_000; round++)
        {
            var records = new List<byte[]>();
            int count = random.Next(0, 8);
            for (int i = 0; i < count; i++)
            {
                byte[] r = new byte[random.Next(0, 120)];
                random.NextBytes(r);
                // Mostly the three real kinds, so the field parsers (not just the kind check) see the garbage.
                if (r.Length > 0 && random.Next(4) > 0) r[0] = (byte)random.Next(1, 4);
                records.Add(r);
            }
            HistoryLogImage image = HistoryLog.Read(records);
            AssertWellFormed(image, records.Count);
        }
    }

    [Fact]
    public void Damaging_a_valid_log_never_throws_and_never_loses_the_records_before_the_damage()
    {
        var random = new Random(4242);
        for (int round = 0; round < 3_000; round++)
        {
            List<byte[]> records = ValidLog(random.Next(0, 6));
            int damaged = random.Next(records.Count);
            byte[] r = (byte[])records[damaged].Clone();
            switch (random.Next(4))
            {
                case 0: r[random.Next(r.Length)] ^= (byte)random.Next(1, 256); break;   // a flipped byte
                case 1: r = r[..random.Next(r.Length)]; break;                           // a torn record
                case 2: random.NextBytes(r); break;                                      // overwritten
                default: r = [.. r, .. Enumerable.Repeat((byte)random.Next(256), random.Next(1, 9))]; break; // trailing bytes
            }
            records[damaged] = r;

            HistoryLogImage image = HistoryLog.Read(records);
            AssertWellFormed(image, records.Count);
            // Everything before the damaged record is intact and must be read back.
            HistoryLogImage before = HistoryLog.Read(records.GetRange(0, damaged));
            Assert.Equal(0, before.Unreadable);
            Assert.True(image.Entries.Count >= before.Entries.Count);
            Assert.Equal(before.Incarnations, image.Incarnations.Take(before.Incarnations.Count));
            for (int i = 0; i < before.Entries.Count; i++) AssertSameEntry(before.Entries[i], image.Entries[i]);
            // (A flipped payload byte can leave a record that still parses: guarding against that is the file's CRC's job.)
        }
    }
}
