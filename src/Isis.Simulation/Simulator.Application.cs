using System.Buffers.Binary;
using Isis.Core.Durability;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Simulation;

/// <summary>
/// The simulated application's replicated state and its checkpoints (state transfer): what a real
/// application does in its MakeChkpt and LoadChkpt handlers, reduced to what the checker can judge.
/// </summary>
/// <remarks>
/// The state is the list of messages the application applied in the group. A checkpoint is that
/// list, written as message ids in chunks of <see cref="IdsPerChunk"/>, made at the cut (a copy, as an
/// application's snapshot would be) and handed to the core later, a chunk at a time, while the
/// core's backlog allows. The joiner rebuilds the list from the chunks alone, so a chunk lost,
/// repeated or reordered on the way shows up as a state that differs from its maker's.
/// </remarks>
internal sealed partial class Simulator
{
    /// <summary>Message ids per checkpoint chunk: small, so that even short runs send several chunks and fill the window.</summary>
    private const int IdsPerChunk = 16;

    private const int IdBytes = 32;

    /// <summary>The simulated application's part of a process: its state in the group and the checkpoint chunks it is receiving.</summary>
    internal sealed class ApplicationState
    {
        public List<MessageId> Applied { get; private set; } = new();

        public List<byte[]> IncomingChunks { get; } = new();

        /// <summary>Disk durability: the history entries applied (replayed, restored or delivered), in order; their count is the history position a checkpoint records.</summary>
        public List<(MessageId Id, ulong Hash)> SafeApplied { get; private set; } = new();

        /// <summary>Disk durability: the history this member holds, once it does.</summary>
        public Lineage? HistoryLineage { get; set; }

        /// <summary>With <see cref="Scenario.Collections"/>: the incarnation's replicated collection (Simulator.Collections.cs).</summary>
        public CollectionReplica? Collection { get; set; }

        /// <summary>With <see cref="Scenario.Locks"/>: the incarnation's lock table and its own request (Simulator.Locks.cs).</summary>
        public LockClient? Locks { get; set; }

        /// <summary>With <see cref="Scenario.Clients"/>: the incarnation's client sessions and the requests it relays (Simulator.Clients.cs).</summary>
        public ClientRelay? Clients { get; set; }

        public void Reset()
        {
            Applied = new List<MessageId>();
            IncomingChunks.Clear();
            SafeApplied = new List<(MessageId, ulong)>();
            HistoryLineage = null;
        }

        public void Restore(Checkpoint c)
        {
            SafeApplied = [.. c.Entries];
            Applied = [.. c.Entries.Select(e => e.Id)];
        }

        public void Load(List<MessageId> state) => Applied = state;
    }

    /// <summary>
    /// A persistent checkpoint of the simulated application of a group with disk durability: the
    /// history entries it had applied (its durable state) and the lineage of that history, as the
    /// runtime's checkpoint file records them.
    /// </summary>
    internal sealed record Checkpoint(string Name, Lineage Lineage, (MessageId Id, ulong Hash)[] Entries);

    /// <summary>Chance that the application saves a persistent checkpoint after a SafeSend it applies.</summary>
    private const double CheckpointChance = 0.1;

    /// <summary>Chance that a process finds its newest checkpoint damaged when it restarts (the runtime then names only the older one).</summary>
    private const double DamagedCheckpointChance = 0.2;

    /// <summary>The checkpoints the driver names to the core at a join: the whole ones, newest first (null without them).</summary>
    private List<CheckpointMark>? CheckpointsOf(SimProcess p)
    {
        if (!Scenario.PersistentCheckpoints || !Scenario.DiskDurability) return null;
        IEnumerable<Checkpoint> whole = p.Checkpoints;
        if (p.Checkpoints.Count > 1 && _random.Chance(DamagedCheckpointChance)) whole = whole.Skip(1);
        return whole.Select(MarkOf).ToList();
    }

    /// <summary>A checkpoint as the driver names it to the core: its position and the digest of the entries it holds, as the runtime records them in the file.</summary>
    private static CheckpointMark MarkOf(Checkpoint c)
    {
        ulong digest = HistoryDigest.Empty;
        foreach ((MessageId id, _) in c.Entries) digest = HistoryDigest.Next(digest, id.Sender, id.ViewId, id.Seq);
        return new CheckpointMark(c.Lineage, c.Entries.Length, c.Name, digest);
    }

