using System.Security.Cryptography;
using System.Text;
using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Runtime;
using Isis.Serialization;

namespace Isis.Tests.Runtime;

/// <summary>
/// The state lineage of checkpoint-only groups: a member whose checkpoint holds a state the running
/// group was started without keeps it aside and says so, instead of letting the next save
/// overwrite it; one of the same lineage, or of the old file format (unknown lineage), goes on as before.
/// </summary>
public sealed partial class PersistentCheckpointTests
{
    /// <summary>A thread-safe stand-in for standard error: where a runtime without a logger reports.</summary>
    private sealed class CapturedStandardError
    {
        private readonly StringWriter _text = new();

        public CapturedStandardError() => Writer = TextWriter.Synchronized(_text);

        public TextWriter Writer { get; }

        public string Text
        {
            get { lock (Writer) return _text.ToString(); } // the synchronized writer locks itself
        }
    }

    private static void SendAndWait(List<Replica> replicas, IEnumerable<int> numbers)
    {
        int[] sent = [.. numbers];
        foreach (int n in sent) replicas[0].Group.Send(Put, n);
        replicas[0].Group.Flush();
        TestRuntimes.WaitUntil(() => replicas.All(r => r.State().Contains(sent[^1])), $"update {sent[^1]} everywhere");
    }

    private static CheckpointFile.Checked OpenChecked(string path, string group) =>
        CheckpointFile.Open(path, group, out string? problem) ?? throw new InvalidOperationException($"{path} does not open: {problem ?? "missing"}");

    [Fact]
    public void A_member_without_a_checkpoint_refuses_to_start_an_empty_state_over_one_this_machine_kept_and_says_where_it_is()
    {
        using var runtimes = new TestRuntimes();
        List<Replica> before = JoinAll(Enumerable.Range(0, 2).Select(i => new Replica(runtimes.Start(), "orders", Dir(i))));
        SendAndWait(before, Enumerable.Range(1, 4));
        foreach (Replica r in before) r.Group.SaveCheckpoint();
        foreach (Replica r in before) r.Runtime.Crash(); // every instance stops: the embedded service forgets the group
        DurableGroupRegistry.Entry entry = DurableGroupRegistry.Read(runtimes.Options().DurableGroupRegistryFolder, "orders")!;
        Assert.Equal(before[0].Group.StateLineage.ToString(), entry.Lineage);

        // A new instance with an empty directory starts first: its join fails, naming where the state is.
        var stderr = new CapturedStandardError();
        var fresh = new Replica(runtimes.Start(o => o.StandardError = stderr.Writer), "orders", Dir(2));
        var refused = Assert.Throws<IsisException>(() => fresh.Group.Join());
        Assert.Contains("registry of durable groups", refused.Message, StringComparison.Ordinal);
        Assert.Contains(Path.GetFullPath(Dir(0)), refused.Message, StringComparison.Ordinal);
        Assert.Contains("registry of durable groups", stderr.Text, StringComparison.Ordinal); // visible without a logger
        Assert.Empty(Directory.GetFiles(Dir(2), "*.checkpoint*")); // it saved nothing

        // The old instance starts first, then a new one: the state is the old one everywhere.
        Replica old = JoinAll([new Replica(runtimes.Start(), "orders", Dir(0))])[0];
        var joiner = new Replica(runtimes.Start(), "orders", Dir(3));
        joiner.Group.Join();
        TestRuntimes.WaitUntil(() => joiner.State().Length == 4, "the joiner receives the old state");
        Assert.Equal([1, 2, 3, 4], old.State().Order());
        Assert.Equal([1, 2, 3, 4], joiner.State().Order());
        Assert.Equal(old.Group.StateLineage, joiner.Group.StateLineage);
    }

