using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Core.Membership;

/// <summary>
/// The software firewall: once the membership service expels an incarnation, every process drops
/// its traffic. A paused process that wakes up after its expulsion can therefore never slip stale
/// messages into a view that has moved on without it.
/// </summary>
/// <remarks>
/// Bounded by the endpoints, not by the expulsions: it keeps the highest expelled incarnation per
/// endpoint (see <see cref="ExpelledIncarnations"/>), and the notice rate limit per endpoint.
/// </remarks>
internal sealed class Firewall(ProtocolOptions options)
{
    private readonly ExpelledIncarnations _expelled = new();
    private readonly Dictionary<ulong, long> _lastNotified = new();

    public int ExpelledCount => _expelled.Count;

    public void Expel(NodeId node) => _expelled.Add(node);

    public bool Admit(NodeId sender) => !_expelled.Contains(sender);

    /// <summary>Rate-limits "you are expelled" notices to one per heartbeat period per zombie.</summary>
    public bool ShouldNotify(NodeId zombie, long now)
    {
        if (_lastNotified.TryGetValue(zombie.Endpoint, out long at) && now - at < options.HeartbeatInterval) return false;
        _lastNotified[zombie.Endpoint] = now;
        return true;
    }
}