    private void OnApplicationEvent(NodeId process, NodeEvent e)
    {
        SimProcess? p = ProcessOf(process);
        if (p == null) return;
        if (Scenario.Collections) OnCollectionEvent(p, e);
        if (Scenario.Clients > 0) OnClientEvent(p, e);
        switch (e)
        {
            case MessageDelivered d when d.Group == _group && Scenario.Locks && d.Kind == MessageKind.Safe:
                p.App.Applied.Add(new MessageId(d.Sender, d.Group, d.ViewId, d.Seq));
                OnLockDelivered(p, d);
                break;
            case ViewInstalled v when v.Group == _group && Scenario.Locks:
                OnLockView(p, v);
                break;
            case MessageDelivered d when d.Group == _group:
                // A subset message is its destinations' own, not part of the replicated state a checkpoint carries.
                if (!d.Kind.IsSubset()) p.App.Applied.Add(new MessageId(d.Sender, d.Group, d.ViewId, d.Seq));
                if (d.Kind.IsSafe() && Scenario.PersistentCheckpoints) ApplySafe(p, new MessageId(d.Sender, d.Group, d.ViewId, d.Seq), PayloadHash(d.Payload.Span));
                break;
            case HistoryReplayed r when r.Group == _group && Scenario.PersistentCheckpoints:
                p.App.SafeApplied.Add((new MessageId(r.Entry.Sender, r.Group, r.Entry.ViewId, r.Entry.Seq), PayloadHash(r.Entry.Payload.Span)));
                break;
            case CheckpointRestored c when c.Group == _group:
                Checkpoint restored = p.CheckpointFiles[c.Checkpoint.Name];
                p.App.Restore(restored);
                for (int i = 0; i < restored.Entries.Length; i++)
                {
                    if (RecordsHistory) History.RecordRestore(_now, process, c.Group, i + 1, restored.Entries[i].Id, restored.Entries[i].Hash);
                }
                break;
            case HistoryReady h when h.Group == _group:
                p.App.HistoryLineage = h.Lineage;
                break;
            case GroupLeft l when l.Group == _group:
                p.App.Reset(); // an application that leaves drops its replica; a checkpoint rebuilds it if it joins again
                NewCollection(p);
                NewLockClient(p);
                NewClientRelay(p);
                break;
            case CheckpointReadRequested r when r.Group == _group:
                ServeCheckpoint(p, r);
                break;
            case CheckpointChunkReceived c when c.Group == _group:
                CopyCheckpoint(p, c);
                break;
            case StateRequested r when r.Group == _group:
                MakeCheckpoint(p, r);
                break;
            case StateChunkReceived c when c.Group == _group:
                p.App.IncomingChunks.Add(c.Chunk);
                break;
            case StateTransferAborted a when a.Group == _group:
                p.App.IncomingChunks.Clear();
                break;
            case StateReceived r when r.Group == _group:
                LoadCheckpoint(p, r);
                break;
            case StateReset r when r.Group == _group:
                p.App.Reset();
                FoundCollection(p);
                NewLockClient(p); // the locks start over with the state: every holder of the table is gone
                NewClientRelay(p);
                if (RecordsHistory) History.RecordStateReset(_now, process, r.Group, r.CutViewId);
                break;
        }
    }

    /// <summary>A SafeSend the application applied after its history's replay; now and then it saves a checkpoint then, as a schedule would.</summary>
    private void ApplySafe(SimProcess p, MessageId id, ulong hash)
    {
        p.App.SafeApplied.Add((id, hash));
        if (p.App.HistoryLineage is not { } lineage || !_random.Chance(CheckpointChance)) return;
        KeepCheckpoint(p, new Checkpoint($"{p.Node!.Self}#{p.App.SafeApplied.Count}", lineage, [.. p.App.SafeApplied]));
    }

    /// <summary>
    /// A checkpoint is on disk (saved, or copied from another member): the newest two are what a
    /// restart finds; the driver tells the core, which may trim its log behind it (or goes on
    /// with a copy of the history that waited for it), a little later, as the runtime's save completes.
    /// </summary>
    private void KeepCheckpoint(SimProcess p, Checkpoint c)
    {
        p.Checkpoints.Insert(0, c);
        if (p.Checkpoints.Count > 2) p.Checkpoints.RemoveAt(2);
        p.CheckpointFiles[c.Name] = c;
        ProcessNode node = p.Node!;
        CheckpointMark mark = MarkOf(c);
        At(_now + _random.NextInRange(0, 2_000), () =>
        {
            if (p.Node != node || node.IsShutDown) return;
            node.CheckpointDurable(_group, mark, _now);
            Flush(p);
        });
    }

