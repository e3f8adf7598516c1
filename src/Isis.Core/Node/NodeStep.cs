namespace Isis.Core.Node;

/// <summary>Which node of a driver's step produced an output: the process, or the membership replica the process hosts (or a dedicated replica alone).</summary>
internal enum StepSource : byte
{
    Process = 0,
    Replica = 1,
}

/// <summary>How a step ended.</summary>
internal enum StepOutcome : byte
{
    /// <summary>Everything was made durable, sent and handed over, and the nodes advanced.</summary>
    Done = 0,

    /// <summary>
    /// The ports could not make a node's records durable. Nothing of the step left and none of its
    /// events was handed over (they would promise what is not on disk); the nodes advanced past it.
    /// The driver stops the node whose store failed and steps again to hand over its stop.
    /// </summary>
    NotDurable = 1,
}

/// <summary>
/// What a driver does with a step's outputs, I/O only: the event loop, the service host, the
/// simulator and the test clusters implement it. The order is <see cref="NodeStep"/>'s, never theirs.
/// </summary>
internal interface INodePorts
{
    /// <summary>
    /// Makes <paramref name="ready"/>'s <see cref="Ready.HistoryWrites"/> and
    /// <see cref="Ready.ReplicaRecords"/> durable (written and synced). False if the store refused:
    /// the step is then discarded.
    /// </summary>
    bool MakeDurable(StepSource source, in Ready ready);

    /// <summary>Sends one packet of the node <paramref name="source"/> (it may queue it: <see cref="FlushSends"/> follows the step's last).</summary>
    void Send(StepSource source, in OutboundPacket packet);

    /// <summary>
    /// Once per step, after its packets (also when it sent none): whatever the ports queued goes to
    /// the wire, and whatever else of theirs is due (a transport's fault-delayed datagrams).
    /// </summary>
    void FlushSends();

    /// <summary>Hands one event over, with the time of the step that produced it.</summary>
    void Deliver(StepSource source, NodeEvent e, long time);
}

/// <summary>
/// The driver contract (docs/architecture.md), coded once: after a batch of inputs, make the
/// nodes' records durable, then send their packets, then hand their events over, then advance.
/// No other code reads a node's outputs.
/// </summary>
internal static class NodeStep
{
    /// <summary>
    /// Runs the outputs of a process node and of the membership replica it hosts (either may be
    /// null: a dedicated replica runs alone) through <paramref name="ports"/>.
    /// </summary>
    /// <remarks>
    /// The replica's packets go before the process's, and the events of both are handed over in the
    /// order of their step times, the replica's first at equal times. Time order, not one node's
    /// events first: a driver's batch can span steps far apart. A process stopped (SIGSTOP) in the
    /// middle of a batch holds the events of the steps it took before (Sends its lease allowed), and
    /// once continued feeds the replica what queued meanwhile in the same batch (a new leader's
    /// append, the decisions applied from it). Handed over replica first, the earlier Sends would
    /// follow the later decisions into an event log whose times never go back, stamped after the
    /// service expelled the process.
    /// </remarks>
    public static StepOutcome Run<TPorts>(IProtocolNode? process, IProtocolNode? replica, TPorts ports) where TPorts : INodePorts
    {
        bool fromProcess = process is { HasReady: true };
        bool fromReplica = replica is { HasReady: true };
        if (!fromProcess && !fromReplica)
        {
            ports.FlushSends();
            return StepOutcome.Done;
        }
        Ready p = fromProcess ? process!.TakeReady() : default;
        Ready r = fromReplica ? replica!.TakeReady() : default;

        // Durable first: an acknowledgement or a vote must not leave before what it promises is on disk.
        if ((!p.HistoryWrites.IsEmpty || !p.ReplicaRecords.IsEmpty) && !ports.MakeDurable(StepSource.Process, p)
            || (!r.HistoryWrites.IsEmpty || !r.ReplicaRecords.IsEmpty) && !ports.MakeDurable(StepSource.Replica, r))
        {
            if (fromProcess) process!.Advance();
            if (fromReplica) replica!.Advance();
            return StepOutcome.NotDurable;
        }

        // Then the packets, so that the application never sees an event whose packets were not sent.
        foreach (ref readonly OutboundPacket packet in r.Packets) ports.Send(StepSource.Replica, packet);
        foreach (ref readonly OutboundPacket packet in p.Packets) ports.Send(StepSource.Process, packet);
        ports.FlushSends();

        // Then the events, merged by step time.
        int j = 0;
        for (int i = 0; i < p.Events.Length; i++)
        {
            long at = p.EventTimes[i];
            for (; j < r.Events.Length && r.EventTimes[j] <= at; j++) ports.Deliver(StepSource.Replica, r.Events[j], r.EventTimes[j]);
            ports.Deliver(StepSource.Process, p.Events[i], at);
        }
        for (; j < r.Events.Length; j++) ports.Deliver(StepSource.Replica, r.Events[j], r.EventTimes[j]);

        // Last, the nodes may reuse the memory of what was handed over.
        if (fromProcess) process!.Advance();
        if (fromReplica) replica!.Advance();
        return StepOutcome.Done;
    }

    /// <summary>
    /// Drops everything the nodes produced since they last advanced, unsent and not handed over:
    /// what a driver does with a step that broke an invariant, whose outputs cannot be trusted.
    /// </summary>
    public static void Discard(IProtocolNode? process, IProtocolNode? replica)
    {
        process?.Advance();
        replica?.Advance();
    }
}
