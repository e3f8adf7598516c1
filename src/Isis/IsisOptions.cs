using System.Net;
using Microsoft.Extensions.Logging;

namespace Isis;

/// <summary>Whether this process runs a replica of the membership service.</summary>
public enum MembershipServiceMode
{
    /// <summary>
    /// The default. With no <see cref="IsisOptions.MembershipReplicas"/> the service is embedded in
    /// the member processes and replicates itself: the first process founds it, it grows to
    /// <see cref="IsisOptions.EmbeddedServiceReplicas"/> replicas on distinct processes, and a
    /// replica whose process leaves or fails moves to another live process, so no process is
    /// essential. With <see cref="IsisOptions.MembershipReplicas"/>, the first processes to bind each
    /// listed address host those replicas and the others only use the service.
    /// </summary>
    Auto,

    /// <summary>
    /// Always host a replica at a fixed address: the first listed address this machine can bind
    /// (fails to start if none is free); with no list, a single replica at
    /// <see cref="IsisOptions.MembershipServiceAddress"/>:<see cref="IsisOptions.MembershipServicePort"/>
    /// that does not move (the whole system depends on this process).
    /// </summary>
    Host,

    /// <summary>Never host a replica; use the fixed service at <see cref="IsisOptions.MembershipReplicas"/> (or <see cref="IsisOptions.MembershipServiceAddress"/>:<see cref="IsisOptions.MembershipServicePort"/>).</summary>
    Client,
}

/// <summary>
/// Settings of one <see cref="IsisRuntime"/>. The defaults need no configuration: processes on
/// one machine find each other on loopback, and the membership service runs replicated inside
/// them (see <see cref="MembershipServiceMode.Auto"/>).
/// </summary>
public sealed class IsisOptions
{
    /// <summary>Address this process binds its data socket to. Defaults to 127.0.0.1.</summary>
    public IPAddress BindAddress { get; set; } = IPAddress.Loopback;

    /// <summary>UDP port for this process's traffic; 0 picks a free one. Defaults to 0.</summary>
    public int Port { get; set; }

    /// <summary>
    /// The machine's well-known membership address. Defaults to 127.0.0.1. With the embedded
    /// service, one live process holds it and tells newcomers where the replicas are; with
    /// <see cref="MembershipServiceMode.Host"/> or <see cref="MembershipServiceMode.Client"/> and no
    /// <see cref="MembershipReplicas"/>, the single fixed replica listens there.
    /// </summary>
    public IPAddress MembershipServiceAddress { get; set; } = IPAddress.Loopback;

    /// <summary>UDP port of <see cref="MembershipServiceAddress"/>. Defaults to 7345.</summary>
    public int MembershipServicePort { get; set; } = 7345;

    /// <summary>
    /// With the embedded service: how many replicas it keeps, on distinct member processes, once
    /// enough processes run (1, 3 or 5). Defaults to 3, which rides out the loss of any one process
    /// at a time; 5 rides out two. The same number at every process.
    /// </summary>
    public int EmbeddedServiceReplicas { get; set; } = 3;

    /// <summary>
    /// With the embedded service across machines: where to ask for it besides this machine's
    /// well-known port, the well-known address (<see cref="MembershipServicePort"/>) or data address
    /// of processes on other machines. Any live process answers with the current replicas. A
    /// process founds a new service only if it holds its machine's well-known port, no replica it
    /// knows of may still be alive, and it is not told to wait for seeds: with seeds, only the
    /// machine whose well-known address is the first seed may found it. Empty (the default): one machine.
    /// </summary>
    public IList<IPEndPoint> MembershipSeeds { get; set; } = new List<IPEndPoint>();

