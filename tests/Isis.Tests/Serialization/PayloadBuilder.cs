using System.Buffers;
using Isis.Serialization;
using MessagePack;

namespace Isis.Tests.Serialization;

/// <summary>Hand-builds MessagePack payloads, including ones the encoder would never produce.</summary>
internal sealed class PayloadBuilder
{
    private readonly ArrayBufferWriter<byte> _bytes = new();

    /// <summary>Starts the payload array for <paramref name="count"/> arguments (a type and a value each).</summary>
    public PayloadBuilder(int opcode, int count)
    {
        Array(1 + 2 * count);
        Int(opcode);
    }

    /// <summary>A scalar's descriptor: its tag alone.</summary>
    public PayloadBuilder Tag(TypeTag tag) => Int((byte)tag);

    /// <summary>The start of a composite descriptor, [tag, parameter]; the parameter follows.</summary>
    public PayloadBuilder Composite(TypeTag tag) => Array(2).Int((byte)tag);

    /// <summary>An Object or enum descriptor naming <paramref name="key"/>.</summary>
    public PayloadBuilder Keyed(TypeTag tag, string key) => Composite(tag).Str(key);

    public PayloadBuilder Array(int count) => With((ref MessagePackWriter w) => w.WriteArrayHeader(count));

    public PayloadBuilder Map(int count) => With((ref MessagePackWriter w) => w.WriteMapHeader(count));

    public PayloadBuilder Int(long v) => With((ref MessagePackWriter w) => w.Write(v));

    public PayloadBuilder Nil() => With((ref MessagePackWriter w) => w.WriteNil());

    public PayloadBuilder Str(string s) => With((ref MessagePackWriter w) => w.Write(s));

    /// <summary>A string header of <paramref name="length"/> bytes followed by <paramref name="utf8"/> (which may be shorter, or not UTF-8).</summary>
    public PayloadBuilder StrRaw(int length, params byte[] utf8) => With((ref MessagePackWriter w) =>
    {
        w.WriteStringHeader(length);
        w.WriteRaw(utf8);
    });

    public PayloadBuilder Raw(params byte[] bytes) => With((ref MessagePackWriter w) => w.WriteRaw(bytes));

    public byte[] ToArray() => _bytes.WrittenSpan.ToArray();

    private delegate void WriteAction(ref MessagePackWriter w);

    private PayloadBuilder With(WriteAction write)
    {
        var w = new MessagePackWriter(_bytes);
        write(ref w);
        w.Flush();
        return this;
    }
}
