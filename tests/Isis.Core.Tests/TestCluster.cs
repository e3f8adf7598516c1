using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Core.Wire;
using Isis.Simulation.Driving;

namespace Isis.Core.Tests;

/// <summary>A packet in flight in the <see cref="TestCluster"/> network.</summary>
internal sealed record Envelope(ulong From, ulong To, byte[] Bytes)
{
    /// <summary>The parsed header (default when the bytes do not parse).</summary>
    public PacketHeader Header { get; } =
        PacketDecoder.TryReadHeader(Bytes, out PacketHeader h) == HeaderVerdict.Ok ? h : default;

    public PacketKind Kind => Header.Kind;

    /// <summary>For Data packets: the rank of the message's original sender (the body's first field).</summary>
    public int DataOrigin => Kind == PacketKind.Data ? BitConverter.ToInt32(Bytes, PacketHeader.Size) : -1;
}

/// <summary>
/// One membership service and N processes on a perfect in-memory network: zero latency, FIFO,
/// no loss except what a test asks for. Deterministic: no threads, no clocks, no randomness.
/// Process i (0-based) listens on endpoint i + 1; the oracle on <see cref="OracleEndpoint"/>.
/// </summary>
internal sealed class TestCluster : MemoryDriver
{
    public const ulong OracleEndpoint = 100;
    public const string GroupName = "g";
    public static readonly GroupId G = GroupId.FromName(GroupName);

    private readonly Queue<Envelope> _network = new();
    private readonly HashSet<int> _stopped = new();
    private readonly List<Func<Envelope, bool>> _dropRules = new();

    public TestCluster(int processes, ProtocolOptions? options = null)
    {
        Options = options ?? new ProtocolOptions();
        Oracle = new MembershipReplica(new NodeId(OracleEndpoint, 1), Options, Now);
        for (int i = 0; i < processes; i++) AddProcess();
    }

    public ProtocolOptions Options { get; }

    public long Now { get; private set; }

    public MembershipReplica Oracle { get; }

    public List<ProcessNode> Nodes { get; } = new();

    /// <summary>Every event each process emitted, in order.</summary>
    public List<List<NodeEvent>> Events { get; } = new();

    public List<NodeEvent> OracleEvents { get; } = new();

    /// <summary>Every packet the network dropped on purpose.</summary>
    public List<Envelope> Dropped { get; } = new();

    public int InFlight => _network.Count;

    public ProcessNode this[int i] => Nodes[i];

    public NodeId Id(int i) => Nodes[i].Self;

    /// <param name="options">This process's options, if they differ from the cluster's (another key, say).</param>
    public int AddProcess(ProtocolOptions? options = null)
    {
        int index = Nodes.Count;
        var node = new ProcessNode(new NodeId((ulong)index + 1, 1), OracleEndpoint, options ?? Options, Now);
        Nodes.Add(node);
        Events.Add(new List<NodeEvent>());
        Collect(node);
        return index;
    }

    /// <summary>Replaces process i by a new incarnation on the same endpoint (its event log continues).</summary>
    public void Restart(int i)
    {
        var node = new ProcessNode(new NodeId((ulong)i + 1, Nodes[i].Self.Incarnation + 1), OracleEndpoint, Options, Now);
        Nodes[i] = node;
        _stopped.Remove(i);
        Collect(node);
    }

    // ---------------------------------------------------------------- faults

    /// <summary>Drops every packet matching <paramref name="rule"/> until <see cref="ClearDrops"/>.</summary>
    public void DropWhere(Func<Envelope, bool> rule) => _dropRules.Add(rule);

    /// <summary>Drops the first packet matching <paramref name="rule"/>, once.</summary>
    public void DropFirst(Func<Envelope, bool> rule)
    {
        bool used = false;
        _dropRules.Add(e =>
        {
            if (used || !rule(e)) return false;
            used = true;
            return true;
        });
    }

    public void ClearDrops() => _dropRules.Clear();

    /// <summary>Crash or pause: the process stops ticking and everything sent to it is lost.</summary>
    public void Stop(int i) => _stopped.Add(i);

    public void Resume(int i) => _stopped.Remove(i);

    public bool IsStopped(int i) => _stopped.Contains(i);

    // ---------------------------------------------------------------- commands

    public GroupMember Join(int i)
    {
        GroupMember m = Nodes[i].Join(GroupName, Now);
        Collect(Nodes[i]);
        return m;
    }

