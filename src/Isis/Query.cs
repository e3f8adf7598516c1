namespace Isis;

/// <summary>Where SafeSend acceptors keep the messages they acknowledge.</summary>
public enum SafeSendDurability
{
    /// <summary>In memory: a SafeSend survives as long as one of its acceptors does.</summary>
    Memory,

    /// <summary>
    /// On disk: acceptors append and fsync each SafeSend before acknowledging it, so acknowledged
    /// SafeSends survive a crash of the whole group. When the group is formed again, its first
    /// member replays its log: every logged SafeSend is sent again and delivered in log order
    /// before anything new.
    /// </summary>
    Disk,
}

/// <summary>Marks the end of a query's request arguments in the Isis2 form: <c>g.Query(ALL, CODE, args..., new EOLMarker(), replies)</c>.</summary>
public sealed class EOLMarker
{
}

/// <summary>What a member that has not answered by a query's timeout means.</summary>
public enum QueryTimeoutAction
{
    /// <summary>The query fails with a <see cref="QueryTimeoutException"/> naming the members that did not answer.</summary>
    Abort,

    /// <summary>Missing answers count as null replies; the query returns what it has.</summary>
    NullReply,

    /// <summary>The slow members are reported to the membership service, which expels them; the query completes once the view drops them.</summary>
    ExpelSlowMembers,
}

/// <summary>How long a query waits for replies, and what a slow member means then.</summary>
public sealed class QueryTimeout
{
    /// <summary>Creates a timeout.</summary>
    /// <param name="after">How long to wait for replies.</param>
    /// <param name="action">What happens when it passes. Defaults to <see cref="QueryTimeoutAction.Abort"/>.</param>
    public QueryTimeout(TimeSpan after, QueryTimeoutAction action = QueryTimeoutAction.Abort)
    {
        if (after <= TimeSpan.Zero) throw new ArgumentOutOfRangeException(nameof(after), after, "A query timeout must be positive.");
        After = after;
        Action = action;
    }

    /// <summary>How long a query waits for replies.</summary>
    public TimeSpan After { get; }

    /// <summary>What happens when <see cref="After"/> passes.</summary>
    public QueryTimeoutAction Action { get; }
}

/// <summary>A query timed out with <see cref="QueryTimeoutAction.Abort"/>: <see cref="MissingMembers"/> did not answer.</summary>
public sealed class QueryTimeoutException : IsisException
{
    internal QueryTimeoutException(string message, Address[] missing) : base(message) => MissingMembers = missing;

    /// <summary>The members of the request's delivery view that did not answer in time.</summary>
    public IReadOnlyList<Address> MissingMembers { get; }
}

/// <summary>A member answered a query with <see cref="Group.AbortReply"/>.</summary>
public sealed class QueryAbortedException : IsisException
{
    internal QueryAbortedException(string message, Address member, string reason) : base(message)
    {
        Member = member;
        Reason = reason;
    }

    /// <summary>The member that aborted the query.</summary>
    public Address Member { get; }

    /// <summary>The reason it gave.</summary>
    public string Reason { get; }
}
