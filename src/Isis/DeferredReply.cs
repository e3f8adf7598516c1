using Isis.Core.Groups;
using Isis.Core.Identity;

namespace Isis;

/// <summary>
/// The answer to one query, owed by this member and given later: a query handler takes it with
/// <see cref="Group.DeferReply"/>, returns, and answers from any thread once its asynchronous work
/// (a database call, a call to another group) is done.
/// </summary>
/// <remarks>
/// The query's rules still apply: the requester waits for this answer only until its timeout, and
/// counts this member as failed if it leaves the view first. Answer once; an answer after this
/// member left the group throws, since the requester stopped waiting for it when the view dropped it.
/// </remarks>
public sealed class DeferredReply
{
    private readonly Group _group;
    private readonly NodeId _requester;
    private readonly long _queryId;
    private readonly bool _replayed;
    private string? _answeredWith;

    internal DeferredReply(Group group, NodeId requester, long queryId, int viewId, bool replayed)
    {
        _group = group;
        _requester = requester;
        _queryId = queryId;
        ViewId = viewId;
        _replayed = replayed;
    }

    /// <summary>The member that issued the query.</summary>
    public Address Requester => new(_requester);

    /// <summary>The id of the view in which this member received the request.</summary>
    public int ViewId { get; }

    /// <summary>Whether <see cref="Reply"/>, <see cref="NullReply"/> or <see cref="AbortReply"/> was called.</summary>
    public bool IsAnswered => Volatile.Read(ref _answeredWith) != null;

    /// <summary>Answers the query with values, as <see cref="Group.Reply"/> would have in the handler.</summary>
    /// <param name="values">The reply values.</param>
    /// <exception cref="InvalidOperationException">The query was already answered, or this member has left the group.</exception>
    public void Reply(params object?[] values) => Answer(nameof(Reply), () => (ReplyKind.Values, _group.EncodeReplyValues(values)));

    /// <summary>Answers the query with no value: the requester counts the answer but gets nothing from it.</summary>
    /// <exception cref="InvalidOperationException">The query was already answered, or this member has left the group.</exception>
    public void NullReply() => Answer(nameof(NullReply), () => (ReplyKind.Null, []));

    /// <summary>Answers by aborting the query: the requester's call throws a <see cref="QueryAbortedException"/> with <paramref name="reason"/>.</summary>
    /// <param name="reason">Why, for the requester.</param>
    /// <exception cref="InvalidOperationException">The query was already answered, or this member has left the group.</exception>
    public void AbortReply(string reason) => Answer(nameof(AbortReply), () => (ReplyKind.Abort, System.Text.Encoding.UTF8.GetBytes(reason ?? "")));

    private void Answer(string operation, Func<(ReplyKind Kind, byte[] Payload)> encode)
    {
        // Encode first: arguments the codec refuses leave the reply unanswered, for a corrected call.
        (ReplyKind kind, byte[] payload) = encode();
        string? earlier = Interlocked.CompareExchange(ref _answeredWith, operation, null);
        if (earlier != null)
        {
            throw new InvalidOperationException($"This deferred reply already answered the query from {Requester} with {earlier}; a member replies once ({operation} called again).");
        }
        if (_replayed) return; // a SafeQuery of the durable history, replayed at recovery: its requester stopped waiting long ago
        if (!_group.SendDeferredReply(_requester, _queryId, kind, payload))
        {
            throw new InvalidOperationException(
                $"This member left group '{_group.Name}' after the query from {Requester} was delivered in view {ViewId}: the requester stopped waiting for it " +
                "when the view dropped this member, so the answer would be lost. Answer deferred queries before leaving the group.");
        }
    }
}
