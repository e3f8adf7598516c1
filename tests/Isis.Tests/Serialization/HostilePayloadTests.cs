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
                // Pure noise, with a plausible header half the time so parsing gets past it.
                payload = new byte[random.Next(0, 96)];
                random.NextBytes(payload);
                if (payload.Length >= 5 && random.Next(2) == 0)
                    payload[4] = (byte)random.Next(0, 4);
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
        var count = new PayloadBuilder(1, 1).Tag(TypeTag.Array).Tag(TypeTag.Int32).Int32(int.MaxValue).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(count, out _, out _, out var error));
        Assert.Contains("cannot fit", error);

        var length = new PayloadBuilder(1, 1).Tag(TypeTag.String).Int32(int.MaxValue).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(length, out _, out _, out error));
        Assert.Contains("exceeds", error);

        var negative = new PayloadBuilder(1, 1).Tag(TypeTag.Bytes).Int32(-1).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(negative, out _, out _, out _));

        var tooMany = new PayloadBuilder(1, 33).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(tooMany, out _, out _, out error));
        Assert.Contains("maximum of 32", error);
    }

    [Fact]
    public void Deep_nesting_is_rejected()
    {
        var b = new PayloadBuilder(1, 1);
        for (int i = 0; i < 1000; i++) b.Tag(TypeTag.List);
        Assert.False(ArgumentCodec.TryReadHeader(b.Tag(TypeTag.Int32).Int32(0).ToArray(), out _, out _, out var error));
        Assert.Contains("nest deeper", error);
    }

    [Theory]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, (byte)TypeTag.Bool, 2 }, "bool byte")]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, (byte)TypeTag.String, 2, 0, 0, 0, 0xC3, 0x28 }, "not valid UTF-8")]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, 99 }, "unknown type tag 99")]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, (byte)TypeTag.Nullable, (byte)TypeTag.Int32, 1, 1, 0, 0, 0 }, "only valid for array")]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, (byte)TypeTag.Array, (byte)TypeTag.Null, 0, 0, 0, 0 }, "only valid for a whole argument")]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, (byte)TypeTag.Array, (byte)TypeTag.String, 1, 0, 0, 0, 2 }, "presence byte")]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, (byte)TypeTag.List, (byte)TypeTag.Nullable, (byte)TypeTag.String, 0, 0, 0, 0 }, "fixed-size")]
    [InlineData(new byte[] { 7, 0, 0, 0, 1, (byte)TypeTag.Json, 0, 0, 0, 0, 0, 0, 0, 0 }, "type key length 0")]
    public void Invalid_structures_are_reported(byte[] payload, string expected)
    {
        Assert.False(ArgumentCodec.TryReadHeader(payload, out int opcode, out _, out var error));
        Assert.Equal(7, opcode);
        Assert.Contains(expected, error);
    }

    [Fact]
    public void Invalid_fixed_values_are_reported()
    {
        var badDecimal = new PayloadBuilder(1, 1).Tag(TypeTag.Decimal).Int32(1).Int32(0).Int32(0).Int32(29 << 16).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(badDecimal, out _, out _, out var error));
        Assert.Contains("decimal", error);

        var badDate = new PayloadBuilder(1, 1).Tag(TypeTag.DateTime).Int64(DateTime.MaxValue.Ticks + 1).Byte(0).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(badDate, out _, out _, out _));
        var badKind = new PayloadBuilder(1, 1).Tag(TypeTag.DateTime).Int64(0).Byte(3).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(badKind, out _, out _, out _));

        var badOffset = new PayloadBuilder(1, 1).Tag(TypeTag.DateTimeOffset).Int64(0).Byte(0x00).Byte(0x10).ToArray();
        Assert.False(ArgumentCodec.TryReadHeader(badOffset, out _, out _, out error));
        Assert.Contains("DateTimeOffset", error);
    }

    [Fact]
    public void Enum_value_out_of_range_for_the_target_fails_to_materialize()
    {
        var payload = new PayloadBuilder(1, 1).Tag(TypeTag.Enum).Text(typeof(Tiny).FullName!).Int64(300).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out _));
        Assert.False(args.TryMaterialize(0, typeof(Tiny), out _, out var error));
        Assert.Contains("out of range", error);
    }

    [Fact]
    public void Invalid_json_becomes_an_error()
    {
        var payload = new PayloadBuilder(1, 1).Tag(TypeTag.Json).Text(typeof(Order).FullName!).Text("{\"Item\": [").ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out _));
        Assert.False(args.TryMaterialize(0, typeof(Order), out _, out var error));
        Assert.Contains("JsonException", error);
    }

    [Fact]
    public void A_hostile_type_key_is_never_resolved_or_instantiated()
    {
        var process = new PayloadBuilder(7, 1).Tag(TypeTag.Json).Text("System.Diagnostics.Process").Text("{\"StartInfo\":{\"FileName\":\"/bin/sh\"}}").ToArray();
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
    public void A_payload_naming_a_type_no_handler_declares_cannot_create_it()
    {
        // Tripwire's constructor throws, so creating one anywhere would surface as an error or exception.
        var payload = new PayloadBuilder(7, 1).Tag(TypeTag.Json).Text(typeof(Tripwire).FullName!).Text("{\"Value\":1}").ToArray();
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
        var key = Encoding.UTF8.GetBytes(typeof(Order).FullName!.ToUpperInvariant());
        var payload = new PayloadBuilder(1, 1).Tag(TypeTag.Json).Blob(key).Text("{}").ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out _));
        Assert.False(args.TryMaterialize(0, typeof(Order), out _, out _));
    }
}
