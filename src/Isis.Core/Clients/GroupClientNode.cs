using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Security;
using Isis.Core.Wire;

namespace Isis.Core.Clients;

/// <summary>How a <see cref="GroupClientNode"/> paces itself (microseconds).</summary>
/// <param name="RetryInterval">How often a request is sent again to its relay while no answer comes (the relay answers each copy, "working" until done).</param>
/// <param name="FailoverAfter">How long a relay may stay silent about a request before the request moves to another member.</param>
/// <param name="LookupInterval">How often the client asks where the members are while it knows none, or after a failover.</param>
/// <param name="RefreshInterval">How often it asks again while all is well, to learn joiners and leavers.</param>
internal sealed record ClientProtocolOptions(long RetryInterval = 200_000, long FailoverAfter = 1_000_000, long LookupInterval = 250_000, long RefreshInterval = 5_000_000);

/// <summary>
/// A client of a group that is not a member of it, sans-IO: it learns the group's members (from
/// the membership service's replicas, or from any member: its seeds), sends each request to one
/// member, which relays it into the group, and moves the request to another member when that one
/// stops answering or refuses it.
/// </summary>
/// <remarks>
/// <para>Requests are numbered 1, 2, 3, ... in the client's session (its incarnation). Each copy
/// carries the client's floor, the lowest number still unanswered; the members' <see cref="ClientSessions"/>
/// run a request once however many relays issue it, and forget what lies below the floor. A relay
/// answers every copy it receives: "working" while the request is in the group, then the outcome,
/// which it keeps for a while so a lost answer is answered again.</para>
/// <para>A request the application stopped waiting for (<see cref="Abandon"/>) is still retried
/// until a relay answers it, and keeps the floor below it: a copy some relay issued may still be in
/// the group, and members must still recognize its duplicates.</para>
/// </remarks>
internal sealed class GroupClientNode : IProtocolNode
{
    private readonly string _name;
    private readonly GroupId _group;
    private readonly ulong[] _seeds;
    private readonly ClientProtocolOptions _options;
    private readonly PacketSealer _sealer;
    private readonly Outbox _outbox = new();
    private readonly PacketWriter _writer = new();
    private readonly SortedDictionary<long, Pending> _pending = new();
    private NodeId[] _members = [];
    private int _viewId = -1;
    private int _nextRelay;
    private long _next;
    private long _nextLookupAt;
    private long _lastLookupAnswer = long.MinValue / 2;
    private long _lastFailoverLookup = long.MinValue / 2;

    private sealed class Pending(ClientPrimitive primitive, byte[] payload, int replies, long timeoutMicros)
    {
        public readonly ClientPrimitive Primitive = primitive;
        public readonly byte[] Payload = payload;
        public readonly int Replies = replies;
        public readonly long TimeoutMicros = timeoutMicros;
        public NodeId Relay;
        public long HeardAt;
        public long ResendAt;
        public bool Abandoned;
    }

    /// <param name="self">This client's incarnation: its endpoint and a number the driver drew at start.</param>
    /// <param name="name">The group's name.</param>
    /// <param name="seeds">Where to ask for the members: the membership service's replicas, or members.</param>
    /// <param name="salt">Four random bytes for the sealer's nonces.</param>
    /// <param name="systemKey">The system key (the lookups to the service), or null.</param>
    /// <param name="groupKey">The group's key (the requests and answers), or null.</param>
    /// <param name="options">Pacing.</param>
    public GroupClientNode(NodeId self, string name, IReadOnlyList<ulong> seeds, uint salt, byte[]? systemKey, byte[]? groupKey, ClientProtocolOptions options)
    {
        Self = self;
        _name = name;
        _group = GroupId.FromName(name);
        _seeds = [.. seeds];
        _options = options;
        _sealer = new PacketSealer(self, salt, systemKey);
        if (groupKey != null) _sealer.SetGroupKey(_group, groupKey);
    }

    public NodeId Self { get; }

    public ulong Endpoint => Self.Endpoint;

    /// <summary>Requests whose answer has not come (those abandoned included).</summary>
    public int Outstanding => _pending.Count;

    /// <summary>The members the client knows, and the view they are of (-1: none yet).</summary>
    public (int ViewId, NodeId[] Members) Members => (_viewId, _members);

    /// <summary>Packets dropped: malformed, not opened, or answers to nothing asked.</summary>
    public long Dropped { get; private set; }

    /// <summary>Lowest number whose answer has not come (the next number when none is outstanding).</summary>
    public long Floor => _pending.Count == 0 ? _next + 1 : _pending.Keys.First();

    /// <summary>Sends a request into the group; its number, which the <see cref="ClientAnswered"/> names.</summary>
    public long Issue(ClientPrimitive primitive, byte[] payload, int replies, long timeoutMicros, long now)
    {
        _outbox.StepTime = now;
        long number = ++_next;
        var p = new Pending(primitive, payload, replies, timeoutMicros) { HeardAt = now };
        _pending[number] = p;
        if (_members.Length == 0) LookUp(now);
        else MoveTo(number, p, NextRelay(NodeId.None), now);
        return number;
    }

    /// <summary>The application stopped waiting for <paramref name="number"/>: no event will name it, but it is retried until answered (see the remarks).</summary>
    public void Abandon(long number)
    {
        if (_pending.TryGetValue(number, out Pending? p)) p.Abandoned = true;
    }

    public bool HasReady => !_outbox.IsEmpty;

    public Ready TakeReady() => new(_outbox);

    public void Advance() => _outbox.Clear();

