namespace Isis.Core.Groups;

/// <summary>What a message in a sender's FIFO stream is. Part of the wire format: never reuse a number.</summary>
internal enum MessageKind : byte
{
    /// <summary>An application Send: delivered as soon as its FIFO predecessors are.</summary>
    Send = 0,

    /// <summary>An application OrderedSend: delivered when the view's sequencer has placed it in the total order.</summary>
    Ordered = 1,

    /// <summary>The sequencer's announcement of the next positions in the total order (a list of (rank, seq)).</summary>
    OrderAnnouncement = 2,

    /// <summary>A Query request with Send's ordering; the payload starts with the 8-byte query id.</summary>
    QuerySend = 3,

    /// <summary>A Query request with OrderedSend's ordering (OrderedQuery); the payload starts with the 8-byte query id.</summary>
    QueryOrdered = 4,

    /// <summary>An application SafeSend: in the total order, delivered once its acceptors (the first phi members) all hold it.</summary>
    Safe = 5,

    /// <summary>A Query request with SafeSend's ordering and durability (SafeQuery); the payload starts with the 8-byte query id.</summary>
    QuerySafe = 6,

    /// <summary>An acceptor's acknowledgement: it holds every position of the total order up to the 8-byte number in the payload.</summary>
    SafeAccept = 7,

    /// <summary>"I hold the group's next key": its fingerprint (16 bytes), in the total order (see GroupMember.Security.cs, key rotation).</summary>
    KeyRotation = 8,

    /// <summary>An application CausalSend: delivered once every causal message its sender had delivered before sending it is delivered (its timestamp says which).</summary>
    CausalSend = 9,

    /// <summary>A Query request with CausalSend's ordering (CausalQuery); the payload starts with the 8-byte query id.</summary>
    QueryCausal = 10,

    /// <summary>An application SubsetSend or P2PSend: FIFO in its sender's stream like a Send, delivered only at the members it names.</summary>
    Subset = 11,

    /// <summary>A Query request addressed to some members (P2PQuery), with Send's ordering; the payload starts with the 8-byte query id.</summary>
    QuerySubset = 12,
}

internal static class MessageKinds
{
    /// <summary>Whether messages of this kind wait for the total order.</summary>
    public static bool IsOrdered(this MessageKind kind) => kind is MessageKind.Ordered or MessageKind.QueryOrdered or MessageKind.Safe or MessageKind.QuerySafe or MessageKind.KeyRotation;

    public static bool IsSafe(this MessageKind kind) => kind is MessageKind.Safe or MessageKind.QuerySafe;

    public static bool IsQuery(this MessageKind kind) => kind is MessageKind.QuerySend or MessageKind.QueryOrdered or MessageKind.QuerySafe or MessageKind.QueryCausal or MessageKind.QuerySubset;

    /// <summary>Whether messages of this kind carry a causal timestamp and wait for their causal predecessors.</summary>
    public static bool IsCausal(this MessageKind kind) => kind is MessageKind.CausalSend or MessageKind.QueryCausal;

    /// <summary>Whether messages of this kind name the members that deliver them.</summary>
    public static bool IsSubset(this MessageKind kind) => kind is MessageKind.Subset or MessageKind.QuerySubset;

    /// <summary>Protocol messages about the view's positions: void once the view ends (never resent in the next).</summary>
    public static bool IsControl(this MessageKind kind) => kind is MessageKind.OrderAnnouncement or MessageKind.SafeAccept;

    /// <summary>Messages the application never sees: the control messages and the key rotation's announcements.</summary>
    public static bool IsProtocol(this MessageKind kind) => kind.IsControl() || kind == MessageKind.KeyRotation;

    /// <summary>The ordering primitive a kind is checked under (queries count as their ordering).</summary>
    public static MessageKind Primitive(this MessageKind kind) =>
        kind.IsSafe() ? MessageKind.Safe : kind.IsOrdered() ? MessageKind.Ordered : kind.IsCausal() ? MessageKind.CausalSend
        : kind.IsSubset() ? MessageKind.Subset : MessageKind.Send;

    /// <summary>The query id at the start of a query request's payload.</summary>
    public static long QueryIdOf(ReadOnlySpan<byte> payload) =>
        payload.Length >= 8 ? System.Buffers.Binary.BinaryPrimitives.ReadInt64LittleEndian(payload) : 0;
}

/// <summary>
/// One message of a sender's stream: its kind, its payload (opaque to the core), for SafeSend its
/// acceptor count phi (0 = every member of the view), and for the causal kinds its timestamp.
/// </summary>
/// <remarks>
/// <see cref="Pooled"/>: the buffer-pool array behind <see cref="Payload"/>, which the stream
/// returns to the pool when it drops the message (only Sends, whose last holder is the stream).
/// <see cref="Causal"/>: per rank of the view, how many causal messages from that rank the sender
/// had delivered when it sent this one, this one included at its own rank (null for other kinds).
/// <see cref="To"/>: for the subset kinds, the members that deliver it (every member holds it, so
/// the flush can give it to each surviving destination); null for other kinds.
/// </remarks>
internal readonly record struct StreamMessage(MessageKind Kind, ReadOnlyMemory<byte> Payload, int Phi = 0, byte[]? Pooled = null, long[]? Causal = null, Identity.NodeId[]? To = null)
{
    public bool IsApplication => !Kind.IsProtocol();
}
