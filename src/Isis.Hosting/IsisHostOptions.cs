using System.Globalization;
using System.Net;
using Microsoft.Extensions.Logging;

namespace Isis.Hosting;

/// <summary>
/// The settings of the Isis runtime in a .NET host, shaped for configuration binding (addresses as
/// strings, lists as arrays), for example the "Isis" section of appsettings.json:
/// <code>
/// "Isis": { "MembershipSeeds": [ "10.0.0.1:7345", "10.0.0.2:7345" ], "BindAddress": "10.0.1.17", "MembershipServiceAddress": "10.0.1.17" }
/// </code>
/// Every setting defaults to the runtime's zero-configuration default (<see cref="IsisOptions"/>
/// documents each one); they are validated when the host starts.
/// </summary>
public sealed class IsisHostOptions
{
    /// <summary>IPv4 address this process binds its data socket to (<see cref="IsisOptions.BindAddress"/>). Defaults to 127.0.0.1.</summary>
    public string BindAddress { get; set; } = "127.0.0.1";

    /// <summary>UDP port for this process's traffic; 0 picks a free one (<see cref="IsisOptions.Port"/>).</summary>
    public int Port { get; set; }

    /// <summary>The machine's well-known membership address (<see cref="IsisOptions.MembershipServiceAddress"/>). Defaults to 127.0.0.1.</summary>
    public string MembershipServiceAddress { get; set; } = "127.0.0.1";

    /// <summary>Port of <see cref="MembershipServiceAddress"/> (<see cref="IsisOptions.MembershipServicePort"/>). Defaults to 7345.</summary>
    public int MembershipServicePort { get; set; } = 7345;

    /// <summary>Whether this process hosts a membership replica (<see cref="IsisOptions.MembershipService"/>). Defaults to Auto.</summary>
    public MembershipServiceMode MembershipService { get; set; } = MembershipServiceMode.Auto;

    /// <summary>A fixed membership service's replicas as "address:port" (<see cref="IsisOptions.MembershipReplicas"/>); empty for the embedded service.</summary>
    public string[] MembershipReplicas { get; set; } = [];

    /// <summary>Well-known addresses of other machines as "address:port" (<see cref="IsisOptions.MembershipSeeds"/>).</summary>
    public string[] MembershipSeeds { get; set; } = [];

    /// <summary>How many replicas the embedded service keeps: 1, 3 or 5 (<see cref="IsisOptions.EmbeddedServiceReplicas"/>). Defaults to 3.</summary>
    public int EmbeddedServiceReplicas { get; set; } = 3;

    /// <summary>Folder for membership replica logs and the machine's replica file (<see cref="IsisOptions.MembershipDataDirectory"/>).</summary>
    public string? MembershipDataDirectory { get; set; }

    /// <summary>Heartbeat period towards the membership service (<see cref="IsisOptions.HeartbeatInterval"/>). Defaults to 100 ms.</summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>Silent heartbeat periods before expulsion (<see cref="IsisOptions.SuspicionCount"/>). Defaults to 5.</summary>
    public int SuspicionCount { get; set; } = 5;

    /// <summary>How long without the membership service before this process stops (<see cref="IsisOptions.IsolationTimeout"/>); null for twice the expulsion time.</summary>
    public TimeSpan? IsolationTimeout { get; set; }

    /// <summary>How long a process that finds no membership service at start keeps looking (<see cref="IsisOptions.DiscoveryTimeout"/>). Defaults to 10 s.</summary>
    public TimeSpan DiscoveryTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>Most unstable messages a member may have sent (<see cref="IsisOptions.MaxUnstableMessages"/>). Defaults to 20,000.</summary>
    public int MaxUnstableMessages { get; set; } = 20_000;

    /// <summary>How packets travel (<see cref="IsisOptions.Transport"/>): Udp (the default) or Tcp.</summary>
    public IsisTransport Transport { get; set; } = IsisTransport.Udp;

    /// <summary>
    /// IP multicast for groups' data (<see cref="IsisOptions.Multicast"/>); null (the default, or the
    /// section absent) sends by unicast. Every process of the system needs the same settings.
    /// </summary>
    public IsisHostMulticastOptions? Multicast { get; set; }

    /// <summary>
    /// The system key (<see cref="IsisOptions.SystemKey"/>), as the base64 of 32 bytes; null (the
    /// default) leaves the membership service's traffic unsealed. Every process of the system needs
    /// the same one; keep it out of files others can read (an environment variable or a secret store).
    /// </summary>
    public string? SystemKey { get; set; }

    /// <summary>
    /// System keys accepted besides <see cref="SystemKey"/> while it rotates (<see cref="IsisOptions.AcceptedSystemKeys"/>),
    /// each the base64 of 32 bytes: <c>Isis:AcceptedSystemKeys:0</c>, and so on.
    /// </summary>
    public IList<string> AcceptedSystemKeys { get; set; } = new List<string>();

    /// <summary>Largest UDP datagram built (<see cref="IsisOptions.MaxDatagramSize"/>). Defaults to 16 KiB.</summary>
    public int MaxDatagramSize { get; set; } = 16 * 1024;

    /// <summary>Largest message accepted (<see cref="IsisOptions.MaxMessageSize"/>). Defaults to 16 MiB.</summary>
    public int MaxMessageSize { get; set; } = 16 * 1024 * 1024;

    /// <summary>
    /// Stop the application when the membership protocol shuts the runtime down (this process was
    /// expelled, or cut off from the service): its groups are wedged and it can only come back as a
    /// new process, which a supervisor or orchestrator starts. Defaults to true; false keeps the
    /// application running (its health check then reports Unhealthy).
    /// </summary>
    public bool StopApplicationOnShutdown { get; set; } = true;

