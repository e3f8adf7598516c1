using BenchmarkDotNet.Attributes;
using Isis.Dispatch;
using Isis.Serialization;

namespace Isis.Benchmarks;

/// <summary>
/// HandlerTable.Dispatch of a (string, int) message: what each group's delivery thread runs per
/// message (validate, match signatures, materialize, invoke the compiled delegate).
/// </summary>
public class DispatchBenchmarks
{
    private const int Update = 7;
    private readonly HandlerTable _one = new();
    private readonly HandlerTable _three = new();
    private byte[] _payload = [];
    private long _sum;

    [GlobalSetup]
    public void Setup()
    {
        _payload = ArgumentCodec.Encode(Update, ["apples", 12]);
        _one.Register(Update, (Action<string, int>)((item, count) => _sum += item.Length + count));
        // Several handlers on one opcode, picked by signature: two do not match, one does.
        _three.Register(Update, (Action<string>)(item => _sum += item.Length));
        _three.Register(Update, (Action<int, string>)((count, item) => _sum += count));
        _three.Register(Update, (Action<string, int>)((item, count) => _sum += item.Length + count));
    }

    [Benchmark]
    public int Dispatch_OneHandler() => _one.Dispatch(_payload).InvokedCount;

    [Benchmark]
    public int Dispatch_ThreeHandlers_OneMatches() => _three.Dispatch(_payload).InvokedCount;
}