    public void Leave(int i)
    {
        Nodes[i].Leave(G, Now);
        Collect(Nodes[i]);
    }

    public void Send(int i, string text)
    {
        Nodes[i].Send(G, System.Text.Encoding.UTF8.GetBytes(text), Now);
        Collect(Nodes[i]);
    }

    /// <summary>Hands raw bytes to a process as if they came from <paramref name="source"/>; outputs enter the network.</summary>
    public void Inject(int i, ulong source, byte[] packet)
    {
        Nodes[i].Receive(source, packet, Now);
        Collect(Nodes[i]);
    }

    public void InjectToOracle(ulong source, byte[] packet)
    {
        Oracle.Receive(source, packet, Now);
        Collect(Oracle);
    }

    // ---------------------------------------------------------------- time

    /// <summary>Delivers every packet in flight (and whatever they cause), without advancing time.</summary>
    public void DeliverAll()
    {
        int budget = 1_000_000;
        while (_network.Count > 0)
        {
            if (--budget == 0) throw new InvalidOperationException("the network does not quiesce");
            Envelope e = _network.Dequeue();
            if (_dropRules.Any(rule => rule(e)))
            {
                Dropped.Add(e);
                continue;
            }
            if (e.To == OracleEndpoint)
            {
                Oracle.Receive(e.From, e.Bytes, Now);
                Collect(Oracle);
                continue;
            }
            int index = (int)e.To - 1;
            if (index < 0 || index >= Nodes.Count || _stopped.Contains(index)) continue;
            Nodes[index].Receive(e.From, e.Bytes, Now);
            Collect(Nodes[index]);
        }
    }

    /// <summary>Advances time in 1 ms steps; each step delivers what is in flight, then ticks every live node.</summary>
    public void RunFor(long micros)
    {
        long end = Now + micros;
        DeliverAll();
        while (Now < end)
        {
            Now = Math.Min(end, Now + 1_000);
            Oracle.Tick(Now);
            Collect(Oracle);
            for (int i = 0; i < Nodes.Count; i++)
            {
                if (_stopped.Contains(i)) continue;
                Nodes[i].Tick(Now);
                Collect(Nodes[i]);
            }
            DeliverAll();
        }
    }

    /// <summary>Runs until <paramref name="condition"/> holds; fails after <paramref name="limit"/> microseconds.</summary>
    public void RunUntil(Func<bool> condition, long limit = 5_000_000)
    {
        long end = Now + limit;
        DeliverAll();
        while (!condition())
        {
            if (Now >= end) throw new TimeoutException($"condition not reached within {limit / 1000} ms");
            RunFor(1_000);
        }
    }

    // What the step being run produced that the cluster acts on or reports after it.
    private readonly List<StateRequested> _asked = new();
    private readonly List<HistoryWrite> _stepWrites = new();

    /// <summary>Runs a node's step (durable, then sent, then handed over), then answers the state requests it raised.</summary>
    private void Collect(IProtocolNode node)
    {
        List<NodeEvent> log = node == Oracle ? OracleEvents : Events[(int)node.Endpoint - 1];
        int before = log.Count;
        _asked.Clear();
        _stepWrites.Clear();
        Step(node);
        StateRequested[] asked = [.. _asked];
        if (node != Oracle) AfterStep?.Invoke((int)node.Endpoint - 1, [.. _stepWrites], log.GetRange(before, log.Count - before));
        // The application's checkpoint, all of it at once (empty unless a test sets Checkpoint).
        foreach (StateRequested r in asked)
        {
            var maker = (ProcessNode)node;
            byte[][] chunks = Checkpoint?.Invoke(Nodes.IndexOf(maker), r) ?? [];
            for (int k = 0; k < chunks.Length; k++) maker.SendStateChunk(r.Group, r.CutViewId, chunks[k], last: k == chunks.Length - 1, Now);
            if (chunks.Length == 0) maker.SendStateChunk(r.Group, r.CutViewId, [], last: true, Now);
            Collect(node);
        }
    }

    protected override void Transmit(ulong from, in OutboundPacket packet) => _network.Enqueue(new Envelope(from, packet.Destination, packet.Bytes.ToArray()));

    protected override void Handle(IProtocolNode node, NodeEvent e, long time)
    {
        (node == Oracle ? OracleEvents : Events[(int)node.Endpoint - 1]).Add(e);
        if (e is StateRequested r) _asked.Add(r);
    }

