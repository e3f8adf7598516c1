using Isis.Core.Common;
using Isis.Serialization;
using MessagePack;

namespace Isis.Tests.Serialization;

public sealed class ArgumentCodecTests
{
    private static object? RoundTrip(object? value, Type type)
    {
        var payload = ArgumentCodec.Encode(3, [value]);
        Assert.True(ArgumentCodec.TryReadHeader(payload, out int opcode, out var args, out var error), error);
        Assert.Equal(3, opcode);
        Assert.Equal(1, args.Count);
        Assert.True(args.TryMaterialize(0, type, out var result, out error), error);
        return result;
    }

    /// <summary>Bit-exact identity: keeps NaN payloads, -0.0, decimal scale, DateTime kind and offsets apart.</summary>
    private static object? Identity(object? v) => v switch
    {
        float f => BitConverter.SingleToInt32Bits(f),
        double d => BitConverter.DoubleToInt64Bits(d),
        decimal m => string.Join(",", decimal.GetBits(m)),
        DateTime t => (t.Ticks, t.Kind),
        DateTimeOffset o => (o.Ticks, o.Offset),
        _ => v,
    };

    public static TheoryData<object> Scalars() =>
    [
        true, false,
        (byte)0, byte.MaxValue, sbyte.MinValue, sbyte.MaxValue,
        short.MinValue, short.MaxValue, ushort.MaxValue,
        int.MinValue, int.MaxValue, 0, uint.MaxValue,
        long.MinValue, long.MaxValue, ulong.MaxValue,
        float.NaN, -0.0f, float.PositiveInfinity, float.Epsilon, 3.25f,
        double.NaN, -0.0, double.NegativeInfinity, double.MaxValue, Math.PI,
        decimal.MaxValue, decimal.MinValue, -0.0001m, 1.10m, 0m,
        'a', 'é', '\uD800', char.MaxValue,
        "", "apples", "héllo 🌍 \0 end",
        Guid.Empty, Guid.Parse("0f8fad5b-d9cb-469f-a165-70867728950e"),
        DateTime.MinValue, DateTime.MaxValue, new DateTime(2024, 2, 29, 13, 14, 15, DateTimeKind.Utc).AddTicks(7),
        new DateTime(2020, 1, 1, 0, 0, 0, DateTimeKind.Local), new DateTime(2020, 1, 1, 0, 0, 0, DateTimeKind.Unspecified),
        DateTimeOffset.MinValue, DateTimeOffset.MaxValue, new DateTimeOffset(2021, 6, 1, 8, 30, 0, TimeSpan.FromMinutes(330)),
        new DateTimeOffset(2021, 6, 1, 8, 30, 0, TimeSpan.FromHours(-14)),
        TimeSpan.MinValue, TimeSpan.MaxValue, TimeSpan.FromMilliseconds(1.5),
        Color.Blue, Tiny.Max, Signed.Low, Huge.Big, Perms.Read | Perms.Exec, (Color)42,
    ];

    [Theory]
    [MemberData(nameof(Scalars))]
    public void Scalar_round_trips_bit_exact(object value)
    {
        var result = RoundTrip(value, value.GetType());
        Assert.IsType(value.GetType(), result);
        Assert.Equal(Identity(value), Identity(result));
    }

