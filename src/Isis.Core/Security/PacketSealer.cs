using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;
using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Security;

/// <summary>What <see cref="PacketSealer.Open(PacketHeader, ReadOnlySpan{byte}, out ReadOnlySpan{byte})"/> found.</summary>
internal enum OpenVerdict
{
    /// <summary>A clear packet of a kind no key protects here: take it as it is.</summary>
    Clear,

    /// <summary>Sealed, authentic, and not seen before: its plaintext is ready.</summary>
    Opened,

    /// <summary>Sealed, but the tag does not verify: forged, corrupted, or sealed with another key.</summary>
    Unauthenticated,

    /// <summary>Authentic, but its counter was seen already (or is too old to tell): a replay.</summary>
    Replayed,

    /// <summary>Clear, but a key protects its kind here: refused unread.</summary>
    KeyRequired,

    /// <summary>Sealed, but this process holds no key for it.</summary>
    NoKey,
}

/// <summary>
/// Authenticated encryption of packets (DESIGN.md section 3, security): AES-256-GCM over each
/// packet's body, with its header as associated data, checked before anything reads the body.
/// </summary>
/// <remarks>
/// <para>Which key: a member-to-member packet (kind Data and above) of a group with a key is sealed
/// with that group's key; every other packet (heartbeats, joins, views, the membership service's
/// own traffic) with the system key, if one is configured. Without a key a kind travels in the clear.</para>
/// <para>A sealed packet is the 44-byte header (version 2, its length counting everything) followed
/// by the encrypted body and a 28-byte trailer: a 4-byte salt, an 8-byte counter and the 16-byte tag.</para>
/// <para>Nonces are never reused: each sender encrypts with its own key, derived (HKDF-SHA256) from
/// the shared key and its incarnation (endpoint and incarnation number, new at every start), and the
/// 12-byte nonce is the salt (4 random bytes the driver draws at start) and a counter that starts at 1
/// for the incarnation and only grows. A repeat would need the same endpoint, incarnation number and
/// salt, and a counter that wrapped 2^64.</para>
/// <para>Replays: a receiver keeps, per sender and key, the highest counter it accepted and which of the
/// 1,024 before it it has seen; a repeated or older counter is dropped. Packets are sealed as they
/// leave, so a retransmission carries a new counter and is never mistaken for a replay.</para>
/// <para>Key rotation (GroupMember.Security.cs): a group's next key is <i>staged</i> before the group
/// moves to it, and a packet that does not open with the current key is tried with the staged ones
/// (a member that installed the view of the move seals with the new key before this one installs
/// it); after the move the old key is <i>retiring</i> and still opens packets until the next view
/// change retires it, so nothing sent around the move is lost. Keys are named by a fingerprint
/// (<see cref="Fingerprint"/>), never sent.</para>
/// </remarks>
internal sealed class PacketSealer
{
    public const byte SealedVersion = PacketHeader.SealedVersion;
    public const int KeySize = 32;
    private const int TagSize = 16;
    private const int TrailerSize = 4 + 8 + TagSize;
    private const int MaxPeersPerKey = 4096;
    private static readonly byte[] KeyLabel = Encoding.ASCII.GetBytes("isis packet key v1");

    private readonly NodeId _self;
    private readonly uint _salt;
    private readonly bool _acceptUnauthenticated;
    private ulong _counter;
    private KeyRing? _system;
    private readonly Dictionary<GroupId, KeyRing> _groups = new();

    /// <summary>The senders whose keys and replay windows this process keeps for <paramref name="group"/>'s key.</summary>
    internal int RememberedSenders(GroupId group) => _groups.TryGetValue(group, out KeyRing? ring) ? ring.Count : 0;
    private readonly Dictionary<GroupId, List<KeyRing>> _staged = new();   // a group's next keys, newest last
    private readonly Dictionary<GroupId, (KeyRing Ring, HashSet<NodeId> Senders)> _retiring = new(); // a group's previous key, until the view change after the move, from the members that moved
    private const int MaxStagedKeys = 4;
    private const int FingerprintSize = 16;
    private static readonly byte[] FingerprintLabel = Encoding.ASCII.GetBytes("isis key fingerprint v1");
    private byte[] _plain = new byte[16 * 1024];

