using System.Buffers.Binary;
using System.Security.Cryptography;
using Isis.Core.Wire;

namespace Isis.Core.Bft;

/// <summary>What a service's replicas agree to order: Perpetual's inputs, a batch of them per PBFT sequence number.</summary>
internal enum ProposalKind : byte
{
    /// <summary>The null request a new view fills a gap with: an empty proposal.</summary>
    Null = 0,

    /// <summary>An unreplicated client's request: its packet, tagged by the client for every replica.</summary>
    Request = 1,

    /// <summary>A call from a replicated service: f+1 of the caller's replicas' identical copies (at least one correct replica made it).</summary>
    Call = 2,

    /// <summary>The answer to a call this service made: f+1 of the target's replicas' identical replies.</summary>
    CallReply = 3,

    /// <summary>The end of a call that took too long: f+1 of this service's replicas gave up on it.</summary>
    CallAbort = 4,

    /// <summary>What one sequence number orders: one or more of the inputs above, in order, under one stamp of the primary's clock.</summary>
    Batch = 5,
}

/// <summary>
/// What one input of a batch means: who it is from and its number (requests and calls execute once
/// each), or the call it completes, and the bytes it hands over (an operation, or a result).
/// </summary>
internal readonly record struct ProposalMeaning(ProposalKind Kind, int From, long Number, int Target, byte[] Payload, byte[] Digest)
{
    /// <summary>What identifies the proposal for deduplication: a request or call (from, number), or a completion (target, number).</summary>
    public (bool Completion, int Who, long Number) Key => (Kind is ProposalKind.CallReply or ProposalKind.CallAbort, Kind is ProposalKind.CallReply or ProposalKind.CallAbort ? Target : From, Number);
}

/// <summary>What one sequence number orders: its inputs in order (none: the null request), the primary's stamp, and the digest agreement names it by.</summary>
internal readonly record struct BatchMeaning(ProposalMeaning[] Items, long Time, byte[] Digest);

/// <summary>
/// The encoding of proposals, and the one reader that checks them. An input is a kind byte, a time
/// field (unused: the batch carries the stamp) and the packets that justify it: a client's request
/// packet, or a certificate of f+1 packets from distinct replicas of one service with identical
/// bodies. Each packet carries its sender's tag for every replica of the receiving service, so every
/// replica checks the certificate for itself before it prepares it. An input's digest names its
/// meaning (the common body), not the packets: two certificates of the same call are the same input.
/// What a sequence number orders is a batch (<see cref="Batch"/>): the inputs the primary gathered
/// while earlier batches were in agreement, stamped with its clock (<see cref="Stamp"/>: the
/// replicas' agreed clock); its digest names the stamp and its inputs' digests in order.
/// </summary>
internal static class Proposal
{
    private const int Header = 1 + 8; // kind, time

    /// <summary>The most inputs one batch holds: a faulty primary cannot make a backup check an unbounded pre-prepare.</summary>
    public const int MaxBatchItems = 256;

    /// <summary>A batch of <paramref name="items"/> (inputs, in order), to be stamped by the primary.</summary>
    public static byte[] Batch(IReadOnlyList<byte[]> items)
    {
        var w = new PacketWriter().BeginRecord().U8((byte)ProposalKind.Batch).I64(0).I32(items.Count);
        foreach (byte[] item in items) w.Bytes(item);
        return w.FinishRecord();
    }