    [Fact]
    public void Top_level_null_materializes_into_reference_and_nullable_types_only()
    {
        var payload = ArgumentCodec.Encode(1, [null]);
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out var error), error);
        Assert.Equal(TypeTag.Null, args.GetTag(0));
        foreach (var type in new[] { typeof(string), typeof(int?), typeof(int[]), typeof(List<string>), typeof(Order), typeof(Point?), typeof(byte[]) })
        {
            Assert.True(args.TryMaterialize(0, type, out var value, out error), $"{type}: {error}");
            Assert.Null(value);
        }
        Assert.False(args.TryMaterialize(0, typeof(int), out _, out error));
        Assert.Contains("null", error);
        Assert.False(args.TryMaterialize(0, typeof(Point), out _, out _));
    }

    [Fact]
    public void Nullable_parameter_accepts_the_underlying_value()
    {
        Assert.Equal(5, RoundTrip(5, typeof(int?)));
        Assert.Equal(new Point(1, 2), RoundTrip(new Point(1, 2), typeof(Point?)));
        Assert.Equal(Color.Green, RoundTrip(Color.Green, typeof(Color?)));
    }

    [Fact]
    public void Byte_arrays_round_trip()
    {
        Assert.Equal(new byte[] { 1, 2, 255 }, RoundTrip(new byte[] { 1, 2, 255 }, typeof(byte[])));
        Assert.Equal(Array.Empty<byte>(), RoundTrip(Array.Empty<byte>(), typeof(byte[])));
        var big = new byte[300_000];
        new Random(7).NextBytes(big);
        Assert.Equal(big, RoundTrip(big, typeof(byte[])));
    }

    public static TheoryData<object> Collections() =>
    [
        new[] { 1, -2, int.MaxValue },
        Array.Empty<int>(),
        new[] { true, false, true },
        new[] { 1.5, double.NaN },
        new[] { 'x', 'y' },
        new ulong[] { 0, ulong.MaxValue },
        new sbyte[] { -1, 1 },
        new[] { 1.25m, -3m },
        new[] { Guid.Empty, Guid.Parse("0f8fad5b-d9cb-469f-a165-70867728950e") },
        new[] { new DateTime(2001, 1, 1, 0, 0, 0, DateTimeKind.Utc), DateTime.MaxValue },
        new[] { DateTimeOffset.UnixEpoch },
        new[] { TimeSpan.FromDays(1) },
        new[] { "a", null, "" },
        new[] { new byte[] { 1 }, null, [] },
        new[] { new[] { 1, 2 }, null, [] },
        new[] { new[] { new[] { "deep" } } },
        new[] { Color.Red, Color.Blue },
        new[] { Huge.Big },
        new int?[] { 1, null, 3 },
        new Color?[] { null, Color.Green },
        new List<int> { 1, 2, 3 },
        new List<int>(),
        new List<byte> { 9, 8 },
        new List<bool> { true },
        new List<string?> { "x", null },
        new List<int?> { null, 4 },
        new List<List<int>> { new() { 1 }, new() },
        new List<int[]> { new[] { 1, 2 } },
        new List<Color> { Color.Green },
        new List<decimal> { 1.5m },
    ];

    [Theory]
    [MemberData(nameof(Collections))]
    public void Collection_round_trips(object value)
    {
        var result = RoundTrip(value, value.GetType());
        Assert.IsType(value.GetType(), result);
        Assert.Equal(Flatten(value), Flatten(result));
    }

    /// <summary>Structural text for nested collections, so Assert.Equal compares contents.</summary>
    private static string Flatten(object? v) => v switch
    {
        null => "null",
        string s => "\"" + s + "\"",
        System.Collections.IEnumerable e => "[" + string.Join(",", e.Cast<object?>().Select(Flatten)) + "]",
        _ => Identity(v)?.ToString() ?? "null",
    };

    [Fact]
    public void Records_classes_and_library_collections_travel_as_MessagePack()
    {
        var order = new Order("apples", 12, ["fresh", "red"], 1.99m);
        var back = (Order)RoundTrip(order, typeof(Order))!;
        Assert.Equal(order.Item, back.Item);
        Assert.Equal(order.Tags, back.Tags);
        Assert.Equal(order.Price, back.Price);

        Assert.Equal(new Point(3, 4), RoundTrip(new Point(3, 4), typeof(Point)));
        Assert.Equal(new Dictionary<string, int> { ["a"] = 1 }, RoundTrip(new Dictionary<string, int> { ["a"] = 1 }, typeof(Dictionary<string, int>)));
        Assert.Equal((7, "seven"), RoundTrip((7, "seven"), typeof(ValueTuple<int, string>)));
        Assert.True(new HashSet<int> { 1, 2 }.SetEquals((HashSet<int>)RoundTrip(new HashSet<int> { 1, 2 }, typeof(HashSet<int>))!));
        var stamp = new Stamp { At = new DateTime(2020, 5, 6, 7, 8, 9, DateTimeKind.Local), Id = Guid.NewGuid(), Note = "n" };
        var stampBack = (Stamp)RoundTrip(stamp, typeof(Stamp))!;
        Assert.Equal((stamp.At, DateTimeKind.Local, stamp.Id, "n"), (stampBack.At, stampBack.At.Kind, stampBack.Id, stampBack.Note));
    }

    [Fact]
    public void An_annotated_type_travels_by_its_contract_and_a_plain_one_by_its_member_names()
    {
        var quote = new Quote("ACME", 12.5m);
        Assert.Equal(quote, RoundTrip(quote, typeof(Quote)));
        // [MessagePackObject] with [Key(n)]: an array of the keyed members, in key order.
        Assert.Equal("[\"ACME\",\"12.5\"]", ValueAsJson(ArgumentCodec.Encode(1, [quote])));
        // Contractless: a map from member name to value.
        Assert.Equal("{\"X\":3,\"Y\":4}", ValueAsJson(ArgumentCodec.Encode(1, [new Point(3, 4)])));
    }

    /// <summary>The first argument's value as JSON, through MessagePack's own converter.</summary>
    private static string ValueAsJson(byte[] payload)
    {
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out var error), error);
        return MessagePackSerializer.ConvertToJson(payload.AsMemory(args[0].ValueStart, args[0].ValueLength));
    }

    [Fact]
    public void A_payload_is_plain_MessagePack_that_any_reader_can_dump()
    {
        // [opcode, type of "apples" (string = 14), "apples", type of 12 (int = 6), 12, null's type, null, [List, int], [1, 2]]
        var payload = ArgumentCodec.Encode(7, ["apples", 12, null, new List<int> { 1, 2 }]);
        Assert.Equal("[7,14,\"apples\",6,12,null,null,[22,6],[1,2]]", MessagePackSerializer.ConvertToJson(payload));
        Assert.Equal(20, payload.Length);
    }

    [Fact]
    public void An_object_graph_with_a_cycle_fails_at_encode_instead_of_overflowing_the_stack()
    {
        var node = new Link { Name = "a" };
        node.Next = node;
        var e = Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, [node]));
        Assert.Contains("cycle", e.Message);
        Assert.Contains("Argument 0", e.Message);
    }

    [Fact]
    public void A_type_MessagePack_cannot_serialize_fails_at_encode_saying_so()
    {
        var e = Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, [new Opaque(5)]));
        Assert.Contains("Argument 0 (Isis.Tests.Serialization.Opaque) cannot be sent", e.Message);
        Assert.Contains("MessagePack", e.Message);
    }

    [Fact]
    public void Collections_of_object_types_round_trip()
    {
        var list = new List<Order> { new("a", 1, [], 0m), new("b", 2, ["t"], 2m) };
        var back = (List<Order>)RoundTrip(list, typeof(List<Order>))!;
        Assert.Equal(2, back.Count);
        Assert.Equal("b", back[1].Item);

        var points = (Point[])RoundTrip(new[] { new Point(1, 1), new Point(2, 2) }, typeof(Point[]))!;
        Assert.Equal([new Point(1, 1), new Point(2, 2)], points);

        var animals = (Animal?[])RoundTrip(new Animal?[] { new("cat"), null }, typeof(Animal[]))!;
        Assert.Equal("cat", animals[0]!.Name);
        Assert.Null(animals[1]);

        var maybe = (List<Point?>)RoundTrip(new List<Point?> { new Point(5, 6), null }, typeof(List<Point?>))!;
        Assert.Equal([new Point(5, 6), null], maybe);
    }

    [Fact]
    public void Several_arguments_keep_order_and_types()
    {
        var payload = ArgumentCodec.Encode(42, ["apples", 12, null, new List<int> { 1 }, Color.Red]);
        Assert.True(ArgumentCodec.TryReadHeader(payload, out int opcode, out var args, out var error), error);
        Assert.Equal(42, opcode);
        Assert.Equal(5, args.Count);
        Assert.Equal("(string, int, null, List<int>, Isis.Tests.Serialization.Color)", args.DescribeTypes());
        Assert.True(args.TryMaterialize(1, typeof(int), out var twelve, out _));
        Assert.Equal(12, twelve);
    }

    [Fact]
    public void Zero_arguments_is_just_the_header()
    {
        var payload = ArgumentCodec.Encode(-9, []);
        Assert.Equal(new byte[] { 0x91, 0xF7 }, payload); // a one-element array holding the fixint -9
        Assert.True(ArgumentCodec.TryReadHeader(payload, out int opcode, out var args, out _));
        Assert.Equal(-9, opcode);
        Assert.Equal(0, args.Count);
    }

    [Fact]
    public void Materialize_is_strict_about_types()
    {
        var payload = ArgumentCodec.Encode(1, [5, new Order("a", 1, [], 0m), Color.Red, new[] { 1 }]);
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out _));
        Assert.False(args.TryMaterialize(0, typeof(long), out _, out var error));
        Assert.Equal("argument 0 was sent as int, not long", error);
        Assert.False(args.TryMaterialize(1, typeof(Animal), out _, out error));
        Assert.Contains("Isis.Tests.Serialization.Order", error);
        Assert.False(args.TryMaterialize(2, typeof(int), out _, out _));
        Assert.False(args.TryMaterialize(2, typeof(Perms), out _, out _));
        Assert.False(args.TryMaterialize(3, typeof(List<int>), out _, out _));
        Assert.False(args.TryMaterialize(0, typeof(object), out _, out error));
        Assert.Contains("cannot be decoded", error);
        Assert.False(args.TryMaterialize(9, typeof(int), out _, out error));
        Assert.Contains("does not exist", error);
    }

    [Fact]
    public void DescribeTypes_uses_csharp_names()
    {
        Assert.Equal("(string, int)", ArgumentCodec.DescribeTypes([typeof(string), typeof(int)]));
        Assert.Equal("()", ArgumentCodec.DescribeTypes(ReadOnlySpan<Type>.Empty));
        Assert.Equal("(int?, int[][], List<string>, byte[], Isis.Tests.Serialization.Order)",
            ArgumentCodec.DescribeTypes([typeof(int?), typeof(int[][]), typeof(List<string>), typeof(byte[]), typeof(Order)]));
        Assert.Equal("(string, null, long)", ArgumentCodec.DescribeTypes(["x", null, 1L]));
    }

    [Fact]
    public void Pooled_encoding_matches_and_a_failed_one_returns_its_buffer()
    {
        var pool = new BufferPool();
        var writer = new PooledBufferWriter(pool);
        (byte[] array, int length) = ArgumentCodec.Encode(5, ["x", 1], writer);
        Assert.Equal(ArgumentCodec.Encode(5, ["x", 1]), array.AsSpan(0, length).ToArray());
        pool.Return(array);
        Assert.Equal(0, pool.Outstanding);

        Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(5, ["x", IntPtr.Zero], writer));
        Assert.Equal(0, pool.Outstanding);
        (array, length) = ArgumentCodec.Encode(6, [], writer);
        Assert.Equal(new byte[] { 0x91, 6 }, array.AsSpan(0, length).ToArray());
    }

    [Fact]
    public void With_a_thread_cache_encoding_enums_arrays_lists_and_records_allocates_nothing_per_message()
    {
        var pool = new BufferPool();
        var writer = new PooledBufferWriter(pool);
        var cache = new WireTypeCache();
        // The arguments are the caller's: built (and boxed) once, outside the measurement.
        object?[][] messages =
        [
            [Color.Blue, "apples", 12],
            [new[] { 1, 2, 3 }, new List<string> { "a", "b" }],
            [new Order("apples", 12, ["fresh"], 1.5m), new Point(1, 2)],
        ];
        void EncodeAll()
        {
            foreach (object?[] message in messages)
            {
                (byte[] array, _) = ArgumentCodec.Encode(1, message, writer, cache);
                pool.Return(array);
            }
        }
        EncodeAll(); // first use: describes the types, warms the pool and MessagePack's formatters
        long before = GC.GetAllocatedBytesForCurrentThread();
        for (int i = 0; i < 1000; i++) EncodeAll();
        long allocated = GC.GetAllocatedBytesForCurrentThread() - before;
        Assert.True(allocated == 0, $"{allocated} bytes allocated over 3,000 encodes");
    }

    [Fact]
    public void Over_limit_payload_throws_at_encode_naming_the_limit()
    {
        var options = new ArgumentCodecOptions { MaxPayloadBytes = 1000 };
        var e = Assert.ThrowsAny<ArgumentException>(() => ArgumentCodec.Encode(1, [new string('x', 2000)], options));
        Assert.Contains("1000 bytes", e.Message);
        Assert.Contains("MaxPayloadBytes", e.Message);

        // Array header, opcode and the string's tag take a byte each; a str16 header three.
        var exactlyFits = ArgumentCodec.Encode(1, [new string('x', 1000 - 3 - 3)], options);
        Assert.Equal(1000, exactlyFits.Length);

        e = Assert.ThrowsAny<ArgumentException>(() => ArgumentCodec.Encode(1, [new byte[ArgumentCodecOptions.DefaultMaxPayloadBytes]]));
        Assert.Contains("16 MiB", e.Message);
        Assert.ThrowsAny<ArgumentException>(() => ArgumentCodec.Encode(1, [Enumerable.Range(0, 100).Select(i => new Order("o", i, [], 0m)).ToList()], options));
    }

    [Fact]
    public void Too_many_arguments_throws_with_advice()
    {
        var args = new object?[33];
        var e = Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, args));
        Assert.Contains("at most 32", e.Message);
        ArgumentCodec.Encode(1, new object?[32]);
    }

    [Fact]
    public void Unsendable_arguments_throw_with_reasons()
    {
        Assert.Contains("too general", Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, [new object[] { 1 }])).Message);
        Assert.Contains("multi-dimensional", Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, [new int[2, 2]])).Message);
        Assert.Contains("native-sized", Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, [IntPtr.Zero])).Message);
        Assert.Contains("delegates", Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, [(Action)(() => { })])).Message);
        Assert.Contains("unpaired surrogate", Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, ["bad \uD800"])).Message);
        Assert.Contains("nest more than", Assert.Throws<ArgumentException>(() => ArgumentCodec.Encode(1, [new int[1][][][][][][][][]])).Message);
    }

    [Fact]
    public void Options_reject_a_limit_smaller_than_the_header() =>
        Assert.Throws<ArgumentOutOfRangeException>(() => new ArgumentCodecOptions { MaxPayloadBytes = 2 });
}
