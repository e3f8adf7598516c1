using System.Text;
using Isis.Dispatch;
using Isis.Serialization;

namespace Isis.Tests.Serialization;

public sealed class HostilePayloadTests
{
    /// <summary>Types a receiver might try; none may make TryMaterialize throw.</summary>
    private static readonly Type[] Targets =
    [
        typeof(int), typeof(string), typeof(int?), typeof(bool), typeof(decimal), typeof(DateTime), typeof(DateTimeOffset),
        typeof(Color), typeof(Tiny), typeof(byte[]), typeof(int[]), typeof(string[]), typeof(List<int?>), typeof(List<List<int>>),
        typeof(Order), typeof(Point), typeof(Tripwire), typeof(List<Order>), typeof(bool[]), typeof(Color?[]),
    ];

    private static readonly ParameterShape[] Shapes = [.. Targets.Select(t => ParameterShape.TryCreate(t, out var s, out _) ? s! : throw new InvalidOperationException(t.Name))];

    private static byte[] ValidPayload() => ArgumentCodec.Encode(7,
    [
        "apples", 12, null, true, 1.5m, new DateTime(2020, 1, 1, 0, 0, 0, DateTimeKind.Utc), DateTimeOffset.UnixEpoch,
        Color.Blue, new byte[] { 1, 2 }, new[] { 1, 2 }, new[] { "a", null }, new List<int?> { 1, null },
        new List<List<int>> { new() { 3 } }, new Order("o", 1, ["t"], 2m), new Point(1, 2), new[] { true }, new Color?[] { Color.Red, null },
    ]);

    /// <summary>Parses and, if the structure is valid, tries every target type on every argument.</summary>
    private static void ParseEverything(byte[] payload, HandlerTable table)
    {
        if (ArgumentCodec.TryReadHeader(payload, out _, out var args, out var error))
        {
            _ = args.DescribeTypes();
            for (int i = 0; i < args.Count; i++)
            {
                _ = args.GetTypeKey(i);
                foreach (var shape in Shapes)
                {
                    if (!args.TryMaterialize(i, shape, out _, out error))
                        Assert.NotNull(error);
                }
            }
        }
        else
        {
            Assert.False(string.IsNullOrEmpty(error));
        }
        var result = table.Dispatch(payload);
        Assert.True(result.Outcome != DispatchOutcome.HandlerThrew, result.ToString());
    }

    private static HandlerTable TableForFuzz()
    {
        var table = new HandlerTable();
        table.Register(7, (Action<string, int>)((_, _) => { }));
        table.Register(7, (Action<int>)(_ => { }));
        table.Register(7, (Action<Order>)(_ => { }));
        return table;
    }

    [Fact]
    public void Random_bytes_never_throw()
    {
        var random = new Random(20240601);
        var table = TableForFuzz();
        var valid = ValidPayload();
        for (int n = 0; n < 20_000; n++)
        {
            byte[] payload;
            if (n % 2 == 0)
            {
                // Pure noise, with a plausible header half the time (a short array and a fixint opcode) so parsing gets past it.
                payload = new byte[random.Next(0, 96)];
                random.NextBytes(payload);
                if (payload.Length >= 2 && random.Next(2) == 0)
                {
                    payload[0] = (byte)(0x91 + 2 * random.Next(0, 4));
                    payload[1] = 7;
                }
            }
            else
            {
                // A valid payload with a few corrupted bytes reaches deep into the parser.
                payload = (byte[])valid.Clone();
                for (int k = random.Next(1, 4); k > 0; k--)
                    payload[random.Next(payload.Length)] = (byte)random.Next(256);
            }
            ParseEverything(payload, table);
        }
    }

    [Fact]
    public void Every_truncation_of_a_valid_payload_is_rejected_without_throwing()
    {
        var valid = ValidPayload();
        var table = TableForFuzz();
        Assert.True(ArgumentCodec.TryReadHeader(valid, out _, out _, out var error), error);
        for (int length = 0; length < valid.Length; length++)
        {
            var cut = valid[..length];
            Assert.False(ArgumentCodec.TryReadHeader(cut, out _, out _, out error));
            Assert.False(string.IsNullOrEmpty(error));
            var result = table.Dispatch(cut);
            Assert.Equal(DispatchOutcome.Malformed, result.Outcome);
        }
    }

