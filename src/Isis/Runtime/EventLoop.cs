using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Transport;

namespace Isis.Runtime;

/// <summary>
/// The one thread that drives a runtime's protocol nodes, following the contract in
/// docs/architecture.md: feed inputs (API commands, received packets, ticks) to the core; take its
/// outbox; send the packets; hand events to the groups in order; clear the outbox.
/// </summary>
/// <remarks>
/// Nothing else touches the core, so it needs no locks. API threads post commands, the transports'
/// receive threads post packets, and both wake the loop. Handlers never run here: deliveries go to
/// each group's delivery thread, so a slow handler cannot stall the protocol.
/// </remarks>
internal sealed class EventLoop : IDisposable
{
    private static readonly long TickInterval = 1_000; // microseconds

    // API commands in the order they were posted: a Send is a struct (no closure per message), anything else an Action.
    private readonly ConcurrentQueue<(Action? Command, QueuedSend Send)> _commands = new();
    private readonly ConcurrentQueue<(bool ForService, ulong Source, ReadOnlyMemory<byte> Packet, ReceiveSlab? Slab)> _inbox = new();
    private readonly ManualResetEventSlim _wake = new(false, spinCount: 0);
    private readonly Stopwatch _clock = Stopwatch.StartNew();
    private readonly Thread _thread;
    private readonly IEventSink _sink;
    private readonly UdpTransport _transport;
    private readonly ServiceHost _service;
    private volatile bool _stopping;

    /// <param name="options">The runtime's settings.</param>
    /// <param name="sink">Where events go.</param>
    /// <param name="buffers">The runtime's buffer pool: the process node holds its Sends' payloads in its arrays and recycles its outbox.</param>
    public EventLoop(IsisOptions options, IEventSink sink, Core.Common.IBufferPool buffers)
    {
        _sink = sink;
        var transportOptions = new UdpTransportOptions { MaxDatagramSize = options.MaxDatagramSize, MaxPacketSize = Math.Max(options.MaxMessageSize + 4096, 1 << 20) };
        ProtocolOptions protocol = options.ToProtocolOptions();
        ProtocolOptions processProtocol = protocol with { BufferPool = buffers };
        UdpTransport? data = null;
        NodeId BindProcess()
        {
            data = new UdpTransport(new IPEndPoint(options.BindAddress, options.Port), (s, p, slab) => Post(false, s, p, slab),
                transportOptions with { Faults = options.TransportFaults });
            // A fresh incarnation number per start: never reused on this endpoint while an older one may be remembered.
            return new NodeId(data.LocalEndpoint, (uint)Random.Shared.Next(1, int.MaxValue));
        }
        try
        {
            (_service, Node) = (options.EmbeddedService ? ServiceHost.StartEmbedded : (StartService)ServiceHost.StartFixed)(
                options, transportOptions, BindProcess, protocol, processProtocol, Now, (s, p, slab) => Post(true, s, p, slab), (s, p, slab) => Post(false, s, p, slab));
        }
        catch
        {
            data?.Dispose();
            throw;
        }
        _transport = data!;
        _thread = new Thread(Run) { IsBackground = true, Name = "isis-event-loop" };
    }

    private delegate (ServiceHost, ProcessNode) StartService(IsisOptions options, UdpTransportOptions transportOptions, Func<NodeId> bindProcess,
        ProtocolOptions protocol, ProtocolOptions processProtocol, long now, ReceivedPacketCallback toReplica, ReceivedPacketCallback toProcess);

    public ProcessNode Node { get; }

    /// <summary>The membership replica this process runs, if any (see <see cref="ServiceHost.Replica"/>).</summary>
    public MembershipReplica? Service => _service.Replica;

    /// <summary>True if this process founded the embedded service when it started.</summary>
    public bool Founded => _service.Founded;

    /// <summary>True while this process hosts a voting membership replica (published after each batch for other threads).</summary>
    public bool HostsReplica => _service.HostsReplica;

    /// <summary>True if the membership service is embedded in the member processes and moves between them.</summary>
    public bool EmbeddedService => _service.Embedded;

    /// <summary>True if this process holds the machine's well-known membership port.</summary>
    public bool HoldsWellKnownPort => _service.HoldsWellKnownPort;

    /// <summary>Where the hosted membership replica listens, if this process hosts one.</summary>
    public IPEndPoint? ServiceEndPoint => _service.EndPoint;

    public UdpTransport Transport => _transport;

    public long Now => (long)_clock.Elapsed.TotalMicroseconds;

    public bool IsLoopThread => Thread.CurrentThread == _thread;

    public void Start() => _thread.Start();

    /// <summary>Runs <paramref name="command"/> on the loop thread, soon.</summary>
    public void Post(Action command)
    {
        _commands.Enqueue((command, default));
        Wake();
    }

    /// <summary>Hands a multicast to the protocol on the loop thread, after every command posted before it.</summary>
    public void PostSend(in QueuedSend send)
    {
        _commands.Enqueue((null, send));
        Wake();
    }

    private void Post(bool forService, ulong source, ReadOnlyMemory<byte> packet, ReceiveSlab? slab)
    {
        _inbox.Enqueue((forService, source, packet, slab));
        Wake();
    }

