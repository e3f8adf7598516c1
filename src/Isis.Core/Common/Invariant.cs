namespace Isis.Core.Common;

/// <summary>
/// Protocol invariants, checked in production too (as TigerBeetle does): a broken invariant means
/// the replica can no longer be trusted, so it stops loudly instead of diverging silently.
/// </summary>
internal static class Invariant
{
    public static void Check(bool condition, string rule)
    {
        if (!condition) throw new ProtocolInvariantException(rule);
    }
}

/// <summary>Thrown when a protocol invariant fails: a bug in the core, never a reaction to input.</summary>
internal sealed class ProtocolInvariantException(string rule) : Exception("Protocol invariant violated: " + rule);
