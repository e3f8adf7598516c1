using Isis.Core.Identity;

namespace Isis.Core.Membership;

/// <summary>
/// The incarnations the membership service expelled, kept as the highest expelled incarnation per
/// endpoint: one entry per endpoint that ever lost an incarnation, however often processes on it
/// restart, instead of one per expulsion for good.
/// </summary>
/// <remarks>
/// Sound because incarnations grow on each endpoint: a process that starts on an endpoint takes an
/// incarnation above every earlier one there (the runtime's incarnation clock, the simulator's
/// counter). An incarnation at or below an expelled one on its endpoint started before that one,
/// and the endpoint was bound by its successor since, so it is dead or a zombie: firewalling it
/// too is what the service would decide anyway. An incarnation above the mark is newer than every
/// expulsion there and is admitted.
/// </remarks>
internal sealed class ExpelledIncarnations
{
    private readonly Dictionary<ulong, uint> _highest = new();

    /// <summary>Endpoints with an expelled incarnation (the memory this set takes).</summary>
    public int Count => _highest.Count;

    /// <summary>True if <paramref name="node"/> was expelled, or started before an incarnation on its endpoint that was.</summary>
    public bool Contains(NodeId node) => _highest.TryGetValue(node.Endpoint, out uint highest) && node.Incarnation <= highest;

    /// <summary>Expels <paramref name="node"/> (and every earlier incarnation on its endpoint); false if it already was.</summary>
    public bool Add(NodeId node)
    {
        if (Contains(node)) return false;
        _highest[node.Endpoint] = node.Incarnation;
        return true;
    }

    /// <summary>The highest expelled incarnation of each endpoint, ordered by endpoint (the snapshot's canonical order).</summary>
    public IEnumerable<NodeId> Highest() => _highest.OrderBy(e => e.Key).Select(e => new NodeId(e.Key, e.Value));

    public void Clear() => _highest.Clear();
}
