using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
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
    private UdpTransport? _serviceTransport;
    private readonly DurableRecordFile? _serviceLog;
    private volatile bool _stopping;

    // The embedded service (see EmbeddedService): this process's replica listens on its own socket;
    // the machine's well-known port, when this process holds it, answers newcomers.
    private readonly IsisOptions _options;
    private readonly UdpTransportOptions _transportOptions;
    private UdpTransport? _directoryTransport;
    private long _nextDirectoryAttemptAt;
    private long _directoryVersionWritten = -1;
    private volatile bool _hostsReplica;

    /// <param name="options">The runtime's settings.</param>
    /// <param name="sink">Where events go.</param>
    /// <param name="buffers">The runtime's buffer pool: the process node holds its Sends' payloads in its arrays and recycles its outbox.</param>
    public EventLoop(IsisOptions options, IEventSink sink, Core.Common.IBufferPool buffers)
    {
        _sink = sink;
        _options = options;
        _transportOptions = new UdpTransportOptions { MaxDatagramSize = options.MaxDatagramSize, MaxPacketSize = Math.Max(options.MaxMessageSize + 4096, 1 << 20) };
        var dataTransportOptions = _transportOptions with { Faults = options.TransportFaults };
        ProtocolOptions protocol = options.ToProtocolOptions();
        ProtocolOptions processProtocol = protocol with { BufferPool = buffers };
        // A fresh incarnation number per start: never reused on this endpoint while an older one may be remembered.
        uint incarnation = (uint)Random.Shared.Next(1, int.MaxValue);

        if (options.EmbeddedService)
        {
            _transport = new UdpTransport(new IPEndPoint(options.BindAddress, options.Port), (s, p, slab) => Post(false, s, p, slab), dataTransportOptions);
            try
            {
                (Node, Service, _serviceTransport, Founded) = StartEmbedded(options, protocol, processProtocol, incarnation);
            }
            catch
            {
                _transport.Dispose();
                _directoryTransport?.Dispose();
                throw;
            }
            _hostsReplica = Founded;
            _thread = new Thread(Run) { IsBackground = true, Name = "isis-event-loop" };
            return;
        }

        IPEndPoint[] replicas = options.ServiceReplicaEndPoints;
        ulong[] replicaEndpoints = replicas.Select(EndpointConversions.FromIPEndPoint).ToArray();
        if (options.MembershipService != MembershipServiceMode.Client)
        {
            for (int i = 0; i < replicas.Length && _serviceTransport == null; i++)
            {
                _serviceTransport = TryBind(replicas[i], forService: true);
                if (_serviceTransport == null) continue;
                IEnumerable<byte[]>? restored = null;
                if (replicas.Length > 1)
                {
                    // A replicated service needs its log back after a restart: the replica must
                    // never contradict a vote or an entry it acknowledged before it stopped.
                    string path = options.ReplicaLogPath(replicas[i]);
                    Directory.CreateDirectory(Path.GetDirectoryName(path)!);
                    (List<byte[]> records, long intact) = DurableRecordFile.Read(path);
                    _serviceLog = new DurableRecordFile(path, truncateTo: intact);
                    restored = records;
                }
                Service = new MembershipReplica(new NodeId(_serviceTransport.LocalEndpoint, 1), replicaEndpoints.Select(e => new NodeId(e, 1)).ToArray(), protocol, Now, restored);
            }
            if (_serviceTransport == null && options.MembershipService == MembershipServiceMode.Host)
            {
                throw new InvalidOperationException("MembershipServiceMode.Host: none of the membership replica addresses (" +
                    string.Join(", ", (object[])replicas) + ") can be bound here; each is in use or not an address of this machine.");
            }
        }
        _hostsReplica = Service != null;

        _transport = new UdpTransport(new IPEndPoint(options.BindAddress, options.Port), (s, p, slab) => Post(false, s, p, slab), dataTransportOptions);
        Node = new ProcessNode(new NodeId(_transport.LocalEndpoint, incarnation), replicaEndpoints, processProtocol, Now);
        _thread = new Thread(Run) { IsBackground = true, Name = "isis-event-loop" };
    }

    /// <summary>
    /// Brings up this process's part of the embedded service: a replica on a socket of its own, and
    /// the machine's well-known port if it is free. The process founds the service (its replica the
    /// only one, leading at once) only if it holds the well-known port, no replica it knows of may
    /// still be alive, and the seeds do not name another machine as the founder; otherwise its
    /// replica waits, dormant, until the service adds it, and the process asks the well-known port,
    /// the seeds and the replicas known from before where the service is.
    /// </summary>
    private (ProcessNode, MembershipReplica, UdpTransport, bool) StartEmbedded(IsisOptions options, ProtocolOptions protocol, ProtocolOptions processProtocol, uint incarnation)
    {
        var self = new NodeId(_transport.LocalEndpoint, incarnation);
        UdpTransport replicaTransport = new(new IPEndPoint(options.BindAddress, 0), (s, p, slab) => Post(true, s, p, slab), _transportOptions);
        var replica = new NodeId(replicaTransport.LocalEndpoint, incarnation);
        IPEndPoint wellKnown = options.WellKnownEndPoint;
        _directoryTransport = TryBind(wellKnown, forService: false);

        (long _, IPEndPoint[] known) = ServiceDirectoryFile.Read(options.EmbeddedDirectoryPath);
        IPEndPoint[] seeds = [.. options.MembershipSeeds];
        // With seeds, the machine named first founds; the others always look for a running service.
        bool seedsAllow = seeds.Length == 0 || (seeds[0].Port == wellKnown.Port && IsLocal(seeds[0].Address));
        bool founds = _directoryTransport != null && seedsAllow && !known.Any(ServiceDirectoryFile.MayBeAlive);
        ulong[] ask = new[] { wellKnown }.Concat(seeds).Concat(known).Select(EndpointConversions.FromIPEndPoint)
            .Where(e => e != self.Endpoint).Distinct().ToArray();
        if (founds)
        {
            ServiceDirectoryFile.Write(options.EmbeddedDirectoryPath, 0, [replicaTransport.LocalIPEndPoint], force: true);
            _directoryVersionWritten = 0;
            // Should the service move while this process misses a configuration, it asks the
            // well-known port and the seeds again, like any newcomer.
            return (new ProcessNode(self, [replica.Endpoint], processProtocol, Now, replica, directory: [.. ask.Where(e => e != replica.Endpoint)]),
                new MembershipReplica(replica, [replica], protocol, Now, host: self), replicaTransport, true);
        }
        return (new ProcessNode(self, ask, processProtocol, Now, replica, discover: true),
            new MembershipReplica(replica, [], protocol, Now, host: self), replicaTransport, false);
    }

    private bool IsLocal(IPAddress address) =>
        IPAddress.IsLoopback(address) || address.Equals(_options.BindAddress) || address.Equals(_options.MembershipServiceAddress);

    /// <summary>True if this process founded the embedded service when it started.</summary>
    public bool Founded { get; }

    public ProcessNode Node { get; }

    /// <summary>The embedded membership service, if this process hosts it.</summary>
    public MembershipReplica? Service { get; private set; }

    /// <summary>True while this process hosts a voting membership replica (published after each batch for other threads).</summary>
    public bool HostsReplica => _hostsReplica;

    /// <summary>True if the membership service is embedded in the member processes and moves between them.</summary>
    public bool EmbeddedService => _options.EmbeddedService;

    /// <summary>True if this process holds the machine's well-known membership port.</summary>
    public bool HoldsWellKnownPort => _directoryTransport != null;

    /// <summary>Where the hosted membership replica listens, if this process hosts one.</summary>
    public IPEndPoint? ServiceEndPoint => _serviceTransport?.LocalIPEndPoint;

    public UdpTransport Transport => _transport;

    public long Now => (long)_clock.Elapsed.TotalMicroseconds;

    public bool IsLoopThread => Thread.CurrentThread == _thread;

    /// <summary>Binds a socket whose packets go to the replica (<paramref name="forService"/>) or to the process; null if the address is taken or not this machine's.</summary>
    private UdpTransport? TryBind(IPEndPoint endpoint, bool forService)
    {
        try
        {
            return new UdpTransport(endpoint, (s, p, slab) => Post(forService, s, p, slab), _transportOptions);
        }
        catch (SocketException e) when (e.SocketErrorCode is SocketError.AddressAlreadyInUse or SocketError.AddressNotAvailable)
        {
            return null; // another process holds it, or it lives on another machine
        }
    }

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
                if (item.ForService) Service?.Receive(item.Source, item.Packet.Span, now);
                else Node.Receive(item.Source, item.Packet.Span, now);
                item.Slab?.Release(); // the core took a span: it copied whatever it keeps
            }
            now = Now;
            if (now >= nextTick)
            {
                Service?.Tick(now);
                Node.Tick(now);
                if (_options.EmbeddedService) MaintainWellKnownPort(now);
                nextTick = now + TickInterval;
            }
            Drain();
        }
    }

    /// <summary>Sends what the nodes produced and hands their events on, then clears their outboxes.</summary>
    public void Drain()
    {
        if (Service is { } service && _serviceTransport != null)
        {
            if (service.Outbox.ReplicaRecords.Count > 0 && _serviceLog != null)
            {
                foreach (byte[] record in service.Outbox.ReplicaRecords) _serviceLog.Append(record);
                _serviceLog.Sync(); // before any vote or acknowledgement leaves
            }
            foreach (OutboundPacket p in service.Outbox.Packets) _serviceTransport.Enqueue(p.Destination, p.Bytes.Span);
            _serviceTransport.Flush();
            foreach (NodeEvent e in service.Outbox.Events) _sink.OnServiceEvent(e);
            service.Outbox.Clear();
        }
        // The contract's order: durable first, then packets, then the application.
        if (Node.Outbox.HistoryWrites.Count > 0 && !TryMakeDurable()) return;
        foreach (OutboundPacket p in Node.Outbox.Packets) _transport.Enqueue(p.Destination, p.Bytes.Span);
        _transport.Flush();
        foreach (NodeEvent e in Node.Outbox.Events) _sink.OnNodeEvent(e);
        Node.Outbox.Clear();
        if (_options.EmbeddedService) AfterEmbeddedBatch();
        _sink.AfterBatch();
    }

    // ---------------------------------------------------------------- the embedded service

    /// <summary>
    /// The well-known port outlives the process that bound it first: while this process runs and
    /// does not hold it, it tries to bind it once a heartbeat period, so some live process answers
    /// newcomers within a period of the holder's exit.
    /// </summary>
    private void MaintainWellKnownPort(long now)
    {
        if (_directoryTransport != null || Node.IsShutDown || now < _nextDirectoryAttemptAt) return;
        _nextDirectoryAttemptAt = now + (long)_options.HeartbeatInterval.TotalMicroseconds;
        _directoryTransport = TryBind(_options.WellKnownEndPoint, forService: false);
    }

    /// <summary>
    /// Records a configuration this process learned in the machine's directory file (if it is newer
    /// than what this process wrote), and stops the replica with the process: an expelled or
    /// isolated incarnation must not vote or answer for the service any longer.
    /// </summary>
    private void AfterEmbeddedBatch()
    {
        if (Node.IsShutDown)
        {
            StopEmbeddedReplica();
            return;
        }
        // Hosting means: the configuration this process learned lists its replica (a replica that
        // was removed may never hear of its own removal, so its own log is not the judge).
        _hostsReplica = Service != null && Node.ServiceReplicas.Contains(Service.Endpoint);
        if (Node.Discovering || _directoryVersionWritten >= Node.ConfigurationVersion) return;
        _directoryVersionWritten = Node.ConfigurationVersion;
        string? problem = ServiceDirectoryFile.Write(_options.EmbeddedDirectoryPath, Node.ConfigurationVersion,
            Node.ServiceReplicas.Select(EndpointConversions.ToIPEndPoint), force: false);
        if (problem != null) _sink.ReportProblem($"the membership service's replicas could not be recorded in {_options.EmbeddedDirectoryPath} ({problem}); newcomers still find them through port {_options.MembershipServicePort}");
    }

    private void StopEmbeddedReplica()
    {
        _hostsReplica = false;
        if (Service == null) return;
        Service = null;
        _serviceTransport?.Dispose();
        _serviceTransport = null;
        _directoryTransport?.Dispose();
        _directoryTransport = null;
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
        _hostsReplica = false;
        _wake.Set();
        if (_thread.IsAlive && !IsLoopThread) _thread.Join(TimeSpan.FromSeconds(5));
        _transport.Dispose();
        _serviceTransport?.Dispose();
        _directoryTransport?.Dispose();
        _serviceLog?.Dispose();
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
}

