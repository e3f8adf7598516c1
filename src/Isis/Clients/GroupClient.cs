using System.Collections.Concurrent;
using System.Net;
using System.Security.Cryptography;
using Isis.Core.Clients;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Diagnostics;
using Isis.Runtime;
using Isis.Serialization;
using Isis.Transport;
using Microsoft.Extensions.Logging;

namespace Isis;

/// <summary>
/// A client of a group in a process that is not a member of it (an unreplicated front end, a
/// console): it sends Send, OrderedSend, SafeSend and Query requests to one member, which relays
/// them into the group, and moves to another member when that one fails. Thread-safe; calls may
/// be outstanding concurrently. Needs no <see cref="IsisSystem"/> in the process.
/// </summary>
/// <remarks>
/// <para><b>Finding the members.</b> The client asks the membership service (or the
/// <see cref="GroupClientOptions.Seeds"/>) for the group's current view, asks again every few
/// seconds, and spreads its requests over the members.</para>
/// <para><b>At most once, exactly once.</b> Each request carries the client's session and a number;
/// every member runs a request at most once, however many relays issued it (the members keep the
/// sessions, and a joiner receives them with the group's state). A relay answers when it delivers
/// the request: a Send or OrderedSend has then reached the group from the relay (it survives the
/// relay's crash as a Send does, once stable), a SafeSend is durable at the group's acceptors. If
/// the relay fails first, the client sends the same request to another member, and the members
/// that ran the first relay's copy ignore the second: a SafeSend, once answered, ran exactly once
/// at every member. A query retried this way gets from each member the reply it gave the first copy.</para>
/// <para><b>Order.</b> The client's requests run in the order the relays issue them: to have one run
/// after another (FIFO), await the first before making the second. Handlers see the client's
/// requests as the group's messages; the sender they name is the client.</para>
/// <para>A call that times out (<see cref="GroupClientOptions.Timeout"/>) stops waiting, not the
/// request: the client keeps retrying it in the background until a member answers, so its duplicates
/// are still recognized, and it may still run.</para>
/// </remarks>
public sealed class GroupClient : IDisposable
{
    private readonly string _name;
    private readonly GroupClientOptions _options;
    private readonly NodeHost _host;
    private readonly GroupClientNode _node;
    private readonly ILogger _log;
    private readonly ConcurrentDictionary<long, TaskCompletionSource<ClientAnswered>> _pending = new();
    private readonly SharedBufferPool _buffers = new();
    private readonly ThreadLocal<ThreadEncoder> _encoders;
    private volatile NodeId[] _members = [];
    private long _failovers;
    private volatile bool _disposed;