    /// <summary>The runtime's options; throws <see cref="ArgumentException"/> naming the setting to fix.</summary>
    internal IsisOptions ToIsisOptions(ILoggerFactory? loggerFactory, System.Diagnostics.Metrics.IMeterFactory? meterFactory = null)
    {
        var options = new IsisOptions
        {
            BindAddress = Address(nameof(BindAddress), BindAddress),
            Port = Port,
            MembershipServiceAddress = Address(nameof(MembershipServiceAddress), MembershipServiceAddress),
            MembershipServicePort = MembershipServicePort,
            MembershipService = MembershipService,
            EmbeddedServiceReplicas = EmbeddedServiceReplicas,
            MembershipDataDirectory = MembershipDataDirectory,
            HeartbeatInterval = HeartbeatInterval,
            SuspicionCount = SuspicionCount,
            IsolationTimeout = IsolationTimeout,
            DiscoveryTimeout = DiscoveryTimeout,
            MaxUnstableMessages = MaxUnstableMessages,
            MaxDatagramSize = MaxDatagramSize,
            Transport = Transport,
            Multicast = Multicast?.ToMulticastOptions(),
            MaxMessageSize = MaxMessageSize,
            SystemKey = Key(nameof(SystemKey), SystemKey),
            AcceptedSystemKeys = AcceptedSystemKeys.Select((k, i) => Key($"{nameof(AcceptedSystemKeys)}:{i}", k)
                ?? throw new ArgumentException($"Isis:{nameof(AcceptedSystemKeys)}:{i} is empty; list only keys.")).ToList(),
            LoggerFactory = loggerFactory,
            MeterFactory = meterFactory,
        };
        foreach (string r in MembershipReplicas ?? []) options.MembershipReplicas.Add(EndPoint(nameof(MembershipReplicas), r));
        foreach (string s in MembershipSeeds ?? []) options.MembershipSeeds.Add(EndPoint(nameof(MembershipSeeds), s));
        options.Validate();
        return options;
    }

    private static byte[]? Key(string setting, string? base64)
    {
        if (string.IsNullOrWhiteSpace(base64)) return null;
        byte[] key;
        try
        {
            key = Convert.FromBase64String(base64);
        }
        catch (FormatException)
        {
            throw new ArgumentException($"Isis:{setting} must be the base64 of 32 random bytes (for example Convert.ToBase64String(RandomNumberGenerator.GetBytes(32))); it is not base64.");
        }
        return key.Length == 32 ? key : throw new ArgumentException($"Isis:{setting} must be the base64 of 32 bytes (a 256-bit key); it decodes to {key.Length}.");
    }

    private static IPAddress Address(string setting, string? value) =>
        IPAddress.TryParse(value, out IPAddress? a) && a.AddressFamily == System.Net.Sockets.AddressFamily.InterNetwork
            ? a
            : throw new ArgumentException($"Isis:{setting} must be an IPv4 address such as 127.0.0.1; it is '{value}'.");

    private static IPEndPoint EndPoint(string setting, string? value) =>
        IPEndPoint.TryParse(value ?? "", out IPEndPoint? e) && e.AddressFamily == System.Net.Sockets.AddressFamily.InterNetwork && e.Port != 0
            ? e
            : throw new ArgumentException(string.Create(CultureInfo.InvariantCulture, $"Isis:{setting} must list IPv4 addresses with ports such as 10.0.0.1:7345; found '{value}'."));
}

/// <summary>
/// IP multicast settings shaped for configuration binding (the "Isis:Multicast" section), for example
/// <c>"Multicast": { "AddressRange": "239.192.77.0/24", "Port": 7346 }</c>. Each defaults to
/// <see cref="MulticastOptions"/>' default, which documents it.
/// </summary>
public sealed class IsisHostMulticastOptions
{
    /// <summary>The IPv4 multicast addresses groups may use, in CIDR form (<see cref="MulticastOptions.AddressRange"/>). Defaults to "239.192.77.0/24".</summary>
    public string AddressRange { get; set; } = "239.192.77.0/24";

    /// <summary>The port every process receives multicast on (<see cref="MulticastOptions.Port"/>). Defaults to 7346.</summary>
    public int Port { get; set; } = 7346;

    /// <summary>The IPv4 interface address multicast uses (<see cref="MulticastOptions.Interface"/>); null for the bind address.</summary>
    public string? Interface { get; set; }

    /// <summary>Most addresses one host's processes join together (<see cref="MulticastOptions.MaxAddressesPerHost"/>). Defaults to 20.</summary>
    public int MaxAddressesPerHost { get; set; } = 20;

    /// <summary>Smallest group that gets an address (<see cref="MulticastOptions.MinMembers"/>). Defaults to 3.</summary>
    public int MinMembers { get; set; } = 3;

    /// <summary>Hops a multicast datagram may travel (<see cref="MulticastOptions.TimeToLive"/>). Defaults to 1.</summary>
    public int TimeToLive { get; set; } = 1;

    internal MulticastOptions ToMulticastOptions() => new()
    {
        AddressRange = AddressRange,
        Port = Port,
        Interface = Interface is null ? null
            : IPAddress.TryParse(Interface, out IPAddress? a) && a.AddressFamily == System.Net.Sockets.AddressFamily.InterNetwork
                ? a
                : throw new ArgumentException($"Isis:Multicast:Interface must be an IPv4 address such as 10.0.1.17; it is '{Interface}'."),
        MaxAddressesPerHost = MaxAddressesPerHost,
        MinMembers = MinMembers,
        TimeToLive = TimeToLive,
    };
}
