using BenchmarkDotNet.Attributes;

namespace Isis.Benchmarks;

/// <summary>
/// The Isis2 toolkit's primitives beside the ones they are judged against, in one run, on three
/// real runtimes over loopback UDP (one process; runtime 0 acts): an uncontended lock round
/// (GroupLocks.LockAsync until granted, then Unlock; and the same until the release is applied
/// here) against an OrderedSend
/// round (until every member delivered it), and a CausalSend and a P2PSend against a Send (until
/// every destination delivered it).
/// </summary>
public class LoopbackToolkitBenchmarks
{
    private const int Opcode = 1;
    private const int Members = 3;

    private IsisRuntime[] _runtimes = [];
    private Group[] _groups = [];
    private Group[] _lockGroups = [];
    private GroupLocks[] _locks = [];
    private long[] _delivered = [];
    private long _sent;
    private long _sentToOne;
    private readonly object?[] _arguments = [new byte[100]];

    [GlobalSetup]
    public void Setup()
    {
        _runtimes = Loopback.StartRuntimes(Members);
        _groups = new Group[Members];
        _lockGroups = new Group[Members];
        _locks = new GroupLocks[Members];
        _delivered = new long[Members];
        for (int i = 0; i < Members; i++)
        {
            int me = i;
            _groups[i] = new Group(_runtimes[i], "bench-toolkit");
            _groups[i].Handlers[Opcode] += (Action<byte[]>)(_ => Interlocked.Increment(ref _delivered[me]));
            _lockGroups[i] = new Group(_runtimes[i], "bench-locks");
            _lockGroups[i].Handlers[Opcode] += (Action<byte[]>)(_ => { }); // the SafeSend round's
            _locks[i] = new GroupLocks(_lockGroups[i]);
        }
        Task.WaitAll([.. _groups.Concat(_lockGroups).Select(g => g.JoinAsync())], Loopback.Limit);
        Loopback.WaitUntil(() => _groups.Concat(_lockGroups).All(g => g.GetView()?.Members.Length == Members), "3-member views");
    }

    [Benchmark(Description = "OrderedSend, until every member delivered")]
    public void OrderedSendRound()
    {
        _groups[0].OrderedSend(Opcode, _arguments);
        WaitForEveryone();
    }

    [Benchmark(Description = "GroupLocks: LockAsync until granted, then Unlock (uncontended; the release is ordered before the next request)")]
    public void LockRound()
    {
        _locks[0].LockAsync("bench").WaitAsync(Loopback.Limit).GetAwaiter().GetResult();
        _locks[0].Unlock("bench");
    }

    [Benchmark(Description = "GroupLocks: LockAsync, then Unlock until the release is applied here (uncontended)")]
    public void LockRoundReleased()
    {
        _locks[0].LockAsync("bench").WaitAsync(Loopback.Limit).GetAwaiter().GetResult();
        _locks[0].Unlock("bench");
        Loopback.WaitUntil(() => _locks[0].HolderOf("bench") == null, "the release");
    }

    [Benchmark(Description = "SafeSend (phi = all) on the lock group, until delivered here")]
    public void SafeSendRound() => _lockGroups[0].SafeSendAsync(Opcode, _arguments).WaitAsync(Loopback.Limit).GetAwaiter().GetResult();

    [Benchmark(Description = "Send, until every member delivered")]
    public void SendRound()
    {
        _groups[0].Send(Opcode, _arguments);
        WaitForEveryone();
    }

    [Benchmark(Description = "CausalSend, until every member delivered")]
    public void CausalSendRound()
    {
        _groups[0].CausalSend(Opcode, _arguments);
        WaitForEveryone();
    }

    [Benchmark(Description = "P2PSend to member 1, until it delivered")]
    public void P2PSendRound()
    {
        long target = ++_sentToOne + _sent;
        _groups[0].P2PSend(_runtimes[1].Address!, Opcode, _arguments);
        Loopback.WaitUntil(() => Interlocked.Read(ref _delivered[1]) >= target, "delivery");
    }

    private void WaitForEveryone()
    {
        long target = ++_sent;
        // Member 1 also counts the P2PSends it received.
        Loopback.WaitUntil(() => Interlocked.Read(ref _delivered[0]) >= target && Interlocked.Read(ref _delivered[1]) >= target + _sentToOne
            && Interlocked.Read(ref _delivered[2]) >= target, "delivery");
    }

    [GlobalCleanup]
    public void Cleanup() => Loopback.StopRuntimes(_runtimes);
}
