namespace Isis.Transport.Framing;

/// <summary>
/// Hands out fragment ids. One instance is shared by all batchers of a sender, because receivers
/// key reassembly by (source endpoint, fragment id) whatever destination a batcher serves.
/// </summary>
/// <remarks>
/// Start it at a random value: a process restarted on the same endpoint then does not reuse the ids
/// of fragments its predecessor may have left half-assembled at receivers.
/// </remarks>
internal sealed class FragmentIdCounter(ulong start)
{
    private ulong _next = start;

    public ulong Next() => _next++;
}
