using Isis.Core.Common;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Simulation.Driving;

namespace Isis.Simulation;

/// <summary>
/// A membership service and N processes wired by an in-memory FIFO network, driven on one thread
/// with virtual time and no faults: the steady state of the Send path without sockets or threads,
/// for the core benchmark (benchmarks/CoreSendBenchmarks) and the zero-allocation test. The nodes
/// recycle their buffers as in the runtime, and so does the network. Endpoints are 1..N; the
/// service listens on <see cref="OracleEndpoint"/>.
/// </summary>
internal sealed class CoreCluster : MemoryDriver
{
    public const ulong OracleEndpoint = 100;
    public const string GroupName = "bench";
    public static readonly GroupId Group = GroupId.FromName(GroupName);
    private const long SendStep = 10; // microseconds of virtual time per Send
    private const long TickInterval = 1_000;

    // Packets in flight: copies in pooled arrays (an outbox's packets are valid only until it clears),
    // returned once delivered, so the network itself allocates nothing in the steady state.
    private readonly Queue<(ulong From, ulong To, byte[] Bytes, int Length)> _network = new();
    private readonly BufferPool _networkBuffers = new();
    private readonly BufferPool _nodeBuffers = new();
    private readonly MembershipReplica _oracle;
    private readonly ProcessNode[] _nodes;
    private long _now;
    private long _nextTick;
    private int _deliveries;

    public CoreCluster(int processes)
    {
        var options = new ProtocolOptions { BufferPool = _nodeBuffers };
        _oracle = new MembershipReplica(new NodeId(OracleEndpoint, 1), options, 0);
        _nodes = new ProcessNode[processes];
        for (int i = 0; i < processes; i++) _nodes[i] = new ProcessNode(new NodeId((ulong)i + 1, 1), OracleEndpoint, options, 0);
        foreach (ProcessNode n in _nodes) Collect(n);
        Collect(_oracle);
    }

    public IReadOnlyList<ProcessNode> Nodes => _nodes;

    public long Now => _now;

    /// <summary>Joins every process and runs until all hold the view with all of them.</summary>
    public void FormGroup()
    {
        foreach (ProcessNode n in _nodes)
        {
            n.Join(GroupName, _now);
            Collect(n);
        }
        long deadline = _now + 10_000_000;
        while (!_nodes.All(n => n.FindGroup(Group) is { View: { } v, State: MemberState.Active } && v.Members.Length == _nodes.Length))
        {
            if (_now > deadline) throw new InvalidOperationException("the group did not form within 10 s of virtual time");
            Advance(TickInterval);
        }
        // Let joins settle and leases be held everywhere.
        Advance(200_000);
    }

    /// <summary>Sends at process 0, routes until quiet; returns how many MessageDelivered events that produced.</summary>
    public int SendAndRoute(byte[] payload)
    {
        _deliveries = 0;
        _now += SendStep;
        // As the runtime does: the payload is encoded into a pooled array, which the sender's node
        // owns from here and returns once the message is stable.
        byte[] pooled = _nodeBuffers.Rent(payload.Length);
        payload.CopyTo(pooled, 0);
        _nodes[0].Send(Group, pooled.AsMemory(0, payload.Length), _now, pooled: pooled);
        Collect(_nodes[0]);
        Route();
        int delivered = _deliveries;
        if (_now >= _nextTick) TickAll();
        return delivered;
    }

    private void Advance(long micros)
    {
        long end = _now + micros;
        while (_now < end)
        {
            _now = Math.Min(end, _now + TickInterval);
            TickAll();
        }
    }

    private void TickAll()
    {
        _nextTick = _now + TickInterval;
        _oracle.Tick(_now);
        Collect(_oracle);
        foreach (ProcessNode n in _nodes)
        {
            n.Tick(_now);
            Collect(n);
        }
        Route();
    }

    private void Route()
    {
        while (_network.TryDequeue(out var p))
        {
            IProtocolNode target = p.To == OracleEndpoint ? _oracle : _nodes[(int)p.To - 1];
            target.Receive(p.From, p.Bytes.AsSpan(0, p.Length), _now);
            _networkBuffers.Return(p.Bytes);
            Collect(target);
        }
    }

    // Joiners' state requests of the step being run (rare: the Send path allocates nothing here).
    private List<StateRequested>? _asked;

    /// <summary>Runs a node's step; the benchmark's application keeps no state, so its checkpoint for a joiner is empty.</summary>
    private void Collect(IProtocolNode node)
    {
        Step(node);
        if (_asked == null) return;
        List<StateRequested> asked = _asked;
        _asked = null;
        foreach (StateRequested r in asked)
        {
            ((ProcessNode)node).SendStateChunk(r.Group, r.CutViewId, [], last: true, _now);
            Collect(node);
        }
    }

    protected override void Transmit(ulong from, in OutboundPacket packet)
    {
        byte[] copy = _networkBuffers.Rent(packet.Bytes.Length);
        packet.Bytes.Span.CopyTo(copy);
        _network.Enqueue((from, packet.Destination, copy, packet.Bytes.Length));
    }

    protected override void Handle(IProtocolNode node, NodeEvent e, long time)
    {
        if (e is MessageDelivered) _deliveries++;
        else if (e is StateRequested r) (_asked ??= []).Add(r);
    }
}
