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
/// <para>Nothing else touches the core, so it needs no locks. The loop owns the process's socket:
/// it waits in poll(2) until a datagram arrives or the core's next deadline comes, and feeds what
/// it reads to the core itself, so a received message crosses one thread hand-off (loop to the
/// group's delivery thread) before its handler runs. API threads post commands, and the membership
/// replica's sockets (their own receive threads) post packets; either wakes a sleeping loop with a
/// one-byte datagram to its own socket.</para>
/// <para>The loop ticks the core only at <see cref="ProcessNode.NextDeadline"/> (the simulator checks
/// that nothing is due before it), so an idle process sleeps from one heartbeat to the next.</para>
/// <para>Handlers never run here: deliveries go to each group's delivery thread, so a slow handler
/// cannot stall the protocol.</para>
/// </remarks>
internal sealed class EventLoop : IDisposable
{
    /// <summary>
    /// Ticks are never closer than this (microseconds): a timer that stayed due after its tick
    /// costs a tick a millisecond, the old fixed rate, rather than a spinning core.
    /// </summary>
    private const long MinTickSpacing = 1_000;

    /// <summary>
    /// A command runs on its caller's thread only if none was posted for this long (microseconds):
    /// an isolated Send, reply or request gains a thread hand-off; a stream of them is left to the
    /// loop, which batches their packets.
    /// </summary>
    private const long InlineAfterQuiet = 50;

    /// <summary>
    /// Datagrams read per batch before the loop sends what they produced and hands the deliveries
    /// on (each may carry about 80 packets): small batches keep the delivery thread fed while the
    /// loop reads on, at about the grain of the loop that took packets from a receive thread (2,048).
    /// </summary>
    private const int DatagramsPerBatch = 16;

    // API commands in the order they were posted: a Send is a struct (no closure per message), anything else an Action.
    private readonly ConcurrentQueue<(Action? Command, QueuedSend Send)> _commands = new();
    private readonly ConcurrentQueue<(bool ForService, ulong Source, ReadOnlyMemory<byte> Packet, ReceiveSlab? Slab)> _inbox = new();
    private readonly Stopwatch _clock = Stopwatch.StartNew();
    private readonly ProcessPackets _received;
    private int _sleeping; // 1 while the loop waits in poll (or is about to): a producer then wakes it
    private long _plannedWake; // when the sleeping loop wakes by itself (loop clock)
    private long _lastPostAt = long.MinValue / 2; // when an API thread last posted a command (loop clock)
    private long _lastTick = long.MinValue / 2;
    private long _sinkDeadline;
    private bool _halted;
    private long _ticks;
    private long _inlineCommands;

    /// <summary>Ticks of the nodes so far: an idle process ticks at its timers' deadlines, not every millisecond.</summary>
    public long Ticks => Interlocked.Read(ref _ticks);

    /// <summary>Commands (Sends, replies, requests) that ran on the caller's thread because the loop slept.</summary>
    public long InlineCommands => Interlocked.Read(ref _inlineCommands);

    // Whoever drives the core holds this: the loop thread for each of its iterations (never while
    // it waits in poll), or an API thread that sends while the loop sleeps (see PostSend).
    private readonly object _driver = new();
    private readonly Thread _thread;
    private readonly IEventSink _sink;
    private readonly IPacketTransport _transport;
    private readonly MulticastMemberships _multicast;
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
        IPacketTransport? data = null;
        NodeId BindProcess()
        {
            data = TransportFactory.ForOwner(options.Transport, new IPEndPoint(options.BindAddress, options.Port), transportOptions with
            {
                Faults = options.TransportFaults,
                MulticastPort = options.Multicast?.Port ?? 0,
                MulticastInterface = options.Multicast?.Interface,
                MulticastTimeToLive = options.Multicast?.TimeToLive ?? 1,
            });
            // Greater than every earlier incarnation on this endpoint (IncarnationClock): the
            // service remembers only the highest expelled one per endpoint.
            return new NodeId(data.LocalEndpoint, IncarnationClock.Next());
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
        _multicast = new MulticastMemberships(_transport, sink.ReportProblem);
        _received = new ProcessPackets(this);
        _thread = new Thread(Run) { IsBackground = true, Name = "isis-event-loop" };
    }

