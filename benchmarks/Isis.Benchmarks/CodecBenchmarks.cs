using BenchmarkDotNet.Attributes;
using Isis.Core.Common;
using Isis.Serialization;

namespace Isis.Benchmarks;

/// <summary>
/// ArgumentCodec on the arguments of the design's running example, <c>g.Send(UPDATE, "apples", 12)</c>,
/// and on two heavier kinds: a record (a user type without annotations) and an int[256].
/// Encode is what Group.Send does on the caller's thread (into a pooled array, returned here as
/// the protocol returns it once the message is stable); decode is validation, then materializing
/// the arguments as a handler of the matching type would receive them.
/// </summary>
public class CodecBenchmarks
{
    private const int Update = 7;

    // Built once: the params arrays and boxed values are the caller's allocations, not the codec's.
    private readonly object?[] _args = ["apples", 12];
    private readonly object?[] _order = [new BenchOrder("apples", 12, ["fresh", "red"], 1.99m)];
    private readonly object?[] _ints = [Enumerable.Range(0, 256).ToArray()];
    private readonly BufferPool _pool = new();
    private PooledBufferWriter _writer = null!;
    private readonly WireTypeCache _wireTypes = new();
    private byte[] _payload = [];
    private byte[] _orderPayload = [];
    private byte[] _intsPayload = [];
    private ParameterShape _stringShape = null!;
    private ParameterShape _intShape = null!;
    private ParameterShape _orderShape = null!;
    private ParameterShape _intsShape = null!;

    [GlobalSetup]
    public void Setup()
    {
        _writer = new PooledBufferWriter(_pool);
        _payload = ArgumentCodec.Encode(Update, _args);
        _orderPayload = ArgumentCodec.Encode(Update, _order);
        _intsPayload = ArgumentCodec.Encode(Update, _ints);
        _stringShape = Shape(typeof(string));
        _intShape = Shape(typeof(int));
        _orderShape = Shape(typeof(BenchOrder));
        _intsShape = Shape(typeof(int[]));
    }

    private static ParameterShape Shape(Type type) =>
        ParameterShape.TryCreate(type, out ParameterShape? shape, out string? error) ? shape! : throw new InvalidOperationException(error);

    /// <summary>An exact array for the payload (SafeSend, queries and replies keep such a copy).</summary>
    [Benchmark]
    public byte[] Encode_StringInt_ToArray() => ArgumentCodec.Encode(Update, _args);

    /// <summary>Exactly what Group.Send calls: encoding into a pooled array, which goes back to the pool.</summary>
    [Benchmark]
    public int Encode_StringInt_Pooled() => EncodePooled(_args);

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

    [Benchmark]
    public int Encode_Record_Pooled() => EncodePooled(_order);

    [Benchmark]
    public object? Decode_Record_Materialize() => Materialize(_orderPayload, _orderShape);

    [Benchmark]
    public int Encode_IntArray256_Pooled() => EncodePooled(_ints);

    [Benchmark]
    public object? Decode_IntArray256_Materialize() => Materialize(_intsPayload, _intsShape);

    private int EncodePooled(object?[] args)
    {
        (byte[] array, int length) = ArgumentCodec.Encode(Update, args, _writer, _wireTypes);
        _pool.Return(array);
        return length;
    }

    private static object? Materialize(byte[] payload, ParameterShape shape)
    {
        ArgumentCodec.TryReadHeader(payload, out _, out EncodedArguments args, out _);
        args.TryMaterialize(0, shape, out object? value, out _);
        return value;
    }
}

/// <summary>A plain record, as an application would send one (no serializer attributes).</summary>
public sealed record BenchOrder(string Item, int Count, List<string> Tags, decimal Price);