    // Set only when not set yet: the loop resets the event before it drains the queues, so an item
    // enqueued while the event is still set is seen; and a Set on a set event with the loop just
    // waking takes the event's lock for nothing, once per packet.
    private void Wake()
    {
        if (!_wake.IsSet) _wake.Set();
    }

    private void Run()
    {
        try
        {
            RunLoop();
        }
        catch (Core.Common.ProtocolInvariantException e)
        {
            // A broken invariant means this replica can no longer be trusted: stop it (as if it
            // had been expelled) rather than diverge silently or take the whole process down.
            _stopping = true;
            Node.ShutDown("internal error, this runtime stopped to protect the group's replicas: " + e.Message);
            foreach (NodeEvent ev in Node.Outbox.Events) _sink.OnNodeEvent(ev);
            Node.Outbox.Clear();
        }
    }

    private void RunLoop()
    {
        long nextTick = 0;
        while (!_stopping)
        {
            long now = Now;
            long wait = Math.Max(0, nextTick - now);
            // Wait timeouts have millisecond resolution and round down: round up instead, or the
            // loop would spin a core between ticks.
            if (_commands.IsEmpty && _inbox.IsEmpty && wait > 0) _wake.Wait((int)((wait + 999) / 1000));
            _wake.Reset();
            if (_stopping) break;

            // Inputs in a fixed order: commands from the API, then packets, then the tick. Both
            // batches are bounded: a sender blasting Sends or a flood of packets must never starve
            // the tick, which carries the heartbeats that keep this process in the system.
            int commands = 512;
            while (commands-- > 0 && _commands.TryDequeue(out var item))
            {
                if (item.Command != null) item.Command();
                else item.Send.Group.SendQueued(this, item.Send);
            }
            int budget = 2048;
            while (budget-- > 0 && _inbox.TryDequeue(out var item))
            {
                now = Now;
                if (item.ForService) _service.Receive(item.Source, item.Packet.Span, now);
                else Node.Receive(item.Source, item.Packet.Span, now);
                item.Slab?.Release(); // the core took a span: it copied whatever it keeps
            }
            now = Now;
            if (now >= nextTick)
            {
                _service.Tick(now);
                Node.Tick(now);
                _sink.OnTick(now);
                nextTick = now + TickInterval;
            }
            Drain();
        }
    }

    /// <summary>Sends what the nodes produced and hands their events on, then clears their outboxes.</summary>
    public void Drain()
    {
        _service.Flush(_sink);
        // The contract's order: durable first, then packets, then the application.
        if (Node.Outbox.HistoryWrites.Count > 0 && !TryMakeDurable()) return;
        foreach (OutboundPacket p in Node.Outbox.Packets) _transport.Enqueue(p.Destination, p.Bytes.Span);
        _transport.Flush();
        foreach (NodeEvent e in Node.Outbox.Events) _sink.OnNodeEvent(e);
        Node.Outbox.Clear();
        _service.AfterProcessStep(Node, _sink);
        _sink.AfterBatch();
    }

    /// <summary>
    /// Makes the step's history writes durable. If the disk refuses (full, read-only, removed),
    /// nothing of the step may leave - its acknowledgements would promise what is not on disk - so
    /// this process stops, with the reason, like a process cut off from the membership service.
    /// </summary>
    private bool TryMakeDurable()
    {
        try
        {
            _sink.MakeDurable(Node.Outbox.HistoryWrites);
            return true;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            Node.Outbox.Clear();
            Node.ShutDown($"the SafeSend history log could not be written ({e.GetType().Name}: {e.Message}); this process stops rather than acknowledge what is not on disk");
            foreach (NodeEvent ev in Node.Outbox.Events) _sink.OnNodeEvent(ev);
            Node.Outbox.Clear();
            return false;
        }
    }

    public void Dispose()
    {
        _stopping = true;
        _wake.Set();
        if (_thread.IsAlive && !IsLoopThread) _thread.Join(TimeSpan.FromSeconds(5));
        _transport.Dispose();
        _service.Dispose();
    }
}

/// <summary>
/// A Send, OrderedSend or SafeSend on its way from an API thread to the protocol. For a Send,
/// Pooled is the buffer-pool array behind Payload: the protocol returns it once the message is stable.
/// </summary>
internal readonly record struct QueuedSend(Group Group, Core.Groups.MessageKind Kind, ReadOnlyMemory<byte> Payload, int Phi, byte[]? Pooled);

/// <summary>Where the event loop hands the core's events (implemented by the runtime).</summary>
internal interface IEventSink
{
    void OnNodeEvent(NodeEvent e);

    void OnServiceEvent(NodeEvent e);

    /// <summary>Appends and fsyncs acceptor log records; returns only once they are durable.</summary>
    void MakeDurable(List<HistoryWrite> writes);

    /// <summary>After each batch: publish flow-control state to waiting senders.</summary>
    void AfterBatch();

    /// <summary>Something the operator must know, reported even when the application configured no logger.</summary>
    void ReportProblem(string text);

    /// <summary>Every loop tick (about once a millisecond), after the nodes' ticks: cheap periodic checks.</summary>
    void OnTick(long now);
}

