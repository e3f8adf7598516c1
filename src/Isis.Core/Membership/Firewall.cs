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

    private readonly Dictionary<NodeId, ExpelReason> _reasons = new(); // the latest expulsions' causes, when known and not missed heartbeats
    private readonly Queue<NodeId> _reasonOrder = new();

    public void Expel(NodeId node, ExpelReason reason = ExpelReason.Unheard)
    {
        _expelled.Add(node);
        if (reason == ExpelReason.Unheard || !_reasons.TryAdd(node, reason)) return;
        _reasonOrder.Enqueue(node);
        // Bounded like the service's list of recent expulsions: an older zombie hears the generic cause.
        if (_reasonOrder.Count > options.MembershipUpdateSize) _reasons.Remove(_reasonOrder.Dequeue());
    }

    /// <summary>Why <paramref name="node"/> was expelled, as far as this process was told.</summary>
    public ExpelReason ReasonFor(NodeId node) => _reasons.GetValueOrDefault(node);

    public bool Admit(NodeId sender) => !_expelled.Contains(sender);

    /// <summary>Rate-limits "you are expelled" notices to one per heartbeat period per zombie.</summary>
    public bool ShouldNotify(NodeId zombie, long now)
    {
        if (_lastNotified.TryGetValue(zombie.Endpoint, out long at) && now - at < options.HeartbeatInterval) return false;
        _lastNotified[zombie.Endpoint] = now;
        return true;
    }
}
