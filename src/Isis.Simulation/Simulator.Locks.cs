using System.Buffers.Binary;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Locks;
using Isis.Core.Node;

namespace Isis.Simulation;

/// <summary>
/// The lock families' application (<see cref="Scenario.Locks"/>): GroupLocks' model on every member.
/// Each member keeps the same <see cref="LockTable"/> the runtime uses, fed by the lock operations
/// delivered by SafeSend and by the views; the workload requests one of three locks, holds it 1-30 ms
/// and gives it back, and now and then withdraws a request it waited too long for (TryLock's
/// timeout). A holder records LockAcquired when its table grants it (it acts from there) and
/// LockReleased when it gives the lock back; the checker's LockSafety judges those. As GroupLocks
/// does, half the releases nobody waits for are deferred: sent with the member's next request in
/// one SafeSend, at once when another member's request for the lock arrives, or after a millisecond.
/// </summary>
internal sealed partial class Simulator
{
    private const byte LockTag = 0x4C;
    private const int LockPayloadBytes = 1 + 1 + 1 + 8 + 8 + 4;
    private const int LockPairPayloadBytes = LockPayloadBytes + 1; // a release and the next request: the released lock's index added
    private const uint LockChunkMagic = 0x10C4_7AB1;
    private static readonly string[] LockNames = ["a", "b", "c"];

    /// <summary>Lock grants the holders acted on, over the run (for the scenario tests' report).</summary>
    internal long LocksAcquired { get; private set; }

    /// <summary>One incarnation's view of the locks: the replicated table, and its own request.</summary>
    internal sealed class LockClient(LockTable table)
    {
        public LockTable Table { get; set; } = table;
        public long NextRequest;
        public (string Name, long Request)? Waiting;
        public (string Name, long Request, long Token)? Holding;
        public string? DeferredRelease; // given back by the application, not yet sent
        public bool HasView; // the application saw a view of the group (GroupLocks needs one for LockAsync)
    }

    private LockTable NewLockTable() => new(Scenario.Protocol.Mutations);

    /// <summary>A new incarnation joins: its table starts empty, and a joiner's state transfer fills it.</summary>
    private void NewLockClient(SimProcess p)
    {
        // Request numbers go on growing within an incarnation, as GroupLocks' do: a grant made for a
        // request the member sent before its state started over must never match a later request.
        if (Scenario.Locks) p.App.Locks = new LockClient(NewLockTable()) { NextRequest = p.App.Locks?.NextRequest ?? 0 };
    }

    /// <summary>The workload's step for a lock family: request a lock when holding and wanting none.</summary>
    private void IssueLockOperation(SimProcess p, ProcessNode node)
    {
        LockClient c = p.App.Locks!;
        if (c.Waiting != null || c.Holding != null || !c.HasView) return;
        string name = LockNames[_random.Next(LockNames.Length)];
        long request = ++c.NextRequest;
        c.Waiting = (name, request);
        p.Sent++;
        if (c.DeferredRelease is { } released)
        {
            // The release waiting to be sent travels with this request (GroupLocks' ReleaseThenRequest).
            c.DeferredRelease = null;
            byte[] pair = LockPayload(LockOperation.Request, name, request, node.Self, LockPairPayloadBytes);
            pair[LockPayloadBytes] = (byte)Array.IndexOf(LockNames, released);
            node.Send(_group, pair, _now, MessageKind.Safe);
            Flush(p);
        }
        else
        {
            SendLockOperation(p, node, LockOperation.Request, name, request);
        }
        // TryLock's timeout: now and then the request is withdrawn if it is still waiting.
        if (_random.Chance(0.25))
        {
            At(_now + _random.NextInRange(2_000, 40_000), () =>
            {
                if (p.Node != node || node.IsShutDown || p.App.Locks != c || c.Waiting is not { } w || w.Request != request) return;
                c.Waiting = null;
                SendLockOperation(p, node, LockOperation.Cancel, name, request);
            });
        }
    }

    private void SendLockOperation(SimProcess p, ProcessNode node, LockOperation operation, string name, long request)
    {
        node.Send(_group, LockPayload(operation, name, request, node.Self, LockPayloadBytes), _now, MessageKind.Safe);
        Flush(p);
    }

