using Isis.Core.Identity;
using Isis.Core.Membership;
using Isis.Core.Node;

namespace Isis.Simulation.Driving;

/// <summary>
/// A node's disk in memory: its groups' SafeSend history logs and, for a membership replica, its
/// record file. It belongs to the endpoint, so a restarted process finds what its earlier
/// incarnation made durable.
/// </summary>
internal sealed class MemoryDisk
{
    private readonly Dictionary<GroupId, MemoryHistoryLog> _historyLogs = new();

    /// <summary>The history log of <paramref name="group"/> (empty until written).</summary>
    public MemoryHistoryLog HistoryLog(GroupId group)
    {
        if (!_historyLogs.TryGetValue(group, out MemoryHistoryLog? log)) _historyLogs[group] = log = new MemoryHistoryLog();
        return log;
    }

    /// <summary>Forgets the history log of <paramref name="group"/> (a disk replaced).</summary>
    public void Wipe(GroupId group) => _historyLogs.Remove(group);

    /// <summary>A membership replica's records, in order (a compacted log replaced them).</summary>
    public List<byte[]> ReplicaRecords { get; } = new();
}

/// <summary>
/// The driver of the core's tests and of the core benchmark (the tests' TestCluster and
/// <see cref="CoreCluster"/>): one thread, virtual time, and each node's step run through
/// <see cref="NodeStep"/> as the runtime runs it, durability included, with a
/// <see cref="MemoryDisk"/> per endpoint. The cluster supplies the network and what becomes of events.
/// </summary>
internal abstract class MemoryDriver
{
    private readonly Dictionary<ulong, MemoryDisk> _disks = new();

    /// <summary>The disk of the node at <paramref name="endpoint"/>.</summary>
    public MemoryDisk DiskOf(ulong endpoint)
    {
        if (!_disks.TryGetValue(endpoint, out MemoryDisk? disk)) _disks[endpoint] = disk = new MemoryDisk();
        return disk;
    }

    /// <summary>Runs what <paramref name="node"/> produced since its last step: durable, then sent, then handed over.</summary>
    protected StepOutcome Step(IProtocolNode node) =>
        NodeStep.Run(node as ProcessNode, node as MembershipReplica, new Ports(this, node));

    /// <summary>Puts a packet of <paramref name="from"/> on the network (copy it: its memory is the node's).</summary>
    protected abstract void Transmit(ulong from, in OutboundPacket packet);

    /// <summary>Hands an event of <paramref name="node"/> over (copy what you keep of a recycled one).</summary>
    protected abstract void Handle(IProtocolNode node, NodeEvent e, long time);

    /// <summary>False when the node's disk cannot be written (its process crashed): the step is then discarded.</summary>
    protected virtual bool Writable(IProtocolNode node) => true;

    /// <summary>Sees a step's history writes once they are durable (tests).</summary>
    protected virtual void OnDurable(IProtocolNode node, ReadOnlySpan<HistoryWrite> writes)
    {
    }

    private readonly struct Ports(MemoryDriver driver, IProtocolNode node) : INodePorts
    {
        public bool MakeDurable(StepSource source, in Ready ready)
        {
            if (!driver.Writable(node)) return false;
            MemoryDisk disk = driver.DiskOf(node.Endpoint);
            foreach (HistoryWrite w in ready.HistoryWrites)
            {
                MemoryHistoryLog log = disk.HistoryLog(w.Group);
                log.Apply(w);
                log.DropBehindTrim();
            }
            if (ready.ReplicaRecordsReplaceLog) disk.ReplicaRecords.Clear();
            disk.ReplicaRecords.AddRange(ready.ReplicaRecords);
            driver.OnDurable(node, ready.HistoryWrites);
            return true;
        }

        public void Send(StepSource source, in OutboundPacket packet) => driver.Transmit(node.Endpoint, packet);

        public void FlushSends()
        {
        }

        public void Deliver(StepSource source, NodeEvent e, long time) => driver.Handle(node, e, time);
    }
}