    /// <summary>
    /// The membership service's replicas, the same list in the same order at every process of the
    /// system: 3 or 5 in production, on different machines. The service decides membership while a
    /// majority of them run and can reach each other; processes that lose the majority shut down.
    /// Empty (the default): with <see cref="MembershipServiceMode.Auto"/>, the embedded service that
    /// runs in the member processes and moves between them; with <see cref="MembershipServiceMode.Host"/>
    /// or <see cref="MembershipServiceMode.Client"/>, one fixed replica at
    /// <see cref="MembershipServiceAddress"/>:<see cref="MembershipServicePort"/>.
    /// </summary>
    public IList<IPEndPoint> MembershipReplicas { get; set; } = new List<IPEndPoint>();

    /// <summary>
    /// Where a membership replica of a fixed service (<see cref="MembershipReplicas"/>, or the
    /// single fixed replica) hosted by this process keeps its term, vote and log, which it writes
    /// and fsyncs before answering, so that after a restart it never contradicts what it agreed to
    /// and still knows the groups it decided; with the embedded service, where the processes of
    /// this machine record its current replicas for newcomers (a hint only). Defaults to
    /// <c>isis/membership</c> in the account's local application data folder
    /// (<see cref="Environment.SpecialFolder.LocalApplicationData"/>: <c>~/.local/share</c> on Linux,
    /// <c>%LOCALAPPDATA%</c> on Windows) for replica logs, and to the folder <c>isis-membership</c>
    /// under the system's temporary folder for the embedded service's replica file. Set a folder
    /// of the service's own that survives reboots in production (docs/operations.md).
    /// </summary>
    public string? MembershipDataDirectory { get; set; }

    /// <summary>Whether this process hosts a membership replica. Defaults to <see cref="MembershipServiceMode.Auto"/>.</summary>
    public MembershipServiceMode MembershipService { get; set; } = MembershipServiceMode.Auto;

    /// <summary>Heartbeat period towards the membership service. Defaults to 100 ms.</summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>
    /// Silent heartbeat periods in a row before the membership service expels a process. Defaults
    /// to 5: a crashed member is out of every view after about 0.5-0.7 s.
    /// </summary>
    public int SuspicionCount { get; set; } = 5;

    /// <summary>
    /// How long a process goes without an answer from the membership service before it decides it
    /// is cut off: it then asks once more, waits two heartbeat periods, wedges every group and shuts
    /// down (reason "isolated"). Null (the default) means twice the expulsion time
    /// (2 × <see cref="SuspicionCount"/> × <see cref="HeartbeatInterval"/>, 1 s by default). It must
    /// exceed the expulsion time, so that a process that was merely slow learns it was expelled.
    /// </summary>
    public TimeSpan? IsolationTimeout { get; set; }

    /// <summary>
    /// With the embedded service: how long a process that finds no service at start (it may not
    /// found one) keeps asking the well-known port, the seeds and the replicas on file before it
    /// shuts down saying where it looked. A newcomer has no membership to guard, so it waits out a
    /// first process that is still starting, a busy machine, or (with seeds) a first machine that
    /// comes up later. Never shorter than <see cref="IsolationTimeout"/>. Defaults to 10 s.
    /// </summary>
    public TimeSpan DiscoveryTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>Most messages a member may have sent that are not yet stable; Send blocks beyond it. Defaults to 20,000.</summary>
    public int MaxUnstableMessages { get; set; } = 20_000;

    /// <summary>
    /// How this runtime's packets travel: <see cref="IsisTransport.Udp"/> (the default) or
    /// <see cref="IsisTransport.Tcp"/>, the overlay for networks that block UDP. Every process of a
    /// system must use the same one: a process and the membership service it talks to, and the
    /// members of a group, speak it to each other.
    /// </summary>
    public IsisTransport Transport { get; set; } = IsisTransport.Udp;

    /// <summary>
    /// IP multicast for groups' data, where the network carries it: null (the default) sends each
    /// multicast as one unicast datagram per member. Set, the membership service gives every group
    /// of <see cref="MulticastOptions.MinMembers"/> or more members an address from
    /// <see cref="MulticastOptions.AddressRange"/>, and a member's Send leaves as one datagram.
    /// Needs <see cref="IsisTransport.Udp"/>, and the same settings at every process of the system.
    /// </summary>
    public MulticastOptions? Multicast { get; set; }

