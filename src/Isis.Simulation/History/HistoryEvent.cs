using Isis.Core.Groups;
using Isis.Core.Identity;

namespace Isis.Simulation;

/// <summary>
/// One recorded event. Fields a kind does not use keep their default values (0, NodeId.None,
/// default MessageId, null Members), which is also what JSON lines omit.
/// </summary>
/// <param name="Time">Microseconds, virtual (simulator) or real (monotonic clock of the host).</param>
/// <param name="Process">The incarnation the event happened at; NodeId.None for Heal and End.</param>
/// <param name="Kind">What happened.</param>
/// <remarks>
/// <see cref="Members"/> is an array for speed; it is never mutated after recording (the
/// <see cref="History"/> helpers copy the caller's array) and equality compares its contents.
/// </remarks>
internal sealed record HistoryEvent(long Time, NodeId Process, HistoryEventKind Kind)
{
    /// <summary>Group of Send, Deliver, ViewInstall, LeaveCompleted, JoinRequested.</summary>
    public GroupId Group { get; init; }

    /// <summary>Send: the view sent in. Deliver: the view the process had installed. ViewInstall: the new view.</summary>
    public int ViewId { get; init; }

    /// <summary>Send and Deliver: the message.</summary>
    public MessageId Message { get; init; }

    /// <summary>Send and Deliver: a hash of the payload, so a corrupted or invented payload is caught.</summary>
    public ulong PayloadHash { get; init; }

    /// <summary>Send and Deliver: the primitive (Send or OrderedSend); ordered messages must be delivered in one total order.</summary>
    public MessageKind Primitive { get; init; }

    /// <summary>Send of a SafeSend: its acceptor count phi (0 = every member of the view). FlushRequested: the holders a Flush(k) waits for (0 = every member).</summary>
    public int Phi { get; init; }

    /// <summary>Deliver: delivered by the view change's flush at the end of the view, not on the normal path.</summary>
    public bool AtViewEnd { get; init; }

    /// <summary>Send and Deliver: a query request (its ordering is <see cref="Primitive"/>); a SafeQuery is not part of a durable SafeSend history.</summary>
    public bool IsQuery { get; init; }

    /// <summary>Decide: the position of the decision in the membership service's log.</summary>
    public long LogIndex { get; init; }

    /// <summary>Send of a SubsetSend or P2PSend: its destinations. ViewInstall: the members of the view, oldest first. Decide of a configuration: its replicas. Commit: the replicas that held the entries.</summary>
    public NodeId[]? Members { get; init; }

    /// <summary>Commit: the configuration the leader counted a majority of (its replicas). QueryCompleted of a P2PQuery: the members it was addressed to.</summary>
    public NodeId[]? Voters { get; init; }

    /// <summary>Commit: the log position of that configuration (0: the founding one).</summary>
    public long ConfigurationIndex { get; init; }

    /// <summary>EarlyTimer: what the early tick produced, for the report.</summary>
    public string? Description { get; init; }

    public bool Equals(HistoryEvent? other) =>
        other is not null
        && Time == other.Time
        && Process == other.Process
        && Kind == other.Kind
        && Group == other.Group
        && ViewId == other.ViewId
        && Message == other.Message
        && PayloadHash == other.PayloadHash
        && Primitive == other.Primitive
        && Phi == other.Phi
        && AtViewEnd == other.AtViewEnd
        && IsQuery == other.IsQuery
        && LogIndex == other.LogIndex
        && ConfigurationIndex == other.ConfigurationIndex
        && Description == other.Description
        && MembersEqual(Members, other.Members)
        && MembersEqual(Voters, other.Voters);

    public override int GetHashCode() =>
        HashCode.Combine(Time, Process, Kind, Group, ViewId, Message, PayloadHash, Members?.Length ?? -1);

    private static bool MembersEqual(NodeId[]? a, NodeId[]? b) =>
        a is null ? b is null : b is not null && a.AsSpan().SequenceEqual(b);

    public override string ToString()
    {
        string who = Process.IsNone ? "" : $" {Process}";
        return Kind switch
        {
            HistoryEventKind.Send => $"t={Time}{who} Send {Message} hash {PayloadHash:x16}",
            HistoryEventKind.Deliver => $"t={Time}{who} Deliver {Message} in v{ViewId} hash {PayloadHash:x16}",
            HistoryEventKind.ViewInstall =>
                $"t={Time}{who} ViewInstall g={Group} v{ViewId} [{string.Join(", ", Members ?? [])}]",
            HistoryEventKind.LeaveCompleted or HistoryEventKind.JoinRequested => $"t={Time}{who} {Kind} g={Group}",
            HistoryEventKind.EarlyTimer => $"t={Time}{who} EarlyTimer before deadline t={LogIndex}: {Description}",
            _ => $"t={Time}{who} {Kind}",
        };
    }
}
