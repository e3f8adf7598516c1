using BenchmarkDotNet.Attributes;

namespace Isis.Benchmarks;

/// <summary>
/// Send across three real runtimes on loopback UDP (one process, three event loops, three sockets,
/// a private membership service): the latency of one Send until all three members' handlers ran,
/// and the throughput of a burst. tools/Isis.Bench measures the same with three processes and
/// reports percentiles from histograms; this suite gives BenchmarkDotNet's statistics and the
/// allocations per message.
/// </summary>
public class LoopbackSendBenchmarks
{
    private const int Opcode = 1;
    private const int Burst = 1_000;

    private readonly long[] _delivered = new long[3];
    private IsisRuntime[] _runtimes = [];
    private Group[] _groups = [];
    private long _sent;

    [GlobalSetup]
    public void Setup()
    {
        _runtimes = Loopback.StartRuntimes(3);
        _groups = new Group[3];
        for (int i = 0; i < 3; i++)
        {
            int me = i;
            _groups[i] = new Group(_runtimes[i], "bench");
            _groups[i].Handlers[Opcode] += (Action<int>)(_ => Interlocked.Increment(ref _delivered[me]));
            _groups[i].Join();
        }
        Loopback.WaitUntil(() => _groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");
    }

    [Benchmark(Description = "Send, until all 3 members delivered")]
    public void SendOne()
    {
        long target = ++_sent;
        _groups[0].Send(Opcode, 42);
        Loopback.WaitUntil(() => AllDelivered(target), "delivery");
    }

    [Benchmark(OperationsPerInvoke = Burst, Description = "Send burst of 1000, per message")]
    public void SendBurst()
    {
        for (int i = 0; i < Burst; i++) _groups[0].Send(Opcode, i);
        long target = _sent += Burst;
        Loopback.WaitUntil(() => AllDelivered(target), "delivery of the burst");
    }

    private bool AllDelivered(long target) =>
        Interlocked.Read(ref _delivered[0]) >= target && Interlocked.Read(ref _delivered[1]) >= target && Interlocked.Read(ref _delivered[2]) >= target;

    [GlobalCleanup]
    public void Cleanup()
    {
        Loopback.StopRuntimes(_runtimes);
    }
}
