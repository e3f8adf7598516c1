using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Core.Membership;

/// <summary>
/// The software firewall: once the membership service expels an incarnation, every process drops
/// its traffic. A paused process that wakes up after its expulsion can therefore never slip stale
/// messages into a view that has moved on without it.
/// </summary>
internal sealed class Firewall(ProtocolOptions options)
{
    private readonly HashSet<NodeId> _expelled = new();
    private readonly Dictionary<NodeId, long> _lastNotified = new();

    public int ExpelledCount => _expelled.Count;

    public void Expel(NodeId node) => _expelled.Add(node);

    public bool Admit(NodeId sender) => !_expelled.Contains(sender);

    /// <summary>Rate-limits "you are expelled" notices to one per heartbeat period per zombie.</summary>
    public bool ShouldNotify(NodeId zombie, long now)
    {
        if (_lastNotified.TryGetValue(zombie, out long at) && now - at < options.HeartbeatInterval) return false;
        _lastNotified[zombie] = now;
        return true;
    }
}
