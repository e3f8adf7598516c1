using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Clients;

/// <summary>
/// Which requests of non-member clients a member has run: the table that makes a request retried
/// through another relay run at most once. Every member applies the relayed messages it delivers
/// (<see cref="TryBegin"/>), and a joiner receives the table with its state transfer, so members
/// that deliver the same messages hold the same table. Sans-IO and deterministic: the runtime and
/// the simulator drive the same code.
/// </summary>
/// <remarks>
/// <para>A client numbers its requests 1, 2, 3, ... and sends with each the lowest number whose answer
/// it still waits for (its floor): it never sends a request below its floor again, so the table
/// keeps, per client, the floor and the numbers above it that ran. A client is one incarnation (its
/// endpoint and a number drawn at its start): a restarted client is a new session.</para>
/// <para>A session whose client has sent nothing for <see cref="IdleSessions"/> relayed messages of the
/// group is forgotten, in the delivery order, so at every member alike; a client that was idle that
/// long has had every answer it waited for or given up (its relays retry for a few seconds only).</para>
/// </remarks>
internal sealed class ClientSessions(ProtocolMutations mutations = ProtocolMutations.None)
{
    /// <summary>Relayed messages after which a client that sent none in between is forgotten.</summary>
    public const long IdleSessions = 1_000_000;

    /// <summary>Most numbers above its floor a client may have ran and not yet acknowledged (its window of outstanding requests).</summary>
    public const int MaxAboveFloor = 4096;

    private sealed class Session
    {
        public long Floor;
        public readonly SortedSet<long> Ran = new();
        public long LastSeen;
    }

    private readonly Dictionary<NodeId, Session> _sessions = new();
    private readonly bool _runTwice = (mutations & ProtocolMutations.ClientRetriesRunTwice) != 0;
    private long _applied;

    /// <summary>Clients this member holds a session for.</summary>
    public int Count => _sessions.Count;

    /// <summary>
    /// A relayed request delivered: true if it runs now (the first copy of it this member
    /// delivered), false if a copy ran already or it lies below the client's floor.
    /// </summary>
    /// <param name="client">The client's incarnation.</param>
    /// <param name="number">The request's number.</param>
    /// <param name="floor">The client's floor when it sent this copy: every request below it was answered.</param>
    public bool TryBegin(NodeId client, long number, long floor)
    {
        _applied++;
        if (!_sessions.TryGetValue(client, out Session? s)) _sessions[client] = s = new Session();
        s.LastSeen = _applied;
        if (floor > s.Floor)
        {
            s.Floor = floor;
            s.Ran.RemoveWhere(n => n < floor);
        }
        if (_applied % 4096 == 0) ForgetIdle();
        if (_runTwice) return true;
        if (number < s.Floor || !s.Ran.Add(number)) return false;
        // A client that holds more than its window open is misbehaving: its oldest entries go first.
        while (s.Ran.Count > MaxAboveFloor)
        {
            long oldest = s.Ran.Min;
            s.Ran.Remove(oldest);
            s.Floor = oldest + 1;
        }
        return true;
    }

    /// <summary>True if <paramref name="number"/> of <paramref name="client"/> ran here (or lies below its floor).</summary>
    public bool Ran(NodeId client, long number) =>
        _sessions.TryGetValue(client, out Session? s) && (number < s.Floor || s.Ran.Contains(number));

    private void ForgetIdle()
    {
        List<NodeId>? idle = null;
        foreach (var (client, s) in _sessions)
        {
            if (_applied - s.LastSeen > IdleSessions) (idle ??= new()).Add(client);
        }
        if (idle != null) foreach (NodeId c in idle) _sessions.Remove(c);
    }

    /// <summary>The table, for a joiner's state transfer: sessions in a fixed order, so every member writes the same bytes.</summary>
    public byte[] Snapshot()
    {
        var w = new PacketWriter().BeginRecord().I64(_applied).I32(_sessions.Count);
        foreach (var (client, s) in _sessions.OrderBy(e => e.Key))
        {
            w.Node(client).I64(s.Floor).I64(s.LastSeen).Longs([.. s.Ran]);
        }
        return w.FinishRecord();
    }

    /// <summary>Replaces the table with a snapshot another member made; false if it is malformed (the table is then unchanged).</summary>
    public bool Load(ReadOnlySpan<byte> snapshot)
    {
        var r = new WireReader(snapshot);
        long applied = r.I64();
        int count = r.Count(8 + 4 + 8 + 8 + 4);
        var sessions = new Dictionary<NodeId, Session>();
        for (int i = 0; i < count && r.Ok; i++)
        {
            NodeId client = r.Node();
            var s = new Session { Floor = r.I64(), LastSeen = r.I64() };
            foreach (long n in r.Longs()) s.Ran.Add(n);
            sessions[client] = s;
        }
        if (!r.Complete || applied < 0) return false;
        _sessions.Clear();
        foreach (var (c, s) in sessions) _sessions[c] = s;
        _applied = applied;
        return true;
    }
}
