using System.Buffers.Binary;
using System.Text;
using Isis.Serialization;

namespace Isis.Tests.Serialization;

/// <summary>Hand-builds payloads, including ones the encoder would never produce.</summary>
internal sealed class PayloadBuilder
{
    private readonly List<byte> _bytes = [];

    public PayloadBuilder(int opcode, int count)
    {
        Int32(opcode);
        _bytes.Add((byte)count);
    }

    public PayloadBuilder Tag(TypeTag tag)
    {
        _bytes.Add((byte)tag);
        return this;
    }

    public PayloadBuilder Byte(byte b)
    {
        _bytes.Add(b);
        return this;
    }

    public PayloadBuilder Int32(int v)
    {
        Span<byte> s = stackalloc byte[4];
        BinaryPrimitives.WriteInt32LittleEndian(s, v);
        _bytes.AddRange(s.ToArray());
        return this;
    }

    public PayloadBuilder Int64(long v)
    {
        Span<byte> s = stackalloc byte[8];
        BinaryPrimitives.WriteInt64LittleEndian(s, v);
        _bytes.AddRange(s.ToArray());
        return this;
    }

    public PayloadBuilder Blob(byte[] b)
    {
        Int32(b.Length);
        _bytes.AddRange(b);
        return this;
    }

    public PayloadBuilder Text(string s) => Blob(Encoding.UTF8.GetBytes(s));

    public byte[] ToArray() => [.. _bytes];
}
