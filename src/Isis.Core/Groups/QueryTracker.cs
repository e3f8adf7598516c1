using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Core.Groups;

/// <summary>What a reply carries.</summary>
internal enum ReplyKind : byte
{
    Values = 0,
    Null = 1,
    Abort = 2,
}

/// <summary>What a slow member means once a query's timeout passes.</summary>
internal enum QueryTimeoutAction : byte
{
    /// <summary>Give up: the query fails, naming the members that did not answer.</summary>
    Abort = 0,

    /// <summary>Count every missing answer as a null reply and complete.</summary>
    NullReply = 1,

    /// <summary>Ask the membership service to expel the slow members; the query completes once the view drops them.</summary>
    ExpelSlowMembers = 2,
}

internal enum QueryOutcome
{
    Completed,
    TimedOut,
    Aborted,
}

/// <summary>One reply to a query.</summary>
internal readonly record struct QueryReply(NodeId Replier, ReplyKind Kind, byte[] Payload);

/// <summary>
/// The requester's side of the queries it issued in one group: which members must answer (the
/// view in which the request was delivered, minus those that fail or leave), the replies so far,
/// and the timeout. Replies come from distinct members of the delivery view; waiting for ALL
/// never waits on a member that is no longer in the view.
/// </summary>
/// <remarks>
/// A reply counts whatever view it was sent in: a member may answer late (a deferred reply), after
/// views that kept it and the requester; only its leaving the view releases the requester.
/// </remarks>
internal sealed class QueryTracker(GroupId group, Action<NodeEvent> emit, Action<NodeId> suspect, bool completeOnFirstReply = false, bool lateRepliesDropped = false)
{
    public const int All = -1;
    public const int Majority = -2;

    private readonly Dictionary<long, Pending> _pending = new();

    private sealed class Pending
    {
        public required long Id;
        public required int Needed;
        public required long Deadline;
        public required QueryTimeoutAction Action;
        public int ViewId = -1;
        public int ViewSize;
        public HashSet<NodeId>? Expected;
        public NodeId[]? Only; // a P2PQuery's destinations: only they answer
        public readonly Dictionary<NodeId, QueryReply> Replies = new();
        public bool Suspected;
    }

    public int Count => _pending.Count;

    public void Add(long id, int needed, long deadline, QueryTimeoutAction action) =>
        _pending[id] = new Pending { Id = id, Needed = needed, Deadline = deadline, Action = action };

    /// <summary>Our own request was delivered here (or, addressed to others, reached its place in our stream): its view, and its destinations if it names some, fix who may and must answer.</summary>
    public void OnRequestDelivered(long id, GroupView view, NodeId[]? only = null)
    {
        if (!_pending.TryGetValue(id, out Pending? p) || p.Expected != null) return;
        p.ViewId = view.Id;
        p.Expected = new HashSet<NodeId>(view.Members);
        p.Only = only;
        if (only != null) p.Expected.IntersectWith(only);
        p.ViewSize = p.Expected.Count;
        // Replies that raced ahead of our own delivery count only if they come from that view.
        foreach (NodeId early in p.Replies.Keys.Where(n => !p.Expected.Contains(n)).ToList()) p.Replies.Remove(early);
        Check(p);
    }

    /// <param name="from">The replier.</param>
    /// <param name="id">The query.</param>
    /// <param name="kind">What the reply carries.</param>
    /// <param name="payload">Its values.</param>
    /// <param name="sentInView">The view the replier had when it answered.</param>
    /// <returns>False if the reply is for no query of ours, or a duplicate.</returns>
    public bool OnReply(NodeId from, long id, ReplyKind kind, byte[] payload, int sentInView)
    {
        if (!_pending.TryGetValue(id, out Pending? p)) return false;
        if (lateRepliesDropped && p.ViewId >= 0 && sentInView > p.ViewId) return false; // deliberate bug (ProtocolMutations)
        if (p.Expected != null && !p.Expected.Contains(from)) return false;
        if (!p.Replies.TryAdd(from, new QueryReply(from, kind, payload))) return false;
        if (kind == ReplyKind.Abort) Complete(p, QueryOutcome.Aborted);
        else Check(p);
        return true;
    }

    /// <summary>Members that left the view (failed or left) are no longer waited for.</summary>
    public void OnViewInstalled(GroupView view)
    {
        foreach (Pending p in _pending.Values.ToList())
        {
            if (p.Expected == null) continue;
            p.Expected.RemoveWhere(n => !view.Contains(n) && !p.Replies.ContainsKey(n));
            Check(p);
        }
    }

    /// <summary>The earliest deadline of an open query (see <see cref="GroupMember.NextDeadline"/>).</summary>
    public long NextDeadline
    {
        get
        {
            long d = long.MaxValue;
            foreach (Pending p in _pending.Values)
            {
                // An expelling query that already suspected its laggards does nothing more at its deadline.
                if (p.Action == QueryTimeoutAction.ExpelSlowMembers && (p.Suspected || p.Expected == null)) continue;
                d = Math.Min(d, p.Deadline);
            }
            return d;
        }
    }

    public void Tick(long now)
    {
        if (_pending.Count == 0) return; // every tick of every group: no copy to walk when nothing waits
        foreach (Pending p in _pending.Values.ToList())
        {
            if (now < p.Deadline) continue;
            switch (p.Action)
            {
                case QueryTimeoutAction.Abort:
                    Complete(p, QueryOutcome.TimedOut);
                    break;
                case QueryTimeoutAction.NullReply:
                    foreach (NodeId n in Missing(p)) p.Replies[n] = new QueryReply(n, ReplyKind.Null, []);
                    Complete(p, QueryOutcome.Completed);
                    break;
                case QueryTimeoutAction.ExpelSlowMembers when !p.Suspected && p.Expected != null:
                    p.Suspected = true;
                    NodeId[] slow = [.. Missing(p)];
                    foreach (NodeId n in slow) suspect(n);
                    if (slow.Length > 0) emit(new SlowRepliersReported(group, p.Id, slow));
                    break;
            }
        }
    }

    /// <summary>The process leaves the group or stops: every open query ends with what it has.</summary>
    public void AbandonAll()
    {
        foreach (Pending p in _pending.Values.ToList()) Complete(p, QueryOutcome.TimedOut);
    }

    private IEnumerable<NodeId> Missing(Pending p) =>
        p.Expected == null ? [] : p.Expected.Where(n => !p.Replies.ContainsKey(n)).OrderBy(n => n).ToList();

    private void Check(Pending p)
    {
        if (p.Expected == null) return;
        int values = p.Replies.Values.Count(r => r.Kind == ReplyKind.Values);
        bool everyoneAnswered = p.Expected.All(p.Replies.ContainsKey);
        bool enough = p.Needed switch
        {
            All => everyoneAnswered,
            Majority => values >= p.ViewSize / 2 + 1,
            _ => values >= p.Needed,
        };
        if (completeOnFirstReply && values > 0) enough = true; // deliberate bug (ProtocolMutations)
        if (enough || everyoneAnswered) Complete(p, QueryOutcome.Completed);
    }

    private void Complete(Pending p, QueryOutcome outcome)
    {
        _pending.Remove(p.Id);
        emit(new QueryCompleted(group, p.Id, outcome, p.ViewId, p.Replies.Values.ToList(), Missing(p).ToArray(), p.Only));
    }
}