    [Fact]
    public void Trailing_bytes_are_malformed()
    {
        byte[] payload = [.. ArgumentCodec.Encode(1, [5]), 0];
        Assert.False(ArgumentCodec.TryReadHeader(payload, out _, out _, out var error));
        Assert.Contains("1 unexpected bytes", error);
    }

    [Fact]
    public void Huge_counts_and_lengths_are_rejected_before_allocating()
    {
        // An int[] claiming 2^31-1 elements in a few bytes.
        var count = new PayloadBuilder(1, 1).Composite(TypeTag.Array).Tag(TypeTag.Int32).Raw(0xDD, 0x7F, 0xFF, 0xFF, 0xFF).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(count, out _, out _, out var error));
        Assert.Contains("malformed MessagePack", error);

        // A count of 2^32-1, which MessagePack 2.5's skip takes as -1 and so lets through: the read
        // that follows refuses it, so no handler sees it.
        var negative = new PayloadBuilder(1, 1).Composite(TypeTag.Array).Tag(TypeTag.Int32).Raw(0xDD, 0xFF, 0xFF, 0xFF, 0xFF).ToArray();
        if (ArgumentCodec.TryReadHeader(negative, out _, out var args, out _))
            Assert.False(args.TryMaterialize(0, typeof(int[]), out _, out _));
        var table = new HandlerTable();
        table.Register(1, (Action<int[]>)(_ => Assert.Fail("must not run")));
        Assert.Equal(DispatchOutcome.Malformed, table.Dispatch(negative).Outcome);