    /// <param name="self">This process's incarnation: its packets are sealed under a key derived for it.</param>
    /// <param name="salt">Four random bytes drawn by the driver at start (the core has no randomness of its own).</param>
    /// <param name="systemKey">The key of the membership service's traffic, or null.</param>
    /// <param name="mutations">Deliberate bugs: <see cref="ProtocolMutations.AcceptUnauthenticated"/>, <see cref="ProtocolMutations.AcceptedSystemKeysIgnored"/>.</param>
    /// <param name="acceptedSystemKeys">System keys that open packets but never seal them (a rolling rotation's other key); only with <paramref name="systemKey"/>.</param>
    public PacketSealer(NodeId self, uint salt, byte[]? systemKey, ProtocolMutations mutations = ProtocolMutations.None, IReadOnlyList<byte[]>? acceptedSystemKeys = null)
    {
        _self = self;
        _salt = salt;
        _acceptUnauthenticated = (mutations & ProtocolMutations.AcceptUnauthenticated) != 0;
        if (systemKey != null) _system = new KeyRing(CheckKey(systemKey), self);
        acceptedSystemKeys ??= [];
        Invariant.Check(acceptedSystemKeys.Count == 0 || systemKey != null, "accepted system keys need a system key to seal with");
        Invariant.Check(acceptedSystemKeys.Count <= MaxAcceptedSystemKeys, $"at most {MaxAcceptedSystemKeys} accepted system keys");
        if ((mutations & ProtocolMutations.AcceptedSystemKeysIgnored) == 0)
        {
            _systemAccepted = [.. acceptedSystemKeys.Select(k => new KeyRing(CheckKey(k), self))
                .Where(r => !r.Fingerprint.AsSpan().SequenceEqual(_system!.Fingerprint))];
        }
    }

    /// <summary>Most system keys a process accepts besides its own: a rotation needs one; a few allow for a rotation begun before the last one ended.</summary>
    public const int MaxAcceptedSystemKeys = 4;

    // Rolling rotation of the system key: keys that open what the system key does, and seal nothing.
    private readonly KeyRing[] _systemAccepted = [];

    /// <summary>True if some key is configured (otherwise every packet travels in the clear).</summary>
    public bool Enabled => _system != null || _groups.Count > 0;

    /// <summary>Packets sealed so far (the counter of this incarnation).</summary>
    public ulong Sealed => _counter;

    /// <summary>Protects a group's member-to-member traffic with <paramref name="key"/> (32 bytes), or removes its key (null).</summary>
    public void SetGroupKey(GroupId group, byte[]? key)
    {
        if (key == null) _groups.Remove(group);
        else _groups[group] = new KeyRing(CheckKey(key), _self);
        _staged.Remove(group);
        _retiring.Remove(group);
    }

    /// <summary>A key's name on the wire: the first 16 bytes of SHA-256 over a label and the key (the key itself never travels).</summary>
    public static byte[] Fingerprint(ReadOnlySpan<byte> key)
    {
        byte[] data = [.. FingerprintLabel, .. key];
        return SHA256.HashData(data)[..FingerprintSize];
    }

    /// <summary>True if <paramref name="fingerprint"/> names a well-formed fingerprint.</summary>
    public static bool IsFingerprint(ReadOnlySpan<byte> fingerprint) => fingerprint.Length == FingerprintSize;

    /// <summary>Holds <paramref name="key"/> as a next key of <paramref name="group"/> (packets sealed with it open from now on); returns its fingerprint.</summary>
    public byte[] StageGroupKey(GroupId group, byte[] key)
    {
        var ring = new KeyRing(CheckKey(key), _self);
        if (!_staged.TryGetValue(group, out List<KeyRing>? staged)) _staged[group] = staged = new List<KeyRing>();
        staged.RemoveAll(r => r.Fingerprint.AsSpan().SequenceEqual(ring.Fingerprint));
        staged.Add(ring);
        if (staged.Count > MaxStagedKeys) staged.RemoveAt(0);
        return ring.Fingerprint;
    }

    /// <summary>True if the group's current key is the one named by <paramref name="fingerprint"/>.</summary>
    public bool UsesGroupKey(GroupId group, ReadOnlySpan<byte> fingerprint) =>
        _groups.TryGetValue(group, out KeyRing? ring) && ring.Fingerprint.AsSpan().SequenceEqual(fingerprint);

