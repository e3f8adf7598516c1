using Isis.Core.Common;
using Isis.Core.Groups;
using Isis.Core.Identity;

namespace Isis.Core.Node;

/// <summary>A packet the driver must send.</summary>
/// <remarks>Built by a node with a buffer pool, <paramref name="Bytes"/> is valid only until <see cref="Outbox.Clear"/>: copy it to keep it.</remarks>
internal readonly record struct OutboundPacket(ulong Destination, ReadOnlyMemory<byte> Bytes);

/// <summary>
/// A change to a group's durable SafeSend history log, to be made durable (fsync) before the step's
/// packets leave: <paramref name="Records"/> appended, or (<paramref name="Rewrite"/>) the whole log
/// replaced by them atomically (written aside, synced, renamed over the old one); with
/// <paramref name="KeepOldAside"/> the old log is kept under another name instead of replaced.
/// A <paramref name="Stage"/> other than None writes a replacement log in parts, one step each
/// (a history copied from another member, written as it arrives): see <see cref="HistoryStage"/>.
/// </summary>
internal readonly record struct HistoryWrite(GroupId Group, IReadOnlyList<byte[]> Records, bool Rewrite, bool KeepOldAside, HistoryStage Stage = HistoryStage.None);

/// <summary>
/// A replacement of a history log written in parts over several steps (a copied history, as it
/// arrives, so that no step writes the whole of it). The parts go to a file aside (the runtime's
/// "*.safelog.next"), each made durable in its step; the log itself is untouched until
/// <see cref="Commit"/>, which renames the whole replacement over it. So a crash at any moment
/// leaves the old log under the log's name, never a part of the copy: a driver that starts again
/// discards what it finds aside (the core copies the history anew).
/// </summary>
internal enum HistoryStage : byte
{
    /// <summary>Not staged: an append or a whole rewrite.</summary>
    None = 0,

    /// <summary>The records start a new replacement aside (any unfinished one is dropped); the log is unchanged.</summary>
    Begin = 1,

    /// <summary>The records follow the replacement's; the log is unchanged.</summary>
    Continue = 2,

    /// <summary>The records end the replacement, which then replaces the log atomically (<see cref="HistoryWrite.KeepOldAside"/> as for a rewrite).</summary>
    Commit = 3,
}

/// <summary>
/// Everything one step of a node produced. The driver's contract (docs/architecture.md): after
/// each input, make <see cref="HistoryWrites"/> and <see cref="ReplicaRecords"/> durable, then send <see cref="Packets"/>, then hand
/// <see cref="Events"/> to the application in list order, then call <see cref="Clear"/>.
/// </summary>
internal sealed class Outbox
{
    private const int ArenaSize = 64 * 1024;

    private readonly IBufferPool? _pool;
    private readonly List<byte[]> _returnOnClear = new();
    private readonly Stack<MessageDelivered> _freeDeliveries = new();
    private readonly Stack<MessageSent> _freeSends = new();
    private readonly Stack<SafeAccepted> _freeAcceptances = new();
    private readonly List<byte[]> _fullArenas = new();
    private readonly Stack<byte[]> _freeArenas = new();
    private byte[]? _arena;
    private int _arenaUsed;

    /// <param name="pool">
    /// With a pool the outbox recycles: packets built with <see cref="Keep"/> live in reused
    /// memory, the per-message events (<see cref="MessageDelivered"/>, <see cref="MessageSent"/>,
    /// <see cref="SafeAccepted"/>) are reused, and payload arrays the node let go of return to the
    /// pool, all at <see cref="Clear"/>. The driver must then copy whatever it keeps of a packet or
    /// an event before it clears. Without a pool nothing is reused, and drivers (tests) may keep anything.
    /// </param>
    public Outbox(IBufferPool? pool = null) => _pool = pool;

    /// <summary>The pool held payloads come from, if the node recycles.</summary>
    public IBufferPool? Pool => _pool;

    public List<OutboundPacket> Packets { get; } = new();

    /// <summary>The step's events, in order; add with <see cref="Add"/>, which also records the step time.</summary>
    public List<NodeEvent> Events { get; } = new();

    /// <summary>
    /// The time of the step that produced each of <see cref="Events"/> (same index). A driver may run
    /// several steps before it drains, and a process may be stopped between a step and the drain:
    /// an event log stamps each event with its own step's time, not the drain's.
    /// </summary>
    public List<long> EventTimes { get; } = new();

    /// <summary>The driver's clock at the node's current input (the node sets it at every input).</summary>
    public long StepTime { get; set; }

    /// <summary>Adds an event of the current step.</summary>
    public void Add(NodeEvent e)
    {
        Events.Add(e);
        EventTimes.Add(StepTime);
    }

    /// <summary>SafeSend history log changes (disk durability), in order, to be made durable before <see cref="Packets"/> are sent.</summary>
    public List<HistoryWrite> HistoryWrites { get; } = new();

