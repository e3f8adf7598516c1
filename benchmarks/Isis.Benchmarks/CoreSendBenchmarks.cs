using BenchmarkDotNet.Attributes;
using Isis.Simulation;

namespace Isis.Benchmarks;

/// <summary>
/// One Send through the sans-IO core of a 3-member group, no sockets and no threads: the sender's
/// ProcessNode.Send, its outbox packets handed to the two other members' Receive, until both
/// emitted MessageDelivered. The network is a FIFO queue in memory.
/// </summary>
/// <remarks>
/// Virtual time advances 10 us per Send and every node (and the membership service) is ticked once
/// per virtual millisecond, so acknowledgement digests, stability and garbage collection of held
/// messages run as they do in steady state (their cost is amortized into the per-Send figure) and
/// nothing grows without bound over millions of iterations.
/// </remarks>
public class CoreSendBenchmarks
{
    private CoreCluster _cluster = null!;
    private byte[] _payload = [];

    [Params(100)]
    public int PayloadBytes { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _cluster = new CoreCluster(3);
        _cluster.FormGroup();
        _payload = new byte[PayloadBytes];
    }

    /// <summary>Send at member 0, routed until members 1 and 2 delivered it (plus the amortized ticks).</summary>
    [Benchmark]
    public int Send_DeliveredAtTwoReceivers()
    {
        int delivered = _cluster.SendAndRoute(_payload);
        if (delivered != 3) throw new InvalidOperationException($"expected 3 deliveries (sender + 2), saw {delivered}");
        return delivered;
    }
}
