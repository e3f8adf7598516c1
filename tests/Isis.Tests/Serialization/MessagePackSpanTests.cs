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
}