    /// <summary>
    /// A 256-bit key (32 bytes) shared by every process and membership replica of the system, or
    /// null (the default). Set, every packet no group key protects (heartbeats, joins, views, the
    /// membership service's own traffic) is encrypted and authenticated with AES-256-GCM, and
    /// packets that do not open with it are dropped and counted: a process without it cannot talk
    /// to the service, join a group, or forge a view. In configuration, a base64 string.
    /// </summary>
    public byte[]? SystemKey { get; set; }

    /// <summary>
    /// System keys this process accepts besides <see cref="SystemKey"/>: packets sealed with them
    /// open, but it seals only with <see cref="SystemKey"/>. This rotates the system key without
    /// stopping the system, in three rolling restarts, each finished at every process and replica
    /// before the next begins: (1) add the new key here; (2) make the new key the
    /// <see cref="SystemKey"/> and list the old one here; (3) remove the old one. At most 4 keys,
    /// 32 bytes each; needs a <see cref="SystemKey"/>. In configuration, base64 strings.
    /// </summary>
    public IList<byte[]> AcceptedSystemKeys { get; set; } = new List<byte[]>();

    /// <summary>Largest UDP datagram the transport builds; small messages are batched up to it. Defaults to 16 KiB.</summary>
    public int MaxDatagramSize { get; set; } = 16 * 1024;

    /// <summary>Largest message (encoded arguments) Send accepts. Defaults to 16 MiB.</summary>
    public int MaxMessageSize { get; set; } = 16 * 1024 * 1024;

    /// <summary>
    /// Where the runtime logs. Null (the default): warnings and errors (undeliverable messages,
    /// handler exceptions, hostile input dropped, shutdowns) go to standard error, so that nothing
    /// that goes wrong is silent; set a factory (for example the host's) to route them elsewhere.
    /// </summary>
    public ILoggerFactory? LoggerFactory { get; set; }

    /// <summary>
    /// Where the runtime's metrics (meter "Isis": messages sent, delivered and undeliverable, packets
    /// dropped by reason, views, unstable messages, Flush / SafeSend / query durations) are created;
    /// a host passes its own. Null: a meter of its own, which any <see cref="System.Diagnostics.Metrics.MeterListener"/> still sees.
    /// </summary>
    public System.Diagnostics.Metrics.IMeterFactory? MeterFactory { get; set; }

    /// <summary>How long a hosted membership replica holds join- and leave-only view changes to batch them (tests only; the protocol default when null).</summary>
    internal TimeSpan? MembershipBatchWindow { get; set; }

    /// <summary>The group size from which the large-group rules apply (tests only; the protocol default, 16, when null). The same at every process.</summary>
    internal int? LargeGroupFromMembers { get; set; }

    /// <summary>Children per member in a large group's stability tree (tests only; the protocol default, 8, when null). The same at every process.</summary>
    internal int? StabilityTreeFanout { get; set; }

    /// <summary>Deliberate protocol bugs (tests only: a runtime test shows it can fail by running with one).</summary>
    internal Core.Node.ProtocolMutations Mutations { get; set; }

    /// <summary>Fault injection on this runtime's outgoing datagrams (tests only; off when null).</summary>
    internal Transport.TransportFaultOptions? TransportFaults { get; set; }

    /// <summary>The file layer under the SafeSend history logs and the membership replica's log (tests: a simulated disk; the real file system when null).</summary>
    internal Runtime.IDurableFiles? StoreFiles { get; set; }

    /// <summary>Where the runtime writes its warnings and errors when no <see cref="LoggerFactory"/> is set (tests; standard error when null).</summary>
    internal TextWriter? StandardError { get; set; }

    /// <summary>True for the embedded, self-replicating service: <see cref="MembershipServiceMode.Auto"/> with no replica list.</summary>
    internal bool EmbeddedService => MembershipService == MembershipServiceMode.Auto && MembershipReplicas.Count == 0;