    /// <summary>A client of group <paramref name="groupName"/>; it starts looking for the members at once.</summary>
    /// <param name="groupName">The group's name, as its members created it.</param>
    /// <param name="options">Where to find the members, the group's key, timeouts (null: defaults).</param>
    /// <exception cref="ArgumentException">No name, a key that is not 32 bytes, or a timeout that is not positive.</exception>
    public GroupClient(string groupName, GroupClientOptions? options = null)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(groupName);
        _options = options ?? new GroupClientOptions();
        if (_options.GroupKey is { Length: not Core.Security.PacketSealer.KeySize })
        {
            throw new ArgumentException($"GroupClientOptions.GroupKey must be the group's {Core.Security.PacketSealer.KeySize}-byte key (it has {_options.GroupKey.Length} bytes).", nameof(options));
        }
        if (_options.Timeout <= TimeSpan.Zero || _options.QueryTimeout <= TimeSpan.Zero || _options.FailoverAfter <= TimeSpan.Zero)
        {
            throw new ArgumentException("GroupClientOptions.Timeout, QueryTimeout and FailoverAfter must be positive.", nameof(options));
        }
        _name = groupName;
        _encoders = new(() => new ThreadEncoder(_buffers));
        _log = _options.LoggerFactory?.CreateLogger("Isis.GroupClient") ?? new StandardErrorLogger(null);
        ulong[] seeds = [.. Seeds(_options).Select(EndpointConversions.FromIPEndPoint).Distinct()];
        var pacing = new ClientProtocolOptions(
            RetryInterval: Math.Max(10_000, (long)_options.FailoverAfter.TotalMicroseconds / 5),
            FailoverAfter: (long)_options.FailoverAfter.TotalMicroseconds);
        GroupClientNode? node = null;
        _host = new NodeHost(endpoint => node = new GroupClientNode(new NodeId(endpoint, IncarnationClock.Next()), groupName, seeds,
                (uint)RandomNumberGenerator.GetInt32(int.MaxValue), _options.Membership.SystemKey, _options.GroupKey, pacing),
            new IPEndPoint(_options.BindAddress, 0), OnEvent, "client " + groupName, reason => Log.ClientStopped(_log, groupName, reason));
        _node = node!;
        _host.Start();
    }

    /// <summary>The group's members as the client last learned them (empty until it found them).</summary>
    public IReadOnlyList<Address> Members => [.. _members.Select(m => new Address(m))];

    /// <summary>Times a request moved from a relay that stopped answering (or refused it) to another member.</summary>
    public long Failovers => Interlocked.Read(ref _failovers);

    /// <summary>This client's own address (its session: a new one at each start).</summary>
    public Address Address => new(_node.Self);

    /// <summary>Sends a message to the group through a member, as that member's <see cref="Group.Send"/>; completes once the member delivered it.</summary>
    /// <param name="opcode">The request code whose handlers run.</param>
    /// <param name="args">The arguments.</param>
    /// <exception cref="TimeoutException">No member answered within <see cref="GroupClientOptions.Timeout"/>.</exception>
    /// <exception cref="IsisException">The relay could not issue it (for example, too large).</exception>
    public Task SendAsync(int opcode, params object?[] args) => Call(ClientPrimitive.Send, opcode, args, 0);

    /// <summary>Sends a message in the group's total order through a member (<see cref="Group.OrderedSend"/>); completes once the member delivered it.</summary>
    /// <param name="opcode">The request code whose handlers run.</param>
    /// <param name="args">The arguments.</param>
    /// <exception cref="TimeoutException">No member answered within <see cref="GroupClientOptions.Timeout"/>.</exception>
    /// <exception cref="IsisException">The relay could not issue it.</exception>
    public Task OrderedSendAsync(int opcode, params object?[] args) => Call(ClientPrimitive.Ordered, opcode, args, 0);

    /// <summary>SafeSends a message through a member (<see cref="Group.SafeSend"/>); completes once it is delivered, so durable, and it runs exactly once at every member.</summary>
    /// <param name="opcode">The request code whose handlers run.</param>
    /// <param name="args">The arguments.</param>
    /// <exception cref="TimeoutException">No member answered within <see cref="GroupClientOptions.Timeout"/>.</exception>
    /// <exception cref="IsisException">The relay could not issue it.</exception>
    public Task SafeSendAsync(int opcode, params object?[] args) => Call(ClientPrimitive.Safe, opcode, args, 0);

    /// <summary>Queries the group through a member (an OrderedQuery: in the total order) and returns each replying member's value.</summary>
    /// <typeparam name="TReply">The type of the value each member passes to <see cref="Group.Reply"/>.</typeparam>
    /// <param name="nreplies">How many replies to wait for: a count or <see cref="Group.ALL"/>.</param>
    /// <param name="opcode">The request code whose handlers answer.</param>
    /// <param name="args">The request's arguments.</param>
    /// <exception cref="QueryTimeoutException">Members did not reply within <see cref="GroupClientOptions.QueryTimeout"/>.</exception>
    /// <exception cref="QueryAbortedException">A member answered with <see cref="Group.AbortReply"/>.</exception>
    /// <exception cref="TimeoutException">No member answered within <see cref="GroupClientOptions.Timeout"/>.</exception>
    public Task<IReadOnlyList<TReply>> QueryAsync<TReply>(int nreplies, int opcode, params object?[] args)
    {
        if (nreplies <= 0 && nreplies != Group.ALL) throw new ArgumentOutOfRangeException(nameof(nreplies), nreplies, "A client's query waits for a positive number of replies or Group.ALL.");
        return Read(Call(ClientPrimitive.Query, opcode, args, nreplies == Group.ALL ? -1 : nreplies));

        static async Task<IReadOnlyList<TReply>> Read(Task<ClientAnswered> call)
        {
            ClientAnswered answer = await call.ConfigureAwait(false);
            return [.. answer.Replies.Select(r => (TReply)Group.Values(new QueryReply(r.Replier, ReplyKind.Values, r.Payload), [typeof(TReply)])[0]!)];
        }
    }

    /// <summary>Checks the call at once (a disposed client throws here, not in the task), then issues it.</summary>
    private Task<ClientAnswered> Call(ClientPrimitive primitive, int opcode, object?[]? args, int replies)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        return CallAsync(primitive, opcode, args, replies);
    }

    private async Task<ClientAnswered> CallAsync(ClientPrimitive primitive, int opcode, object?[]? args, int replies)
    {
        (byte[] array, int length) = _encoders.Value!.Encode(opcode, args ?? [null]);
        byte[] payload = array.AsSpan(0, length).ToArray(); // the node keeps it until the request is answered
        _buffers.Return(array);
        var answer = new TaskCompletionSource<ClientAnswered>(TaskCreationOptions.RunContinuationsAsynchronously);
        long number = 0;
        var issued = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _host.Post(now =>
        {
            number = _node.Issue(primitive, payload, replies, (long)_options.QueryTimeout.TotalMicroseconds, now);
            _pending[number] = answer;
            issued.SetResult();
        });
        await issued.Task.WaitAsync(_options.Timeout).ConfigureAwait(false);
        ClientAnswered a;
        try
        {
            a = await answer.Task.WaitAsync(_options.Timeout).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            long abandoned = number;
            _host.Post(_ =>
            {
                _pending.TryRemove(abandoned, out TaskCompletionSource<ClientAnswered>? _);
                _node.Abandon(abandoned);
            });
            throw new TimeoutException($"No member of group '{_name}' answered request {number} within {_options.Timeout.TotalSeconds:0.#} s " +
                $"({(_members.Length == 0 ? "no member found yet: are the members running, and do the seeds or membership settings point at them?" : $"members known: {_members.Length}")}); the client keeps retrying it, so it may still run.");
        }
        return a.Outcome switch
        {
            ClientOutcome.Failed => throw new IsisException($"The request to group '{_name}' failed at member {a.Relay}, which relayed it: {a.Reason}"),
            ClientOutcome.Aborted when a.Replies is [var abort] => throw Aborted(abort),
            ClientOutcome.TimedOut => throw new QueryTimeoutException(
                $"The query to group '{_name}' timed out without replies from {string.Join(", ", a.Replies.Select(r => r.Replier))} (GroupClientOptions.QueryTimeout).",
                [.. a.Replies.Select(r => new Address(r.Replier))]),
            _ => a,
        };
    }

    private static QueryAbortedException Aborted(ClientReply abort)
    {
        string reason = System.Text.Encoding.UTF8.GetString(abort.Payload);
        return new QueryAbortedException($"Member {abort.Replier} aborted the query: {reason}", new Address(abort.Replier), reason);
    }

    /// <summary>Stops the client; calls still waiting end with <see cref="ObjectDisposedException"/>.</summary>
    public void Dispose()
    {
        if (_disposed) return;
        _disposed = true;
        _host.Dispose();
        foreach (var waiter in _pending.Values) waiter.TrySetException(new ObjectDisposedException(nameof(GroupClient)));
        _encoders.Dispose();
    }

    private void OnEvent(NodeEvent e, long time)
    {
        switch (e)
        {
            case ClientAnswered a:
                if (_pending.TryRemove(a.Number, out TaskCompletionSource<ClientAnswered>? waiter)) waiter.TrySetResult(a);
                break;
            case ClientMembersLearned m:
                _members = m.Members;
                break;
            case ClientFailedOver f:
                Interlocked.Increment(ref _failovers);
                Log.ClientFailedOver(_log, _name, f.Number, f.From.IsNone ? "(none)" : f.From.ToString(), f.To.IsNone ? "(none known yet)" : f.To.ToString());
                break;
        }
    }

    /// <summary>Where to ask for the members: the seeds, or the membership service as the members find it.</summary>
    private static IEnumerable<IPEndPoint> Seeds(GroupClientOptions options)
    {
        if (options.Seeds.Count > 0) return options.Seeds;
        IsisOptions m = options.Membership;
        if (!m.EmbeddedService) return [.. m.ServiceReplicaEndPoints, .. m.MembershipSeeds];
        return [m.WellKnownEndPoint, .. m.MembershipSeeds, .. ServiceDirectoryFile.Read(m.EmbeddedDirectoryPath).Replicas];
    }
}
