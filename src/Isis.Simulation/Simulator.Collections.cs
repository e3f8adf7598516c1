using System.Buffers.Binary;
using Isis.Core.Collections;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Simulation;

/// <summary>
/// A replicated collection on the simulated application (<see cref="Scenario.Collections"/>): each
/// process runs the collections' own <see cref="MergeLog{TOp}"/> (the model Isis.Collections drives), driven as OperationLog drives it
/// on a real group. The workload's Sends are its updates; the view's oldest member multicasts merge
/// lists by OrderedSend, one in flight at a time, as the runtime's default does; checkpoints carry the history's lineage,
/// length and chain; every 10 ms each member pulls from a random peer by Query, which only that
/// peer answers. Members stall their handlers now and then (a slow application): what their
/// handlers would do waits, while their gossip goes on and repairs them. Every history entry is
/// recorded, and the checker's Collections property judges them.
/// </summary>
internal sealed partial class Simulator
{
    private const byte MergeListTag = 0xC1, PullTag = 0xC2, PullReplyTag = 0xC3;
    private const long GossipIntervalMicros = 10_000, PullTimeoutMicros = 100_000;
    private const int RepairBatch = 64;
    private const uint CollectionChunkMagic = 0xC011EC71;
    private const int CollectionChunkBytes = 28; // magic, lineage, length, chain: shorter than an id, so the id reader skips it

    /// <summary>Chance per millisecond tick of the fault phase that a member's handlers stall, for 20 to 400 ms.</summary>
    private const double StallChance = 0.002;

    private long _nextLineage;

    /// <summary>Repairs that added history entries, over the run (for the scenario tests' report).</summary>
    internal long CollectionRepairs { get; private set; }

    /// <summary>Handler stalls over the run.</summary>
    internal long CollectionStalls { get; private set; }

    /// <summary>One incarnation's collection: the model, its lineage, and what its stalled handlers have not done yet.</summary>
    internal sealed class CollectionReplica(MergeLog<ulong> log, long lineage)
    {
        public readonly MergeLog<ulong> Log = log;
        public long Lineage = lineage;
        public bool Stalled;
        public readonly Queue<Action> Waiting = new();
        public long NextGossipAt;
        public readonly Dictionary<long, NodeId> Pulls = new(); // query id -> the peer asked
        public bool Repairing; // applying a repair (its entries are recorded as such)

        /// <summary>The node published a view of the group to the application (stalled handlers or not): what a real member's Group.GetView() needs before it may issue updates.</summary>
        public bool HasView;
    }

    /// <summary>The workload may issue an update from <paramref name="p"/> only once its application has a view, as the runtime's Issue requires.</summary>
    private bool MayIssueUpdate(SimProcess p) => !Scenario.Collections || p.App.Collection?.HasView == true;

    private static string MemberName(NodeId n) => $"{n.Endpoint}.{n.Incarnation}";

    /// <summary>An update's issuer: the member and its collection's first view (a process that leaves and joins again has a new one), as MergeLog names it.</summary>
    private static string IssuerName(NodeId n, int instance) => $"{MemberName(n)}/{instance}";

    private static (NodeId Node, int Instance) IssuerOf(string issuer)
    {
        int dot = issuer.IndexOf('.', StringComparison.Ordinal), slash = issuer.LastIndexOf('/');
        var inv = System.Globalization.CultureInfo.InvariantCulture;
        return (new NodeId(ulong.Parse(issuer.AsSpan(0, dot), inv), uint.Parse(issuer.AsSpan(dot + 1, slash - dot - 1), inv)), int.Parse(issuer.AsSpan(slash + 1), inv));
    }

    /// <summary>An update as the history names it: its issuer as sender, its collection's first view as view, its sequence as seq.</summary>
    private MessageId UpdateId(UpdateId id)
    {
        (NodeId node, int instance) = IssuerOf(id.Issuer);
        return new MessageId(node, _group, instance, id.Sequence);
    }

