using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;
using Isis.Core.Wire;

namespace Isis.Core.Bft;

/// <summary>
/// One principal's keys in a BFT deployment: a key shared with each other principal, for the MAC
/// authenticators on every message (Castro and Liskov's choice, which Perpetual-WS keeps: a MAC
/// costs three orders of magnitude less than a signature), and, at a replica, a signing key for the
/// one message PBFT must be able to pass on: the view change (<see cref="Sign"/>).
/// </summary>
/// <remarks>
/// A host holds only its own keys: the pair keys it belongs to, its own signing key, and the
/// replicas' public keys. <see cref="Derive"/> computes them from a deployment's master key; a
/// host that held the master key itself could derive every pair's key and speak for anyone, so in
/// production the master key stays with whoever provisions the hosts and each gets its own
/// <see cref="BftKeys"/> (on one machine, for development and tests, deriving on the spot is fine).
/// A message to several receivers carries an authenticator: one tag per receiver, each an
/// HMAC-SHA256 (truncated to 16 bytes) of the message's SHA-256 digest, so the message is hashed
/// once whatever the number of receivers.
/// </remarks>
internal sealed class BftKeys
{
    public const int TagSize = 16;
    public const int SignatureSize = 64; // ECDSA P-256, IEEE P1363: r then s
    private static readonly byte[] CurveOrder = Convert.FromHexString("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551");
    private const byte ExportVersion = 1;
    private readonly Dictionary<int, byte[]> _pairKeys;
    private readonly Dictionary<int, IncrementalHash> _pairs; // one HMAC state per pair key, reused: a one-shot HMAC sets the key up anew each time (twice the cost)
    private readonly ECDsa? _signer;
    private readonly Dictionary<int, ECDsa> _verifiers;

    private BftKeys(int self, Dictionary<int, byte[]> pairs, ECDsa? signer, Dictionary<int, ECDsa> verifiers)
    {
        Self = self;
        _pairKeys = pairs;
        _pairs = pairs.ToDictionary(p => p.Key, p => IncrementalHash.CreateHMAC(HashAlgorithmName.SHA256, p.Value));
        _signer = signer;
        _verifiers = verifiers;
    }

    /// <summary>The principal whose keys these are.</summary>
    public int Self { get; }

    /// <summary>
    /// <paramref name="self"/>'s keys, derived (HKDF-SHA256) from the deployment's 32-byte master key:
    /// the key of each pair it belongs to, its signing key if it is a replica, and every replica's
    /// public key.
    /// </summary>
    public static BftKeys Derive(byte[] masterKey, BftDeployment deployment, int self)
    {
        if (masterKey.Length != 32) throw new ArgumentException("a BFT deployment's master key is 32 bytes");
        var pairs = new Dictionary<int, byte[]>();
        for (int other = 0; other < deployment.Count; other++)
        {
            if (other == self) continue;
            (int a, int b) = self < other ? (self, other) : (other, self);
            pairs[other] = Hkdf(masterKey, "isis-bft-pair-v1", a, b, 0);
        }
        var verifiers = new Dictionary<int, ECDsa>();
        ECDsa? signer = null;
        foreach (BftService service in deployment.Services)
        {
            foreach (int replica in service.Replicas)
            {
                using ECDsa full = SigningKey(masterKey, replica);
                if (replica == self) signer = SigningKey(masterKey, replica);
                verifiers[replica] = ECDsa.Create(new ECParameters { Curve = ECCurve.NamedCurves.nistP256, Q = full.ExportParameters(false).Q });
            }
        }
        return new BftKeys(self, pairs, signer, verifiers);
    }

    private static byte[] Hkdf(byte[] master, string label, int a, int b, int attempt)
    {
        byte[] info = new byte[label.Length + 12];
        Encoding.ASCII.GetBytes(label, info);
        BinaryPrimitives.WriteInt32LittleEndian(info.AsSpan(label.Length), a);
        BinaryPrimitives.WriteInt32LittleEndian(info.AsSpan(label.Length + 4), b);
        BinaryPrimitives.WriteInt32LittleEndian(info.AsSpan(label.Length + 8), attempt);
        return HKDF.DeriveKey(HashAlgorithmName.SHA256, master, 32, salt: [], info: info);
    }

    private static ECDsa SigningKey(byte[] master, int replica)
    {
        for (int attempt = 0; ; attempt++)
        {
            // A private scalar is in [1, n-1]: a 256-bit draw falls outside with odds about 2^-32; draw again then.
            byte[] d = Hkdf(master, "isis-bft-sign-v1", replica, 0, attempt);
            if (d.AsSpan().SequenceCompareTo(CurveOrder) < 0 && d.AsSpan().IndexOfAnyExcept((byte)0) >= 0)
                return ECDsa.Create(new ECParameters { Curve = ECCurve.NamedCurves.nistP256, D = d });
        }
    }