    /// <summary>A stopped (crashed) process's disk is gone with it: nothing of its step is written, sent or handed over.</summary>
    protected override bool Writable(IProtocolNode node) => node == Oracle || !IsStopped((int)node.Endpoint - 1);

    protected override void OnDurable(IProtocolNode node, ReadOnlySpan<HistoryWrite> writes) => _stepWrites.AddRange(writes);

    /// <summary>The disk of process i (it survives restarts: it belongs to the endpoint).</summary>
    public MemoryDisk Disk(int i) => DiskOf((ulong)i + 1);

    /// <summary>After each step of process i: the history writes it made durable and the events it handed over.</summary>
    public Action<int, List<HistoryWrite>, List<NodeEvent>>? AfterStep { get; set; }

    /// <summary>What the application of process i puts in a checkpoint it is asked for (null: nothing, an empty checkpoint).</summary>
    public Func<int, StateRequested, byte[][]>? Checkpoint { get; set; }

    // ---------------------------------------------------------------- queries

    public IEnumerable<GroupView> Views(int i) => Events[i].OfType<ViewInstalled>().Select(v => v.View);

    public GroupView? CurrentView(int i) => Views(i).LastOrDefault();

    /// <summary>Delivered messages at process i as "senderIndex:seq:text", in delivery order.</summary>
    public List<string> Delivered(int i, int? viewId = null) =>
        Events[i].OfType<MessageDelivered>()
            .Where(d => viewId == null || d.ViewId == viewId)
            .Select(d => $"{(int)d.Sender.Endpoint - 1}:{d.Seq}:{System.Text.Encoding.UTF8.GetString(d.Payload.Span)}")
            .ToList();

    /// <summary>Joins processes 0..n-1 one after the other and waits until all hold the view with all of them.</summary>
    public void FormGroup(int n)
    {
        for (int i = 0; i < n; i++)
        {
            Join(i);
            int joined = i;
            RunUntil(() => CurrentView(joined) is { } v && v.Members.Length == joined + 1);
        }
        RunUntil(() => Enumerable.Range(0, n).All(i => CurrentView(i)?.Members.Length == n));
    }
}

/// <summary>Checks the rules of DESIGN.md section 3 over a <see cref="TestCluster"/>'s event logs.</summary>
internal static class ClusterChecks
{
    /// <summary>
    /// Virtual synchrony: any two processes that both installed views v and v+1 delivered the same set
    /// of messages in v; and each sender's messages are delivered in FIFO order, without gaps or duplicates.
    /// </summary>
    public static void AssertVirtualSynchronyAndFifo(TestCluster c)
    {
        var deliveredIn = new Dictionary<(int Process, int View), HashSet<string>>();
        var installed = new HashSet<(int Process, int View)>();
        for (int p = 0; p < c.Nodes.Count; p++)
        {
            var next = new Dictionary<(ulong, uint, int), long>();
            foreach (NodeEvent e in c.Events[p])
            {
                if (e is ViewInstalled v) installed.Add((p, v.View.Id));
                if (e is not MessageDelivered d) continue;
                var stream = (d.Sender.Endpoint, d.Sender.Incarnation, d.ViewId);
                long expected = next.GetValueOrDefault(stream) + 1;
                Assert.True(d.Seq == expected, $"process {p} delivered {d.Sender} seq {d.Seq} in view {d.ViewId}, expected {expected}");
                next[stream] = d.Seq;
                if (!deliveredIn.TryGetValue((p, d.ViewId), out HashSet<string>? set)) deliveredIn[(p, d.ViewId)] = set = new();
                set.Add($"{d.Sender}:{d.Seq}:{Convert.ToHexString(d.Payload.Span)}");
            }
        }
        foreach (var (p, v) in installed)
        {
            if (!installed.Contains((p, v + 1))) continue;
            foreach (var (q, w) in installed)
            {
                if (q <= p || w != v || !installed.Contains((q, v + 1))) continue;
                var a = deliveredIn.GetValueOrDefault((p, v)) ?? new();
                var b = deliveredIn.GetValueOrDefault((q, v)) ?? new();
                Assert.True(a.SetEquals(b), $"processes {p} and {q} both moved from view {v} to {v + 1} but delivered different sets in {v}: " +
                    $"only at {p}: [{string.Join(", ", a.Except(b))}], only at {q}: [{string.Join(", ", b.Except(a))}]");
            }
        }
    }
}