    private static void WriteUpdateId(Span<byte> into, UpdateId id)
    {
        (NodeId node, int instance) = IssuerOf(id.Issuer);
        BinaryPrimitives.WriteUInt64LittleEndian(into, node.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(into[8..], node.Incarnation);
        BinaryPrimitives.WriteInt32LittleEndian(into[12..], instance);
        BinaryPrimitives.WriteInt64LittleEndian(into[16..], id.Sequence);
    }

    /// <summary>Writes the lengths a member has heard of (20 bytes each: the member's endpoint and incarnation, the length) and returns the bytes written.</summary>
    private static int WriteHeard(Span<byte> into, MemberLength[] heard)
    {
        int at = 0;
        foreach (MemberLength h in heard)
        {
            if (h.Member.Length == 0) continue;
            int dot = h.Member.IndexOf('.', StringComparison.Ordinal);
            var inv = System.Globalization.CultureInfo.InvariantCulture;
            BinaryPrimitives.WriteUInt64LittleEndian(into[at..], ulong.Parse(h.Member.AsSpan(0, dot), inv));
            BinaryPrimitives.WriteUInt32LittleEndian(into[(at + 8)..], uint.Parse(h.Member.AsSpan(dot + 1), inv));
            BinaryPrimitives.WriteInt64LittleEndian(into[(at + 12)..], h.Length);
            at += 20;
        }
        return at;
    }

    private static MemberLength[] ReadHeard(ReadOnlySpan<byte> from, int count)
    {
        var heard = new MemberLength[count];
        for (int i = 0; i < count; i++)
        {
            ReadOnlySpan<byte> at = from[(i * 20)..];
            heard[i] = new MemberLength(MemberName(new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(at), BinaryPrimitives.ReadUInt32LittleEndian(at[8..]))), BinaryPrimitives.ReadInt64LittleEndian(at[12..]));
        }
        return heard;
    }

