using System.Collections.Concurrent;
using Isis.Core.Clients;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Runtime;

namespace Isis;

/// <summary>
/// Relaying for clients that are not members (<see cref="GroupClient"/>): a member issues a client's
/// request in the group under its own name, wrapped with the client's session and number, and every
/// member runs the wrapped request at most once however many relays issued it (<see cref="ClientSessions"/>).
/// </summary>
public sealed partial class Group
{
    /// <summary>The request code of a client's request relayed into the group (the wrapper every member unwraps).</summary>
    internal const int ClientRelayCode = 31_200;

    private static ReadOnlySpan<byte> SessionsMagic => "ISISCLNT"u8;
    private const int MaxRelayedAnswers = 4096;
    private const int MaxCachedReplies = 4096;

    private ClientSessions? _clientSessions;
    private readonly ConcurrentDictionary<(NodeId Client, long Number), RelayedRequest> _relayed = new();
    private readonly Dictionary<(NodeId Client, long Number), (ReplyKind Kind, byte[] Payload)> _clientReplies = new();
    private readonly Queue<(NodeId Client, long Number)> _clientReplyOrder = new();
    private (NodeId Client, long Number)? _currentClientRequest;

    /// <summary>A request this member relays: in the group until its answer is known, then kept a while to answer a lost answer's retry.</summary>
    private sealed class RelayedRequest(ClientPrimitive primitive)
    {
        public readonly ClientPrimitive Primitive = primitive;
        public volatile bool Answered;
        public ClientOutcome Outcome;
        public IReadOnlyList<ClientReply>? Replies;
        public string? Reason;
        public long AnsweredAt;
    }

    /// <summary>
    /// Whether this member relays the requests of <see cref="GroupClient"/>s, processes that are not
    /// members (default true). A member that does not tells a client to ask another. With a group
    /// key, a client must hold the key (<see cref="GroupClientOptions.GroupKey"/>): its requests are
    /// refused unread otherwise.
    /// </summary>
    public bool AcceptClients { get; set; } = true;

    private ClientSessions Sessions => _clientSessions ??= new ClientSessions(_runtime.Options.Mutations);

    /// <summary>Clients whose requests this member tracks (tests).</summary>
    internal int ClientSessionCount => _clientSessions?.Count ?? 0;

    /// <summary>
    /// A copy of a client's request arrived (event loop, while it hands over a step's events): answered
    /// at once if known, else relayed. Answers are commands of their own step, posted: what a node
    /// produces while its events are handed over is dropped when the step ends.
    /// </summary>
    private void OnClientRequest(ClientRequestArrived request, EventLoop loop)
    {
        var key = (request.Client, request.Number);
        if (_relayed.TryGetValue(key, out RelayedRequest? known))
        {
            if (known.Answered) PostAnswer(loop, request, known.Outcome, known.Replies, known.Reason);
            else PostAnswer(loop, request, ClientOutcome.Working, null, null);
            return;
        }
        if (!AcceptClients || _state != GroupState.Joined)
        {
            string why = AcceptClients ? "this member is not in the group (joining or leaving)" : $"this member of group '{Name}' does not accept clients (AcceptClients is false)";
            PostAnswer(loop, request, ClientOutcome.Refused, null, why);
            return;
        }
        ForgetOldAnswers(loop.Now);
        var relayed = new RelayedRequest(request.Primitive);
        _relayed[key] = relayed;
        PostAnswer(loop, request, ClientOutcome.Working, null, null);
        // Off the event loop: a send may wait for flow control, which the loop itself releases.
        _ = Task.Run(() => Relay(request, relayed));
    }

    private void PostAnswer(EventLoop loop, ClientRequestArrived request, ClientOutcome outcome, IReadOnlyList<ClientReply>? replies, string? reason) =>
        loop.Post(() => loop.Node.AnswerClient(Id, request.Client, request.Number, outcome, replies, reason, loop.Now));