    private delegate (ServiceHost, ProcessNode) StartService(IsisOptions options, UdpTransportOptions transportOptions, Func<NodeId> bindProcess,
        ProtocolOptions protocol, ProtocolOptions processProtocol, long now, ReceivedPacketCallback toReplica, ReceivedPacketCallback toProcess);

    public ProcessNode Node { get; }

    /// <summary>The membership replica this process runs, if any (see <see cref="ServiceHost.Replica"/>).</summary>
    public MembershipReplica? Service => _service.Replica;

    /// <summary>The id of the membership replica this process hosts, if any.</summary>
    public NodeId? ServiceReplica => _service.Replica?.Self;

    /// <summary>True if this process founded the embedded service when it started.</summary>
    public bool Founded => _service.Founded;

    /// <summary>See <see cref="ServiceHost.FoundedLaterAfter"/>.</summary>
    public long FoundedLaterAfter => _service.FoundedLaterAfter;

    /// <summary>See <see cref="ServiceHost.FoundingDeferredBecause"/>.</summary>
    public string? FoundingDeferredBecause => _service.FoundingDeferredBecause;

    /// <summary>True while this process hosts a voting membership replica (published after each batch for other threads).</summary>
    public bool HostsReplica => _service.HostsReplica;

    /// <summary>True if the membership service is embedded in the member processes and moves between them.</summary>
    public bool EmbeddedService => _service.Embedded;

    /// <summary>True if this process holds the machine's well-known membership port.</summary>
    public bool HoldsWellKnownPort => _service.HoldsWellKnownPort;

    /// <summary>Where the hosted membership replica listens, if this process hosts one.</summary>
    public IPEndPoint? ServiceEndPoint => _service.EndPoint;

    /// <summary>The process's transport (the loop owns it).</summary>
    public IPacketTransport Transport => _transport;

    public long Now => (long)_clock.Elapsed.TotalMicroseconds;

    public bool IsLoopThread => Thread.CurrentThread == _thread;

    public void Start() => _thread.Start();

    /// <summary>Runs <paramref name="command"/> on the core, after every command posted before it: at once on this thread if the loop sleeps (see <see cref="PostSend"/>), else on the loop thread, soon.</summary>
    public void Post(Action command)
    {
        if (TryRunInline(command, default)) return;
        _commands.Enqueue((command, default));
        Wake();
    }

    /// <summary>
    /// Hands a multicast to the protocol, after every command posted before it. When the loop
    /// sleeps and nothing is queued, the calling thread drives the core itself (under the driver
    /// lock): the message leaves and the sender's own delivery reaches the delivery thread without
    /// waiting for the loop to wake, one hand-off instead of two. Otherwise (the loop is busy, as in
    /// a burst, where batching many Sends into each datagram pays) it is queued for the loop.
    /// </summary>
    /// <param name="send">The multicast.</param>
    /// <param name="mayRunInline">False when the sender streams (its window of unstable messages is filling): always queued.</param>
    public void PostSend(in QueuedSend send, bool mayRunInline = true)
    {
        if (mayRunInline && TryRunInline(null, send)) return;
        _commands.Enqueue((null, send));
        Wake();
    }

