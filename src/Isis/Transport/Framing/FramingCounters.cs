namespace Isis.Transport.Framing;

/// <summary>
/// What the parser and reassembler accepted and dropped, by reason. Written only by the thread
/// that parses; other threads may read the fields for metrics (64-bit reads do not tear on the
/// 64-bit runtimes we support), seeing slightly stale values.
/// </summary>
internal sealed class FramingCounters
{
    /// <summary>Datagrams dropped whole: bad magic/version, too short, record count or trailing bytes wrong.</summary>
    public long MalformedDatagrams;

    /// <summary>Datagrams dropped whole because a record was unknown or ran past the end.</summary>
    public long BadRecords;

    /// <summary>Fragments whose fields contradict themselves, their siblings or the limits.</summary>
    public long FragmentsOutOfBounds;

    /// <summary>Fragments of packets claiming more than the maximum packet size.</summary>
    public long OversizePackets;

    /// <summary>Incomplete packets dropped because they got too old.</summary>
    public long ReassembliesExpired;

    /// <summary>Incomplete packets dropped to stay within the reassembly limits.</summary>
    public long ReassembliesEvicted;

    /// <summary>Fragments seen before (harmless: duplicates are ignored).</summary>
    public long DuplicateFragments;

    /// <summary>Packets handed to the visitor (whole and reassembled).</summary>
    public long PacketsDelivered;

    /// <summary>Of <see cref="PacketsDelivered"/>, those rebuilt from fragments.</summary>
    public long PacketsReassembled;

    /// <summary>Every drop, whatever the reason (duplicates are not drops).</summary>
    public long TotalDrops =>
        MalformedDatagrams + BadRecords + FragmentsOutOfBounds + OversizePackets + ReassembliesExpired + ReassembliesEvicted;
}
