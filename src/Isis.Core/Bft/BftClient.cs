using Isis.Core.Node;

namespace Isis.Core.Bft;

/// <summary>
/// An unreplicated client of a BFT service (an ASP.NET front end, a console), sans-IO: it sends each
/// request to the primary, again to every replica while no answer comes, and accepts a result once
/// f+1 replicas sent it: at least one of them is correct, and a correct replica sends only what the
/// service agreed to. Replies that disagree are counted (<see cref="DivergentReplies"/>): a faulty
/// replica, or a nondeterministic application.
/// </summary>
internal sealed class BftClient : IProtocolNode
{
    private readonly BftDeployment _deployment;
    private readonly BftService _service;
    private readonly BftKeys _keys;
    private readonly BftOptions _options;
    private readonly Outbox _outbox = new();
    private readonly SortedDictionary<long, Pending> _pending = new();
    private long _next;
    private long _view; // the latest view a reply named: its primary gets new requests

    private sealed class Pending(byte[] packet, long resendAt)
    {
        public readonly byte[] Packet = packet;
        public long ResendAt = resendAt;
        public readonly Dictionary<int, byte[]> Replies = new();
    }

    public BftClient(BftDeployment deployment, string service, BftKeys keys, BftOptions options)
    {
        _deployment = deployment;
        _service = deployment.Service(service);
        Principal = keys.Self;
        _keys = keys;
        _options = options;
    }

    public int Principal { get; }

    public ulong Endpoint => _deployment.EndpointOf(Principal);

    /// <summary>Requests sent and not yet answered.</summary>
    public int Outstanding => _pending.Count;

    /// <summary>Replies that differed from the result accepted (or from each other) for the same request.</summary>
    public long DivergentReplies { get; private set; }

    /// <summary>Packets dropped: malformed, badly authenticated, or not from a replica of the service.</summary>
    public long Dropped { get; private set; }

    /// <summary>Sends <paramref name="operation"/> to the service; its number, which the <see cref="BftReplyAccepted"/> names.</summary>
    public long Invoke(ReadOnlySpan<byte> operation, long now)
    {
        _outbox.StepTime = now;
        long number = ++_next;
        byte[] packet = BftWire.Seal(_keys, BftKind.Request, BftWire.RequestBody(Principal, number, operation), _service.Replicas);
        _pending[number] = new Pending(packet, now + _options.RetryInterval);
        _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(_service.Replicas[(int)(_view % _service.N)]), packet));
        return number;
    }

    public bool HasReady => !_outbox.IsEmpty;

    public Ready TakeReady() => new(_outbox);

    public void Advance() => _outbox.Clear();

    public long NextDeadline => _pending.Count == 0 ? long.MaxValue : _pending.Values.Min(p => p.ResendAt);

    public void Receive(ulong source, ReadOnlySpan<byte> packet, long now)
    {
        _outbox.StepTime = now;
        if (!BftWire.TryOpen(_keys, packet, out BftKind kind, out int sender, out ReadOnlySpan<byte> body) || kind != BftKind.Reply)
        {
            Dropped++;
            return;
        }
        int from = _service.IndexOf(sender);
        if (from < 0 || !BftWire.TryReadReply(body, out long view, out long number, out ReadOnlySpan<byte> result))
        {
            Dropped++;
            return;
        }
        if (!_pending.TryGetValue(number, out Pending? pending)) return; // answered already, or never asked
        byte[] answer = result.ToArray();
        pending.Replies[from] = answer;
        int needed = (_options.Mutations & BftMutations.ReplyOnFMatches) != 0 ? Math.Max(1, _service.F) : _service.F + 1;
        int matching = pending.Replies.Values.Count(r => r.AsSpan().SequenceEqual(answer));
        if (matching < needed) return;
        _view = Math.Max(_view, view);
        DivergentReplies += pending.Replies.Count - matching;
        _pending.Remove(number);
        _outbox.Add(new BftReplyAccepted(_service.Name, number, answer));
    }

    public void Tick(long now)
    {
        _outbox.StepTime = now;
        foreach (Pending p in _pending.Values)
        {
            if (now < p.ResendAt) continue;
            // The primary may be slow, faulty or gone: every replica gets it (a backup relays it to the primary).
            foreach (int replica in _service.Replicas) _outbox.Packets.Add(new OutboundPacket(_deployment.EndpointOf(replica), p.Packet));
            p.ResendAt = now + _options.RetryInterval;
        }
    }
}
