namespace Isis.Core.Node;

/// <summary>
/// A sans-IO protocol node: feed it packets and ticks, take its <see cref="Outbox"/>.
/// Both the runtime and the simulator drive nodes through this interface only.
/// </summary>
internal interface IProtocolNode
{
    /// <summary>The endpoint this node receives on.</summary>
    ulong Endpoint { get; }

    Outbox Outbox { get; }

    /// <summary>A packet arrived from <paramref name="source"/> (the transport's view of the sender's endpoint).</summary>
    void Receive(ulong source, ReadOnlySpan<byte> packet, long now);

    /// <summary>Time passed: the node does whatever is due. Drivers tick at <see cref="NextDeadline"/> (earlier is harmless).</summary>
    void Tick(long now);

    /// <summary>
    /// The earliest time at which <see cref="Tick"/> may have something to do. Valid until the next
    /// input (a packet, a tick, a command): read it again after each.
    /// </summary>
    long NextDeadline { get; }
}
