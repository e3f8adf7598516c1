using Isis.Core.Membership;
using Isis.Core.Node;

namespace Isis.Core.Tests;

/// <summary>
/// The packets and events one node produced since it last advanced, copied: for tests that drive a
/// single node by hand (none of them writes a history; durable steps go through TestCluster's disk).
/// </summary>
internal sealed class NodeOutputs : INodePorts
{
    public List<(ulong Destination, byte[] Bytes)> Packets { get; } = new();

    public List<NodeEvent> Events { get; } = new();

    public List<long> EventTimes { get; } = new();

    /// <summary>The bytes of the packets to <paramref name="destination"/>, in order.</summary>
    public List<byte[]> To(ulong destination) => [.. Packets.Where(p => p.Destination == destination).Select(p => p.Bytes)];

    bool INodePorts.MakeDurable(StepSource source, in Ready ready) => true;

    void INodePorts.Send(StepSource source, in OutboundPacket packet) => Packets.Add((packet.Destination, packet.Bytes.ToArray()));

    void INodePorts.FlushSends()
    {
    }

    void INodePorts.Deliver(StepSource source, NodeEvent e, long time)
    {
        Events.Add(e);
        EventTimes.Add(time);
    }
}

internal static class NodeOutputsExtensions
{
    /// <summary>Runs the node's step (<see cref="NodeStep"/>, as every driver does) into a <see cref="NodeOutputs"/>.</summary>
    public static NodeOutputs TakeOutputs(this IProtocolNode node)
    {
        var outputs = new NodeOutputs();
        NodeStep.Run(node is MembershipReplica ? null : node, node as MembershipReplica, outputs);
        return outputs;
    }
}