    /// <summary>
    /// A membership replica's persistent state changes (term, vote, log entries), to be appended
    /// in order to its durable record file before <see cref="Packets"/> are sent; after a restart
    /// the driver hands them back to the replica.
    /// </summary>
    public List<byte[]> ReplicaRecords { get; } = new();

    /// <summary>
    /// True when the replica compacted its log in this step: <see cref="ReplicaRecords"/> then hold
    /// its whole persistent state (a snapshot and the entries after it), which replace the record
    /// file's contents instead of following them, atomically (no moment without a valid log).
    /// </summary>
    public bool ReplicaRecordsReplaceLog { get; set; }

    public bool IsEmpty => Packets.Count == 0 && Events.Count == 0 && HistoryWrites.Count == 0 && ReplicaRecords.Count == 0;

    /// <summary>A copy of a finished packet in memory valid until <see cref="Clear"/> (a new array when the outbox does not recycle).</summary>
    public ReadOnlyMemory<byte> Keep(ReadOnlySpan<byte> packet)
    {
        if (_pool == null || packet.Length > ArenaSize) return packet.ToArray();
        if (_arena == null || _arenaUsed + packet.Length > ArenaSize)
        {
            if (_arena != null) _fullArenas.Add(_arena);
            _arena = _freeArenas.Count > 0 ? _freeArenas.Pop() : new byte[ArenaSize];
            _arenaUsed = 0;
        }
        packet.CopyTo(_arena.AsSpan(_arenaUsed));
        var kept = new ReadOnlyMemory<byte>(_arena, _arenaUsed, packet.Length);
        _arenaUsed += packet.Length;
        return kept;
    }

    /// <summary>Writable memory of <paramref name="length"/> bytes valid until <see cref="Clear"/>, for a packet built in place (a sealed one).</summary>
    public Memory<byte> Allocate(int length)
    {
        if (_pool == null || length > ArenaSize) return new byte[length];
        if (_arena == null || _arenaUsed + length > ArenaSize)
        {
            if (_arena != null) _fullArenas.Add(_arena);
            _arena = _freeArenas.Count > 0 ? _freeArenas.Pop() : new byte[ArenaSize];
            _arenaUsed = 0;
        }
        var memory = new Memory<byte>(_arena, _arenaUsed, length);
        _arenaUsed += length;
        return memory;
    }

    /// <summary>Returns <paramref name="array"/> to the pool at the next <see cref="Clear"/>, after the driver is done with this step's events.</summary>
    public void ReturnOnClear(byte[] array) => _returnOnClear.Add(array);

    public void Delivered(GroupId group, int viewId, NodeId sender, long seq, MessageKind kind, ReadOnlyMemory<byte> payload, bool atViewEnd)
    {
        MessageDelivered e = _freeDeliveries.Count > 0 ? _freeDeliveries.Pop() : new MessageDelivered();
        e.Set(group, viewId, sender, seq, kind, payload, atViewEnd);
        Add(e);
    }

    public void Sent(GroupId group, int viewId, long seq, MessageKind kind, ReadOnlyMemory<byte> payload, int phi, NodeId[]? to = null)
    {
        MessageSent e = _freeSends.Count > 0 ? _freeSends.Pop() : new MessageSent();
        e.Set(group, viewId, seq, kind, payload, phi, to);
        Add(e);
    }

    public void Accepted(GroupId group, int viewId, NodeId sender, long seq)
    {
        SafeAccepted e = _freeAcceptances.Count > 0 ? _freeAcceptances.Pop() : new SafeAccepted();
        e.Set(group, viewId, sender, seq);
        Add(e);
    }

    /// <summary>
    /// Packets a key covers, not yet sealed (see <see cref="ProcessNode.SealPendingPackets"/>): they live
    /// in this outbox's memory, so they go with it at <see cref="Clear"/>, like unsent packets.
    /// </summary>
    internal List<(ulong Endpoint, GroupId KeyGroup, ReadOnlyMemory<byte> Packet)> ToSeal { get; } = new();

    public void Clear()
    {
        ToSeal.Clear();
        if (_pool != null)
        {
            foreach (NodeEvent e in Events)
            {
                if (e is MessageDelivered d) { d.Set(default, 0, default, 0, default, default, false); _freeDeliveries.Push(d); }
                else if (e is MessageSent m) { m.Set(default, 0, 0, default, default, 0); _freeSends.Push(m); }
                else if (e is SafeAccepted a) { a.Set(default, 0, default, 0); _freeAcceptances.Push(a); }
            }
            foreach (byte[] array in _returnOnClear) _pool.Return(array);
            foreach (byte[] arena in _fullArenas) _freeArenas.Push(arena);
            _fullArenas.Clear();
            _arenaUsed = 0;
        }
        _returnOnClear.Clear();
        Packets.Clear();
        Events.Clear();
        EventTimes.Clear();
        HistoryWrites.Clear();
        ReplicaRecords.Clear();
        ReplicaRecordsReplaceLog = false;
    }
}