    private async Task Relay(ClientRequestArrived r, RelayedRequest relayed)
    {
        object?[] wrapper = [r.Client.Endpoint, r.Client.Incarnation, r.Number, r.Floor, r.Payload];
        try
        {
            switch (r.Primitive)
            {
                case ClientPrimitive.Send: await SendAsync(ClientRelayCode, wrapper).ConfigureAwait(false); break;
                case ClientPrimitive.Ordered: await OrderedSendAsync(ClientRelayCode, wrapper).ConfigureAwait(false); break;
                case ClientPrimitive.Safe: await SafeSendAsync(ClientRelayCode, wrapper).ConfigureAwait(false); break;
                case ClientPrimitive.Query:
                    var timeout = new QueryTimeout(TimeSpan.FromMicroseconds(r.TimeoutMicros));
                    IReadOnlyList<QueryReply> replies = await QueryCore(MessageKind.QueryOrdered, "GroupClient.QueryAsync", r.Replies == -1 ? ALL : r.Replies, timeout, ClientRelayCode, wrapper).ConfigureAwait(false);
                    AnswerRelayed(r.Client, r.Number, relayed, ClientOutcome.Replies, [.. replies.Select(x => new ClientReply(x.Replier, x.Payload))], null);
                    return;
            }
            // A send is answered when this member delivers it (OnRelayedDelivered): a SafeSend is durable then.
        }
        catch (QueryAbortedException e)
        {
            AnswerRelayed(r.Client, r.Number, relayed, ClientOutcome.Aborted, [new ClientReply(e.Member.Node, System.Text.Encoding.UTF8.GetBytes(e.Reason))], null);
        }
        catch (QueryTimeoutException e)
        {
            AnswerRelayed(r.Client, r.Number, relayed, ClientOutcome.TimedOut, [.. e.MissingMembers.Select(m => new ClientReply(m.Node, []))], null);
        }
        catch (Exception e) when (e is IsisException or ArgumentException or InvalidOperationException)
        {
            AnswerRelayed(r.Client, r.Number, relayed, ClientOutcome.Failed, null, e.Message);
        }
    }

    private void AnswerRelayed(NodeId client, long number, RelayedRequest relayed, ClientOutcome outcome, IReadOnlyList<ClientReply>? replies, string? reason)
    {
        if (relayed.Answered || !_runtime.IsRunning) return;
        relayed.Outcome = outcome;
        relayed.Replies = replies;
        relayed.Reason = reason;
        EventLoop loop = _runtime.RunningLoop();
        loop.Post(() =>
        {
            relayed.AnsweredAt = loop.Now;
            relayed.Answered = true;
            loop.Node.AnswerClient(Id, client, number, outcome, replies, reason, loop.Now);
        });
    }

    /// <summary>Answers older than a minute go (a client retries for seconds), and the oldest past the cap.</summary>
    private void ForgetOldAnswers(long now)
    {
        if (_relayed.Count < MaxRelayedAnswers / 2) return;
        foreach (var (key, r) in _relayed)
        {
            if (r.Answered && (now - r.AnsweredAt > 60_000_000 || _relayed.Count > MaxRelayedAnswers)) _relayed.TryRemove(key, out _);
        }
    }

    /// <summary>
    /// A relayed request delivered (delivery thread): it runs here if this is the first copy this
    /// member delivered; a duplicate query gets the reply this member gave the first copy. A request
    /// this member relays is answered now (any copy's delivery completes it).
    /// </summary>
    private void OnRelayedDelivered(ulong endpoint, uint incarnation, long number, long floor, byte[] payload)
    {
        var client = new NodeId(endpoint, incarnation);
        bool run = Sessions.TryBegin(client, number, floor);
        if (run)
        {
            _currentClientRequest = (client, number);
            try
            {
                Dispatch(client, payload);
            }
            finally
            {
                _currentClientRequest = null;
            }
        }
        else if (_currentQuery is { Replied: false } && _clientReplies.TryGetValue((client, number), out var reply))
        {
            SendReply(reply.Kind, reply.Payload, "GroupClient.QueryAsync");
        }
        if (_relayed.TryGetValue((client, number), out RelayedRequest? relayed) && relayed.Primitive != ClientPrimitive.Query)
        {
            AnswerRelayed(client, number, relayed, ClientOutcome.Done, null, null);
        }
    }

    /// <summary>The reply this member gave a client's query, for a duplicate of it (called as the reply is sent); the last 4,096 are kept.</summary>
    private void RememberClientReply(ReplyKind kind, byte[] payload)
    {
        if (_currentClientRequest is not { } key) return;
        _clientReplies[key] = (kind, payload);
        _clientReplyOrder.Enqueue(key);
        while (_clientReplyOrder.Count > MaxCachedReplies) _clientReplies.Remove(_clientReplyOrder.Dequeue());
    }

    /// <summary>The sessions' part of a checkpoint (transfer or disk), before the application's parts; null when there are none.</summary>
    private byte[]? ClientSessionsPart()
    {
        if (_clientSessions is not { Count: > 0 } sessions) return null;
        byte[] table = sessions.Snapshot();
        byte[] part = new byte[SessionsMagic.Length + table.Length];
        SessionsMagic.CopyTo(part);
        table.CopyTo(part, SessionsMagic.Length);
        return part;
    }

    /// <summary>True if <paramref name="part"/> is the sessions' part (loaded here); an application's part is a MessagePack array, never starting with 'I'.</summary>
    private bool TryLoadClientSessions(ReadOnlySpan<byte> part)
    {
        if (!part.StartsWith(SessionsMagic)) return false;
        var sessions = new ClientSessions(_runtime.Options.Mutations);
        if (!sessions.Load(part[SessionsMagic.Length..])) throw new IsisException($"The client sessions in the checkpoint of group '{Name}' are malformed.");
        _clientSessions = sessions;
        return true;
    }
}
