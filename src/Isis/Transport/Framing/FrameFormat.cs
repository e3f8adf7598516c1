namespace Isis.Transport.Framing;

/// <summary>
/// The datagram layout shared by <see cref="DatagramBatcher"/> and <see cref="DatagramParser"/>.
/// All integers are little-endian.
/// </summary>
/// <remarks>
/// <code>
/// datagram = magic:u8 version:u8 recordCount:u16 record*
/// record   = 1:u8 length:u16 bytes                                    (a whole packet)
///          | 2:u8 fragmentId:u64 index:u32 count:u32 total:u32 length:u16 bytes   (one fragment)
/// </code>
/// The record count lets the parser tell a truncated datagram from a shorter one, so every
/// truncation is detected and dropped as a whole. Fragments carry no offset: a packet is the
/// concatenation of its fragments in index order, so overlapping or gapped fragments cannot exist.
/// </remarks>
internal static class FrameFormat
{
    public const byte Magic = 0xB5;
    public const byte Version = 1;

    public const byte WholeRecord = 1;
    public const byte FragmentRecord = 2;

    public const int DatagramHeaderSize = 4;
    public const int WholeRecordHeaderSize = 3;
    public const int FragmentRecordHeaderSize = 1 + 8 + 4 + 4 + 4 + 2;

    /// <summary>The largest UDP payload over IPv4 (65,535 - 8 UDP - 20 IP).</summary>
    public const int MaxUdpPayload = 65_507;

    /// <summary>Room for the headers plus a useful amount of fragment payload.</summary>
    public const int MinDatagramSize = 64;

    public const int DefaultMaxDatagramSize = 16 * 1024;
    public const int DefaultMaxPacketSize = 64 * 1024 * 1024;
}