    /// <summary>
    /// Reads what one sequence number orders: the null request (empty) or a batch of at least one
    /// input. With <paramref name="keys"/>, checks every input as <see cref="TryRead"/> does: what a
    /// backup does before it prepares a pre-prepare (a primary cannot slip an invented input into a batch).
    /// </summary>
    public static bool TryReadBatch(ReadOnlySpan<byte> proposal, BftDeployment deployment, BftService self, BftKeys? keys, out BatchMeaning meaning, BftMutations mutations = BftMutations.None)
    {
        meaning = default;
        if (proposal.IsEmpty)
        {
            meaning = new BatchMeaning([], 0, BftWire.NullDigest);
            return true;
        }
        if (proposal.Length < Header || proposal[0] != (byte)ProposalKind.Batch) return false;
        long time = BinaryPrimitives.ReadInt64LittleEndian(proposal[1..]);
        if (time < 0) return false;
        var r = new WireReader(proposal[Header..]);
        int count = r.Count(4);
        if (!r.Ok || count < 1 || count > MaxBatchItems) return false;
        var items = new ProposalMeaning[count];
        byte[] digests = new byte[1 + 8 + count * BftWire.DigestSize];
        digests[0] = (byte)ProposalKind.Batch;
        BinaryPrimitives.WriteInt64LittleEndian(digests.AsSpan(1), time);
        for (int i = 0; i < count; i++)
        {
            ReadOnlySpan<byte> item = r.BytesSpan();
            // The mutation checks the first input's tags only: the rule that every input is checked, broken.
            BftKeys? check = i > 0 && (mutations & BftMutations.BatchChecksFirstOnly) != 0 ? null : keys;
            if (!r.Ok || item.IsEmpty || item[0] == (byte)ProposalKind.Batch || !TryRead(item, deployment, self, check, out items[i])) return false;
            items[i].Digest.CopyTo(digests.AsSpan(Header + i * BftWire.DigestSize));
        }
        if (!r.Complete) return false;
        meaning = new BatchMeaning(items, time, SHA256.HashData(digests));
        return true;
    }

    public static byte[] OfRequest(ReadOnlySpan<byte> requestPacket)
    {
        var proposal = new byte[Header + requestPacket.Length];
        proposal[0] = (byte)ProposalKind.Request;
        requestPacket.CopyTo(proposal.AsSpan(Header));
        return proposal;
    }

    public static byte[] OfPackets(ProposalKind kind, IReadOnlyCollection<byte[]> packets)
    {
        var w = new PacketWriter().BeginRecord().U8((byte)kind).I64(0).I32(packets.Count);
        foreach (byte[] p in packets) w.Bytes(p);
        return w.FinishRecord();
    }

    /// <summary>A copy of batch <paramref name="proposal"/> stamped with the primary's clock, <paramref name="time"/> (microseconds).</summary>
    public static byte[] Stamp(ReadOnlySpan<byte> proposal, long time)
    {
        byte[] stamped = proposal.ToArray();
        BinaryPrimitives.WriteInt64LittleEndian(stamped.AsSpan(1), time);
        return stamped;
    }

    /// <summary>A call's body (from a replica of service <paramref name="caller"/>): the caller's id, the call's number, the operation.</summary>
    public static byte[] CallBody(int caller, long number, ReadOnlySpan<byte> operation) => BftWire.RequestBody(caller, number, operation);

    /// <summary>A target replica's reply to a call: caller, target, number, result.</summary>
    public static byte[] ReplyBody(int caller, int target, long number, ReadOnlySpan<byte> result)
    {
        var body = new byte[16 + result.Length];
        BinaryPrimitives.WriteInt32LittleEndian(body, caller);
        BinaryPrimitives.WriteInt32LittleEndian(body.AsSpan(4), target);
        BinaryPrimitives.WriteInt64LittleEndian(body.AsSpan(8), number);
        result.CopyTo(body.AsSpan(16));
        return body;
    }

    /// <summary>A caller replica's vote to abort its call: target, number.</summary>
    public static byte[] AbortBody(int target, long number) => ReplyBody(0, target, number, []);

    private static bool TryReadReply(ReadOnlySpan<byte> body, out int caller, out int target, out long number, out ReadOnlySpan<byte> result)
    {
        caller = target = 0;
        number = 0;
        result = default;
        if (body.Length < 16) return false;
        caller = BinaryPrimitives.ReadInt32LittleEndian(body);
        target = BinaryPrimitives.ReadInt32LittleEndian(body[4..]);
        number = BinaryPrimitives.ReadInt64LittleEndian(body[8..]);
        result = body[16..];
        return number > 0;
    }

