using BenchmarkDotNet.Attributes;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;

namespace Isis.Benchmarks;

/// <summary>
/// One Send through the sans-IO core of a 3-member group, no sockets and no threads: the sender's
/// ProcessNode.Send, its outbox packets handed to the two other members' Receive, until both
/// emitted MessageDelivered. The network is a FIFO queue in memory.
/// </summary>
/// <remarks>
/// Virtual time advances 10 us per Send and every node (and the membership service) is ticked once
/// per virtual millisecond, so acknowledgement digests, stability and garbage collection of held
/// messages run as they do in steady state (their cost is amortized into the per-Send figure) and
/// nothing grows without bound over millions of iterations.
/// </remarks>
public class CoreSendBenchmarks
{
    private CoreCluster _cluster = null!;
    private byte[] _payload = [];

    [Params(100)]
    public int PayloadBytes { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _cluster = new CoreCluster(3);
        _cluster.FormGroup();
        _payload = new byte[PayloadBytes];
    }

    /// <summary>Send at member 0, routed until members 1 and 2 delivered it (plus the amortized ticks).</summary>
    [Benchmark]
    public int Send_DeliveredAtTwoReceivers()
    {
        int delivered = _cluster.SendAndRoute(_payload);
        if (delivered != 3) throw new InvalidOperationException($"expected 3 deliveries (sender + 2), saw {delivered}");
        return delivered;
    }
}

/// <summary>
/// A membership service and N processes wired by an in-memory FIFO network, driven on one thread
/// with virtual time: a stripped-down TestCluster for benchmarking. Endpoints are 1..N; the
/// service listens on <see cref="OracleEndpoint"/>.
/// </summary>
internal sealed class CoreCluster
{
    public const ulong OracleEndpoint = 100;
    public const string GroupName = "bench";
    public static readonly GroupId Group = GroupId.FromName(GroupName);
    private const long SendStep = 10; // microseconds of virtual time per Send
    private const long TickInterval = 1_000;

    private readonly Queue<(ulong From, ulong To, byte[] Bytes)> _network = new();
    private readonly MembershipReplica _oracle;
    private readonly ProcessNode[] _nodes;
    private long _now;
    private long _nextTick;
    private int _deliveries;

    public CoreCluster(int processes)
    {
        var options = new ProtocolOptions();
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
        _nodes[0].Send(Group, payload, _now);
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
            target.Receive(p.From, p.Bytes, _now);
            Collect(target);
        }
    }

    private void Collect(IProtocolNode node)
    {
        Outbox o = node.Outbox;
        foreach (OutboundPacket p in o.Packets) _network.Enqueue((node.Endpoint, p.Destination, p.Bytes));
        foreach (NodeEvent e in o.Events)
        {
            if (e is MessageDelivered) _deliveries++;
        }
        o.Clear();
    }
}