    /// <summary>The machine's well-known membership endpoint.</summary>
    internal IPEndPoint WellKnownEndPoint => new(MembershipServiceAddress, MembershipServicePort);

    /// <summary>
    /// The file in which the processes of this machine keep the embedded service's latest replicas,
    /// so a newcomer finds them even while nobody holds the well-known port. Keyed by that port:
    /// separate systems on one machine (tests) keep separate files.
    /// </summary>
    internal string EmbeddedDirectoryPath =>
        System.IO.Path.Combine(MembershipDataDirectory ?? System.IO.Path.Combine(System.IO.Path.GetTempPath(), "isis-membership"),
            $"embedded-{MembershipServiceAddress}-{MembershipServicePort}.replicas");

    /// <summary>
    /// The folder of this machine's registry of durable groups (<see cref="Runtime.DurableGroupRegistry"/>):
    /// in <see cref="MembershipDataDirectory"/>, or the account's local application data folder
    /// (it must survive reboots, so never the temporary folder); keyed by the membership service,
    /// so separate systems on one machine (tests) keep separate registries.
    /// </summary>
    internal string DurableGroupRegistryFolder
    {
        get
        {
            IPEndPoint service = EmbeddedService ? WellKnownEndPoint : ServiceReplicaEndPoints[0];
            return System.IO.Path.Combine(MembershipDataDirectory ?? DefaultReplicaDataDirectory("This process keeps a durable group (disk SafeSend or persistent checkpoints), which this machine records in its registry of durable groups"), $"durable-groups-{service.Address}-{service.Port}");
        }
    }

    /// <summary>The replicas' addresses in order: the configured list, or the single fixed replica.</summary>
    internal IPEndPoint[] ServiceReplicaEndPoints =>
        MembershipReplicas.Count > 0 ? [.. MembershipReplicas] : [new IPEndPoint(MembershipServiceAddress, MembershipServicePort)];

    /// <summary>
    /// Where a fixed replica keeps its log: in <see cref="MembershipDataDirectory"/>, or by default
    /// in the account's local application data folder, never the temporary folder, which the
    /// system may empty at a reboot and so make a replica forget its votes.
    /// </summary>
    internal string ReplicaLogPath(IPEndPoint replica) =>
        System.IO.Path.Combine(MembershipDataDirectory ?? DefaultReplicaDataDirectory(), $"replica-{replica.Address}-{replica.Port}.log");

    private static string DefaultReplicaDataDirectory(string why = "This process hosts a membership replica, which keeps its log")
    {
        string appData = Environment.GetFolderPath(Environment.SpecialFolder.LocalApplicationData, Environment.SpecialFolderOption.DoNotVerify);
        if (string.IsNullOrEmpty(appData))
        {
            throw new InvalidOperationException($"{why} in IsisOptions.MembershipDataDirectory, and the account " +
                "has no local application data folder to default to (no HOME?): set MembershipDataDirectory to a folder that survives reboots.");
        }
        return System.IO.Path.Combine(appData, "isis", "membership");
    }

