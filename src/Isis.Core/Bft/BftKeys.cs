using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;

namespace Isis.Core.Bft;

/// <summary>
/// The pairwise keys of a BFT deployment and the MAC authenticators made with them (Castro and
/// Liskov's choice, which Perpetual-WS keeps: a MAC costs three orders of magnitude less than a
/// signature). Principals a and b share one key, derived (HKDF-SHA256) from the system key and the
/// pair's numbers, so that no third principal can compute it. A message to several receivers
/// carries an authenticator: one tag per receiver, each an HMAC-SHA256 (truncated to 16 bytes) of
/// the message's SHA-256 digest, so the message is hashed once whatever the number of receivers.
/// </summary>
internal sealed class PairKeys
{
    public const int TagSize = 16;
    private readonly byte[] _systemKey;
    private readonly Dictionary<(int, int), byte[]> _keys = new();

    public PairKeys(byte[] systemKey, int self)
    {
        if (systemKey.Length != 32) throw new ArgumentException("a BFT deployment's system key is 32 bytes");
        _systemKey = systemKey;
        Self = self;
    }

    /// <summary>The principal whose keys these are: only pairs it belongs to are ever derived.</summary>
    public int Self { get; }

    private byte[] KeyWith(int other)
    {
        (int a, int b) = Self < other ? (Self, other) : (other, Self);
        if (!_keys.TryGetValue((a, b), out byte[]? key))
        {
            Span<byte> info = stackalloc byte[16 + 8];
            Encoding.ASCII.GetBytes("isis-bft-pair-v1", info);
            BinaryPrimitives.WriteInt32LittleEndian(info[16..], a);
            BinaryPrimitives.WriteInt32LittleEndian(info[20..], b);
            key = HKDF.DeriveKey(HashAlgorithmName.SHA256, _systemKey, 32, salt: [], info: info.ToArray());
            _keys[(a, b)] = key;
        }
        return key;
    }

    /// <summary>The tag for <paramref name="receiver"/> over a message whose digest is <paramref name="digest"/>.</summary>
    public void Tag(int receiver, ReadOnlySpan<byte> digest, Span<byte> tag)
    {
        Span<byte> full = stackalloc byte[32];
        HMACSHA256.HashData(KeyWith(receiver), digest, full);
        full[..TagSize].CopyTo(tag);
    }

    /// <summary>True if <paramref name="tag"/> is <paramref name="sender"/>'s tag for this principal over <paramref name="digest"/>.</summary>
    public bool Verify(int sender, ReadOnlySpan<byte> digest, ReadOnlySpan<byte> tag)
    {
        if (tag.Length != TagSize || sender == Self) return false;
        Span<byte> expected = stackalloc byte[TagSize];
        Tag(sender, digest, expected);
        return CryptographicOperations.FixedTimeEquals(expected, tag);
    }
}