    private static UpdateId ReadUpdateId(ReadOnlySpan<byte> from) =>
        new(IssuerName(new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(from), BinaryPrimitives.ReadUInt32LittleEndian(from[8..])), BinaryPrimitives.ReadInt32LittleEndian(from[12..])),
            BinaryPrimitives.ReadInt64LittleEndian(from[16..]));

    /// <summary>A new, empty collection for <paramref name="p"/>'s current incarnation (it started, left, or its group's state was lost).</summary>
    private void NewCollection(SimProcess p)
    {
        if (!Scenario.Collections || p.Node == null) return;
        ProcessNode node = p.Node;
        CollectionReplica? replica = null;
        var log = new MergeLog<ulong>((id, _) => OnCollectionApplied(p, node, replica!, id))
        {
            LeftoverInArrivalOrder = (Scenario.Protocol.Mutations & ProtocolMutations.CollectionLeftoverInArrivalOrder) != 0,
        };
        replica = new CollectionReplica(log, ++_nextLineage) { NextGossipAt = _now + _random.NextInRange(0, GossipIntervalMicros) };
        p.App.Collection = replica;
    }

    private void OnCollectionApplied(SimProcess p, ProcessNode node, CollectionReplica c, UpdateId id)
    {
        if (!RecordsHistory || p.Node != node) return;
        History.RecordCollectionApplied(_now, node.Self, _group, c.Log.ViewId, c.Lineage, c.Log.History.Length - 1,
            UpdateId(id), (ulong)c.Log.History.Chain, c.Repairing);
    }

    /// <summary>The first view of the collection that issues <paramref name="p"/>'s updates now (the workload puts it in the payload).</summary>
    private static int CollectionInstanceOf(SimProcess p) => p.App.Collection!.Log.FirstViewId;

    /// <summary>The workload issued an update (its payload's sequence is the update's).</summary>
    private void NoteCollectionUpdateIssued(SimProcess p, int viewId)
    {
        if (Scenario.Collections && RecordsHistory) History.RecordCollectionIssued(_now, p.Node!.Self, _group, viewId, new MessageId(p.Node.Self, _group, CollectionInstanceOf(p), p.Sent));
    }

    /// <summary>What the collection does with a node's event: handler work waits while the handlers stall; query replies do not (the gossip task takes them).</summary>
    private void OnCollectionEvent(SimProcess p, NodeEvent e)
    {
        if (p.App.Collection is not { } c || p.Node is not { } node) return;
        switch (e)
        {
            case MessageDelivered d when d.Group == _group:
                Action? work = CollectionWork(p, node, c, d);
                if (work != null) RunOrWait(c, work);
                break;
            case ViewInstalled v when v.Group == _group:
                int viewId = v.View.Id;
                List<string> members = v.View.Members.Select(MemberName).ToList();
                int rank = Array.IndexOf(v.View.Members, node.Self);
                c.HasView = true;
                if (rank >= 0) c.Log.NoteView(MemberName(node.Self), viewId); // as the runtime's Group.GetView() has it before the handlers run
                RunOrWait(c, () => c.Log.OnView(viewId, members, rank));
                break;
            case QueryCompleted q when q.Group == _group && c.Pulls.Remove(q.QueryId, out NodeId peer):
                OnPullCompleted(p, node, c, peer, q);
                break;
        }
    }

    private static void RunOrWait(CollectionReplica c, Action work)
    {
        if (c.Stalled) c.Waiting.Enqueue(work);
        else work();
    }

    /// <summary>The handler work for a delivered message (copied out of the event, which the outbox reuses), or null if it is none of the collection's.</summary>
    private Action? CollectionWork(SimProcess p, ProcessNode node, CollectionReplica c, MessageDelivered d)
    {
        byte[] payload = d.Payload.ToArray();
        NodeId sender = d.Sender;
        if (d.Kind == MessageKind.Send && payload.Length == 24)
        {
            var id = new UpdateId(IssuerName(sender, (int)BinaryPrimitives.ReadInt64LittleEndian(payload.AsSpan(16))), BinaryPrimitives.ReadInt32LittleEndian(payload.AsSpan(12)));
            ulong op = PayloadHash(payload);
            return () =>
            {
                if (c.Log.OnUpdate(id, op)) At(_now, () => AnnounceMergeList(p, node, c));
            };
        }
        if (d.Kind == MessageKind.Ordered && payload.Length >= 9 && payload[0] == MergeListTag)
        {
            int viewId = BinaryPrimitives.ReadInt32LittleEndian(payload.AsSpan(1));
            int count = BinaryPrimitives.ReadInt32LittleEndian(payload.AsSpan(5));
            var ids = new List<UpdateId>(count);
            for (int i = 0; i < count && 9 + (i + 1) * 24 <= payload.Length; i++) ids.Add(ReadUpdateId(payload.AsSpan(9 + i * 24)));
            return () =>
            {
                if (c.Log.OnMerge(viewId, ids)) At(_now, () => AnnounceMergeList(p, node, c));
            };
        }
        if (d.Kind == MessageKind.QuerySend && payload.Length >= 8 + 34 && payload[8] == PullTag)
        {
            long queryId = MessageKinds.QueryIdOf(payload);
            ReadOnlySpan<byte> body = payload.AsSpan(9);
            var target = new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(body), BinaryPrimitives.ReadUInt32LittleEndian(body[8..]));
            int heard = BinaryPrimitives.ReadInt32LittleEndian(body[29..]);
            if (body.Length != 33 + heard * 20) return null;
            var pull = new PullRequest(BinaryPrimitives.ReadInt64LittleEndian(body[12..]), BinaryPrimitives.ReadInt64LittleEndian(body[20..]), body[28] != 0, ReadHeard(body[33..], heard));
            // The reply is sent after the current step, as a handler runs after the delivery that queued it.
            return () => At(_now, () => AnswerPull(p, node, c, sender, queryId, target, pull));
        }
        return null;
    }

    /// <summary>The sequencer's timer: multicast the list of updates that reached it since the last one.</summary>
    private void AnnounceMergeList(SimProcess p, ProcessNode node, CollectionReplica c)
    {
        if (p.Node != node || node.IsShutDown || p.App.Collection != c) return;
        if (node.FindGroup(_group)?.State != MemberState.Active) return; // the view change merges what is pending
        if (c.Log.TakeAnnouncement() is not { } list) return;
        var payload = new byte[9 + list.Ids.Count * 24];
        payload[0] = MergeListTag;
        BinaryPrimitives.WriteInt32LittleEndian(payload.AsSpan(1), list.ViewId);
        BinaryPrimitives.WriteInt32LittleEndian(payload.AsSpan(5), list.Ids.Count);
        for (int i = 0; i < list.Ids.Count; i++) WriteUpdateId(payload.AsSpan(9 + i * 24), list.Ids[i]);
        node.Send(_group, payload, _now, MessageKind.Ordered);
        Flush(p);
    }

    // ---------------------------------------------------------------- gossip

    /// <summary>Every millisecond tick: stall or resume handlers, and pull from a random peer every gossip interval.</summary>
    private void TickCollection(SimProcess p)
    {
        if (p.App.Collection is not { } c || p.Node is not { } node) return;
        if (!_healed && !c.Stalled && _random.Chance(StallChance))
        {
            c.Stalled = true;
            CollectionStalls++;
            At(_now + _random.NextInRange(20_000, 400_000), () => EndStall(p, node, c));
        }
        // Gossip stops where the workload does, a little later: a pull sent at the very end would be a message some member never delivers.
        if (_now < c.NextGossipAt || _now > Scenario.FaultPhase + Scenario.HealPhase * 3 / 4) return;
        c.NextGossipAt = _now + GossipIntervalMicros;
        StartPull(p, node, c);
    }

    /// <summary>The handlers go on: what waited runs now, in order.</summary>
    private void EndStall(SimProcess p, ProcessNode node, CollectionReplica c)
    {
        if (p.Node != node || node.IsShutDown || p.App.Collection != c) return;
        c.Stalled = false;
        while (c.Waiting.TryDequeue(out Action? work)) work();
    }

    private void StartPull(SimProcess p, ProcessNode node, CollectionReplica c)
    {
        GroupMember? g = node.FindGroup(_group);
        if (g?.State != MemberState.Active || g.View is not { } view) return;
        NodeId[] peers = view.Members.Where(m => m != node.Self).ToArray();
        if (peers.Length == 0) return;
        NodeId peer = peers[_random.Next(peers.Length)];
        PullRequest pull = c.Log.MakePull();
        var buffer = new byte[34 + pull.Heard.Length * 20];
        buffer[0] = PullTag;
        BinaryPrimitives.WriteUInt64LittleEndian(buffer.AsSpan(1), peer.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(buffer.AsSpan(9), peer.Incarnation);
        BinaryPrimitives.WriteInt64LittleEndian(buffer.AsSpan(13), pull.Length);
        BinaryPrimitives.WriteInt64LittleEndian(buffer.AsSpan(21), pull.Chain);
        buffer[29] = pull.WantEntries ? (byte)1 : (byte)0;
        int heard = WriteHeard(buffer.AsSpan(34), pull.Heard);
        BinaryPrimitives.WriteInt32LittleEndian(buffer.AsSpan(30), heard / 20);
        byte[] payload = buffer[..(34 + heard)];
        long queryId = ++p.QueryIds;
        c.Pulls[queryId] = peer;
        node.Query(_group, queryId, MessageKind.QuerySend, payload, needed: 1, timeout: PullTimeoutMicros, QueryTimeoutAction.NullReply, _now);
        Flush(p);
    }

    /// <summary>A member's handler for a pull: the member it names answers with its side; the others pass.</summary>
    private void AnswerPull(SimProcess p, ProcessNode node, CollectionReplica c, NodeId requester, long queryId, NodeId target, PullRequest pull)
    {
        if (p.Node != node || node.IsShutDown) return;
        if (target != node.Self)
        {
            node.Reply(_group, requester, queryId, ReplyKind.Null, [], _now);
            Flush(p);
            return;
        }
        PullReply<ulong> reply = c.Log.AnswerPull(MemberName(requester), pull, RepairBatch);
        // Header (34 bytes), the lengths heard of (20 bytes each), the entries (32 bytes each).
        var buffer = new byte[34 + reply.Heard.Length * 20 + reply.Ids.Length * 32];
        buffer[0] = PullReplyTag;
        BinaryPrimitives.WriteInt64LittleEndian(buffer.AsSpan(1), reply.Length);
        buffer[9] = reply.Agrees ? (byte)1 : (byte)0;
        BinaryPrimitives.WriteInt64LittleEndian(buffer.AsSpan(10), reply.RetainedFrom);
        BinaryPrimitives.WriteInt64LittleEndian(buffer.AsSpan(18), reply.First);
        BinaryPrimitives.WriteInt32LittleEndian(buffer.AsSpan(26), reply.Ids.Length);
        int heard = WriteHeard(buffer.AsSpan(34), reply.Heard);
        BinaryPrimitives.WriteInt32LittleEndian(buffer.AsSpan(30), heard / 20);
        for (int i = 0; i < reply.Ids.Length; i++)
        {
            Span<byte> at = buffer.AsSpan(34 + heard + i * 32);
            WriteUpdateId(at, reply.Ids[i]);
            BinaryPrimitives.WriteUInt64LittleEndian(at[24..], reply.Ops[i]);
        }
        byte[] payload = buffer[..(34 + heard + reply.Ids.Length * 32)];
        node.Reply(_group, requester, queryId, ReplyKind.Values, payload, _now);
        Flush(p);
    }

    /// <summary>The gossip task has the peer's answer (or none, if it timed out): the model applies what extends the history.</summary>
    private void OnPullCompleted(SimProcess p, ProcessNode node, CollectionReplica c, NodeId peer, QueryCompleted q)
    {
        QueryReply? answer = null;
        foreach (QueryReply r in q.Replies)
        {
            if (r.Replier == peer && r.Kind == ReplyKind.Values) answer = r;
        }
        if (answer is not { Payload: var payload } || payload.Length < 34 || payload[0] != PullReplyTag) return;
        int count = BinaryPrimitives.ReadInt32LittleEndian(payload.AsSpan(26)), heard = BinaryPrimitives.ReadInt32LittleEndian(payload.AsSpan(30));
        if (payload.Length != 34 + heard * 20 + count * 32) return;
        var ids = new UpdateId[count];
        var ops = new ulong[count];
        for (int i = 0; i < count; i++)
        {
            ReadOnlySpan<byte> at = payload.AsSpan(34 + heard * 20 + i * 32);
            ids[i] = ReadUpdateId(at);
            ops[i] = BinaryPrimitives.ReadUInt64LittleEndian(at[24..]);
        }
        var reply = new PullReply<ulong>(BinaryPrimitives.ReadInt64LittleEndian(payload.AsSpan(1)), payload[9] != 0,
            BinaryPrimitives.ReadInt64LittleEndian(payload.AsSpan(10)), BinaryPrimitives.ReadInt64LittleEndian(payload.AsSpan(18)), ids, ops, ReadHeard(payload.AsSpan(34), heard));
        c.Repairing = true;
        RepairOutcome outcome = c.Log.OnPullReply(MemberName(peer), reply);
        c.Repairing = false;
        if (outcome.Gained > 0) CollectionRepairs++;
        if (outcome.Divergence != null && RecordsHistory) History.RecordCollectionDivergence(_now, node.Self, _group, outcome.Divergence);
        if (outcome.More) At(_now, () => { if (p.Node == node && p.App.Collection == c) StartPull(p, node, c); });
    }

    // ---------------------------------------------------------------- checkpoints and the end

    /// <summary>The collection's part of a checkpoint made at the cut: its lineage and where its history ends (the handlers catch up first).</summary>
    private byte[] CollectionChunk(SimProcess p)
    {
        CollectionReplica c = p.App.Collection!;
        EndStall(p, p.Node!, c);
        var chunk = new byte[CollectionChunkBytes];
        BinaryPrimitives.WriteUInt32LittleEndian(chunk, CollectionChunkMagic);
        BinaryPrimitives.WriteInt64LittleEndian(chunk.AsSpan(4), c.Lineage);
        BinaryPrimitives.WriteInt64LittleEndian(chunk.AsSpan(12), c.Log.History.Length);
        BinaryPrimitives.WriteInt64LittleEndian(chunk.AsSpan(20), c.Log.History.Chain);
        return chunk;
    }

    /// <summary>A joiner loads the collection's part of its checkpoint, if the chunk is one.</summary>
    private void LoadCollectionChunk(SimProcess p, byte[] chunk)
    {
        if (p.App.Collection is not { } c || chunk.Length != CollectionChunkBytes || BinaryPrimitives.ReadUInt32LittleEndian(chunk) != CollectionChunkMagic) return;
        c.Lineage = BinaryPrimitives.ReadInt64LittleEndian(chunk.AsSpan(4));
        long length = BinaryPrimitives.ReadInt64LittleEndian(chunk.AsSpan(12));
        long chain = BinaryPrimitives.ReadInt64LittleEndian(chunk.AsSpan(20));
        c.Log.Load(length, chain);
        if (RecordsHistory) History.RecordCollectionLoaded(_now, p.Node!.Self, _group, c.Lineage, length, (ulong)chain);
    }

    /// <summary>
    /// The group's state starts empty here (it formed, or every holder left): a new lineage. The
    /// member's collection is empty already (a joiner applies nothing before its state), and keeps
    /// the view it has.
    /// </summary>
    private void FoundCollection(SimProcess p)
    {
        if (p.App.Collection is not { } c) return;
        if (c.Log.History.Length != 0)
        {
            NewCollection(p);
            c = p.App.Collection!;
        }
        c.Lineage = ++_nextLineage;
        if (RecordsHistory) History.RecordCollectionFounded(_now, p.Node!.Self, _group, c.Lineage);
    }

    /// <summary>At the end: what each live member of the group holds.</summary>
    private void RecordCollectionsAtEnd()
    {
        if (!Scenario.Collections || !RecordsHistory) return;
        foreach (SimProcess p in _processes)
        {
            if (!p.Alive || p.App.Collection is not { } c || p.Node!.FindGroup(_group)?.State != MemberState.Active) continue;
            EndStall(p, p.Node, c);
            History.RecordCollectionFinal(_now, p.Node.Self, _group, c.Log.FirstViewId, c.Lineage, c.Log.History.Length, (ulong)c.Log.History.Chain, c.Log.PendingCount);
        }
    }
}