    /// <summary>
    /// Runs a command on the calling thread if the loop sleeps, nothing is queued before it, and
    /// this thread is not driving already (a completion running under the lock). Returns false if
    /// the caller must queue it instead.
    /// </summary>
    private bool TryRunInline(Action? command, in QueuedSend send)
    {
        long now = Now;
        long previous = Interlocked.Exchange(ref _lastPostAt, now);
        // Commands close together are a burst: queue them, so the loop batches their packets into
        // few datagrams (one send call per message would cost throughput).
        if (now - previous < InlineAfterQuiet) return false;
        if (Volatile.Read(ref _sleeping) != 1 || !_commands.IsEmpty || Monitor.IsEntered(_driver) || !Monitor.TryEnter(_driver)) return false;
        bool ran = false;
        try
        {
            if (!_stopping && !_halted && _commands.IsEmpty)
            {
                ran = true;
                if (command != null) command();
                else TakeSend(send);
                Drain();
                Interlocked.Increment(ref _inlineCommands);
            }
        }
        catch (Core.Common.ProtocolInvariantException e)
        {
            Halt(e);
        }
        finally
        {
            // The command may have armed a timer (a Send's digest) earlier than the sleeping loop's
            // wake-up: move the wake-up (a loop about to sleep reads it after announcing the sleep)
            // and wake a loop already asleep. The exchange is a full fence before Wake reads _sleeping.
            bool earlier = false;
            if (ran && !_halted)
            {
                long next = NextWake();
                if (next < Volatile.Read(ref _plannedWake))
                {
                    Interlocked.Exchange(ref _plannedWake, next);
                    earlier = true;
                }
            }
            Monitor.Exit(_driver);
            if (earlier) Wake();
        }
        return ran;
    }

    private void Post(bool forService, ulong source, ReadOnlyMemory<byte> packet, ReceiveSlab? slab)
    {
        _inbox.Enqueue((forService, source, packet, slab));
        Wake();
    }

    // The announce-then-look protocol of the loop's sleep (see RunLoop): a producer that enqueued
    // before the loop announced is found by the loop's second look; one that enqueues after sees
    // the announcement and sends the wake-up, which costs a system call only when the loop sleeps.
    private void Wake()
    {
        if (Volatile.Read(ref _sleeping) == 1 && Interlocked.Exchange(ref _sleeping, 0) == 1) _transport.Wake();
    }

    private void Run()
    {
        bool readable = false;
        while (!_stopping)
        {
            lock (_driver)
            {
                if (_halted) return;
                try
                {
                    if (!RunOnce(ref readable)) continue;
                }
                catch (Core.Common.ProtocolInvariantException e)
                {
                    Halt(e);
                    return;
                }
            }
            // Sleep until the next deadline: announce it, then look at the queues and the wake-up
            // time again (a producer, or a command run inline, that came before the announcement is
            // found here; one after it sees the announcement and wakes us).
            Interlocked.Exchange(ref _sleeping, 1);
            long now = Now;
            long wakeAt = Volatile.Read(ref _plannedWake);
            if (wakeAt > now && _commands.IsEmpty && _inbox.IsEmpty && !_stopping) readable = _transport.WaitReadable(wakeAt - now);
            Volatile.Write(ref _sleeping, 0);
        }
    }

    /// <summary>
    /// A broken invariant means this replica can no longer be trusted: stop it (as if it had been
    /// expelled) rather than diverge silently or take the whole process down. Under the driver lock.
    /// </summary>
    private void Halt(Core.Common.ProtocolInvariantException e)
    {
        _halted = true;
        _stopping = true;
        _transport.Wake(); // a loop asleep in poll notices at once
        // Nothing of the step that broke the rule leaves, and none of its events is handed over.
        NodeStep.Discard(Node, _service.Replica);
        Node.ShutDown("internal error, this runtime stopped to protect the group's replicas: " + e.Message);
        NodeStep.Run(Node, _service.Replica, new Ports(this));
    }

    /// <summary>Messages handed to the core: queued multicasts (Send, OrderedSend, SafeSend) and queries; counted on this thread, read by metric listeners.</summary>
    internal long MessagesSent => Volatile.Read(ref _messagesSent);

    private long _messagesSent;

    /// <summary>Counts a message the caller hands to the core on this thread itself (a query).</summary>
    internal void CountSent() => _messagesSent++;

    /// <summary>A queued Send or OrderedSend goes to the protocol, which owns a pooled payload from here.</summary>
    private void TakeSend(in QueuedSend send)
    {
        Interlocked.Decrement(ref send.Queued.Value);
        _messagesSent++;
        Node.Send(send.Group, send.Payload, Now, send.Kind, send.Phi, send.Pooled, send.To);
    }