    /// <summary>
    /// These keys as bytes, for the host they belong to (an explicit key set: the provisioner derives
    /// each host's keys and hands each its own, so no host holds the deployment's key): the pair keys,
    /// the signing key if a replica, and the replicas' public keys. Secret: whoever holds them speaks
    /// for this principal.
    /// </summary>
    public byte[] Export()
    {
        PacketWriter w = new PacketWriter().BeginRecord().U8(ExportVersion).I32(Self).I32(_pairKeys.Count);
        foreach (var (principal, key) in _pairKeys.OrderBy(k => k.Key)) w.I32(principal).Bytes(key);
        w.Bytes(_signer?.ExportParameters(includePrivateParameters: true).D ?? []);
        w.I32(_verifiers.Count);
        foreach (var (replica, key) in _verifiers.OrderBy(v => v.Key))
        {
            ECPoint q = key.ExportParameters(false).Q;
            w.I32(replica).Bytes(q.X).Bytes(q.Y);
        }
        return w.FinishRecord();
    }

    /// <summary>Keys that <see cref="Export"/> wrote, or null if <paramref name="data"/> is not such keys.</summary>
    public static BftKeys? Import(ReadOnlySpan<byte> data)
    {
        var r = new WireReader(data);
        if (r.U8() != ExportVersion) return null;
        int self = r.I32();
        var pairs = new Dictionary<int, byte[]>();
        for (int i = 0, n = r.Count(8); i < n && r.Ok; i++)
        {
            int principal = r.I32();
            byte[] key = r.Bytes();
            if (key.Length != 32 || principal == self || !pairs.TryAdd(principal, key)) r.Fail();
        }
        byte[] d = r.Bytes();
        var points = new List<(int Replica, byte[] X, byte[] Y)>();
        for (int i = 0, n = r.Count(12); i < n && r.Ok; i++)
        {
            var point = (r.I32(), r.Bytes(), r.Bytes());
            if (point.Item2.Length != 32 || point.Item3.Length != 32) r.Fail();
            points.Add(point);
        }
        if (!r.Complete || d.Length is not (0 or 32) || points.Select(p => p.Replica).Distinct().Count() != points.Count) return null;
        try
        {
            ECDsa? signer = d.Length == 0 ? null : ECDsa.Create(new ECParameters { Curve = ECCurve.NamedCurves.nistP256, D = d });
            var verifiers = points.ToDictionary(p => p.Replica, p => ECDsa.Create(new ECParameters { Curve = ECCurve.NamedCurves.nistP256, Q = new ECPoint { X = p.X, Y = p.Y } }));
            return new BftKeys(self, pairs, signer, verifiers);
        }
        catch (CryptographicException)
        {
            return null; // a point off the curve, a scalar out of range
        }
    }

    /// <summary>The tag for <paramref name="receiver"/> over a message whose digest is <paramref name="digest"/>.</summary>
    public void Tag(int receiver, ReadOnlySpan<byte> digest, Span<byte> tag)
    {
        Span<byte> full = stackalloc byte[32];
        Mac(_pairs[receiver], digest, full);
        full[..TagSize].CopyTo(tag);
    }

    /// <summary>HMAC-SHA256 of <paramref name="digest"/> under one pair's state. Locked: a node seals and checks on its own thread, but one BftKeys may be handed to several (the simulator, tests), and the state is not thread-safe; uncontended, the lock costs nanoseconds.</summary>
    private static void Mac(IncrementalHash pair, ReadOnlySpan<byte> digest, Span<byte> full)
    {
        lock (pair)
        {
            pair.AppendData(digest);
            pair.GetHashAndReset(full);
        }
    }

    /// <summary>True if <paramref name="tag"/> is <paramref name="sender"/>'s tag for this principal over <paramref name="digest"/>.</summary>
    public bool Verify(int sender, ReadOnlySpan<byte> digest, ReadOnlySpan<byte> tag)
    {
        if (tag.Length != TagSize || !_pairs.TryGetValue(sender, out IncrementalHash? pair)) return false;
        Span<byte> full = stackalloc byte[32];
        Mac(pair, digest, full);
        return CryptographicOperations.FixedTimeEquals(full[..TagSize], tag);
    }

    /// <summary>This replica's signature over <paramref name="data"/> (a view change, which the new primary passes on).</summary>
    public byte[] Sign(ReadOnlySpan<byte> data) =>
        (_signer ?? throw new InvalidOperationException($"principal {Self} is not a replica: it signs nothing"))
            .SignData(data, HashAlgorithmName.SHA256, DSASignatureFormat.IeeeP1363FixedFieldConcatenation);

    /// <summary>True if <paramref name="signature"/> is replica <paramref name="replica"/>'s over <paramref name="data"/>.</summary>
    public bool VerifySignature(int replica, ReadOnlySpan<byte> data, ReadOnlySpan<byte> signature) =>
        signature.Length == SignatureSize && _verifiers.TryGetValue(replica, out ECDsa? key)
        && key.VerifyData(data, signature, HashAlgorithmName.SHA256, DSASignatureFormat.IeeeP1363FixedFieldConcatenation);
}
