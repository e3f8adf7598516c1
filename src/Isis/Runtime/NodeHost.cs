using System.Collections.Concurrent;
using System.Net;
using Isis.Core.Common;
using Isis.Core.Node;
using Isis.Transport;
using Isis.Transport.Framing;

namespace Isis.Runtime;

/// <summary>
/// Runs one node that is not a process of the membership system (a BFT replica or client of
/// Isis.Perpetual, a <see cref="Core.Clients.GroupClientNode"/>) over a real UDP socket of its own: a thread of its own reads packets, ticks the node at its deadlines and steps it
/// through <see cref="NodeStep"/>, the same driver contract the simulator uses. The application's
/// commands (a reply, a call, a request) are posted to that thread (<see cref="Post"/>); the
/// node's events reach <c>onEvent</c> on it, in order, and may post commands in turn.
/// </summary>
/// <remarks>
/// Time is the wall clock in microseconds since the Unix epoch: a BFT primary's stamp becomes the
/// service's agreed clock, so it must be comparable across hosts (a monotonic clock is not). A
/// broken invariant stops the node (<see cref="StoppedBecause"/>): its outputs are discarded.
/// </remarks>
internal sealed class NodeHost : IDisposable
{
    private readonly IProtocolNode _node;
    private readonly IPacketTransport _transport;
    private readonly Action<NodeEvent, long> _onEvent;
    private readonly ConcurrentQueue<Action<long>> _commands = new();
    private readonly Thread _thread;
    private readonly Action<string>? _onStopped;
    private readonly Func<OutboundPacket, OutboundPacket>? _outbound;
    private volatile bool _stopping;

    /// <summary>Binds the node's socket; <see cref="Start"/> starts its thread (commands posted before wait for it).</summary>
    /// <param name="node">The replica or client.</param>
    /// <param name="bindTo">Its endpoint in the deployment.</param>
    /// <param name="onEvent">Its events, on the node's thread, in order, with the step's time.</param>
    /// <param name="name">The thread's name.</param>
    /// <param name="onStopped">Told why, if a broken invariant stops the node.</param>
    /// <param name="outbound">
    /// Rewrites each packet before it leaves (null: none). Only the multi-process tests' Byzantine
    /// build sets it, to lie on the wire as a faulty replica would; nothing in the package does.
    /// </param>
    public NodeHost(IProtocolNode node, IPEndPoint bindTo, Action<NodeEvent, long> onEvent, string name, Action<string>? onStopped = null, Func<OutboundPacket, OutboundPacket>? outbound = null)
        : this(_ => node, bindTo, onEvent, name, onStopped, outbound)
    {
    }

    /// <summary>Binds the socket first, then makes the node for the endpoint it got (<paramref name="bindTo"/> may have port 0: any free port).</summary>
    /// <param name="makeNode">Makes the node, given the endpoint the socket is bound to.</param>
    /// <param name="bindTo">The address (and port, or 0) to bind.</param>
    /// <param name="onEvent">The node's events, on the node's thread, in order, with the step's time.</param>
    /// <param name="name">The thread's name.</param>
    /// <param name="onStopped">Told why, if a broken invariant stops the node.</param>
    /// <param name="outbound">Rewrites each packet before it leaves (null: none).</param>
    public NodeHost(Func<ulong, IProtocolNode> makeNode, IPEndPoint bindTo, Action<NodeEvent, long> onEvent, string name, Action<string>? onStopped = null, Func<OutboundPacket, OutboundPacket>? outbound = null)
    {
        _outbound = outbound;
        _onEvent = onEvent;
        _onStopped = onStopped;
        _transport = TransportFactory.ForOwner(IsisTransport.Udp, bindTo, new UdpTransportOptions());
        try
        {
            _node = makeNode(_transport.LocalEndpoint);
        }
        catch
        {
            _transport.Dispose();
            throw;
        }
        _thread = new Thread(Loop) { IsBackground = true, Name = "isis-node " + name };
    }

    /// <summary>Starts the node's thread: it reads packets, ticks the node and runs the commands posted.</summary>
    public NodeHost Start()
    {
        _thread.Start();
        return this;
    }

    /// <summary>Why the node stopped on its own (a broken invariant), or null.</summary>
    public string? StoppedBecause { get; private set; }

    /// <summary>Datagrams the transport dropped before the node saw them: not framed as ours, or fragments that contradict each other.</summary>
    public long TransportDrops => _transport.Counters.Framing.TotalDrops;

    /// <summary>The wall clock, microseconds since the Unix epoch.</summary>
    public static long Now() => (DateTime.UtcNow.Ticks - DateTime.UnixEpoch.Ticks) / 10;

    /// <summary>Runs <paramref name="command"/> on the node's thread (given the time), before the node's next step.</summary>
    public void Post(Action<long> command)
    {
        _commands.Enqueue(command);
        _transport.Wake();
    }

    private void Loop()
    {
        var packets = new Packets(this);
        while (!_stopping)
        {
            long now = Now();
            bool readable = _transport.WaitReadable(Math.Clamp(_node.NextDeadline - now, 0, 100_000));
            if (_stopping) break;
            try
            {
                now = Now();
                _transport.ReceivePending(packets, 256, readable);
                while (_commands.TryDequeue(out Action<long>? command)) command(now);
                if (_node.NextDeadline <= now) _node.Tick(now);
                Step();
            }
            catch (ProtocolInvariantException e)
            {
                NodeStep.Discard(_node, null);
                StoppedBecause = e.Message;
                _onStopped?.Invoke(e.Message);
                return;
            }
            _transport.EvictExpiredFragments();
        }
    }

    /// <summary>Steps until the node is quiet: the events' handlers may post commands, which run at once and step again.</summary>
    private void Step()
    {
        var ports = new Ports(this);
        while (true)
        {
            NodeStep.Run(_node, null, ports);
            if (_commands.IsEmpty) return;
            long now = Now();
            while (_commands.TryDequeue(out Action<long>? command)) command(now);
        }
    }

    public void Dispose()
    {
        _stopping = true;
        _transport.Wake();
        if (_thread.IsAlive) _thread.Join(TimeSpan.FromSeconds(5));
        _transport.Dispose();
    }

    private sealed class Packets(NodeHost host) : IPacketVisitor
    {
        public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => host._node.Receive(source, packet, Now());

        public void OnReassembledPacket(ulong source, byte[] packet) => host._node.Receive(source, packet, Now());
    }

    private readonly struct Ports(NodeHost host) : INodePorts
    {
        public bool MakeDurable(StepSource source, in Ready ready) => true; // the nodes it hosts keep nothing on disk yet

        public void Send(StepSource source, in OutboundPacket packet)
        {
            OutboundPacket sent = host._outbound?.Invoke(packet) ?? packet;
            host._transport.Enqueue(sent.Destination, sent.Bytes.Span);
        }

        public void FlushSends() => host._transport.Flush();

        public void Deliver(StepSource source, NodeEvent e, long time) => host._onEvent(e, time);
    }
}
