namespace Isis.Transport.Framing;

/// <summary>
/// Bounds on what hostile or broken senders can make a receiver hold. Memory is charged for the
/// fragment bytes actually received, not for the size a fragment claims, so a lie costs nothing.
/// </summary>
internal sealed record ReassemblyLimits
{
    /// <summary>Largest packet rebuilt from fragments. Defaults to 64 MiB.</summary>
    public int MaxPacketSize { get; init; } = FrameFormat.DefaultMaxPacketSize;

    /// <summary>Bytes held in all incomplete packets together. Defaults to 256 MiB.</summary>
    public long MaxBufferedBytes { get; init; } = 256L * 1024 * 1024;

    /// <summary>Incomplete packets from one source. Defaults to 64.</summary>
    public int MaxInFlightPerSource { get; init; } = 64;

    /// <summary>Incomplete packets from all sources. Defaults to 1,024.</summary>
    public int MaxInFlight { get; init; } = 1024;

    /// <summary>
    /// Fragments one packet may claim. Defaults to 65,536, enough for a 64 MiB packet in datagrams
    /// of 1 KiB or more.
    /// </summary>
    public int MaxFragmentsPerPacket { get; init; } = 65_536;

    /// <summary>Age (from its first fragment) at which an incomplete packet is dropped. Defaults to 5 s.</summary>
    public long TimeoutMicros { get; init; } = 5_000_000;

    /// <summary>Throws if the limits cannot work together.</summary>
    public void Validate()
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(MaxPacketSize);
        ArgumentOutOfRangeException.ThrowIfLessThan(MaxBufferedBytes, MaxPacketSize);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(MaxInFlightPerSource);
        ArgumentOutOfRangeException.ThrowIfLessThan(MaxInFlight, MaxInFlightPerSource);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(MaxFragmentsPerPacket);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(TimeoutMicros);
    }
}
