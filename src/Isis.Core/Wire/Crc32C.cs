using System.Buffers.Binary;
using System.Numerics;

namespace Isis.Core.Wire;

/// <summary>CRC-32C (Castagnoli), using the hardware instruction where the CPU has it.</summary>
internal static class Crc32C
{
    public static uint Compute(ReadOnlySpan<byte> data) => Append(0xFFFFFFFFu, data) ^ 0xFFFFFFFFu;

    /// <summary>Continues a running (not yet finalised) CRC over more bytes.</summary>
    public static uint Append(uint crc, ReadOnlySpan<byte> data)
    {
        while (data.Length >= 8)
        {
            crc = BitOperations.Crc32C(crc, BinaryPrimitives.ReadUInt64LittleEndian(data));
            data = data[8..];
        }
        foreach (byte b in data) crc = BitOperations.Crc32C(crc, b);
        return crc;
    }
}
