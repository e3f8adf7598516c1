using BenchmarkDotNet.Attributes;

namespace Isis.Benchmarks;

/// <summary>The multicast primitive a <see cref="LoopbackPrimitiveBenchmarks"/> case measures.</summary>
public enum LoopbackPrimitive
{
    /// <summary>Send: FIFO, delivered at the sender at once.</summary>
    Send,
    /// <summary>OrderedSend: total order set by the oldest member.</summary>
    OrderedSend,
    /// <summary>SafeSendAsync with SetSafeSendThreshold(1).</summary>
    SafeSendPhi1,
    /// <summary>SafeSendAsync with SetSafeSendThreshold(3) (group sizes of at least 3 only).</summary>
    SafeSendPhi3,
    /// <summary>SafeSendAsync with the default threshold: every member.</summary>
    SafeSendPhiAll,
    /// <summary>QueryAsync&lt;int&gt;(Group.ALL, ...): every member Replies.</summary>
    QueryAll,
}

/// <summary>
/// Every primitive across 3 or 5 real runtimes on loopback UDP (one process, one event loop and
/// socket per runtime, a private membership service hosted by runtime 0; runtime 0 sends). One
/// operation is measured until every member's handler ran it (Query: until the QueryAsync task
/// completed with every member's reply); the burst case issues 1,000 operations and waits for the
/// same, reported per operation. tools/Isis.Bench measures the same with one process per member.
/// </summary>
public class LoopbackPrimitiveBenchmarks
{
    private const int Opcode = 1;
    private const int Burst = 1_000;

    private long[] _delivered = [];
    private IsisRuntime[] _runtimes = [];
    private Group[] _groups = [];
    private long _sent;
    private readonly Task[] _burstTasks = new Task[Burst];

    /// <summary>Number of members (runtimes) in the group.</summary>
    [Params(3, 5)]
    public int Members { get; set; }

    /// <summary>The primitive under test.</summary>
    [ParamsAllValues]
    public LoopbackPrimitive Primitive { get; set; }

    /// <summary>Bytes of the one byte[] argument every operation carries.</summary>
    [Params(100, 1024)]
    public int PayloadBytes { get; set; }

    // One argument array reused by every operation: the benchmark measures the library, not the caller.
    private object?[] _arguments = [];

    [GlobalSetup]
    public void Setup()
    {
        if (Primitive == LoopbackPrimitive.SafeSendPhi3 && Members < 3) throw new InvalidOperationException("phi 3 needs at least 3 members");
        _delivered = new long[Members];
        _arguments = [new byte[PayloadBytes]];
        _runtimes = Loopback.StartRuntimes(Members);
        _groups = new Group[Members];
        for (int i = 0; i < Members; i++)
        {
            int me = i;
            Group g = new(_runtimes[i], "bench-primitives");
            _groups[i] = g;
            if (Primitive == LoopbackPrimitive.QueryAll)
            {
                g.Handlers[Opcode] += (Action<byte[]>)(_ =>
                {
                    Interlocked.Increment(ref _delivered[me]);
                    g.Reply(me);
                });
            }
            else
            {
                g.Handlers[Opcode] += (Action<byte[]>)(_ => Interlocked.Increment(ref _delivered[me]));
            }
        }
        // Join in parallel: each Join waits for a view change, and five in a row add up.
        Task.WaitAll([.. _groups.Select(g => g.JoinAsync())], Loopback.Limit);
        Loopback.WaitUntil(() => _groups.All(g => g.GetView()?.Members.Length == Members), $"a {Members}-member view");
        switch (Primitive)
        {
            case LoopbackPrimitive.SafeSendPhi1: _groups[0].SetSafeSendThreshold(1); break;
            case LoopbackPrimitive.SafeSendPhi3: _groups[0].SetSafeSendThreshold(3); break;
        }
    }

    [Benchmark(Description = "one operation, until every member delivered (Query: all replies)")]
    public void One()
    {
        long target = ++_sent;
        Group g = _groups[0];
        switch (Primitive)
        {
            case LoopbackPrimitive.Send:
                g.Send(Opcode, _arguments);
                break;
            case LoopbackPrimitive.OrderedSend:
                g.OrderedSend(Opcode, _arguments);
                break;
            case LoopbackPrimitive.QueryAll:
                IReadOnlyList<int> replies = g.QueryAsync<int>(Group.ALL, Opcode, _arguments).WaitAsync(Loopback.Limit).GetAwaiter().GetResult();
                if (replies.Count != Members) throw new InvalidOperationException($"{replies.Count} replies, expected {Members}");
                return;
            default:
                g.SafeSendAsync(Opcode, _arguments).WaitAsync(Loopback.Limit).GetAwaiter().GetResult();
                break;
        }
        Loopback.WaitUntil(() => AllDelivered(target), "delivery");
    }

    [Benchmark(OperationsPerInvoke = Burst, Description = "burst of 1000, per operation")]
    public void BurstOf1000()
    {
        Group g = _groups[0];
        switch (Primitive)
        {
            case LoopbackPrimitive.Send:
                for (int i = 0; i < Burst; i++) g.Send(Opcode, _arguments);
                break;
            case LoopbackPrimitive.OrderedSend:
                for (int i = 0; i < Burst; i++) g.OrderedSend(Opcode, _arguments);
                break;
            case LoopbackPrimitive.QueryAll:
                for (int i = 0; i < Burst; i++) _burstTasks[i] = g.QueryAsync<int>(Group.ALL, Opcode, _arguments);
                if (!Task.WaitAll(_burstTasks, Loopback.Limit)) throw new TimeoutException("the burst's queries did not complete");
                break;
            default:
                for (int i = 0; i < Burst; i++) _burstTasks[i] = g.SafeSendAsync(Opcode, _arguments);
                if (!Task.WaitAll(_burstTasks, Loopback.Limit)) throw new TimeoutException("the burst's SafeSends did not complete");
                break;
        }
        long target = _sent += Burst;
        Loopback.WaitUntil(() => AllDelivered(target), "delivery of the burst");
    }

    private bool AllDelivered(long target)
    {
        for (int i = 0; i < _delivered.Length; i++)
        {
            if (Interlocked.Read(ref _delivered[i]) < target) return false;
        }
        return true;
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        Loopback.StopRuntimes(_runtimes);
    }
}
