using Isis.Core.Node;

namespace Isis.Core.Membership;

/// <summary>
/// The founding rule of the embedded membership service, one decision for a process's start and
/// for any later moment, taken by the driver with what it knows of the machine (the runtime's
/// <c>ServiceHost</c>, and the simulator, which models the well-known port and the replica file).
/// </summary>
/// <remarks>
/// A process founds a service (its own replica the only one) only if all of these hold:
/// <list type="number">
/// <item>it holds the machine's well-known port: one process of a machine at a time (the port is
/// the machine-wide mutex);</item>
/// <item>the seeds allow it: without seeds, or when the first seed is this machine (with seeds,
/// only the machine named first founds; the others always look for a running service);</item>
/// <item>no replica on the machine's replica file may still run (its port is in use): a service
/// whose replicas this machine last knew of may be alive, paused or slow, and must not get a twin;</item>
/// <item>nobody could answer, or nobody did: at its start the process bound the port itself, so no
/// other process of this system ran on the machine to ask; later (it took the port over from a
/// process that stopped) it has asked everything it knows for <see cref="ProcessNode.FoundingWait"/>
/// without an answer and was never admitted by a service (<see cref="ProcessNode.MayFoundServiceAt"/>).</item>
/// </list>
/// </remarks>
internal static class EmbeddedFounding
{
    /// <param name="node">The process (for a later founding: how long it has looked, and its options' mutations).</param>
    /// <param name="now">The driver's clock.</param>
    /// <param name="atStart">The decision at the process's start, when it has just bound the well-known port (the node does not exist yet: pass null).</param>
    /// <param name="holdsWellKnownPort">This process holds the machine's well-known port.</param>
    /// <param name="seedsAllow">No seeds, or the first seed is this machine.</param>
    /// <param name="replicaOnFileMayBeAlive">Some replica on the machine's file may still run (its port is in use).</param>
    /// <param name="mutations">The protocol's mutations (<see cref="ProtocolMutations.FoundBesideLiveService"/> breaks the rule on purpose).</param>
    public static bool MayFound(ProcessNode? node, long now, bool atStart, bool holdsWellKnownPort, bool seedsAllow, bool replicaOnFileMayBeAlive, ProtocolMutations mutations)
    {
        if (!holdsWellKnownPort || !seedsAllow) return false;
        if (replicaOnFileMayBeAlive && (mutations & ProtocolMutations.FoundBesideLiveService) == 0) return false;
        return atStart || (node != null && now >= node.MayFoundServiceAt);
    }
}