    /// <summary>True if this process holds the key named by <paramref name="fingerprint"/> for the group (current or staged).</summary>
    public bool HoldsGroupKey(GroupId group, ReadOnlySpan<byte> fingerprint) =>
        UsesGroupKey(group, fingerprint) || StagedRing(group, fingerprint) != null;

    private KeyRing? StagedRing(GroupId group, ReadOnlySpan<byte> fingerprint)
    {
        if (!_staged.TryGetValue(group, out List<KeyRing>? staged)) return null;
        foreach (KeyRing r in staged)
        {
            if (r.Fingerprint.AsSpan().SequenceEqual(fingerprint)) return r;
        }
        return null;
    }

    /// <summary>
    /// The group moves to its staged key named by <paramref name="fingerprint"/>: it seals from now on;
    /// the current key retires: it still opens packets of <paramref name="movers"/> (the members that
    /// moved with this one, which may not have installed the move yet) until <see cref="RetireGroupKey"/>,
    /// and nobody else's (a process that comes with the old key is refused). Keys staged before this
    /// one are dropped: keys are handed over in order, so the group will never use them, and they
    /// must not open anything. False if this process does not hold that key.
    /// </summary>
    public bool SwitchGroupKey(GroupId group, ReadOnlySpan<byte> fingerprint, IEnumerable<NodeId> movers)
    {
        if (UsesGroupKey(group, fingerprint)) return true;
        KeyRing? next = StagedRing(group, fingerprint);
        if (next == null || !_groups.TryGetValue(group, out KeyRing? current)) return false;
        List<KeyRing> staged = _staged[group];
        staged.RemoveRange(0, staged.IndexOf(next) + 1);
        _retiring[group] = (current, [.. movers]);
        _groups[group] = next;
        return true;
    }

    /// <summary>The view change after a move: the previous key opens nothing any more.</summary>
    public void RetireGroupKey(GroupId group) => _retiring.Remove(group);

    /// <summary>The group's keys by the first bytes of their fingerprints, for diagnostics: "key 1a2b next 3c4d retiring 5e6f" (empty without a key).</summary>
    public string DescribeGroupKeys(GroupId group)
    {
        if (!_groups.TryGetValue(group, out KeyRing? current)) return "";
        static string Short(KeyRing r) => Convert.ToHexString(r.Fingerprint, 0, 2).ToLowerInvariant();
        string text = " key " + Short(current);
        if (_staged.TryGetValue(group, out List<KeyRing>? staged) && staged.Count > 0) text += " next " + string.Join(",", staged.Select(Short));
        if (_retiring.TryGetValue(group, out var previous)) text += " retiring " + Short(previous.Ring);
        return text;
    }

    /// <summary>The fingerprint of the staged key the last packet opened with (null if it opened with the current key, or not at all).</summary>
    public byte[]? LastOpenedWithStagedKey { get; private set; }

    /// <summary>True while the group's previous key still opens packets (between a move and the next view change).</summary>
    public bool IsRetiringGroupKey(GroupId group) => _retiring.ContainsKey(group);

    /// <summary>True if the group's member traffic is sealed with a key of its own.</summary>
    public bool HasGroupKey(GroupId group) => _groups.ContainsKey(group);

    private static byte[] CheckKey(byte[] key)
    {
        Invariant.Check(key.Length == KeySize, $"keys are {KeySize} bytes (AES-256); this one has {key.Length}");
        return (byte[])key.Clone();
    }

    private KeyRing? KeyFor(PacketKind kind, GroupId group) =>
        PacketKinds.IsGroupKeyed(kind) && _groups.Count > 0 && _groups.TryGetValue(group, out KeyRing? ring) ? ring : _system;

    /// <summary>
    /// The key a packet of this kind and group is sealed with: false if none (it travels clear);
    /// else <paramref name="keyGroup"/> is the group whose key it is, or the default id for the system key.
    /// </summary>
    public bool TryKeyOf(PacketKind kind, GroupId group, out GroupId keyGroup)
    {
        keyGroup = default;
        if (!Enabled) return false;
        if (PacketKinds.IsGroupKeyed(kind) && _groups.Count > 0 && _groups.ContainsKey(group))
        {
            keyGroup = group;
            return true;
        }
        return _system != null;
    }