    private static byte[] DomainDigest(byte domain, ReadOnlySpan<byte> body)
    {
        byte[] input = [domain, .. body];
        return SHA256.HashData(input);
    }

    /// <summary>
    /// Reads one input for service <paramref name="self"/>. With <paramref name="keys"/>, also checks
    /// every packet's tag for that principal (its own packets excepted) and the certificate's quorum:
    /// what a replica does before it prepares it. Without, reads only the meaning of an input
    /// agreement already checked (to execute it, or to name it in a view change).
    /// </summary>
    public static bool TryRead(ReadOnlySpan<byte> proposal, BftDeployment deployment, BftService self, BftKeys? keys, out ProposalMeaning meaning)
    {
        meaning = default;
        if (proposal.Length < Header) return false;
        var kind = (ProposalKind)proposal[0];
        if (kind == ProposalKind.Request)
        {
            ReadOnlySpan<byte> packet = proposal[Header..];
            ReadOnlySpan<byte> body;
            int sender;
            if (keys != null)
            {
                if (!BftWire.TryOpen(keys, packet, out BftKind k, out sender, out body) || k != BftKind.Request) return false;
            }
            else
            {
                sender = BftWire.ClaimedSender(packet);
                body = BftWire.BodyOf(packet);
            }
            if (!BftWire.TryReadRequest(body, out int client, out long number, out ReadOnlySpan<byte> operation) || client != sender || client < 0 || deployment.IsReplica(client)) return false;
            meaning = new ProposalMeaning(kind, client, number, 0, operation.ToArray(), BftWire.RequestDigest(body));
            return true;
        }
        if (kind is not (ProposalKind.Call or ProposalKind.CallReply or ProposalKind.CallAbort)) return false;
        var r = new WireReader(proposal[Header..]);
        var packets = new List<byte[]>();
        for (int i = 0, n = r.Count(4); i < n && r.Ok; i++) packets.Add(r.Bytes());
        if (!r.Complete || packets.Count == 0) return false;

        byte[]? common = null;
        var senders = new HashSet<int>();
        BftService? from = null;
        BftKind expected = kind switch { ProposalKind.Call => BftKind.Call, ProposalKind.CallReply => BftKind.CallReply, _ => BftKind.CallAbort };
        foreach (byte[] packet in packets)
        {
            int sender = BftWire.ClaimedSender(packet);
            ReadOnlySpan<byte> body = BftWire.BodyOf(packet);
            if (keys != null && sender != keys.Self && (!BftWire.TryOpen(keys, packet, out BftKind k, out _, out body) || k != expected)) return false;
            if (packet.Length < 2 || packet[1] != (byte)expected) return false;
            if (common == null) common = body.ToArray();
            else if (!body.SequenceEqual(common)) return false;
            BftService? service = deployment.ServiceOf(sender);
            if (service == null || from != null && from != service) return false;
            from = service;
            senders.Add(sender);
        }
        if (common == null || from == null || senders.Count < from.F + 1) return false; // f+1: at least one correct replica stands behind it
        int selfId = deployment.ServiceId(self);
        switch (kind)
        {
            case ProposalKind.Call:
                if (!BftWire.TryReadRequest(common, out int caller, out long callNumber, out ReadOnlySpan<byte> operation) || caller != deployment.ServiceId(from)) return false;
                meaning = new ProposalMeaning(kind, caller, callNumber, 0, operation.ToArray(), BftWire.RequestDigest(common));
                return true;
            case ProposalKind.CallReply:
                if (!TryReadReply(common, out int to, out int target, out long number, out ReadOnlySpan<byte> result) || to != selfId || target != deployment.ServiceId(from)) return false;
                meaning = new ProposalMeaning(kind, to, number, target, result.ToArray(), DomainDigest(3, common));
                return true;
            default:
                if (!TryReadReply(common, out _, out int abortedAt, out long aborted, out _) || from != self) return false;
                meaning = new ProposalMeaning(kind, selfId, aborted, abortedAt, [], DomainDigest(4, common));
                return true;
        }
    }
}
