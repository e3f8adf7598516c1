using Isis.Core.Bft;
using Microsoft.Extensions.Logging;

namespace Isis.Perpetual;

/// <summary>Settings of a Perpetual replica or client. Every replica of a service should use the same.</summary>
public sealed class PerpetualOptions
{
    /// <summary>
    /// How long a replica waits for a request it knows of to be ordered before it suspects the
    /// primary and votes for the next view (each further view gets twice as long). Default 300 ms.
    /// </summary>
    public TimeSpan ViewChangeTimeout { get; set; } = TimeSpan.FromMilliseconds(300);

    /// <summary>How long before an unanswered message is sent again (doubling while nothing new happens). Default 20 ms.</summary>
    public TimeSpan RetryInterval { get; set; } = TimeSpan.FromMilliseconds(20);

    /// <summary>
    /// How far the primary's clock may be from a backup's for the backup to accept the primary's
    /// stamp as the agreed time. A primary with a wrong clock makes no progress and is replaced.
    /// Keep the hosts' clocks synchronized (NTP) well within it. Default 2 s.
    /// </summary>
    public TimeSpan MaxClockSkew { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>
    /// How many calls a replica's loop may have outstanding (sent, not completed):
    /// <see cref="PerpetualReplica.SendAsync"/> waits for one to complete beyond it. Default 1,024.
    /// </summary>
    public int MaxOutstandingCalls { get; set; } = 1024;

    /// <summary>
    /// Where the replica or client logs divergence, a loop that stopped, and hostile input. Null
    /// (the default): warnings and errors go to standard error.
    /// </summary>
    public ILoggerFactory? LoggerFactory { get; set; }

    internal BftOptions ToProtocol()
    {
        if (ViewChangeTimeout <= TimeSpan.Zero || RetryInterval <= TimeSpan.Zero || MaxClockSkew <= TimeSpan.Zero)
            throw new ArgumentException("PerpetualOptions: ViewChangeTimeout, RetryInterval and MaxClockSkew must be positive");
        if (MaxOutstandingCalls < 1) throw new ArgumentException("PerpetualOptions.MaxOutstandingCalls must be at least 1");
        return new BftOptions
        {
            ViewChangeTimeout = Micros(ViewChangeTimeout),
            RetryInterval = Micros(RetryInterval),
            MaxClockSkew = Micros(MaxClockSkew),
        };
    }

    internal static long Micros(TimeSpan span) => span.Ticks / 10;
}