    /// <summary>
    /// Seals <paramref name="packets"/> (whole packets to one destination, all under the key of
    /// <paramref name="keyGroup"/>: see <see cref="TryKeyOf"/>) into one <see cref="PacketKind.Bundle"/>:
    /// one AES-GCM operation for all of them. <paramref name="bodyLength"/> is their total length.
    /// </summary>
    public ReadOnlyMemory<byte> SealBundle(GroupId keyGroup, List<ReadOnlyMemory<byte>> packets, int bodyLength, Outbox outbox)
    {
        KeyRing ring = keyGroup == default ? _system! : _groups[keyGroup];
        if (_bundle.Length < bodyLength) _bundle = new byte[Math.Max(bodyLength, _bundle.Length * 2)];
        int at = 0;
        foreach (ReadOnlyMemory<byte> p in packets)
        {
            p.Span.CopyTo(_bundle.AsSpan(at));
            at += p.Length;
        }
        Span<byte> header = stackalloc byte[PacketHeader.Size];
        new PacketHeader(PacketKind.Bundle, _self, keyGroup, 0, 0).WriteTo(header, 0);
        return SealInto(ring, header, _bundle.AsSpan(0, bodyLength), outbox);
    }

    /// <summary>
    /// The sealed packet (in <paramref name="outbox"/>'s memory): <paramref name="header"/> marked
    /// sealed, with its length counting everything and as associated data; <paramref name="body"/>
    /// encrypted; the trailer (salt, the next counter, the tag); the checksum over it all.
    /// </summary>
    private ReadOnlyMemory<byte> SealInto(KeyRing ring, ReadOnlySpan<byte> header, ReadOnlySpan<byte> body, Outbox outbox)
    {
        int total = PacketHeader.Size + body.Length + TrailerSize;
        Memory<byte> memory = outbox.Allocate(total);
        Span<byte> sealedPacket = memory.Span;
        header.CopyTo(sealedPacket);
        sealedPacket[2] = SealedVersion;
        BinaryPrimitives.WriteInt32LittleEndian(sealedPacket[PacketHeader.LengthOffset..], total);
        BinaryPrimitives.WriteUInt32LittleEndian(sealedPacket[PacketHeader.ChecksumOffset..], 0);
        Span<byte> trailer = sealedPacket[(PacketHeader.Size + body.Length)..];
        BinaryPrimitives.WriteUInt32LittleEndian(trailer, _salt);
        BinaryPrimitives.WriteUInt64LittleEndian(trailer[4..], ++_counter);
        ring.Own.Encrypt(trailer[..12], body, sealedPacket.Slice(PacketHeader.Size, body.Length), trailer[12..], sealedPacket[..PacketHeader.Size]);
        BinaryPrimitives.WriteUInt32LittleEndian(sealedPacket[PacketHeader.ChecksumOffset..], Crc32C.Compute(sealedPacket));
        return memory;
    }

    private byte[] _bundle = new byte[16 * 1024];

    /// <summary>The packet as it should leave: sealed (in <paramref name="outbox"/>'s memory) if a key protects its kind, else unchanged.</summary>
    public ReadOnlyMemory<byte> Seal(ReadOnlyMemory<byte> packet, Outbox outbox)
    {
        if (!Enabled) return packet;
        ReadOnlySpan<byte> clear = packet.Span;
        KeyRing? ring = KeyFor((PacketKind)clear[3], new GroupId(BinaryPrimitives.ReadUInt64LittleEndian(clear[20..])));
        return ring == null ? packet : SealInto(ring, clear[..PacketHeader.Size], clear[PacketHeader.Size..], outbox);
    }

