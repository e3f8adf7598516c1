namespace Isis.Transport;

/// <summary>
/// Faults a <see cref="UdpTransport"/> injects into its outgoing datagrams, for tests: the kernels
/// we run on have no tc netem, so delay, duplication and reordering on real sockets come from here.
/// </summary>
internal sealed record TransportFaultOptions
{
    /// <summary>Seed of the random generator that decides every fault, so a run can be repeated.</summary>
    /// <remarks>Defaults to 1.</remarks>
    public int Seed { get; init; } = 1;

    /// <summary>Probability that a datagram is silently not sent.</summary>
    /// <remarks>Defaults to 0.</remarks>
    public double DropProbability { get; init; }

    /// <summary>Probability that a datagram is sent twice.</summary>
    /// <remarks>Defaults to 0.</remarks>
    public double DuplicateProbability { get; init; }

    /// <summary>Probability that a datagram is held back and sent later (which also reorders it).</summary>
    /// <remarks>Defaults to 0.</remarks>
    public double DelayProbability { get; init; }

    /// <summary>Longest a held datagram waits; each gets a uniform delay up to this.</summary>
    /// <remarks>Defaults to 5 ms. Held datagrams go out from the send path (Flush), so the real delay can be longer if nothing is sent.</remarks>
    public TimeSpan MaxDelay { get; init; } = TimeSpan.FromMilliseconds(5);

    /// <summary>Most datagrams held at once; when full, the oldest is sent early.</summary>
    /// <remarks>Defaults to 1,024.</remarks>
    public int MaxHeldDatagrams { get; init; } = 1024;

    /// <summary>Throws <see cref="ArgumentOutOfRangeException"/> for settings that cannot work.</summary>
    public void Validate()
    {
        CheckProbability(DropProbability, nameof(DropProbability));
        CheckProbability(DuplicateProbability, nameof(DuplicateProbability));
        CheckProbability(DelayProbability, nameof(DelayProbability));
        ArgumentOutOfRangeException.ThrowIfLessThan(MaxDelay, TimeSpan.Zero);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(MaxHeldDatagrams);
    }

    private static void CheckProbability(double p, string name)
    {
        if (!(p >= 0 && p <= 1)) throw new ArgumentOutOfRangeException(name, p, "A probability lies in [0, 1].");
    }
}