    private static byte[] LockPayload(LockOperation operation, string name, long request, NodeId self, int length)
    {
        var payload = new byte[length];
        payload[0] = LockTag;
        payload[1] = (byte)operation;
        payload[2] = (byte)Array.IndexOf(LockNames, name);
        BinaryPrimitives.WriteInt64LittleEndian(payload.AsSpan(3), request);
        BinaryPrimitives.WriteUInt64LittleEndian(payload.AsSpan(11), self.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(payload.AsSpan(19), self.Incarnation);
        return payload;
    }

    /// <summary>A lock operation delivered (by SafeSend, in the uniform total order): the table applies it (a pair: the release, then the request).</summary>
    private void OnLockDelivered(SimProcess p, MessageDelivered d)
    {
        if (p.App.Locks is not { } c || d.Payload.Length is not (LockPayloadBytes or LockPairPayloadBytes) || d.Payload.Span[0] != LockTag) return;
        ReadOnlySpan<byte> b = d.Payload.Span;
        var operation = (LockOperation)b[1];
        string name = LockNames[b[2] % LockNames.Length];
        long request = BinaryPrimitives.ReadInt64LittleEndian(b[3..]);
        var member = new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(b[11..]), BinaryPrimitives.ReadUInt32LittleEndian(b[19..]));
        if (b.Length == LockPairPayloadBytes) Granted(p, c, c.Table.Apply(LockOperation.Release, LockNames[b[LockPayloadBytes] % LockNames.Length], member, 0), d.ViewId);
        Granted(p, c, c.Table.Apply(operation, name, member, request), d.ViewId);
        // Another member waits for a lock this one gave back and has not sent yet: send it now.
        if (operation == LockOperation.Request && member != p.Node!.Self && c.DeferredRelease == name && c.Table.WaitingFor(name) > 0) SendDeferredRelease(p, p.Node!, c);
    }

    private void SendDeferredRelease(SimProcess p, ProcessNode node, LockClient c)
    {
        if (c.DeferredRelease is not { } name) return;
        c.DeferredRelease = null;
        At(_now, () =>
        {
            if (p.Node != node || node.IsShutDown || p.App.Locks != c) return;
            SendLockOperation(p, node, LockOperation.Release, name, 0);
        });
    }

    /// <summary>A view installed: the locks of members that left go to the next in line.</summary>
    private void OnLockView(SimProcess p, ViewInstalled v)
    {
        if (p.App.Locks is not { } c) return;
        c.HasView = true;
        Granted(p, c, c.Table.OnView(v.View.Members), v.View.Id);
    }

    /// <summary>This member's own grants: it acts on one it still waits for, holds it 1-30 ms, and gives it back.</summary>
    private void Granted(SimProcess p, LockClient c, List<LockGrant> grants, int viewId)
    {
        ProcessNode node = p.Node!;
        foreach (LockGrant g in grants)
        {
            if (g.Holder != node.Self || c.Waiting is not { } w || w.Request != g.Request || w.Name != g.Name) continue;
            c.Waiting = null;
            c.Holding = (g.Name, g.Request, g.Token);
            LocksAcquired++;
            if (RecordsHistory) History.RecordLockAcquired(_now, node.Self, _group, viewId, g.Name, g.Token);
            At(_now + _random.NextInRange(1_000, 30_000), () =>
            {
                if (p.Node != node || node.IsShutDown || p.App.Locks != c || c.Holding is not { } h || h.Request != g.Request) return;
                c.Holding = null;
                if (RecordsHistory) History.RecordLockReleased(_now, node.Self, _group, h.Name, h.Token);
                if (c.Table.WaitingFor(h.Name) == 0 && _random.Chance(0.5))
                {
                    // Nobody waits: the release waits for the next request, or a millisecond.
                    c.DeferredRelease = h.Name;
                    At(_now + 1_000, () => { if (p.Node == node && !node.IsShutDown && p.App.Locks == c && c.DeferredRelease == h.Name) SendDeferredRelease(p, node, c); });
                    return;
                }
                SendLockOperation(p, node, LockOperation.Release, h.Name, h.Request);
            });
        }
    }

    /// <summary>
    /// The process leaves the group: as GroupLocks documents, it stops using what its locks guard
    /// before it calls Leave (the view that removes it gives them to the next in line).
    /// </summary>
    private void StopHoldingLocks(SimProcess p)
    {
        if (p.App.Locks is not { } c) return;
        c.Waiting = null; // a leaving member acts on no grant: its request ends with its membership
        c.DeferredRelease = null; // the view that removes it releases its locks
        if (c.Holding is not { } h) return;
        c.Holding = null;
        if (RecordsHistory) History.RecordLockReleased(_now, p.Node!.Self, _group, h.Name, h.Token);
    }

    /// <summary>The lock table's part of a checkpoint.</summary>
    private byte[] LockChunk(SimProcess p) => TaggedChunk(LockChunkMagic, p.App.Locks!.Table.Snapshot());

    /// <summary>A joiner loads the lock table from its checkpoint; true if the chunk was the table's.</summary>
    private bool LoadLockChunk(SimProcess p, byte[] chunk)
    {
        if (!TryReadTaggedChunk(chunk, LockChunkMagic, out byte[] snapshot)) return false;
        if (p.App.Locks is { } c)
        {
            var table = NewLockTable();
            Invariant(table.Load(snapshot), "a checkpoint's lock table loads");
            c.Table = table;
        }
        return true;
    }

    private static void Invariant(bool holds, string what)
    {
        if (!holds) throw new InvalidOperationException("simulator: " + what);
    }
}