    /// <summary>A member copies the history from this one and needs a checkpoint of it: read its bytes (a disk read, a little later).</summary>
    private void ServeCheckpoint(SimProcess p, CheckpointReadRequested r)
    {
        ProcessNode node = p.Node!;
        At(_now + _random.NextInRange(0, 1_000), () =>
        {
            if (p.Node != node || node.IsShutDown) return;
            if (!p.CheckpointFiles.TryGetValue(r.Mark.Name, out Checkpoint? c))
            {
                node.AnswerCheckpointRead(_group, r.Requester, r.Mark, r.Offset, null, 0, $"no checkpoint {r.Mark.Name}", _now);
            }
            else
            {
                byte[] file = CheckpointBytes(c);
                int length = (int)Math.Clamp(file.Length - r.Offset, 0, r.MaxBytes);
                node.AnswerCheckpointRead(_group, r.Requester, r.Mark, r.Offset, file.AsSpan((int)Math.Min(r.Offset, file.Length), length).ToArray(), file.Length, null, _now);
            }
            Flush(p);
        });
    }

    /// <summary>The next bytes of a checkpoint copied from another member; whole, it is kept as this process's own.</summary>
    private void CopyCheckpoint(SimProcess p, CheckpointChunkReceived c)
    {
        if (c.Offset == 0) p.CopyingCheckpoint = [];
        if (p.CopyingCheckpoint == null || p.CopyingCheckpoint.Count != c.Offset) return; // the core hands chunks in order; a restart drops a partial copy
        p.CopyingCheckpoint.AddRange(c.Bytes);
        if (p.CopyingCheckpoint.Count < c.Total) return;
        (MessageId Id, ulong Hash)[] entries = ReadCheckpointBytes([.. p.CopyingCheckpoint]);
        p.CopyingCheckpoint = null;
        if (entries.Length != c.Index) return; // not what it claims: never made durable, so the core asks again
        KeepCheckpoint(p, new Checkpoint($"{p.Node!.Self}#copy{c.Index}", c.Lineage, entries));
    }

    /// <summary>A checkpoint's file as the simulated application writes it: each entry's id and payload hash.</summary>
    private static byte[] CheckpointBytes(Checkpoint c)
    {
        var bytes = new byte[c.Entries.Length * (IdBytes + 8)];
        for (int i = 0; i < c.Entries.Length; i++)
        {
            WriteId(bytes.AsSpan(i * (IdBytes + 8)), c.Entries[i].Id);
            BinaryPrimitives.WriteUInt64LittleEndian(bytes.AsSpan(i * (IdBytes + 8) + IdBytes), c.Entries[i].Hash);
        }
        return bytes;
    }

    private static (MessageId Id, ulong Hash)[] ReadCheckpointBytes(byte[] bytes)
    {
        var entries = new (MessageId, ulong)[bytes.Length / (IdBytes + 8)];
        for (int i = 0; i < entries.Length; i++)
        {
            entries[i] = (ReadId(bytes.AsSpan(i * (IdBytes + 8))), BinaryPrimitives.ReadUInt64LittleEndian(bytes.AsSpan(i * (IdBytes + 8) + IdBytes)));
        }
        return entries;
    }

