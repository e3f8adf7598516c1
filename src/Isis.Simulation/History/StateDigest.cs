namespace Isis.Simulation;

/// <summary>
/// A replica's state as the checker sees it: the set of messages its application applied in one
/// group, whatever their order, as a count and an order-free hash. Two replicas with the same
/// messages have the same digest; a checkpoint carries the digest of its maker's state at the cut.
/// </summary>
/// <remarks>
/// The hash of a message is FNV-1a over its id's fields, not <see cref="object.GetHashCode"/> (which
/// .NET randomizes per process), so a member process and the test that checks its log agree.
/// </remarks>
internal readonly record struct StateDigest(long Count, ulong Hash)
{
    public static readonly StateDigest Empty = new(0, 0);

    /// <summary>The state after applying <paramref name="message"/>.</summary>
    public StateDigest With(MessageId message) => new(Count + 1, Hash ^ HashOf(message));

    /// <summary>This state and <paramref name="other"/>'s messages together (the two hold different messages).</summary>
    public StateDigest Plus(StateDigest other) => new(Count + other.Count, Hash ^ other.Hash);

    public static ulong HashOf(MessageId m)
    {
        ulong h = 14695981039346656037UL;
        Mix(ref h, m.Sender.Endpoint);
        Mix(ref h, m.Sender.Incarnation);
        Mix(ref h, m.Group.Value);
        Mix(ref h, (ulong)(uint)m.ViewId);
        Mix(ref h, (ulong)m.Seq);
        // A final avalanche, so that XOR-ing many ids does not cancel structure out.
        h ^= h >> 33; h *= 0xff51afd7ed558ccdUL; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53UL; h ^= h >> 33;
        return h;
    }

    private static void Mix(ref ulong h, ulong value)
    {
        for (int i = 0; i < 8; i++, value >>= 8)
        {
            h ^= value & 0xff;
            h *= 1099511628211UL;
        }
    }

    public override string ToString() => $"{Count} messages, hash {Hash:x16}";
}
