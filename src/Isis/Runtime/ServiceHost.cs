using System.Net;
using System.Net.Sockets;
using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;
using Isis.Transport;

namespace Isis.Runtime;

/// <summary>
/// This process's part of the membership service, driven by the event loop on its thread: the
/// replica it runs (if any) and its socket; for a replica of a fixed, configured service, its
/// durable log; for the embedded service, the machine's well-known port and replica file.
/// </summary>
/// <remarks>
/// The two ways are built by <see cref="StartFixed"/> and <see cref="StartEmbedded"/>, which also
/// build the process node, because the process must know where the service is from its start.
/// </remarks>
internal sealed class ServiceHost : IDisposable
{
    private readonly IsisOptions _options;
    private readonly UdpTransportOptions _transportOptions;
    private readonly ReceivedPacketCallback _toProcess;
    private IPacketTransport? _replicaTransport;
    private readonly DurableRecordFile? _replicaLog;
    private IPacketTransport? _wellKnownPort;
    private long _nextPortAttemptAt;
    private long _versionOnFile = -1;
    private volatile bool _hostsReplica;
    private volatile bool _founded;
    private ProtocolOptions? _protocol; // embedded: to found a service later
    private NodeId _host; // embedded: this process
    private bool _seedsAllow; // embedded: the seeds let this machine found

    private ServiceHost(IsisOptions options, UdpTransportOptions transportOptions, ReceivedPacketCallback toProcess,
        MembershipReplica? replica, IPacketTransport? replicaTransport, DurableRecordFile? replicaLog)
    {
        _options = options;
        _transportOptions = transportOptions;
        _toProcess = toProcess;
        Replica = replica;
        _replicaTransport = replicaTransport;
        _replicaLog = replicaLog;
        _hostsReplica = replica != null;
    }

    /// <summary>The replica this process runs: of a fixed service, if it bound a listed address; of the embedded one, always (dormant until the service adds it); null once stopped.</summary>
    public MembershipReplica? Replica { get; private set; }

    /// <summary>True for the embedded service, which moves between the member processes.</summary>
    public bool Embedded => _options.EmbeddedService;

    /// <summary>True if this process founded the embedded service: when it started, or later (see <see cref="FoundIfNoServiceAnswers"/>).</summary>
    public bool Founded => _founded;

    /// <summary>
    /// Why a process that held the well-known port at start did not found the service (the
    /// replica file named replicas whose ports are in use), with what the operator can do if
    /// they are not replicas after all; null if it founded, or did not hold the port.
    /// </summary>
    public string? FoundingDeferredBecause { get; private set; }

    /// <summary>If this process founded the service after its start: how long it had looked for one (microseconds); 0 otherwise.</summary>
    public long FoundedLaterAfter { get; private set; }

    /// <summary>True while this process hosts a voting replica (published for other threads after each batch).</summary>
    public bool HostsReplica => _hostsReplica;

    /// <summary>True if this process holds the machine's well-known membership port.</summary>
    public bool HoldsWellKnownPort => _wellKnownPort != null;

    /// <summary>Where this process's replica listens, if it runs one.</summary>
    public IPEndPoint? EndPoint => _replicaTransport?.LocalIPEndPoint;

    // ---------------------------------------------------------------- the two ways to start

    /// <summary>
    /// A fixed service at the configured addresses (or the single one at the well-known port):
    /// this process runs the replica of the first listed address it can bind, unless it is a
    /// client, and restores that replica's log (a single replica's too). The process's
    /// data socket (bindProcess, which returns the process's identity) is bound after the replica
    /// addresses, so a socket on a free port can never take one of them.
    /// </summary>
    public static (ServiceHost, ProcessNode) StartFixed(IsisOptions options, UdpTransportOptions transportOptions, Func<NodeId> bindProcess,
        ProtocolOptions protocol, ProtocolOptions processProtocol, long now, ReceivedPacketCallback toReplica, ReceivedPacketCallback toProcess)
    {
        IPEndPoint[] replicas = options.ServiceReplicaEndPoints;
        NodeId[] founding = replicas.Select(r => new NodeId(EndpointConversions.FromIPEndPoint(r), 1)).ToArray();
        IPacketTransport? transport = null;
        DurableRecordFile? log = null;
        MembershipReplica? replica = null;
        if (options.MembershipService != MembershipServiceMode.Client)
        {
            for (int i = 0; i < replicas.Length && transport == null; i++)
            {
                transport = TryBind(options, replicas[i], toReplica, transportOptions);
                if (transport == null) continue;
                // The replica needs its log back after a restart: it must never contradict a vote
                // or an entry it acknowledged before it stopped, and a single replica, which is
                // the whole service, must not forget the groups and views it decided.
                List<byte[]> restored;
                try
                {
                    (log, restored) = OpenReplicaLog(options.ReplicaLogPath(replicas[i]), options.StoreFiles);
                }
                catch
                {
                    transport.Dispose();
                    throw;
                }
                replica = new MembershipReplica(new NodeId(transport.LocalEndpoint, 1), founding, protocol, now, restored);
            }
            if (transport == null && options.MembershipService == MembershipServiceMode.Host)
            {
                throw new InvalidOperationException("MembershipServiceMode.Host: none of the membership replica addresses (" +
                    string.Join(", ", (object[])replicas) + ") can be bound here; each is in use or not an address of this machine.");
            }
        }
        var host = new ServiceHost(options, transportOptions, toProcess, replica, transport, log);
        try
        {
            return (host, new ProcessNode(bindProcess(), founding.Select(r => r.Endpoint).ToArray(), processProtocol, now));
        }
        catch
        {
            host.Dispose();
            throw;
        }
    }