    private void MakeCheckpoint(SimProcess p, StateRequested request)
    {
        MessageId[] snapshot = [.. p.App.Applied];
        var digest = StateDigest.Empty;
        foreach (MessageId m in snapshot) digest = digest.With(m);
        if (RecordsHistory) History.RecordStateMade(_now, p.Node!.Self, request.Group, request.CutViewId, digest);
        var chunks = new List<byte[]>();
        for (int start = 0; start < snapshot.Length || chunks.Count == 0; start += IdsPerChunk)
        {
            int n = Math.Min(IdsPerChunk, snapshot.Length - start);
            var chunk = new byte[n * IdBytes];
            for (int i = 0; i < n; i++) WriteId(chunk.AsSpan(i * IdBytes), snapshot[start + i]);
            chunks.Add(chunk);
        }
        if (Scenario.Collections && p.App.Collection != null) chunks.Add(CollectionChunk(p));
        if (Scenario.Locks && p.App.Locks != null) chunks.Add(LockChunk(p));
        if (Scenario.Clients > 0 && p.App.Clients != null) chunks.Add(ClientChunk(p));
        // A real maker's handler runs on its delivery thread a little later than the protocol asked.
        ProcessNode node = p.Node!;
        if (!_healed && _random.Chance(Scenario.CrashMakerChance)) At(_now + _random.NextInRange(0, 30_000), () => Crash(p));
        At(_now + _random.NextInRange(0, 5_000), () => SendCheckpointChunks(p, node, request.CutViewId, chunks, 0));
    }

    /// <summary>Hands the core chunks while its backlog is under the window, as the runtime's SendChkpt waits; then tries again a millisecond later.</summary>
    private void SendCheckpointChunks(SimProcess p, ProcessNode node, int cut, List<byte[]> chunks, int next)
    {
        if (p.Node != node || node.IsShutDown) return;
        while (next < chunks.Count && (node.FindGroup(_group)?.StateBacklogBytes ?? 0) < _protocol.StateWindowBytes)
        {
            node.SendStateChunk(_group, cut, chunks[next], last: next == chunks.Count - 1, _now);
            next++;
            Flush(p);
            if (p.Node != node || node.IsShutDown) return;
        }
        if (next < chunks.Count) At(_now + 1_000, () => SendCheckpointChunks(p, node, cut, chunks, next));
    }

    private void LoadCheckpoint(SimProcess p, StateReceived received)
    {
        var state = new List<MessageId>();
        var digest = StateDigest.Empty;
        foreach (byte[] chunk in p.App.IncomingChunks)
        {
            if (LoadLockChunk(p, chunk) || LoadClientChunk(p, chunk)) continue;
            LoadCollectionChunk(p, chunk);
            for (int at = 0; at + IdBytes <= chunk.Length; at += IdBytes)
            {
                MessageId m = ReadId(chunk.AsSpan(at));
                state.Add(m);
                digest = digest.With(m);
            }
        }
        p.App.IncomingChunks.Clear();
        p.App.Load(state);
        if (RecordsHistory) History.RecordStateLoaded(_now, p.Node!.Self, received.Group, received.CutViewId, digest);
    }

    /// <summary>A table's part of a checkpoint (the locks', the client sessions'): a chunk no id reader takes for ids, since it starts with <paramref name="magic"/> and is read first.</summary>
    private static byte[] TaggedChunk(uint magic, byte[] snapshot)
    {
        var chunk = new byte[4 + snapshot.Length];
        BinaryPrimitives.WriteUInt32LittleEndian(chunk, magic);
        snapshot.CopyTo(chunk, 4);
        return chunk;
    }

    /// <summary>The snapshot in a chunk <see cref="TaggedChunk"/> made with <paramref name="magic"/>; false if the chunk is another.</summary>
    private static bool TryReadTaggedChunk(byte[] chunk, uint magic, out byte[] snapshot)
    {
        bool tagged = chunk.Length >= 4 && BinaryPrimitives.ReadUInt32LittleEndian(chunk) == magic;
        snapshot = tagged ? chunk[4..] : [];
        return tagged;
    }

    private static void WriteId(Span<byte> into, MessageId m)
    {
        BinaryPrimitives.WriteUInt64LittleEndian(into, m.Sender.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(into[8..], m.Sender.Incarnation);
        BinaryPrimitives.WriteInt32LittleEndian(into[12..], m.ViewId);
        BinaryPrimitives.WriteInt64LittleEndian(into[16..], m.Seq);
        BinaryPrimitives.WriteUInt64LittleEndian(into[24..], m.Group.Value);
    }

    private static MessageId ReadId(ReadOnlySpan<byte> from) =>
        new(new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(from), BinaryPrimitives.ReadUInt32LittleEndian(from[8..])),
            new GroupId(BinaryPrimitives.ReadUInt64LittleEndian(from[24..])),
            BinaryPrimitives.ReadInt32LittleEndian(from[12..]),
            BinaryPrimitives.ReadInt64LittleEndian(from[16..]));
}