    [Fact]
    public void A_member_whose_checkpoint_is_of_another_lineage_keeps_it_aside_and_reports_it_instead_of_taking_the_running_state_over_it()
    {
        using var runtimes = new TestRuntimes();
        List<Replica> before = JoinAll(Enumerable.Range(0, 2).Select(i => new Replica(runtimes.Start(), "orders", Dir(i))));
        Lineage original = Assert.IsType<Lineage>(before[0].Group.StateLineage);
        Assert.Equal(original, before[1].Group.StateLineage); // the joiner took it by transfer
        SendAndWait(before, Enumerable.Range(1, 3));
        before[1].Group.SaveCheckpoint(); // becomes member 1's previous checkpoint: 3 numbers
        SendAndWait(before, Enumerable.Range(4, 2));
        before[1].Group.SaveCheckpoint(); // its newest: 5 numbers
        before[0].Group.SaveCheckpoint();
        foreach (Replica r in before) r.Runtime.Crash();
        string newest = CheckpointFile.NewestPath(Dir(1), "orders"), previous = CheckpointFile.PreviousPath(Dir(1), "orders");
        byte[] newestBytes = File.ReadAllBytes(newest), previousBytes = File.ReadAllBytes(previous);

        // A member with an empty directory starts the group alone, on a machine that does not know
        // the group (this machine's registry of durable groups is forgotten; with it, the member
        // would refuse, see the next test): an empty state, of a new lineage.
        Assert.True(DurableGroupRegistry.Forget(runtimes.Options().DurableGroupRegistryFolder, "orders"));
        Replica fresh = JoinAll([new Replica(runtimes.Start(), "orders", Dir(2))])[0];
        Assert.Empty(fresh.State());
        Lineage started = Assert.IsType<Lineage>(fresh.Group.StateLineage);
        Assert.NotEqual(original, started);

        // The old member starts with its directory: it joins and takes the running group's state ...
        var stderr = new CapturedStandardError();
        var old = new Replica(runtimes.Start(o => o.StandardError = stderr.Writer), "orders", Dir(1));
        old.Group.Join();
        TestRuntimes.WaitUntil(() => fresh.Group.GetView()?.Members.Length == 2, "a 2-member view");
        Assert.Empty(old.State());
        Assert.Equal(started, old.Group.StateLineage);

        // ... with both of its checkpoints aside, byte for byte, before anything could save over them,
        string newestAside = Assert.Single(Directory.GetFiles(Dir(1), "orders.checkpoint.orphan-*"));
        string previousAside = Assert.Single(Directory.GetFiles(Dir(1), "orders.checkpoint.1.orphan-*"));
        Assert.False(File.Exists(newest));
        Assert.False(File.Exists(previous));
        Assert.Equal(newestBytes, File.ReadAllBytes(newestAside));
        Assert.Equal(previousBytes, File.ReadAllBytes(previousAside));

        // ... and an error on standard error (no logger is configured) that says what was kept where and what to do.
        string report = stderr.Text;
        Assert.Contains("isis: error:", report);
        Assert.Contains(newestAside, report);
        Assert.Contains(previousAside, report);
        Assert.Contains(original.ToString(), report);
        Assert.Contains(started.ToString(), report);
        Assert.Contains("start this member first", report);

        // It goes on with the running state; saves fill its directory again and leave the data aside untouched.
        old.Group.Send(Put, 100);
        old.Group.Flush();
        TestRuntimes.WaitUntil(() => fresh.State().SequenceEqual([100]) && old.State().SequenceEqual([100]), "the next update at both");
        old.Group.SaveCheckpoint();
        old.Group.SaveCheckpoint(); // a newest and a previous of the new lineage
        using (CheckpointFile.Checked saved = OpenChecked(newest, "orders"))
        {
            Assert.Equal(started, saved.Lineage);
            Assert.Equal(1, saved.Parts);
        }
        Assert.Equal(newestBytes, File.ReadAllBytes(newestAside));
        Assert.Equal(previousBytes, File.ReadAllBytes(previousAside));
        using (CheckpointFile.Checked aside = OpenChecked(newestAside, "orders"))
        {
            Assert.Equal(original, aside.Lineage);
            Assert.Equal(5, aside.Parts); // the data the empty state would have overwritten
        }
    }

