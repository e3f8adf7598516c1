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

    /// <summary>Time passed. Drivers tick often (every millisecond or few); the node decides what is due.</summary>
    void Tick(long now);
}
