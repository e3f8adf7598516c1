using System.Buffers;
using Isis.Serialization;
using MessagePack;

namespace Isis.Tests.Serialization;

/// <summary>The span readers must agree with MessagePack-CSharp's reader wherever they answer at all.</summary>
public sealed class MessagePackSpanTests
{
    private static byte[] Token(Action<MessagePackWriterBox> write)
    {
        var buffer = new ArrayBufferWriter<byte>();
        var box = new MessagePackWriterBox(buffer);
        write(box);
        return buffer.WrittenSpan.ToArray();
    }

    /// <summary>Writes one token with the library's writer (a class, so lambdas can use it).</summary>
    public sealed class MessagePackWriterBox(IBufferWriter<byte> output)
    {
        public void Do(WriteAction action)
        {
            var w = new MessagePackWriter(output);
            action(ref w);
            w.Flush();
        }
    }

    public delegate void WriteAction(ref MessagePackWriter w);

    /// <summary>Tokens the library writes for many values, and random bytes that are mostly not valid at all.</summary>
    private static IEnumerable<byte[]> Tokens()
    {
        var random = new Random(4242);
        long[] integers = [0, 1, -1, 127, 128, -32, -33, 255, 256, -128, -129, 65535, 65536, -32768, -32769, int.MaxValue, int.MinValue, uint.MaxValue, long.MaxValue, long.MinValue];
        foreach (long v in integers)
        {
            yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(v)));
            yield return Token(b => b.Do((ref MessagePackWriter w) => w.WriteInt64(v))); // always the 9-byte form
        }
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(ulong.MaxValue)));
        foreach (int length in new[] { 0, 1, 31, 32, 255, 256, 65535, 65536 })
        {
            string text = new('é', length / 2);
            yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(text)));
            byte[] bin = new byte[length];
            yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(bin)));
            yield return Token(b => b.Do((ref MessagePackWriter w) => w.WriteArrayHeader(length)));
        }
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.WriteNil()));
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(true)));
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(1.5f)));
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(2.5)));
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.Write(DateTime.UnixEpoch)));
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.WriteExtensionFormat(new ExtensionResult(5, new byte[300]))));
        yield return Token(b => b.Do((ref MessagePackWriter w) => w.WriteMapHeader(3)));
        // Whole nested values: arrays and maps of scalars and of each other.
        yield return MessagePackSerializer.Serialize(new Dictionary<string, int[]> { ["a"] = [1, 300, -5], ["b"] = [] });
        yield return MessagePackSerializer.Serialize(new object[] { 1, "x", new object[] { 2.5, null!, new byte[3] }, new Dictionary<int, string> { [1] = "y" } });
        yield return MessagePackSerializer.Serialize(Enumerable.Range(0, 70_000).ToArray());
        for (int i = 0; i < 20_000; i++)
        {
            var bytes = new byte[random.Next(0, 12)];
            random.NextBytes(bytes);
            yield return bytes;
        }
    }

    [Fact]
    public void Span_readers_agree_with_the_library_reader()
    {
        int checkedCount = 0;
        foreach (byte[] token in Tokens())
        {
            foreach (byte[] t in new[] { token, token.Length > 1 ? token[..^1] : token })
            {
                int length = MessagePackSpan.ScalarLength(t);
                if (length >= 0)
                {
                    var r = new MessagePackReader(t);
                    r.Skip();
                    Assert.Equal(r.Consumed, length);
                    checkedCount++;
                }
                int whole = MessagePackSpan.ValueLength(t);
                if (whole >= 0)
                {
                    var r = new MessagePackReader(t);
                    r.Skip();
                    Assert.Equal(r.Consumed, whole);
                }
                if (MessagePackSpan.TryReadMapHeader(t, out int pairs, out int header))
                {
                    var r = new MessagePackReader(t);
                    Assert.True(r.TryReadMapHeader(out int expected));
                    Assert.Equal((expected, r.Consumed), (pairs, (long)header));
                }
                if (MessagePackSpan.TryReadInt64(t, out long value, out int n))
                {
                    var r = new MessagePackReader(t);
                    Assert.Equal(r.ReadInt64(), value);
                    Assert.Equal(r.Consumed, n);
                }
                if (MessagePackSpan.TryReadStringSpan(t, out ReadOnlySpan<byte> utf8, out n))
                {
                    var r = new MessagePackReader(t);
                    Assert.True(r.TryReadStringSpan(out ReadOnlySpan<byte> expected));
                    Assert.True(expected.SequenceEqual(utf8));
                    Assert.Equal(r.Consumed, n);
                }
                if (MessagePackSpan.TryReadArrayHeader(t, out int count, out n))
                {
                    var r = new MessagePackReader(t);
                    Assert.True(r.TryReadArrayHeader(out int expected));
                    Assert.Equal(expected, count);
                    Assert.Equal(r.Consumed, n);
                }
            }
        }
        Assert.True(checkedCount > 1000, $"only {checkedCount} scalar tokens were compared");
    }

    [Fact]
    public void Integers_and_doubles_are_written_byte_for_byte_as_the_library_writes_them()
    {
        var random = new Random(99);
        IEnumerable<long> values = [0, 1, 127, 128, 255, 256, 65535, 65536, uint.MaxValue, (long)uint.MaxValue + 1, long.MaxValue,
            -1, -32, -33, -128, -129, short.MinValue, short.MinValue - 1, int.MinValue, (long)int.MinValue - 1, long.MinValue];
        foreach (long v in values.Concat(Enumerable.Range(0, 5000).Select(_ => random.NextInt64(long.MinValue, long.MaxValue) >> random.Next(64))))
        {
            byte[] expected = Token(b => b.Do((ref MessagePackWriter w) => w.Write(v)));
            var ours = new byte[9];
            int n = MessagePackSpan.WriteInt64(ours, v);
            Assert.Equal(expected, ours[..n]);
            if (v is >= int.MinValue and <= int.MaxValue)
                Assert.Equal(Token(b => b.Do((ref MessagePackWriter w) => w.Write((int)v))), ours[..n]);
        }
        foreach (double d in new[] { 0.0, -0.0, double.NaN, double.MaxValue, double.Epsilon, Math.PI })
        {
            var ours = new byte[9];
            MessagePackSpan.WriteDouble(ours, d);
            Assert.Equal(Token(b => b.Do((ref MessagePackWriter w) => w.Write(d))), ours);
        }
    }

    [Fact]
    public void Numeric_arrays_and_lists_write_what_the_library_writes_and_read_any_valid_encoding()
    {
        var random = new Random(5);
        int[] ints = [.. Enumerable.Range(0, 3000).Select(_ => random.Next(int.MinValue, int.MaxValue) >> random.Next(32))];
        long[] longs = [.. Enumerable.Range(0, 3000).Select(_ => random.NextInt64(long.MinValue, long.MaxValue) >> random.Next(64))];
        double[] doubles = [.. Enumerable.Range(0, 3000).Select(_ => random.NextDouble() * 1e6), double.NaN, -0.0];

        // The library's standard resolver writes the same bytes (so other MessagePack readers agree).
        Assert.Equal(MessagePackSerializer.Serialize(ints, MessagePack.Resolvers.StandardResolver.Options), ValueBytes(ints));
        Assert.Equal(MessagePackSerializer.Serialize(longs.ToList(), MessagePack.Resolvers.StandardResolver.Options), ValueBytes(longs.ToList()));
        Assert.Equal(MessagePackSerializer.Serialize(doubles, MessagePack.Resolvers.StandardResolver.Options), ValueBytes(doubles));

        Assert.Equal(ints, RoundTrip(ints));
        Assert.Equal(longs.ToList(), RoundTrip(longs.ToList()));
        Assert.Equal(doubles.Select(BitConverter.DoubleToInt64Bits), RoundTrip(doubles).Select(BitConverter.DoubleToInt64Bits));
        Assert.Empty(RoundTrip(Array.Empty<int>()));

        // Valid MessagePack the span path does not take (doubles as float32, ints in the 9-byte form)
        // is read by the library's reader instead.
        var odd = new PayloadBuilder(1, 2)
            .Composite(TypeTag.Array).Tag(TypeTag.Double).Raw(0x92, 0xCA, 0x3F, 0xC0, 0, 0, 0x01)
            .Composite(TypeTag.List).Tag(TypeTag.Int32).Raw(0x92, 0xD3, 0, 0, 0, 0, 0, 0, 0, 7, 0xCF, 0, 0, 0, 0, 0, 0, 0, 8).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(odd, out _, out var args, out var error), error);
        Assert.True(args.TryMaterialize(0, typeof(double[]), out object? d, out error), error);
        Assert.Equal([1.5, 1.0], (double[])d!);
        Assert.True(args.TryMaterialize(1, typeof(List<int>), out object? l, out error), error);
        Assert.Equal([7, 8], (List<int>)l!);

        // An element out of range for int is refused, not truncated.
        var wide = new PayloadBuilder(1, 1).Composite(TypeTag.Array).Tag(TypeTag.Int32).Raw(0x91, 0xCE, 0xFF, 0xFF, 0xFF, 0xFF).ToArray();
        Assert.True(ArgumentCodec.TryReadHeader(wide, out _, out args, out _));
        Assert.False(args.TryMaterialize(0, typeof(int[]), out _, out _));
    }

    private static byte[] ValueBytes(object value)
    {
        byte[] payload = ArgumentCodec.Encode(1, [value]);
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out var error), error);
        return payload[args[0].ValueStart..(args[0].ValueStart + args[0].ValueLength)];
    }

    private static T RoundTrip<T>(T value)
    {
        byte[] payload = ArgumentCodec.Encode(1, [value]);
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out var args, out var error), error);
        Assert.True(args.TryMaterialize(0, typeof(T), out object? back, out error), error);
        return (T)back!;
    }
}