    [Fact]
    public void A_member_whose_checkpoint_is_of_the_running_lineage_rejoins_without_a_report_and_its_checkpoint_is_replaced_by_the_newer_state()
    {
        using var runtimes = new TestRuntimes();
        List<Replica> before = JoinAll(Enumerable.Range(0, 2).Select(i => new Replica(runtimes.Start(), "orders", Dir(i))));
        Lineage original = Assert.IsType<Lineage>(before[0].Group.StateLineage);
        SendAndWait(before, Enumerable.Range(1, 3));
        before[1].Group.SaveCheckpoint(); // member 1 stops at 3 numbers
        SendAndWait(before, Enumerable.Range(4, 2));
        before[0].Group.SaveCheckpoint(); // member 0 at 5
        foreach (Replica r in before) r.Runtime.Crash();

        // Member 0 starts the group alone from its checkpoint: the lineage comes back from the file.
        Replica first = JoinAll([new Replica(runtimes.Start(), "orders", Dir(0))])[0];
        Assert.Equal([1, 2, 3, 4, 5], first.State());
        Assert.Equal(original, first.Group.StateLineage);

        // Member 1 rejoins with its older checkpoint of the same lineage: it takes the newer state, says nothing, keeps nothing aside.
        var stderr = new CapturedStandardError();
        var second = new Replica(runtimes.Start(o => o.StandardError = stderr.Writer), "orders", Dir(1));
        second.Group.Join();
        List<Replica> after = [first, second];
        TestRuntimes.WaitUntil(() => first.Group.GetView()?.Members.Length == 2, "a 2-member view");
        Assert.Equal([1, 2, 3, 4, 5], second.State());
        Assert.Equal(original, second.Group.StateLineage);
        SendAndWait(after, [6]);
        second.Group.SaveCheckpoint();
        Assert.Empty(Directory.GetFiles(Dir(1), "*orphan*"));
        Assert.DoesNotContain("lineage", stderr.Text);
        using CheckpointFile.Checked saved = OpenChecked(CheckpointFile.NewestPath(Dir(1), "orders"), "orders");
        Assert.Equal(original, saved.Lineage);
        Assert.Equal(6, saved.Parts); // the newer state replaced the 3 numbers (now the previous checkpoint)
        using CheckpointFile.Checked replaced = OpenChecked(CheckpointFile.PreviousPath(Dir(1), "orders"), "orders");
        Assert.Equal(3, replaced.Parts);
    }

    /// <summary>Writes a checkpoint as format 1 laid it out (no state lineage), one part per number.</summary>
    private static void WriteFormat1Checkpoint(string directory, string group, params int[] numbers)
    {
        Directory.CreateDirectory(directory);
        var body = new MemoryStream();
        using (var w = new BinaryWriter(body, Encoding.UTF8, leaveOpen: true))
        {
            w.Write("ISISCKPT"u8);
            w.Write((byte)1);
            w.Write(group);
            w.Write(false); // no history position
            w.Write(new DateTime(2025, 6, 1, 0, 0, 0, DateTimeKind.Utc).Ticks);
            w.Write((byte)0); // no key
            foreach (int n in numbers)
            {
                byte[] part = ArgumentCodec.Encode(0, [n]);
                w.Write(part.Length);
                w.Write(part);
            }
            w.Write(-1);
            w.Write((long)numbers.Length);
        }
        byte[] bytes = body.ToArray();
        File.WriteAllBytes(CheckpointFile.NewestPath(directory, group), [.. bytes, .. SHA256.HashData(bytes)]);
    }

    [Fact]
    public void A_format_2_checkpoint_with_a_history_position_opens_with_its_digest_unknown_which_the_core_accepts()
    {
        string directory = Dir(0);
        Directory.CreateDirectory(directory);
        var body = new MemoryStream();
        using (var w = new BinaryWriter(body, Encoding.UTF8, leaveOpen: true))
        {
            w.Write("ISISCKPT"u8);
            w.Write((byte)2);
            w.Write("ledger");
            w.Write(true); // a history position, without the digest format 3 adds
            w.Write(7UL);  // lineage: founder endpoint, incarnation, view
            w.Write(1u);
            w.Write(1);
            w.Write(12L);  // entries
            w.Write(false); // no state lineage
            w.Write(new DateTime(2025, 6, 1, 0, 0, 0, DateTimeKind.Utc).Ticks);
            w.Write((byte)0); // no key
            w.Write(-1);
            w.Write(0L);
        }
        byte[] bytes = body.ToArray();
        File.WriteAllBytes(CheckpointFile.NewestPath(directory, "ledger"), [.. bytes, .. SHA256.HashData(bytes)]);
        using CheckpointFile.Checked format2 = OpenChecked(CheckpointFile.NewestPath(directory, "ledger"), "ledger");
        Assert.Equal(12, format2.Position!.Value.Index);
        Assert.Equal(Isis.Core.Durability.HistoryDigest.Unknown, format2.Position.Value.Digest);
        Assert.Equal(Isis.Core.Durability.HistoryDigest.Unknown, format2.Position.Value.Mark.Digest);
    }