    /// <summary>
    /// Checks a received packet whose header (<paramref name="h"/>) parsed: returns its plaintext in
    /// <paramref name="plain"/> (this packet itself if clear; else memory valid until the next call).
    /// </summary>
    public OpenVerdict Open(PacketHeader h, ReadOnlySpan<byte> packet, out ReadOnlySpan<byte> plain)
    {
        plain = packet;
        LastOpenedWithStagedKey = null;
        bool sealedPacket = packet[2] == SealedVersion;
        KeyRing? ring = KeyFor(h.Kind, h.Group);
        if (!sealedPacket) return ring == null || _acceptUnauthenticated ? OpenVerdict.Clear : OpenVerdict.KeyRequired;
        if (ring == null) return OpenVerdict.NoKey;
        OpenVerdict verdict = OpenWith(ring, h, packet, out plain);
        if (verdict == OpenVerdict.Unauthenticated && ring == _system)
        {
            // A rolling rotation of the system key: the sender may seal with the other key.
            for (int i = 0; i < _systemAccepted.Length && verdict == OpenVerdict.Unauthenticated; i++)
                verdict = OpenWith(_systemAccepted[i], h, packet, out plain);
            return verdict;
        }
        if (verdict != OpenVerdict.Unauthenticated || !PacketKinds.IsGroupKeyed(h.Kind)) return verdict;
        // Around a key rotation: the next keys (a member that moved already), then the previous one (one that has not yet).
        if (_staged.TryGetValue(h.Group, out List<KeyRing>? staged))
        {
            for (int i = staged.Count - 1; i >= 0 && verdict == OpenVerdict.Unauthenticated; i--)
            {
                verdict = OpenWith(staged[i], h, packet, out plain);
                if (verdict == OpenVerdict.Opened) LastOpenedWithStagedKey = staged[i].Fingerprint;
            }
        }
        if (verdict == OpenVerdict.Unauthenticated && _retiring.TryGetValue(h.Group, out var previous) && previous.Senders.Contains(h.Sender))
        {
            verdict = OpenWith(previous.Ring, h, packet, out plain);
        }
        return verdict;
    }

    private OpenVerdict OpenWith(KeyRing ring, PacketHeader h, ReadOnlySpan<byte> packet, out ReadOnlySpan<byte> plain)
    {
        plain = packet;
        int bodyLength = packet.Length - PacketHeader.Size - TrailerSize;
        if (bodyLength < 0) return OpenVerdict.Unauthenticated;
        ReadOnlySpan<byte> trailer = packet[(PacketHeader.Size + bodyLength)..];
        ulong counter = BinaryPrimitives.ReadUInt64LittleEndian(trailer[4..]);
        if (counter == 0) return OpenVerdict.Unauthenticated;
        Peer peer = ring.PeerFor(h.Sender, out bool known);
        if (peer.Window.IsReplay(counter)) return OpenVerdict.Replayed;
        if (_plain.Length < PacketHeader.Size + bodyLength) _plain = new byte[Math.Max(PacketHeader.Size + bodyLength, _plain.Length * 2)];
        Span<byte> header = stackalloc byte[PacketHeader.Size];
        packet[..PacketHeader.Size].CopyTo(header);
        BinaryPrimitives.WriteUInt32LittleEndian(header[PacketHeader.ChecksumOffset..], 0);
        try
        {
            peer.Aes.Decrypt(trailer[..12], packet.Slice(PacketHeader.Size, bodyLength), trailer[12..], _plain.AsSpan(PacketHeader.Size, bodyLength), header);
        }
        catch (AuthenticationTagMismatchException)
        {
            if (!_acceptUnauthenticated) return OpenVerdict.Unauthenticated;
            packet.Slice(PacketHeader.Size, bodyLength).CopyTo(_plain.AsSpan(PacketHeader.Size)); // the deliberate bug: take it anyway
        }
        if (!known) ring.Remember(h.Sender, peer); // only a sender that proved the key takes a place in the cache
        ring.Heard(peer);
        peer.Window.Mark(counter);
        // The plaintext as a clear packet, so everything after this reads it unchanged.
        Span<byte> opened = _plain.AsSpan(0, PacketHeader.Size + bodyLength);
        header.CopyTo(opened);
        opened[2] = PacketHeader.CurrentVersion;
        BinaryPrimitives.WriteInt32LittleEndian(opened[PacketHeader.LengthOffset..], opened.Length);
        // A bundle's own header is not read again (its packets carry their own checksums): no second pass over it.
        if (h.Kind != PacketKind.Bundle) BinaryPrimitives.WriteUInt32LittleEndian(opened[PacketHeader.ChecksumOffset..], Crc32C.Compute(opened));
        plain = opened;
        return OpenVerdict.Opened;
    }

