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
}

/// <summary>One message of a sender's stream: its kind and its payload (opaque to the core).</summary>
internal readonly record struct StreamMessage(MessageKind Kind, byte[] Payload)
{
    public bool IsApplication => Kind is MessageKind.Send or MessageKind.Ordered;
}