    internal void Validate()
    {
        if (BindAddress is null || BindAddress.AddressFamily != System.Net.Sockets.AddressFamily.InterNetwork)
            throw new ArgumentException("IsisOptions.BindAddress must be an IPv4 address, for example IPAddress.Loopback.");
        if (Port is < 0 or > 65535) throw new ArgumentException($"IsisOptions.Port must be 0-65535 (0 picks a free port); it is {Port}.");
        if (MembershipServicePort is <= 0 or > 65535) throw new ArgumentException($"IsisOptions.MembershipServicePort must be 1-65535; it is {MembershipServicePort}.");
        if (MembershipReplicas is null) throw new ArgumentException("IsisOptions.MembershipReplicas must not be null; leave it empty for the embedded service.");
        foreach (IPEndPoint? replica in MembershipReplicas)
        {
            if (replica is null || replica.AddressFamily != System.Net.Sockets.AddressFamily.InterNetwork || replica.Port == 0)
                throw new ArgumentException($"IsisOptions.MembershipReplicas must list IPv4 addresses with ports, for example 10.0.0.1:7345; found '{replica}'.");
        }
        if (MembershipReplicas.Distinct().Count() != MembershipReplicas.Count)
            throw new ArgumentException("IsisOptions.MembershipReplicas lists a replica twice; list each replica once, in the same order at every process.");
        if (MembershipReplicas.Count is 2 or 4)
            throw new ArgumentException($"IsisOptions.MembershipReplicas lists {MembershipReplicas.Count} replicas; use an odd number (1, 3 or 5): an even one tolerates no more failures than one fewer.");
        if (EmbeddedServiceReplicas is not (1 or 3 or 5))
            throw new ArgumentException($"IsisOptions.EmbeddedServiceReplicas must be 1, 3 or 5 (an even number tolerates no more failures than one fewer); it is {EmbeddedServiceReplicas}.");
        if (MembershipSeeds is null) throw new ArgumentException("IsisOptions.MembershipSeeds must not be null; leave it empty on one machine.");
        foreach (IPEndPoint? seed in MembershipSeeds)
        {
            if (seed is null || seed.AddressFamily != System.Net.Sockets.AddressFamily.InterNetwork || seed.Port == 0)
                throw new ArgumentException($"IsisOptions.MembershipSeeds must list IPv4 addresses with ports, for example 10.0.0.2:7345; found '{seed}'.");
        }
        if (MembershipSeeds.Count > 0 && !EmbeddedService)
            throw new ArgumentException("IsisOptions.MembershipSeeds is for the embedded service (MembershipService = Auto with no MembershipReplicas); with a fixed service, list its replicas in MembershipReplicas instead.");
        if (HeartbeatInterval < TimeSpan.FromMilliseconds(5)) throw new ArgumentException($"IsisOptions.HeartbeatInterval must be at least 5 ms; it is {HeartbeatInterval.TotalMilliseconds} ms.");
        if (SuspicionCount < 3) throw new ArgumentException($"IsisOptions.SuspicionCount must be at least 3 (a member's lease is two heartbeat periods shorter than the expulsion time); it is {SuspicionCount}.");
        if (IsolationTimeout is { } isolation && isolation <= HeartbeatInterval * SuspicionCount)
            throw new ArgumentException($"IsisOptions.IsolationTimeout ({isolation.TotalMilliseconds} ms) must exceed the expulsion time, SuspicionCount x HeartbeatInterval ({(HeartbeatInterval * SuspicionCount).TotalMilliseconds} ms); leave it null for twice that.");
        if (DiscoveryTimeout <= TimeSpan.Zero) throw new ArgumentException($"IsisOptions.DiscoveryTimeout must be positive; it is {DiscoveryTimeout.TotalMilliseconds} ms.");
        if (!Enum.IsDefined(Transport)) throw new ArgumentException($"IsisOptions.Transport must be IsisTransport.Udp or IsisTransport.Tcp; it is {(int)Transport}.");
        if (Multicast is { } multicast)
        {
            if (Transport != IsisTransport.Udp) throw new ArgumentException("IsisOptions.Multicast needs IsisOptions.Transport = IsisTransport.Udp: the TCP overlay connects pairs of processes and cannot carry IP multicast. Set Multicast to null for TCP.");
            multicast.Validate();
        }
        if (MaxUnstableMessages < 16) throw new ArgumentException($"IsisOptions.MaxUnstableMessages must be at least 16; it is {MaxUnstableMessages}.");
        if (MaxDatagramSize is < 1024 or > 65000) throw new ArgumentException($"IsisOptions.MaxDatagramSize must be 1024-65000 bytes; it is {MaxDatagramSize}.");
        if (MaxMessageSize < 1024) throw new ArgumentException($"IsisOptions.MaxMessageSize must be at least 1024 bytes; it is {MaxMessageSize}.");
        if (SystemKey is { Length: not 32 } key) throw new ArgumentException($"IsisOptions.SystemKey must be 32 bytes (a 256-bit AES key); it is {key.Length}. Generate one with RandomNumberGenerator.GetBytes(32).");
        if (AcceptedSystemKeys is null) throw new ArgumentException("IsisOptions.AcceptedSystemKeys must not be null; leave it empty unless a rotation of the system key is under way.");
        if (AcceptedSystemKeys.Count > 0 && SystemKey is null)
            throw new ArgumentException("IsisOptions.AcceptedSystemKeys needs a SystemKey to seal with: during a rotation, SystemKey is the key this process seals with and AcceptedSystemKeys the other one.");
        if (AcceptedSystemKeys.Count > Core.Security.PacketSealer.MaxAcceptedSystemKeys)
            throw new ArgumentException($"IsisOptions.AcceptedSystemKeys lists {AcceptedSystemKeys.Count} keys; at most {Core.Security.PacketSealer.MaxAcceptedSystemKeys} (a rotation needs one).");
        for (int i = 0; i < AcceptedSystemKeys.Count; i++)
        {
            if (AcceptedSystemKeys[i] is not { Length: 32 })
                throw new ArgumentException($"IsisOptions.AcceptedSystemKeys[{i}] must be 32 bytes (a 256-bit AES key); it is {AcceptedSystemKeys[i]?.Length.ToString(System.Globalization.CultureInfo.InvariantCulture) ?? "null"}.");
        }
    }

