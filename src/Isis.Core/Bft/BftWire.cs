using System.Buffers.Binary;
using System.Security.Cryptography;

namespace Isis.Core.Bft;

/// <summary>The kinds of BFT message (PBFT's, Castro and Liskov 1999, and the client's).</summary>
internal enum BftKind : byte
{
    /// <summary>A client's request to a service: client, request number, operation.</summary>
    Request = 1,

    /// <summary>The primary assigns a sequence number to a request in a view: view, seq, the request's packet.</summary>
    PrePrepare = 2,

    /// <summary>A backup accepted the primary's assignment: view, seq, digest.</summary>
    Prepare = 3,

    /// <summary>A replica holds a prepared certificate: view, seq, digest.</summary>
    Commit = 4,

    /// <summary>A replica's reply to a client: view, request number, result.</summary>
    Reply = 5,

    /// <summary>A replica executed through seq, with this history digest: seq, digest.</summary>
    Checkpoint = 6,

    /// <summary>A replica behind a certified checkpoint asks for the requests executed from seq to seq.</summary>
    Fetch = 7,

    /// <summary>The requests asked for: (seq, request packet) pairs, checked by the asker against the certified digest.</summary>
    FetchReply = 8,

    /// <summary>A replica moves to a new view: what it holds (checkpoints, prepared and pre-prepared requests), signed so the new primary can pass it on.</summary>
    ViewChange = 9,

    /// <summary>The new primary starts its view: the 2f+1 signed view changes from which every replica computes the same new view.</summary>
    NewView = 10,

    /// <summary>A replica of a calling service calls a target service (Perpetual): caller id, call number, operation; to the target's primary, and to every target replica when sent again.</summary>
    Call = 11,

    /// <summary>A target replica's reply to a call: caller, target, number, result, tagged for every caller replica; inside a <see cref="ReplyBundle"/>, or straight to a caller replica that sent its call again.</summary>
    CallReply = 12,

    /// <summary>A caller replica gave up waiting for a call: target, number; to the other replicas of its service.</summary>
    CallAbort = 13,

    /// <summary>A replica hands its primary a proposal it assembled (a reply certificate): the proposal.</summary>
    Submit = 14,

    /// <summary>
    /// Call replies passed on whole (each keeps its own tags): from a target replica to its service's
    /// responder (its primary), one reply; from the responder to every caller replica, f+1 matching ones.
    /// </summary>
    ReplyBundle = 15,
}

/// <summary>
/// The envelope of every BFT message: magic, kind, sender, the body's length, the body, then the
/// authenticator (one tag per receiver over the digest of all that precedes it). Receivers check
/// their own tag; a packet that does not parse or whose tag does not verify is dropped and counted.
/// </summary>
internal static class BftWire
{
    public const byte Magic = 0xB7;
    private const int HeaderSize = 1 + 1 + 4 + 4;
    public const int DigestSize = 32;

    /// <summary>Seals <paramref name="body"/> as a <paramref name="kind"/> message from the keys' owner to <paramref name="receivers"/>.</summary>
    public static byte[] Seal(BftKeys keys, BftKind kind, ReadOnlySpan<byte> body, ReadOnlySpan<int> receivers)
    {
        int signed = HeaderSize + body.Length;
        var packet = new byte[signed + 4 + receivers.Length * (4 + BftKeys.TagSize)];
        packet[0] = Magic;
        packet[1] = (byte)kind;
        BinaryPrimitives.WriteInt32LittleEndian(packet.AsSpan(2), keys.Self);
        BinaryPrimitives.WriteInt32LittleEndian(packet.AsSpan(6), body.Length);
        body.CopyTo(packet.AsSpan(HeaderSize));
        Span<byte> digest = stackalloc byte[DigestSize];
        SHA256.HashData(packet.AsSpan(0, signed), digest);
        BinaryPrimitives.WriteInt32LittleEndian(packet.AsSpan(signed), receivers.Length);
        int at = signed + 4;
        foreach (int r in receivers)
        {
            BinaryPrimitives.WriteInt32LittleEndian(packet.AsSpan(at), r);
            keys.Tag(r, digest, packet.AsSpan(at + 4, BftKeys.TagSize));
            at += 4 + BftKeys.TagSize;
        }
        return packet;
    }

    /// <summary>
    /// Opens a message addressed (among others) to the keys' owner: its kind, sender and body, if it
    /// parses and carries a valid tag from its claimed sender for this principal.
    /// </summary>
    public static bool TryOpen(BftKeys keys, ReadOnlySpan<byte> packet, out BftKind kind, out int sender, out ReadOnlySpan<byte> body)
    {
        kind = default;
        sender = -1;
        body = default;
        if (packet.Length < HeaderSize + 4 || packet[0] != Magic) return false;
        int length = BinaryPrimitives.ReadInt32LittleEndian(packet[6..]);
        if (length < 0 || length > packet.Length - HeaderSize - 4) return false;
        int signed = HeaderSize + length;
        int count = BinaryPrimitives.ReadInt32LittleEndian(packet[signed..]);
        if (count < 0 || count > (packet.Length - signed - 4) / (4 + BftKeys.TagSize) || packet.Length != signed + 4 + count * (4 + BftKeys.TagSize)) return false;
        sender = BinaryPrimitives.ReadInt32LittleEndian(packet[2..]);
        for (int i = 0, at = signed + 4; i < count; i++, at += 4 + BftKeys.TagSize)
        {
            if (BinaryPrimitives.ReadInt32LittleEndian(packet[at..]) != keys.Self) continue;
            Span<byte> digest = stackalloc byte[DigestSize];
            SHA256.HashData(packet[..signed], digest);
            if (!keys.Verify(sender, digest, packet.Slice(at + 4, BftKeys.TagSize))) return false;
            kind = (BftKind)packet[1];
            body = packet.Slice(HeaderSize, length);
            return true;
        }
        return false;
    }

