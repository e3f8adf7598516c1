using System.Buffers;
using System.Buffers.Binary;
using Isis.Core.Common;

namespace Isis.Transport.Framing;

/// <summary>
/// Packs the packets bound for one destination into as few datagrams as possible: a syscall per
/// datagram is the cost that limits message rates, so many small packets share one datagram, and
/// a packet too big for one datagram is split into fragments (see <see cref="FrameFormat"/>).
/// </summary>
/// <remarks>
/// Usage: <see cref="Add"/> packets; <see cref="Seal"/> when about to send; send each
/// <see cref="GetCompleted"/>(i) for i &lt; <see cref="CompletedCount"/>; then
/// <see cref="ReleaseCompleted"/>, after which those memories must no longer be read (their
/// buffers go back to <see cref="ArrayPool{T}.Shared"/> and are reused). Not thread-safe.
/// </remarks>
internal sealed class DatagramBatcher
{
    /// <summary>
    /// A fragment is packed after other records only if this much payload fits; a smaller sliver
    /// would cost a fragment header and a reassembly slot for little gain.
    /// </summary>
    private const int MinPackedFragmentPayload = 512;

    private readonly FragmentIdCounter _fragmentIds;
    private readonly List<Completed> _completed = [];
    private byte[]? _open;
    private int _openLength;
    private int _openRecords;

    private readonly record struct Completed(byte[] Buffer, int Length);

