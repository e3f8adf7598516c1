using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Clients;

/// <summary>What a non-member client asks its relay to issue in the group.</summary>
internal enum ClientPrimitive : byte
{
    /// <summary>A Send: FIFO from the relay.</summary>
    Send = 1,

    /// <summary>An OrderedSend: in the group's total order.</summary>
    Ordered = 2,

    /// <summary>A SafeSend: delivered once the group's acceptors hold it.</summary>
    Safe = 3,

    /// <summary>An OrderedQuery: in the total order, with the members' replies.</summary>
    Query = 4,
}

/// <summary>A relay's answer to one copy of a client's request.</summary>
internal enum ClientOutcome : byte
{
    /// <summary>The relay has the request and is working on it: the client keeps waiting for this relay.</summary>
    Working = 1,

    /// <summary>The request was issued and delivered (a SafeSend: is durable): done.</summary>
    Done = 2,

    /// <summary>The query's replies.</summary>
    Replies = 3,

    /// <summary>The request failed (a query aborted or timed out, a SafeSend that could not be issued): why.</summary>
    Failed = 4,

    /// <summary>This member relays nothing for the client (it does not accept clients, is not in the group yet, or is leaving): the client asks another.</summary>
    Refused = 5,

    /// <summary>A member answered the query with an abort: the one reply names it and carries its reason (UTF-8).</summary>
    Aborted = 6,

    /// <summary>The query timed out in the group: the replies name the members that did not answer (empty payloads).</summary>
    TimedOut = 7,
}

/// <summary>One reply to a relayed query: who answered, and the reply's encoded values.</summary>
internal readonly record struct ClientReply(NodeId Replier, byte[] Payload);

/// <summary>
/// The bodies of <see cref="PacketKind.ClientRequest"/> and <see cref="PacketKind.ClientAnswer"/>.
/// A request: the primitive (u8), the client's floor (i64), the replies a query waits for (i32: a
/// count, or -1 for all), the query's timeout in microseconds (i64), then the payload (the
/// runtime's encoded request code and arguments). An answer: the outcome (u8), then for
/// <see cref="ClientOutcome.Replies"/>, <see cref="ClientOutcome.Aborted"/> and <see cref="ClientOutcome.TimedOut"/> the replies (count, then replier and payload each), for
/// <see cref="ClientOutcome.Failed"/> and <see cref="ClientOutcome.Refused"/> the reason (UTF-8).
/// </summary>
internal static class ClientWire
{
    /// <summary>Longest reason an answer carries.</summary>
    public const int MaxReasonBytes = 4096;

    public static PacketWriter Request(PacketWriter w, ClientPrimitive primitive, long floor, int replies, long timeoutMicros, ReadOnlySpan<byte> payload) =>
        w.U8((byte)primitive).I64(floor).I32(replies).I64(timeoutMicros).Bytes(payload);

    public static bool TryReadRequest(ReadOnlySpan<byte> body, out ClientPrimitive primitive, out long floor, out int replies, out long timeoutMicros, out byte[] payload)
    {
        var r = new WireReader(body);
        primitive = (ClientPrimitive)r.U8();
        floor = r.I64();
        replies = r.I32();
        timeoutMicros = r.I64();
        payload = r.Bytes();
        return r.Complete && Enum.IsDefined(primitive) && floor >= 1 && timeoutMicros > 0 && (primitive == ClientPrimitive.Query ? replies > 0 || replies == -1 : replies == 0);
    }

    public static PacketWriter Answer(PacketWriter w, ClientOutcome outcome, IReadOnlyList<ClientReply>? replies = null, string? reason = null)
    {
        w.U8((byte)outcome);
        if (outcome is ClientOutcome.Replies or ClientOutcome.Aborted or ClientOutcome.TimedOut)
        {
            w.I32(replies?.Count ?? 0);
            foreach (ClientReply reply in replies ?? []) w.Node(reply.Replier).Bytes(reply.Payload);
        }
        else if (outcome is ClientOutcome.Failed or ClientOutcome.Refused)
        {
            w.String(reason ?? "");
        }
        return w;
    }

    public static bool TryReadAnswer(ReadOnlySpan<byte> body, out ClientOutcome outcome, out ClientReply[] replies, out string reason)
    {
        var r = new WireReader(body);
        outcome = (ClientOutcome)r.U8();
        replies = [];
        reason = "";
        if (outcome is ClientOutcome.Replies or ClientOutcome.Aborted or ClientOutcome.TimedOut)
        {
            int n = r.Count(12 + 4);
            replies = new ClientReply[n];
            for (int i = 0; i < n && r.Ok; i++) replies[i] = new ClientReply(r.Node(), r.Bytes());
        }
        else if (outcome is ClientOutcome.Failed or ClientOutcome.Refused)
        {
            reason = r.String(MaxReasonBytes);
        }
        return r.Complete && Enum.IsDefined(outcome);
    }
}