    /// <summary>
    /// One iteration under the driver lock: inputs in a fixed order (commands from the API, then
    /// packets, then the tick), then the outputs. Every batch is bounded: a sender blasting Sends
    /// or a flood of packets must never starve the tick, which carries the heartbeats that keep
    /// this process in the system. Returns true if the loop may sleep (nothing more waiting).
    /// </summary>
    private bool RunOnce(ref bool readable)
    {
        int commands = 512;
        while (commands-- > 0 && _commands.TryDequeue(out var item))
        {
            if (item.Command != null) item.Command();
            else TakeSend(item.Send);
        }
        int datagrams = _transport.ReceivePending(_received, DatagramsPerBatch, readable);
        readable = false;
        int budget = 2048;
        while (budget-- > 0 && _inbox.TryDequeue(out var item))
        {
            long at = Now;
            if (item.ForService) _service.Receive(item.Source, item.Packet.Span, at);
            else Node.Receive(item.Source, item.Packet.Span, at);
            item.Slab?.Release(); // the core took a span: it copied whatever it keeps
        }
        long now = Now;
        if (now >= NextWake())
        {
            _service.Tick(now, Node);
            Node.Tick(now);
            _sinkDeadline = _sink.OnTick(now);
            _transport.EvictExpiredFragments();
            _lastTick = now;
            Interlocked.Increment(ref _ticks);
        }
        Drain();
        Volatile.Write(ref _plannedWake, NextWake());
        return datagrams < DatagramsPerBatch && _commands.IsEmpty && _inbox.IsEmpty;
    }

    /// <summary>
    /// When the loop must tick next (loop clock): the nodes' next deadline, the runtime's own, a
    /// fault-delayed datagram's; never sooner than <see cref="MinTickSpacing"/> after the last tick.
    /// Under the driver lock.
    /// </summary>
    private long NextWake()
    {
        long deadline = Math.Min(Math.Min(Node.NextDeadline, _service.NextDeadline), _sinkDeadline);
        long heldDue = _transport.NextHeldDatagramDue;
        if (heldDue != long.MaxValue) deadline = Math.Min(deadline, Now + Math.Max(0, heldDue - MonotonicClock.NowMicros()));
        return Math.Max(deadline, _lastTick + MinTickSpacing);
    }

    /// <summary>Feeds the packets the loop reads from the process's socket to the process node, as they are parsed.</summary>
    private sealed class ProcessPackets(EventLoop loop) : Transport.Framing.IPacketVisitor
    {
        public void OnPacket(ulong source, ReadOnlySpan<byte> packet) => loop.Node.Receive(source, packet, loop.Now);

        public void OnReassembledPacket(ulong source, byte[] packet) => loop.Node.Receive(source, packet, loop.Now);
    }

    /// <summary>
    /// Runs the step's outputs of the process node and of the replica it hosts through
    /// <see cref="NodeStep"/> (durable, then sent, then handed over), then the runtime's own
    /// after-batch duties.
    /// </summary>
    public void Drain()
    {
        if (NodeStep.Run(Node, _service.Replica, new Ports(this)) == StepOutcome.NotDurable)
        {
            StopBecauseStoreFailed(_storeFailure!);
            return;
        }
        _service.AfterProcessStep(Node, _sink);
        _sink.AfterBatch();
    }

    /// <summary>Why the last step could not be made durable (set by <see cref="Ports.MakeDurable"/>).</summary>
    private string? _storeFailure;