    /// <summary>The digest of the null request, with which a new view fills a sequence number nobody prepared a request at.</summary>
    public static readonly byte[] NullDigest = SHA256.HashData(ReadOnlySpan<byte>.Empty);

    /// <summary>The digest that names a request in PBFT's messages: SHA-256 of its body (client, number, operation), not of its authenticator.</summary>
    public static byte[] RequestDigest(ReadOnlySpan<byte> requestBody) => SHA256.HashData(requestBody);

    /// <summary>A request's body: client, number, operation.</summary>
    public static byte[] RequestBody(int client, long number, ReadOnlySpan<byte> operation)
    {
        var body = new byte[4 + 8 + operation.Length];
        BinaryPrimitives.WriteInt32LittleEndian(body, client);
        BinaryPrimitives.WriteInt64LittleEndian(body.AsSpan(4), number);
        operation.CopyTo(body.AsSpan(12));
        return body;
    }

    public static bool TryReadRequest(ReadOnlySpan<byte> body, out int client, out long number, out ReadOnlySpan<byte> operation)
    {
        client = 0;
        number = 0;
        operation = default;
        if (body.Length < 12) return false;
        client = BinaryPrimitives.ReadInt32LittleEndian(body);
        number = BinaryPrimitives.ReadInt64LittleEndian(body[4..]);
        operation = body[12..];
        return number > 0;
    }

    /// <summary>
    /// The shape of most bodies: two numbers, then bytes to the end. A vote (prepare, commit,
    /// checkpoint) is view, seq, digest; a pre-prepare is view, seq, the client's whole request
    /// packet (so each backup checks the client's tag for itself); a reply is view, request number, result.
    /// </summary>
    public static byte[] TwoNumbersThen(long first, long second, ReadOnlySpan<byte> rest)
    {
        var body = new byte[16 + rest.Length];
        BinaryPrimitives.WriteInt64LittleEndian(body, first);
        BinaryPrimitives.WriteInt64LittleEndian(body.AsSpan(8), second);
        rest.CopyTo(body.AsSpan(16));
        return body;
    }

    public static bool TryReadTwoNumbersThen(ReadOnlySpan<byte> body, out long first, out long second, out ReadOnlySpan<byte> rest)
    {
        first = second = 0;
        rest = default;
        if (body.Length < 16) return false;
        first = BinaryPrimitives.ReadInt64LittleEndian(body);
        second = BinaryPrimitives.ReadInt64LittleEndian(body[8..]);
        rest = body[16..];
        return true;
    }

    public static byte[] Vote(long view, long seq, ReadOnlySpan<byte> digest) => TwoNumbersThen(view, seq, digest);

    public static bool TryReadVote(ReadOnlySpan<byte> body, out long view, out long seq, out ReadOnlySpan<byte> digest) =>
        TryReadTwoNumbersThen(body, out view, out seq, out digest) && digest.Length == DigestSize && view >= 0 && seq > 0;

    public static byte[] PrePrepare(long view, long seq, ReadOnlySpan<byte> requestPacket) => TwoNumbersThen(view, seq, requestPacket);

    public static bool TryReadPrePrepare(ReadOnlySpan<byte> body, out long view, out long seq, out ReadOnlySpan<byte> requestPacket) =>
        TryReadTwoNumbersThen(body, out view, out seq, out requestPacket) && view >= 0 && seq > 0;

    public static byte[] Reply(long view, long number, ReadOnlySpan<byte> result) => TwoNumbersThen(view, number, result);

    public static bool TryReadReply(ReadOnlySpan<byte> body, out long view, out long number, out ReadOnlySpan<byte> result) =>
        TryReadTwoNumbersThen(body, out view, out number, out result) && number > 0;

    /// <summary>The sender field of a packet, unauthenticated (a replica reads it to relay a client's request unchanged).</summary>
    public static int ClaimedSender(ReadOnlySpan<byte> packet) => packet.Length >= HeaderSize ? BinaryPrimitives.ReadInt32LittleEndian(packet[2..]) : -1;

    /// <summary>The body of a packet, unauthenticated (for a request embedded in a pre-prepare, once its tag was checked).</summary>
    public static ReadOnlySpan<byte> BodyOf(ReadOnlySpan<byte> packet) =>
        packet.Length >= HeaderSize && BinaryPrimitives.ReadInt32LittleEndian(packet[6..]) is int n && n >= 0 && n <= packet.Length - HeaderSize ? packet.Slice(HeaderSize, n) : default;
}
