using System.Net;
using Microsoft.Extensions.Logging;

namespace Isis;

/// <summary>Options of a <see cref="GroupClient"/>; every one has a default that works on one machine with no configuration.</summary>
public sealed class GroupClientOptions
{
    /// <summary>
    /// Where the client asks for the group's members: members' endpoints (the address and port of <see cref="IsisRuntime.Address"/>)
    /// or the membership service's replicas. Empty (the default): the membership service as the
    /// members find it with <see cref="Membership"/>'s settings (on one machine with no
    /// configuration, the well-known port and the replicas this machine's processes recorded).
    /// </summary>
    public IList<IPEndPoint> Seeds { get; set; } = new List<IPEndPoint>();

    /// <summary>
    /// The membership settings the group's members start with: the client uses their membership
    /// service address and port, seeds, replicas, data directory and <see cref="IsisOptions.SystemKey"/>
    /// to find the service (the rest is ignored).
    /// </summary>
    public IsisOptions Membership { get; set; } = new();

    /// <summary>The group's key (32 bytes), if the group has one (<see cref="Group.SetKey"/>): a member refuses a client's requests unread without it.</summary>
    public byte[]? GroupKey { get; set; }

    /// <summary>The address the client's socket binds to (default loopback; an address of this host that reaches the members).</summary>
    public IPAddress BindAddress { get; set; } = IPAddress.Loopback;

    /// <summary>How long a call may wait for its answer before it throws <see cref="TimeoutException"/> (default 30 s). The request may still run: see <see cref="GroupClient"/>.</summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>How long a query waits for the members' replies, in the group (default 10 s; as <see cref="Group.QueryTimeout"/>).</summary>
    public TimeSpan QueryTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>How long the relaying member may stay silent before a request moves to another member (default 1 s; a live relay answers every 200 ms).</summary>
    public TimeSpan FailoverAfter { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>Where failovers and dropped packets are logged; null: warnings go to standard error.</summary>
    public ILoggerFactory? LoggerFactory { get; set; }
}
