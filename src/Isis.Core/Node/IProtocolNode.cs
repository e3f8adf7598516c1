namespace Isis.Core.Node;

/// <summary>
/// A sans-IO protocol node: feed it packets and ticks, then run <see cref="NodeStep"/>, which takes
/// its <see cref="Ready"/> and calls <see cref="Advance"/>. Both the runtime and the simulator
/// drive nodes through this interface only.
/// </summary>
internal interface IProtocolNode
{
    /// <summary>The endpoint this node receives on.</summary>
    ulong Endpoint { get; }

    /// <summary>True when the steps since the last <see cref="Advance"/> produced anything (<see cref="TakeReady"/> would not be empty).</summary>
    bool HasReady { get; }

    /// <summary>
    /// What the steps since the last <see cref="Advance"/> produced, with every pending packet
    /// sealed now: so a batch of inputs shares one sealed bundle per destination. Taking it again
    /// before <see cref="Advance"/> returns the same, and whatever inputs in between added.
    /// </summary>
    Ready TakeReady();

    /// <summary>The driver is done with the last <see cref="TakeReady"/>: the node reuses its memory (packets, recycled events, payloads).</summary>
    void Advance();

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