        var length = new PayloadBuilder(1, 1).Tag(TypeTag.String).Raw(0xDB, 0x7F, 0xFF, 0xFF, 0xFF).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(length, out _, out _, out error));
        Assert.Contains("argument 0", error);

        // A well-formed header claiming an array of 2^31 elements inside a valid Object value: the
        // library checks a count against the bytes left before it allocates.
        var inner = new PayloadBuilder(1, 1).Keyed(TypeTag.Object, typeof(List<int>).FullName!).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader((byte[])[.. inner, 0xDD, 0x7F, 0xFF, 0xFF, 0xFF], out _, out _, out _));

        var tooMany = new PayloadBuilder(1, 33).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(tooMany, out _, out _, out error));
        Assert.Contains("maximum of 32", error);
    }

    [Fact]
    public void Deep_nesting_is_rejected()
    {
        var b = new PayloadBuilder(1, 1);
        for (int i = 0; i < 1000; i++) b.Composite(TypeTag.List);
        Assert.False(ArgumentCodec.TryReadHeader(b.Tag(TypeTag.Int32).Int(0).ToArray(), out _, out _, out var error));
        Assert.Contains("nest deeper", error);
    }

    [Fact]
    public void Deeply_nested_values_neither_overflow_the_stack_nor_decode()
    {
        // A value of 100,000 nested maps { "Inner": ... }: the skip is iterative, and the library's
        // depth limit for untrusted data stops the read of a type that could hold it.
        var b = new PayloadBuilder(7, 1).Keyed(TypeTag.Object, typeof(Nest).FullName!);
        for (int i = 0; i < 100_000; i++) b.Map(1).Str("Inner");
        var payload = b.Nil().ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out var error), error);
        Assert.False(args.TryMaterialize(0, typeof(Nest), out _, out error));
        Assert.Contains("maximum depth", error);
    }

    [Theory]
    [InlineData(new byte[] { 0x93, 7, 1, 2 }, "bool")] // [7, bool, 2]
    [InlineData(new byte[] { 0x93, 7, 14, 0xA2, 0xC3, 0x28 }, "UTF-8")] // [7, string, "\xC3\x28"]
    [InlineData(new byte[] { 0x93, 7, 99, 0 }, "unknown type tag 99")]
    [InlineData(new byte[] { 0x93, 7, 0x92, 23, 6, 1 }, "only valid for array")] // [Nullable, int] at top level
    [InlineData(new byte[] { 0x93, 7, 0x92, 21, 0xC0, 0x90 }, "only valid for a whole argument")] // [Array, null]
    [InlineData(new byte[] { 0x93, 7, 0x92, 22, 0x92, 23, 14, 0x90 }, "must wrap a scalar value type")] // List<string?> as Nullable(string)
    [InlineData(new byte[] { 0x93, 7, 0x92, 24, 0xA0, 0x80 }, "type key length 0")]
    [InlineData(new byte[] { 0x93, 7, 0x92, 6, 1, 1 }, "is a scalar and takes no parameter")]
    [InlineData(new byte[] { 0x93, 7, 24, 0x80 }, "needs a parameter")]
    [InlineData(new byte[] { 0x93, 7, 0x93, 21, 6, 6, 0x90 }, "must be [tag, parameter]")]
    [InlineData(new byte[] { 0x93, 7, 0xC0, 1 }, "must be nil")]
    [InlineData(new byte[] { 0x92, 7, 6 }, "2 elements")]
    public void Invalid_structures_are_reported(byte[] payload, string expected)
    {
        bool parsed = ArgumentCodec.TryReadHeader(payload, out int opcode, out var args, out var error);
        if (parsed)
        {
            // Structurally valid; the value does not fit its declared type, found when it is read.
            Assert.False(args.TryMaterialize(0, (TypeTag)payload[2] == TypeTag.Bool ? typeof(bool) : typeof(string), out _, out error));
        }
        Assert.Equal(7, opcode);
        Assert.Contains(expected, error);
    }

    [Fact]
    public void Values_that_break_their_type_fail_to_materialize()
    {
        // An int where a decimal's string belongs; a DateTime outside its range; an offset beyond 14 hours.
        var badDecimal = new PayloadBuilder(1, 1).Tag(TypeTag.Decimal).Str("1e999").ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(badDecimal, out _, out var args, out var error), error);
        Assert.False(args.TryMaterialize(0, typeof(decimal), out _, out error));
        Assert.Contains("decimal", error);

        var badDate = new PayloadBuilder(1, 1).Tag(TypeTag.DateTime).Int(long.MaxValue).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(badDate, out _, out args, out _));
        Assert.False(args.TryMaterialize(0, typeof(DateTime), out _, out _));

        var badOffset = new PayloadBuilder(1, 1).Tag(TypeTag.DateTimeOffset).Array(2).Raw(0xD6, 0xFF, 0, 0, 0, 0).Int(15 * 60).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(badOffset, out _, out args, out _));
        Assert.False(args.TryMaterialize(0, typeof(DateTimeOffset), out _, out error));
        Assert.Contains("DateTimeOffset", error);

        var nullInt = new PayloadBuilder(1, 1).Composite(TypeTag.Array).Tag(TypeTag.Int32).Array(1).Nil().ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(nullInt, out _, out args, out _));
        Assert.False(args.TryMaterialize(0, typeof(int[]), out _, out _));

        var nilPoint = new PayloadBuilder(1, 1).Keyed(TypeTag.Object, typeof(Point).FullName!).Nil().ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(nilPoint, out _, out args, out _));
        Assert.False(args.TryMaterialize(0, typeof(Point), out _, out _));
    }

    [Fact]
    public void Enum_value_out_of_range_for_the_target_fails_to_materialize()
    {
        var payload = new PayloadBuilder(1, 1).Keyed(TypeTag.Enum, typeof(Tiny).FullName!).Int(300).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out _));
        Assert.False(args.TryMaterialize(0, typeof(Tiny), out _, out var error));
        Assert.Contains("Overflow", error);
    }

    [Fact]
    public void A_value_that_is_not_its_type_becomes_an_error()
    {
        var payload = new PayloadBuilder(1, 1).Keyed(TypeTag.Object, typeof(Order).FullName!).Array(1).Str("x").ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out _));
        Assert.False(args.TryMaterialize(0, typeof(Order), out _, out var error));
        Assert.Contains("cannot read Isis.Tests.Serialization.Order", error);
    }

    [Fact]
    public void A_hostile_type_key_is_never_resolved_or_instantiated()
    {
        var process = new PayloadBuilder(7, 1).Keyed(TypeTag.Object, "System.Diagnostics.Process")
            .Map(1).Str("StartInfo").Map(1).Str("FileName").Str("/bin/sh").ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(process, out _, out var args, out var error), error);
        Assert.Equal("System.Diagnostics.Process", args.GetTypeKey(0));
        Assert.Equal("(System.Diagnostics.Process)", args.DescribeTypes());
        foreach (var t in new[] { typeof(object), typeof(Order), typeof(Tripwire), typeof(System.ComponentModel.Component) })
        {
            Assert.False(args.TryMaterialize(0, t, out var value, out _));
            Assert.Null(value);
        }

        var table = new HandlerTable();
        table.Register(7, (Action<Order>)(_ => Assert.Fail("must not run")));
        var result = table.Dispatch(process);
        Assert.Equal(DispatchOutcome.SignatureMismatch, result.Outcome);
        Assert.Contains("received (System.Diagnostics.Process)", result.Message);
    }

    [Fact]
    public void A_typeless_extension_inside_an_object_member_is_never_resolved()
    {
        // MessagePack's typeless format puts a type name in extension 100; an object-typed member is
        // read with the primitive formatter, which has no typeless support, so the name stays bytes.
        byte[] name = Encoding.UTF8.GetBytes("System.Diagnostics.Process, System.Diagnostics.Process");
        var payload = new PayloadBuilder(7, 1).Keyed(TypeTag.Object, typeof(Envelope).FullName!)
            .Map(1).Str("Body").Raw([0xC7, (byte)(name.Length + 3), 100, 0xD9, (byte)name.Length, .. name, 0x80]).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out var error), error);
        Assert.False(args.TryMaterialize(0, typeof(Envelope), out var value, out error));
        Assert.Null(value);
        Assert.Contains("Envelope", error);

        // The same member holding plain data reads as plain data.
        var plain = new PayloadBuilder(7, 1).Keyed(TypeTag.Object, typeof(Envelope).FullName!).Map(1).Str("Body").Str("hello").ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(plain, out _, out args, out _));
        Assert.True(args.TryMaterialize(0, typeof(Envelope), out value, out error), error);
        Assert.Equal("hello", ((Envelope)value!).Body);
    }

    [Fact]
    public void A_payload_naming_a_type_no_handler_declares_cannot_create_it()
    {
        // Tripwire's constructor throws, so creating one anywhere would surface as an error or exception.
        var payload = new PayloadBuilder(7, 1).Keyed(TypeTag.Object, typeof(Tripwire).FullName!).Map(1).Str("Value").Int(1).ToArray();
        var table = new HandlerTable();
        table.Register(7, (Action<string>)(_ => { }));
        table.Register(7, (Action<Order>)(_ => { }));
        Assert.Equal(DispatchOutcome.SignatureMismatch, table.Dispatch(payload).Outcome);

        // Only a handler that declares Tripwire makes it eligible, and then its failure is contained.
        table.Register(7, (Action<Tripwire>)(_ => { }));
        var result = table.Dispatch(payload);
        Assert.Equal(DispatchOutcome.Malformed, result.Outcome);
        Assert.Contains("Tripwire was instantiated", result.Message);
    }

    [Fact]
    public void Type_keys_are_compared_as_bytes_not_loosely()
    {
        var payload = new PayloadBuilder(1, 1).Keyed(TypeTag.Object, typeof(Order).FullName!.ToUpperInvariant()).Map(0).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out _));
        Assert.False(args.TryMaterialize(0, typeof(Order), out _, out _));
    }
}
