using System.Buffers.Binary;

namespace Isis.Soak;

/// <summary>
/// What the parent and the member processes agree on: the group, the request codes, the payload
/// every message carries, and how an operation is named. An operation is (member index, sequence
/// number); a member's sequence numbers start at <see cref="SeqBase"/> times its incarnation, so a
/// restarted member never reuses one of an earlier incarnation and a sender's numbers grow across
/// its restarts (which lets the checker test each sender's order in the history).
/// </summary>
internal static class Protocol
{
    public const string GroupName = "soak";

    /// <summary>SafeSend: (int member, long seq, byte[] payload); appended to the replicated history.</summary>
    public const int SafeUpdate = 1;

    /// <summary>SafeQuery: same arguments, appended to the history too; each member replies with its index.</summary>
    public const int SafeQueryUpdate = 2;

    /// <summary>Send: same arguments; checked and counted, not part of the durable state.</summary>
    public const int PlainSend = 3;

    /// <summary>OrderedSend: same arguments; checked and counted, not part of the durable state.</summary>
    public const int Ordered = 4;

    /// <summary>Sequence numbers of incarnation k are k * SeqBase + 1, + 2, ...</summary>
    public const long SeqBase = 1_000_000_000L;

    /// <summary>
    /// The payload of (member, seq): bytes anyone can recompute, so every delivery is checked byte
    /// for byte (a payload swapped between messages or cut short is a violation, not a silent change).
    /// </summary>
    public static byte[] Payload(int member, long seq, int size)
    {
        var bytes = new byte[size];
        Fill(bytes, member, seq);
        return bytes;
    }

    /// <summary>Whether <paramref name="payload"/> is the payload of (member, seq) of that size.</summary>
    public static bool PayloadMatches(byte[] payload, int member, long seq, int size)
    {
        if (payload.Length != size) return false;
        Span<byte> expected = payload.Length <= 64 * 1024 ? stackalloc byte[payload.Length] : new byte[payload.Length];
        Fill(expected, member, seq);
        return expected.SequenceEqual(payload);
    }

    private static void Fill(Span<byte> bytes, int member, long seq)
    {
        // A cheap generator seeded by the operation: xorshift over (member, seq).
        ulong state = (ulong)seq * 0x9E3779B97F4A7C15UL ^ (ulong)(member + 1) * 0xBF58476D1CE4E5B9UL;
        if (state == 0) state = 1;
        int i = 0;
        Span<byte> word = stackalloc byte[8];
        while (i < bytes.Length)
        {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            BinaryPrimitives.WriteUInt64LittleEndian(word, state);
            int n = Math.Min(8, bytes.Length - i);
            word[..n].CopyTo(bytes[i..]);
            i += n;
        }
    }
}
