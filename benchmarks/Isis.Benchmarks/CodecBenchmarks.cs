using System.Buffers;
using BenchmarkDotNet.Attributes;
using Isis.Serialization;

namespace Isis.Benchmarks;

/// <summary>
/// ArgumentCodec on the arguments of the design's running example, <c>g.Send(UPDATE, "apples", 12)</c>:
/// encode (what Group.Send does on the caller's thread) and decode (validate, then materialize both
/// arguments as a handler of type (string, int) would receive them).
/// </summary>
public class CodecBenchmarks
{
    private const int Update = 7;

    // Built once: the params array and the boxed 12 are the caller's allocations, not the codec's.
    private readonly object?[] _args = ["apples", 12];
    private readonly ArrayBufferWriter<byte> _buffer = new(256);
    private byte[] _payload = [];
    private ParameterShape _stringShape = null!;
    private ParameterShape _intShape = null!;

    [GlobalSetup]
    public void Setup()
    {
        _payload = ArgumentCodec.Encode(Update, _args);
        ParameterShape.TryCreate(typeof(string), out ParameterShape? s, out _);
        ParameterShape.TryCreate(typeof(int), out ParameterShape? i, out _);
        _stringShape = s!;
        _intShape = i!;
    }

    /// <summary>Exactly what Group.Send calls: a fresh ArrayBufferWriter, then a copy to a right-sized array.</summary>
    [Benchmark]
    public byte[] Encode_StringInt_ToArray() => ArgumentCodec.Encode(Update, _args);

    /// <summary>The same encoding into a reused buffer: what a pooled Send path could cost.</summary>
    [Benchmark]
    public int Encode_StringInt_ReusedBuffer()
    {
        _buffer.ResetWrittenCount();
        ArgumentCodec.Encode(Update, _args, _buffer);
        return _buffer.WrittenCount;
    }

    /// <summary>Structural validation only (no argument objects created).</summary>
    [Benchmark]
    public int Decode_StringInt_Validate()
    {
        ArgumentCodec.TryReadHeader(_payload, out int opcode, out EncodedArguments args, out _);
        return opcode + args.Count;
    }

    /// <summary>Validation plus both arguments materialized, as dispatch does for a (string, int) handler.</summary>
    [Benchmark]
    public object? Decode_StringInt_Materialize()
    {
        ArgumentCodec.TryReadHeader(_payload, out _, out EncodedArguments args, out _);
        args.TryMaterialize(0, _stringShape, out object? item, out _);
        args.TryMaterialize(1, _intShape, out object? count, out _);
        return item is null ? count : item;
    }
}