    /// <param name="maxDatagramSize">Largest datagram produced, headers included; at most 65,507.</param>
    /// <param name="fragmentIds">Shared by all batchers of one sender.</param>
    /// <param name="maxPacketSize">Larger packets are refused by <see cref="Add"/>.</param>
    public DatagramBatcher(int maxDatagramSize, FragmentIdCounter fragmentIds, int maxPacketSize = FrameFormat.DefaultMaxPacketSize)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(maxDatagramSize, FrameFormat.MinDatagramSize);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(maxDatagramSize, FrameFormat.MaxUdpPayload);
        ArgumentOutOfRangeException.ThrowIfNegative(maxPacketSize);
        ArgumentNullException.ThrowIfNull(fragmentIds);
        MaxDatagramSize = maxDatagramSize;
        MaxPacketSize = maxPacketSize;
        _fragmentIds = fragmentIds;
    }

    public int MaxDatagramSize { get; }

    public int MaxPacketSize { get; }

    /// <summary>Datagrams ready to send (the open one is not counted until sealed or full).</summary>
    public int CompletedCount => _completed.Count;

    /// <summary>True when nothing was added since the last <see cref="Seal"/>/<see cref="ReleaseCompleted"/>.</summary>
    public bool IsEmpty => _completed.Count == 0 && _openRecords == 0;

    /// <summary>Largest whole packet that fits in one datagram without fragmentation.</summary>
    public int MaxWholePacketSize => MaxDatagramSize - FrameFormat.DatagramHeaderSize - FrameFormat.WholeRecordHeaderSize;

    private int MaxFragmentPayload => MaxDatagramSize - FrameFormat.DatagramHeaderSize - FrameFormat.FragmentRecordHeaderSize;

    private int OpenRemaining => _open is null ? 0 : MaxDatagramSize - _openLength;

    /// <summary>Adds one packet; returns false (adding nothing) if it exceeds <see cref="MaxPacketSize"/>.</summary>
    public bool Add(ReadOnlySpan<byte> packet)
    {
        if (packet.Length > MaxPacketSize) return false;

        if (packet.Length <= MaxWholePacketSize)
        {
            int needed = FrameFormat.WholeRecordHeaderSize + packet.Length;
            if (needed > OpenRemaining || _openRecords == ushort.MaxValue) StartNewDatagram();
            Span<byte> dst = _open.AsSpan(_openLength, needed);
            dst[0] = FrameFormat.WholeRecord;
            BinaryPrimitives.WriteUInt16LittleEndian(dst[1..], (ushort)packet.Length);
            packet.CopyTo(dst[FrameFormat.WholeRecordHeaderSize..]);
            _openLength += needed;
            _openRecords++;
            return true;
        }

        AddFragmented(packet);
        return true;
    }

    private void AddFragmented(ReadOnlySpan<byte> packet)
    {
        // The first fragment may fill the rest of the open datagram; the others take whole
        // datagrams, and the last one leaves its datagram open for the packets that follow.
        int firstPayload = OpenRemaining - FrameFormat.FragmentRecordHeaderSize;
        if (firstPayload < MinPackedFragmentPayload || _openRecords == ushort.MaxValue) firstPayload = 0;
        int full = MaxFragmentPayload;
        int rest = packet.Length - firstPayload;
        long count = (firstPayload > 0 ? 1 : 0) + (rest + (long)full - 1) / full;

        ulong id = _fragmentIds.Next();
        int offset = 0;
        for (uint index = 0; index < count; index++)
        {
            int room = OpenRemaining - FrameFormat.FragmentRecordHeaderSize;
            if (index > 0 || firstPayload == 0)
            {
                StartNewDatagram();
                room = full;
            }
            int length = Math.Min(room, packet.Length - offset);
            Span<byte> dst = _open.AsSpan(_openLength, FrameFormat.FragmentRecordHeaderSize + length);
            dst[0] = FrameFormat.FragmentRecord;
            BinaryPrimitives.WriteUInt64LittleEndian(dst[1..], id);
            BinaryPrimitives.WriteUInt32LittleEndian(dst[9..], index);
            BinaryPrimitives.WriteUInt32LittleEndian(dst[13..], (uint)count);
            BinaryPrimitives.WriteUInt32LittleEndian(dst[17..], (uint)packet.Length);
            BinaryPrimitives.WriteUInt16LittleEndian(dst[21..], (ushort)length);
            packet.Slice(offset, length).CopyTo(dst[FrameFormat.FragmentRecordHeaderSize..]);
            _openLength += dst.Length;
            _openRecords++;
            offset += length;
        }
        Invariant.Check(offset == packet.Length, "fragments cover the packet exactly");
    }

    /// <summary>Closes the open datagram, if it holds anything, so that every added packet is in a completed datagram.</summary>
    public void Seal()
    {
        if (_open is null) return;
        if (_openRecords == 0) return; // keep the empty buffer open for the next packets
        BinaryPrimitives.WriteUInt16LittleEndian(_open.AsSpan(2), (ushort)_openRecords);
        _completed.Add(new Completed(_open, _openLength));
        _open = null;
        _openLength = 0;
        _openRecords = 0;
    }

    /// <summary>The index-th completed datagram; valid until <see cref="ReleaseCompleted"/>.</summary>
    public ReadOnlyMemory<byte> GetCompleted(int index)
    {
        Completed c = _completed[index];
        return new ReadOnlyMemory<byte>(c.Buffer, 0, c.Length);
    }

    /// <summary>Returns the completed datagrams' buffers for reuse; memories taken from them become invalid.</summary>
    public void ReleaseCompleted()
    {
        foreach (Completed c in _completed) ArrayPool<byte>.Shared.Return(c.Buffer);
        _completed.Clear();
    }

    /// <summary>Drops everything pending, open datagram included, and returns all buffers.</summary>
    public void Reset()
    {
        ReleaseCompleted();
        if (_open is not null) ArrayPool<byte>.Shared.Return(_open);
        _open = null;
        _openLength = 0;
        _openRecords = 0;
    }

    private void StartNewDatagram()
    {
        Seal();
        if (_open is not null) return; // an empty open datagram is reused as is
        _open = ArrayPool<byte>.Shared.Rent(MaxDatagramSize);
        _open[0] = FrameFormat.Magic;
        _open[1] = FrameFormat.Version;
        _openLength = FrameFormat.DatagramHeaderSize;
        _openRecords = 0;
    }
}