    public long NextDeadline
    {
        get
        {
            long d = _nextLookupAt;
            foreach (Pending p in _pending.Values) d = Math.Min(d, Math.Min(p.ResendAt, p.HeardAt + _options.FailoverAfter));
            return d;
        }
    }

    public void Receive(ulong source, ReadOnlySpan<byte> packet, long now)
    {
        _outbox.StepTime = now;
        if (PacketDecoder.TryReadHeader(packet, out PacketHeader h) != HeaderVerdict.Ok || h.Sender.Endpoint != source || h.Group != _group
            || PacketSealer.IsDropped(_sealer.Open(h, packet, out packet)))
        {
            Dropped++;
            return;
        }
        ReadOnlySpan<byte> body = PacketDecoder.Body(packet);
        switch (h.Kind)
        {
            case PacketKind.ClientMembers:
            {
                var r = new WireReader(body);
                NodeId[] members = r.Nodes();
                if (!r.Complete) { Dropped++; return; }
                OnMembers(h.View, members, now);
                return;
            }
            case PacketKind.ClientAnswer when ClientWire.TryReadAnswer(body, out ClientOutcome outcome, out ClientReply[] replies, out string reason):
                OnAnswer(h.Sender, h.Number, outcome, replies, reason, now);
                return;
            default:
                Dropped++;
                return;
        }
    }

    public void Tick(long now)
    {
        _outbox.StepTime = now;
        if (now >= _nextLookupAt) LookUp(now);
        foreach (var (number, p) in _pending)
        {
            if (p.Relay.IsNone)
            {
                if (_members.Length > 0) MoveTo(number, p, NextRelay(NodeId.None), now);
                continue;
            }
            if (now - p.HeardAt >= _options.FailoverAfter) FailOver(number, p, now);
            else if (now >= p.ResendAt) SendRequest(number, p, now);
        }
    }

    private void OnMembers(int viewId, NodeId[] members, long now)
    {
        _lastLookupAnswer = now;
        _nextLookupAt = now + _options.RefreshInterval;
        if (viewId < _viewId || members.Length == 0) return;
        bool changed = viewId != _viewId || !members.AsSpan().SequenceEqual(_members);
        _viewId = viewId;
        _members = members;
        if (changed) _outbox.Add(new ClientMembersLearned(viewId, members));
        // Requests that waited for a relay go now; those whose relay left the view move at once.
        foreach (var (number, p) in _pending)
        {
            if (p.Relay.IsNone || Array.IndexOf(members, p.Relay) < 0) MoveTo(number, p, NextRelay(p.Relay), now);
        }
    }

    private void OnAnswer(NodeId relay, long number, ClientOutcome outcome, ClientReply[] replies, string reason, long now)
    {
        if (!_pending.TryGetValue(number, out Pending? p)) return; // answered already
        switch (outcome)
        {
            case ClientOutcome.Working:
                if (relay == p.Relay) p.HeardAt = now;
                return;
            case ClientOutcome.Refused:
                if (relay == p.Relay) FailOver(number, p, now);
                return;
        }
        // Done, replies or failed: from whichever relay issued it (a relay given up may still answer).
        _pending.Remove(number);
        if (!p.Abandoned) _outbox.Add(new ClientAnswered(number, outcome, replies, reason, relay));
    }

    private void FailOver(long number, Pending p, long now)
    {
        NodeId from = p.Relay;
        NodeId to = NextRelay(from);
        // The relay may have left the view: ask where the members are now (at most once per interval).
        if (now - _lastFailoverLookup >= _options.LookupInterval)
        {
            _lastFailoverLookup = now;
            LookUp(now);
        }
        if (!p.Abandoned) _outbox.Add(new ClientFailedOver(number, from, to));
        MoveTo(number, p, to, now);
    }

    private void MoveTo(long number, Pending p, NodeId relay, long now)
    {
        p.Relay = relay;
        p.HeardAt = now;
        if (relay.IsNone)
        {
            p.ResendAt = long.MaxValue;
            return;
        }
        SendRequest(number, p, now);
    }

    /// <summary>The member after <paramref name="after"/> in the view (round robin), or none if the client knows none.</summary>
    private NodeId NextRelay(NodeId after)
    {
        if (_members.Length == 0) return NodeId.None;
        int at = Array.IndexOf(_members, after);
        int next = at >= 0 ? at + 1 : _nextRelay++;
        NodeId relay = _members[((next % _members.Length) + _members.Length) % _members.Length];
        return relay == after && _members.Length > 1 ? _members[(next + 1) % _members.Length] : relay;
    }

    private void SendRequest(long number, Pending p, long now)
    {
        p.ResendAt = now + _options.RetryInterval;
        _writer.Begin(new PacketHeader(PacketKind.ClientRequest, Self, _group, 0, number));
        Send(p.Relay.Endpoint, ClientWire.Request(_writer, p.Primitive, Floor, p.Replies, p.TimeoutMicros, p.Payload).Finish());
    }

    private void LookUp(long now)
    {
        _nextLookupAt = now + (_members.Length == 0 || now - _lastLookupAnswer > _options.RefreshInterval ? _options.LookupInterval : _options.RefreshInterval);
        byte[] lookup = _writer.Begin(new PacketHeader(PacketKind.ClientLookup, Self, _group, 0, 0)).String(_name).Finish();
        foreach (ulong seed in _seeds) Send(seed, lookup);
        foreach (NodeId m in _members)
        {
            if (Array.IndexOf(_seeds, m.Endpoint) < 0) Send(m.Endpoint, lookup);
        }
    }

    private void Send(ulong endpoint, byte[] packet) => _outbox.Packets.Add(new OutboundPacket(endpoint, _sealer.Seal(packet, _outbox)));
}