    /// <summary>
    /// This process's part of the embedded service: a replica on a socket of its own, and the
    /// machine's well-known port if it is free. The process founds the service (its replica the
    /// only one, leading at once) only if it holds the well-known port, no replica on the machine's
    /// file may still be alive, and the seeds do not name another machine as the founder; otherwise
    /// its replica waits, dormant, until the service adds it, and the process asks the well-known
    /// port, the seeds and the replicas on file where the service is. The well-known port is bound
    /// before the process's data socket (bindProcess), which must not take it.
    /// </summary>
    public static (ServiceHost, ProcessNode) StartEmbedded(IsisOptions options, UdpTransportOptions transportOptions, Func<NodeId> bindProcess,
        ProtocolOptions protocol, ProtocolOptions processProtocol, long now, ReceivedPacketCallback toReplica, ReceivedPacketCallback toProcess)
    {
        IPEndPoint wellKnown = options.WellKnownEndPoint;
        IPacketTransport? wellKnownPort = TryBind(options, wellKnown, toProcess, transportOptions);
        IPacketTransport? replicaTransport = null;
        try
        {
            NodeId self = bindProcess();
            replicaTransport = TransportFactory.WithCallback(options.Transport, new IPEndPoint(options.BindAddress, 0), toReplica, transportOptions);
            var replicaId = new NodeId(replicaTransport.LocalEndpoint, self.Incarnation);

            (long _, IPEndPoint[] onFile) = ServiceDirectoryFile.Read(options.EmbeddedDirectoryPath);
            IPEndPoint[] seeds = [.. options.MembershipSeeds];
            // With seeds, the machine named first founds; the others always look for a running service.
            bool seedsAllow = seeds.Length == 0 || (seeds[0].Port == wellKnown.Port && IsLocal(seeds[0].Address, options));
            // A port this process holds (the well-known one, its data and replica sockets) is in use
            // but is no other process's replica: a stale file may name one, its port reused since.
            IPEndPoint[] mayBeAlive = wellKnownPort != null && seedsAllow
                ? onFile.Where(r => !r.Equals(wellKnown) && !r.Equals(replicaTransport.LocalIPEndPoint)
                    && EndpointConversions.FromIPEndPoint(r) != self.Endpoint && ServiceDirectoryFile.MayBeAlive(r)).ToArray()
                : [];
            // Having just bound the well-known port, nobody of this machine ran to answer it.
            bool founds = EmbeddedFounding.MayFound(null, now, atStart: true, wellKnownPort != null, seedsAllow, mayBeAlive.Length > 0, protocol.Mutations);
            ulong[] ask = new[] { wellKnown }.Concat(seeds).Concat(onFile).Select(EndpointConversions.FromIPEndPoint)
                .Where(e => e != self.Endpoint && e != replicaId.Endpoint).Distinct().ToArray();
            ProcessNode node;
            MembershipReplica replica;
            if (founds)
            {
                ServiceDirectoryFile.Write(options.EmbeddedDirectoryPath, 0, [replicaTransport.LocalIPEndPoint], force: true);
                // Should the service move while this process misses a configuration, it asks the
                // well-known port and the seeds again, like any newcomer.
                node = new ProcessNode(self, [replicaId.Endpoint], processProtocol, now, replicaId, directory: ask);
                replica = new MembershipReplica(replicaId, [replicaId], protocol, now, host: self);
            }
            else
            {
                node = new ProcessNode(self, ask, processProtocol, now, replicaId, discover: true);
                replica = new MembershipReplica(replicaId, [], protocol, now, host: self);
            }
            var host = new ServiceHost(options, transportOptions, toProcess, replica, replicaTransport, replicaLog: null)
            {
                _founded = founds,
                _protocol = protocol,
                _host = self,
                _seedsAllow = seedsAllow,
                // A process that stopped running without its replica file being rewritten leaves
                // ports on record that other programs may take later: say which, and how to start afresh.
                FoundingDeferredBecause = DeferredBecause(options, mayBeAlive),
                _wellKnownPort = wellKnownPort,
                _versionOnFile = founds ? 0 : -1,
                _hostsReplica = founds,
            };
            return (host, node);
        }
        catch
        {
            replicaTransport?.Dispose();
            wellKnownPort?.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Opens a replica's log (creating it and its directory) and returns the intact records it
    /// holds, for the replica to restart from; a tail torn by a crash is cut off first, so new
    /// records follow the intact ones.
    /// </summary>
    internal static (DurableRecordFile Log, List<byte[]> Records) OpenReplicaLog(string path, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        try
        {
            files.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw DurableRecordFile.Failed(path, "created (its directory cannot be made)", e);
        }
        DurableRecordFile.Contents contents = DurableRecordFile.Read(path, files);
        return (new DurableRecordFile(path, truncateTo: contents.IntactLength, files), contents.Records);
    }

    /// <summary>
    /// Why a process that holds the well-known port does not found the service, with what the
    /// operator can do if the ports on file are not replicas after all; null if nothing on file runs.
    /// </summary>
    private static string? DeferredBecause(IsisOptions options, IPEndPoint[] mayBeAlive) => mayBeAlive.Length == 0 ? null :
        $"This process held the well-known port but did not found a service: the replica file {options.EmbeddedDirectoryPath} " +
        $"names replicas whose ports are in use ({string.Join(", ", (object[])mayBeAlive)}), so a service may run there, and none answered. " +
        "If no Isis process of this system runs on this machine, other programs hold those ports now: delete that file and start again.";

    private static bool IsLocal(IPAddress address, IsisOptions options) =>
        IPAddress.IsLoopback(address) || address.Equals(options.BindAddress) || address.Equals(options.MembershipServiceAddress);

    /// <summary>Binds a socket; null if the address is taken or not this machine's.</summary>
    private static IPacketTransport? TryBind(IsisOptions options, IPEndPoint endpoint, ReceivedPacketCallback onPacket, UdpTransportOptions transportOptions)
    {
        try
        {
            return TransportFactory.WithCallback(options.Transport, endpoint, onPacket, transportOptions);
        }
        catch (SocketException e) when (e.SocketErrorCode is SocketError.AddressAlreadyInUse or SocketError.AddressNotAvailable)
        {
            return null; // another process holds it, or it lives on another machine
        }
    }

    // ---------------------------------------------------------------- driven by the event loop

    public void Receive(ulong source, ReadOnlySpan<byte> packet, long now) => Replica?.Receive(source, packet, now);

    public void Tick(long now, ProcessNode node)
    {
        Replica?.Tick(now);
        if (!Embedded) return;
        MaintainWellKnownPort(now);
        FoundIfNoServiceAnswers(node, now);
    }

    /// <summary>
    /// The founding rule (<see cref="EmbeddedFounding"/>) after the start: a process that took the
    /// well-known port over from one that stopped, and found no service after asking everything it
    /// knows for <see cref="ProcessNode.FoundingWait"/>, founds one, unless a replica on the
    /// machine's file (read again now) may still run. Without this, restarts that overlap (each
    /// new process starting while an older one, still looking, held the port) would never found.
    /// </summary>
    private void FoundIfNoServiceAnswers(ProcessNode node, long now)
    {
        if (_wellKnownPort == null || Replica is not { } dormant || _protocol == null || now < node.MayFoundServiceAt) return;
        // A replica that votes in some service (as far as it knows) stays that service's. One that
        // only followed a service as a learner (a service that died before adding it) is dropped:
        // the service on the machine's file is checked below.
        if (dormant.IsVoter) return;
        (long _, IPEndPoint[] onFile) = ServiceDirectoryFile.Read(_options.EmbeddedDirectoryPath);
        IPEndPoint ownReplica = _replicaTransport!.LocalIPEndPoint;
        IPEndPoint[] mayBeAlive = onFile.Where(r => !r.Equals(ownReplica) && !r.Equals(_options.WellKnownEndPoint)
            && EndpointConversions.FromIPEndPoint(r) != node.Self.Endpoint && ServiceDirectoryFile.MayBeAlive(r)).ToArray();
        if (_seedsAllow) FoundingDeferredBecause = DeferredBecause(_options, mayBeAlive);
        if (!EmbeddedFounding.MayFound(node, now, atStart: false, holdsWellKnownPort: true, _seedsAllow, mayBeAlive.Length > 0, _protocol.Mutations)) return;
        FoundedLaterAfter = Math.Max(1, now - node.MayFoundServiceAt + node.FoundingWait);
        Replica = new MembershipReplica(dormant.Self, [dormant.Self], _protocol, now, host: _host);
        ServiceDirectoryFile.Write(_options.EmbeddedDirectoryPath, 0, [ownReplica], force: true);
        _versionOnFile = 0;
        _hostsReplica = true;
        _founded = true;
        node.FoundService(now);
    }

    /// <summary>When <see cref="Tick"/> next has something to do: the replica's next timer, or the next attempt at the well-known port.</summary>
    public long NextDeadline
    {
        get
        {
            if (Replica is not { } replica) return long.MaxValue;
            long d = replica.NextDeadline;
            if (Embedded && _wellKnownPort == null) d = Math.Min(d, _nextPortAttemptAt);
            return d;
        }
    }

    /// <summary>
    /// The well-known port outlives the process that bound it first: while this process runs and
    /// does not hold it, it tries to bind it once a heartbeat period, so some live process answers
    /// newcomers within a period of the holder's exit.
    /// </summary>
    private void MaintainWellKnownPort(long now)
    {
        if (_wellKnownPort != null || Replica == null || now < _nextPortAttemptAt) return;
        _nextPortAttemptAt = now + (long)_options.HeartbeatInterval.TotalMicroseconds;
        _wellKnownPort = TryBind(_options, _options.WellKnownEndPoint, _toProcess, _transportOptions);
    }

    /// <summary>
    /// Makes the replica's log records durable (appended, or a compacted log written in their
    /// place), before any of its votes or acknowledgements leaves (see <see cref="NodeStep"/>).
    /// </summary>
    /// <returns>
    /// Null; or, if the log could not be written, why: the replica is then stopped (its log,
    /// poisoned now, cannot take these records again without writing them twice), the service goes
    /// on with the others or waits for this one's restart, and the event loop stops the process.
    /// </returns>
    public string? MakeDurable(ReadOnlySpan<byte[]> records, bool replaceLog)
    {
        if (_replicaLog == null || records.IsEmpty) return null;
        try
        {
            if (replaceLog) _replicaLog.Rewrite(records.ToArray()); // a compacted log, rare
            else foreach (byte[] record in records) _replicaLog.Append(record);
            _replicaLog.Sync();
            return null;
        }
        catch (IOException e)
        {
            StopReplica();
            return $"the membership replica's log could not be written: {e.Message}; the replica stops rather than vote or acknowledge what is not on disk";
        }
    }

    /// <summary>Queues a packet of the replica on its socket.</summary>
    public void Enqueue(in OutboundPacket packet) => _replicaTransport?.Enqueue(packet.Destination, packet.Bytes.Span);

    /// <summary>Sends the replica's queued packets.</summary>
    public void FlushPackets() => _replicaTransport?.Flush();

    /// <summary>
    /// After the process's step (embedded service): records a configuration the process learned
    /// in the machine's file (if newer than what this process wrote), and stops the replica with
    /// the process: an expelled or isolated incarnation must not vote or answer for the service.
    /// </summary>
    public void AfterProcessStep(ProcessNode node, IEventSink sink)
    {
        if (!Embedded) return;
        if (node.IsShutDown)
        {
            StopReplica();
            return;
        }
        // Hosting means: the configuration this process learned lists its replica (a replica that
        // was removed may never hear of its own removal, so its own log is not the judge).
        _hostsReplica = Replica != null && node.ServiceReplicas.Contains(Replica.Endpoint);
        if (node.Discovering || _versionOnFile >= node.ConfigurationVersion) return;
        _versionOnFile = node.ConfigurationVersion;
        string? problem = ServiceDirectoryFile.Write(_options.EmbeddedDirectoryPath, node.ConfigurationVersion,
            node.ServiceReplicas.Select(EndpointConversions.ToIPEndPoint), force: false);
        if (problem != null)
        {
            sink.ReportProblem($"the membership service's replicas could not be recorded in {_options.EmbeddedDirectoryPath} ({problem}); " +
                $"newcomers still find them through port {_options.MembershipServicePort}");
        }
    }

    private void StopReplica()
    {
        _hostsReplica = false;
        if (Replica == null) return;
        Replica = null;
        _replicaTransport?.Dispose();
        _replicaTransport = null;
        _wellKnownPort?.Dispose();
        _wellKnownPort = null;
    }

    public void Dispose()
    {
        _hostsReplica = false;
        _replicaTransport?.Dispose();
        _wellKnownPort?.Dispose();
        _replicaLog?.Dispose();
    }
}
