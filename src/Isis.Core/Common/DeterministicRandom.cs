namespace Isis.Core.Common;

/// <summary>
/// The only source of randomness the core may use: xoshiro256** seeded by the driver, so that one
/// seed decides a whole simulated run.
/// </summary>
internal sealed class DeterministicRandom
{
    private ulong _s0, _s1, _s2, _s3;

    public DeterministicRandom(ulong seed)
    {
        // SplitMix64 spreads a small seed over the whole state.
        _s0 = SplitMix(ref seed); _s1 = SplitMix(ref seed); _s2 = SplitMix(ref seed); _s3 = SplitMix(ref seed);
    }

    private static ulong SplitMix(ref ulong x)
    {
        ulong z = x += 0x9E3779B97F4A7C15UL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
        return z ^ (z >> 31);
    }

    public ulong NextUInt64()
    {
        ulong result = ulong.RotateLeft(_s1 * 5, 7) * 9;
        ulong t = _s1 << 17;
        _s2 ^= _s0; _s3 ^= _s1; _s1 ^= _s2; _s0 ^= _s3; _s2 ^= t;
        _s3 = ulong.RotateLeft(_s3, 45);
        return result;
    }

    /// <summary>A uniform integer in [0, maxExclusive).</summary>
    public int Next(int maxExclusive)
    {
        if (maxExclusive <= 0) throw new ArgumentOutOfRangeException(nameof(maxExclusive));
        return (int)(NextUInt64() % (ulong)maxExclusive);
    }

    /// <summary>A uniform integer in [min, maxExclusive).</summary>
    public long NextInRange(long min, long maxExclusive) =>
        maxExclusive <= min ? min : min + (long)(NextUInt64() % (ulong)(maxExclusive - min));

    /// <summary>A uniform double in [0, 1).</summary>
    public double NextDouble() => (NextUInt64() >> 11) * (1.0 / (1UL << 53));

    public bool Chance(double probability) => probability > 0 && NextDouble() < probability;
}