    [Fact]
    public void A_format_1_checkpoint_loads_with_an_unknown_lineage_which_is_accepted_and_the_next_save_records_the_groups_lineage()
    {
        WriteFormat1Checkpoint(Dir(0), "legacy", 1, 2, 3);
        WriteFormat1Checkpoint(Dir(1), "legacy", 7);
        using (CheckpointFile.Checked format1 = OpenChecked(CheckpointFile.NewestPath(Dir(0), "legacy"), "legacy"))
        {
            Assert.Null(format1.Lineage);
            Assert.Equal(3, format1.Parts);
        }

        using var runtimes = new TestRuntimes();
        // Restored by the member that starts the group: the state gets a lineage of its own.
        Replica first = JoinAll([new Replica(runtimes.Start(), "legacy", Dir(0))])[0];
        Assert.Equal([1, 2, 3], first.State());
        Assert.Equal(3, first.LoadedParts);
        Lineage lineage = Assert.IsType<Lineage>(first.Group.StateLineage);
        Assert.Equal(first.Runtime.Address!.Node, lineage.Founder);

        // Held by a joiner: nothing tells it apart from the running state, so it is accepted, as before lineages.
        var stderr = new CapturedStandardError();
        var second = new Replica(runtimes.Start(o => o.StandardError = stderr.Writer), "legacy", Dir(1));
        second.Group.Join();
        Assert.Equal([1, 2, 3], second.State());
        Assert.Empty(Directory.GetFiles(Dir(1), "*orphan*"));
        Assert.DoesNotContain("lineage", stderr.Text);

        // The next saves are of the current format, with the group's lineage.
        foreach (Replica r in new[] { first, second }) r.Group.SaveCheckpoint();
        foreach (int member in new[] { 0, 1 })
        {
            using CheckpointFile.Checked saved = OpenChecked(CheckpointFile.NewestPath(Dir(member), "legacy"), "legacy");
            Assert.Equal(lineage, saved.StateLineage);
            Assert.Equal(3, saved.Parts);
        }
    }

    [Fact]
    public void The_state_lineage_survives_a_save_and_an_open_of_the_file()
    {
        var lineage = new Lineage(new NodeId(0x7F000001_1F90UL, 42), 17);
        using (CheckpointFile.Writer writer = CheckpointFile.Create(Dir(0), "g", null, lineage, null, DateTime.UtcNow))
        {
            writer.Add(ArgumentCodec.Encode(0, [5]));
            writer.Commit();
        }
        using (CheckpointFile.Checked c = OpenChecked(CheckpointFile.NewestPath(Dir(0), "g"), "g"))
        {
            Assert.Equal(lineage, c.StateLineage);
            Assert.Equal(lineage, c.Lineage);
            Assert.Null(c.Position);
            Assert.Equal(1, c.Parts);
        }

        // With disk durability no state lineage is written: the history position's lineage is the state's.
        var history = new CheckpointFile.HistoryPosition(new Lineage(new NodeId(0x7F000001_1F91UL, 43), 2), 9);
        using (CheckpointFile.Writer writer = CheckpointFile.Create(Dir(1), "g", history, null, null, DateTime.UtcNow))
        {
            writer.Commit();
        }
        using (CheckpointFile.Checked c = OpenChecked(CheckpointFile.NewestPath(Dir(1), "g"), "g"))
        {
            Assert.Null(c.StateLineage);
            Assert.Equal(history, c.Position);
            Assert.Equal(history.Lineage, c.Lineage);
        }
    }
}