    /// <summary>
    /// The event loop's I/O for <see cref="NodeStep"/>: the history logs (through the sink) and the
    /// replica's log, the process's socket and the replica's, and the sink for events. A view or a
    /// leave first moves the process's multicast memberships, so the socket receives on a view's
    /// address from the moment the view is installed.
    /// </summary>
    private readonly struct Ports(EventLoop loop) : INodePorts
    {
        public bool MakeDurable(StepSource source, in Ready ready)
        {
            if (source == StepSource.Replica)
            {
                // The service host stops the replica if its log refuses: the process then stops too.
                loop._storeFailure = loop._service.MakeDurable(ready.ReplicaRecords, ready.ReplicaRecordsReplaceLog);
                return loop._storeFailure == null;
            }
            try
            {
                loop._sink.MakeDurable(ready.HistoryWrites);
                return true;
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                // Its acknowledgements would promise what is not on disk.
                loop._storeFailure = $"the SafeSend history log could not be written ({e.GetType().Name}: {e.Message}); this process stops rather than acknowledge what is not on disk";
                return false;
            }
        }

        public void Send(StepSource source, in OutboundPacket packet)
        {
            if (source == StepSource.Replica) loop._service.Enqueue(packet);
            else loop._transport.Enqueue(packet.Destination, packet.Bytes.Span);
        }

        public void FlushSends()
        {
            loop._service.FlushPackets();
            loop._transport.Flush();
        }

        public void Deliver(StepSource source, NodeEvent e, long time)
        {
            if (source == StepSource.Replica)
            {
                loop._sink.OnServiceEvent(e, time);
                return;
            }
            if (e is MulticastAddressChanged m) loop._multicast.OnView(m.Group, m.Address);
            else if (e is GroupLeft l) loop._multicast.OnLeft(l.Group);
            loop._sink.OnNodeEvent(e, time);
        }
    }

    /// <summary>
    /// A store (the SafeSend history log, the membership replica's log) could not be written:
    /// nothing of the step left (<see cref="NodeStep"/> discarded it), and the process stops with
    /// <paramref name="reason"/> (which names the file), like a process cut off from the membership
    /// service, instead of throwing out of the event loop or out of the API call that drove the step.
    /// </summary>
    private void StopBecauseStoreFailed(string reason)
    {
        // A process the protocol already stopped (a dedicated replica's host, whose replica went
        // on alone) raises no second shutdown: the reason goes to the operator directly.
        if (Node.IsShutDown) _sink.ReportProblem(reason);
        Node.ShutDown(reason);
        NodeStep.Run(Node, _service.Replica, new Ports(this));
    }

    public void Dispose()
    {
        _stopping = true;
        _transport.Wake();
        if (_thread.IsAlive && !IsLoopThread) _thread.Join(TimeSpan.FromSeconds(5));
        // A Send driving the core on its own thread finishes its step before the socket closes.
        bool locked = Monitor.TryEnter(_driver, TimeSpan.FromSeconds(5));
        try
        {
            _transport.Dispose();
            _service.Dispose();
        }
        finally
        {
            if (locked) Monitor.Exit(_driver);
        }
    }
}

/// <summary>
/// A Send, OrderedSend or SafeSend on its way from an API thread to the protocol. For a Send,
/// Pooled is the buffer-pool array behind Payload: the protocol returns it once the message is stable.
/// </summary>
/// <summary>
/// A Send or OrderedSend on its way to the core: the loop hands it over itself (<see cref="EventLoop.TakeSend"/>)
/// and takes it off the group's count of queued sends, which flow control reads.
/// </summary>
internal readonly record struct QueuedSend(Core.Identity.GroupId Group, QueuedSendCount Queued, Core.Groups.MessageKind Kind, ReadOnlyMemory<byte> Payload, int Phi, byte[]? Pooled, Core.Identity.NodeId[]? To = null);

/// <summary>A group's sends queued to the event loop and not yet handed to the core (read by its flow control from any thread).</summary>
internal sealed class QueuedSendCount
{
    public long Value;
}

/// <summary>Where the event loop hands the core's events (implemented by the runtime).</summary>
internal interface IEventSink
{
    /// <summary>An event of the process node; <paramref name="at"/> is the loop-clock time of the step that produced it.</summary>
    void OnNodeEvent(NodeEvent e, long at);

    /// <summary>An event of the membership replica this process hosts; <paramref name="at"/> as for <see cref="OnNodeEvent"/>.</summary>
    void OnServiceEvent(NodeEvent e, long at);

    /// <summary>Appends and fsyncs acceptor log records; returns only once they are durable.</summary>
    void MakeDurable(ReadOnlySpan<HistoryWrite> writes);

    /// <summary>After each batch: publish flow-control state to waiting senders.</summary>
    void AfterBatch();

    /// <summary>Something the operator must know, reported even when the application configured no logger.</summary>
    void ReportProblem(string text);

    /// <summary>At every loop tick, after the nodes' ticks: cheap periodic checks. Returns when it next wants a tick.</summary>
    long OnTick(long now);
}