    internal Core.Node.ProtocolOptions ToProtocolOptions()
    {
        long heartbeat = (long)HeartbeatInterval.TotalMicroseconds;
        var defaults = new Core.Node.ProtocolOptions();
        return new Core.Node.ProtocolOptions
        {
            HeartbeatInterval = heartbeat,
            SuspicionCount = SuspicionCount,
            IsolationTimeout = IsolationTimeout is { } isolation ? (long)isolation.TotalMicroseconds : 2 * SuspicionCount * heartbeat,
            DiscoveryTimeout = (long)DiscoveryTimeout.TotalMicroseconds,
            // Replicas fail over well inside the isolation timeout, so processes ride out the loss of a leader.
            ReplicaHeartbeatInterval = heartbeat / 2,
            ReplicaElectionTimeout = 3 * heartbeat,
            MembershipBatchWindow = MembershipBatchWindow is { } window ? (long)window.TotalMicroseconds : defaults.MembershipBatchWindow,
            ServiceReplicaTarget = EmbeddedService ? EmbeddedServiceReplicas : 0,
            Multicast = Multicast?.ToPlan(),
            // Over TCP a large group's data follows the stability tree, so that a process keeps a
            // connection to its tree neighbours rather than to every member (a full mesh).
            RelayThroughTree = Transport == IsisTransport.Tcp,
            GossipFromMembers = LargeGroupFromMembers ?? defaults.GossipFromMembers,
            StabilityTreeFanout = StabilityTreeFanout ?? defaults.StabilityTreeFanout,
            SystemKey = SystemKey is { } key ? (byte[])key.Clone() : null,
            AcceptedSystemKeys = [.. AcceptedSystemKeys.Select(k => (byte[])k.Clone())],
            // Part of every nonce this process seals with: random per start (see PacketSealer).
            SealSalt = BitConverter.ToUInt32(System.Security.Cryptography.RandomNumberGenerator.GetBytes(4)),
            Mutations = Mutations,
        };
    }
}

/// <summary>How a runtime's packets travel (<see cref="IsisOptions.Transport"/>).</summary>
public enum IsisTransport
{
    /// <summary>UDP datagrams: many packets batched per datagram, large ones fragmented. The default.</summary>
    Udp = 0,

    /// <summary>
    /// A TCP overlay: the same packets and batches as length-prefixed frames over one connection
    /// per destination, for networks that block UDP.
    /// </summary>
    Tcp = 1,
}