    /// <summary>
    /// <see cref="Open(PacketHeader, ReadOnlySpan{byte}, out ReadOnlySpan{byte})"/> for a node's receive path: on success <paramref name="packet"/> becomes the
    /// plaintext; what is dropped is counted in <paramref name="counters"/>. Returns the verdict
    /// (<see cref="IsDropped"/> tells whether to stop).
    /// </summary>
    public OpenVerdict Open(PacketHeader h, ref ReadOnlySpan<byte> packet, NodeCounters counters)
    {
        OpenVerdict verdict = Open(h, packet, out ReadOnlySpan<byte> plain);
        if (verdict == OpenVerdict.Replayed) counters.DroppedReplayed++;
        else if (IsDropped(verdict)) counters.DroppedUnauthenticated++;
        else packet = plain;
        return verdict;
    }

    /// <summary>True for the verdicts that drop the packet unread.</summary>
    public static bool IsDropped(OpenVerdict verdict) => verdict is OpenVerdict.Replayed or OpenVerdict.Unauthenticated or OpenVerdict.KeyRequired or OpenVerdict.NoKey;

    /// <summary>One shared key: this incarnation's sealing key and the senders' keys derived from it.</summary>
    private sealed class KeyRing(byte[] key, NodeId self)
    {
        private readonly Dictionary<NodeId, Peer> _peers = new();

        public byte[] Fingerprint { get; } = PacketSealer.Fingerprint(key);

        public AesGcm Own { get; } = new(Derive(key, self), TagSize);

        public Peer PeerFor(NodeId sender, out bool known)
        {
            known = _peers.TryGetValue(sender, out Peer? peer);
            return peer ?? new Peer(new AesGcm(Derive(key, sender), TagSize));
        }

        private long _clock; // counts packets opened with this key: when each peer was last heard

        public int Count => _peers.Count;

        public void Heard(Peer peer) => peer.LastHeard = ++_clock;

        /// <summary>
        /// Keeps <paramref name="sender"/>'s key and replay window. Bounded: past
        /// <see cref="MaxPeersPerKey"/> incarnations, the eighth heard from least recently are
        /// forgotten. A live member sends all the time (heartbeats, gossip), so it is never among
        /// them, and its window goes on refusing replays; only incarnations long silent (failed,
        /// left, or expelled and firewalled) restart theirs.
        /// </summary>
        public void Remember(NodeId sender, Peer peer)
        {
            if (_peers.Count >= MaxPeersPerKey)
            {
                foreach (var (old, oldPeer) in _peers.OrderBy(p => p.Value.LastHeard).Take(MaxPeersPerKey / 8).ToList())
                {
                    oldPeer.Aes.Dispose();
                    _peers.Remove(old);
                }
            }
            _peers[sender] = peer;
        }
    }

    private static byte[] Derive(byte[] key, NodeId sender)
    {
        Span<byte> info = stackalloc byte[KeyLabel.Length + 12];
        KeyLabel.CopyTo(info);
        BinaryPrimitives.WriteUInt64LittleEndian(info[KeyLabel.Length..], sender.Endpoint);
        BinaryPrimitives.WriteUInt32LittleEndian(info[(KeyLabel.Length + 8)..], sender.Incarnation);
        return HKDF.DeriveKey(HashAlgorithmName.SHA256, key, KeySize, salt: [], info: info.ToArray());
    }

    private sealed class Peer(AesGcm aes)
    {
        public AesGcm Aes { get; } = aes;

        public ReplayWindow Window { get; } = new();

        public long LastHeard { get; set; }
    }
}

/// <summary>The counters a receiver accepted from one sender: the highest, and which of the 1,024 before it.</summary>
internal sealed class ReplayWindow
{
    public const int Size = 1024;
    private readonly ulong[] _seen = new ulong[Size / 64];
    private ulong _highest;

    public bool IsReplay(ulong counter)
    {
        if (counter > _highest) return false;
        ulong back = _highest - counter;
        if (back >= Size) return true; // too old to tell: treated as a replay
        return (_seen[(int)(counter % Size) / 64] & (1UL << (int)(counter % 64))) != 0;
    }

    public void Mark(ulong counter)
    {
        if (counter > _highest)
        {
            // Forget the bits the window slides past.
            ulong advance = counter - _highest;
            if (advance >= Size) Array.Clear(_seen);
            else
            {
                for (ulong c = _highest + 1; c <= counter; c++) _seen[(int)(c % Size) / 64] &= ~(1UL << (int)(c % 64));
            }
            _highest = counter;
        }
        _seen[(int)(counter % Size) / 64] |= 1UL << (int)(counter % 64);
    }
}
