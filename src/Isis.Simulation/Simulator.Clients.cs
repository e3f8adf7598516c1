using System.Buffers.Binary;
using Isis.Core.Clients;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Simulation;

/// <summary>
/// The client families (<see cref="Scenario.Clients"/>): non-member clients, each the core's real
/// <see cref="GroupClientNode"/> on the simulated network, send Sends, OrderedSends, SafeSends and
/// queries through the members, which relay them as the runtime's Group does (Group.Clients.cs):
/// answer "working" to every copy, issue the request wrapped with the client's session and number,
/// run each wrapped request once (<see cref="ClientSessions"/>, passed to joiners with the state) and
/// answer when they deliver it. Relays crash, pause and are cut off mid-request; the checker's
/// ClientRequests wants every request run at most once per member and every answered one run.
/// </summary>
internal sealed partial class Simulator
{
    private const byte ClientTag = 0x43;
    private const int ClientPayloadBytes = 1 + 1 + 8 + 4 + 8 + 8;
    private const uint ClientChunkMagic = 0xC11E_5E55;
    private const int OutstandingPerClient = 3;

    /// <summary>The clients' pacing, scaled to the simulator's runs (seconds long): retries every 20 ms, another relay after 100 ms of silence.</summary>
    private static readonly ClientProtocolOptions SimClientPacing = new(RetryInterval: 20_000, FailoverAfter: 100_000, LookupInterval: 50_000, RefreshInterval: 500_000);

    private SimClient[]? _clients;

    /// <summary>Client requests answered over the run, and how many times a request moved to another relay (for the scenario tests' report).</summary>
    internal (long Answered, long FailedOver) ClientTotals { get; private set; }

    /// <summary>One simulated client process: its protocol node and its workload.</summary>
    private sealed class SimClient(int index, ulong endpoint)
    {
        public readonly int Index = index;
        public readonly ulong Endpoint = endpoint;
        public GroupClientNode? Node;
        public long NextAt;
        public int Issued;
        public readonly HashSet<long> Waiting = new();
    }

    /// <summary>A member incarnation's side of the clients: the sessions it applies, and the requests it relays.</summary>
    internal sealed class ClientRelay(ClientSessions sessions)
    {
        public ClientSessions Sessions { get; set; } = sessions;
        public readonly Dictionary<(NodeId Client, long Number), Relayed> Requests = new();
        public readonly Dictionary<long, (NodeId Client, long Number)> Queries = new();
    }

    /// <summary>A request a member relays; its answer once known.</summary>
    internal sealed class Relayed(ClientPrimitive primitive)
    {
        public readonly ClientPrimitive Primitive = primitive;
        public ClientOutcome? Outcome;
        public ClientReply[] Replies = [];
    }

    private void NewClientRelay(SimProcess p)
    {
        if (Scenario.Clients > 0) p.App.Clients = new ClientRelay(new ClientSessions(Scenario.Protocol.Mutations));
    }

    /// <summary>The clients start within the start window, each at an endpoint below the service directory's.</summary>
    private void StartClients()
    {
        if (Scenario.Clients <= 0) return;
        _clients = new SimClient[Scenario.Clients];
        ulong[] seeds = Scenario.EmbeddedService ? [_directoryEndpoint, _processes[0].Endpoint] : [.. _serviceEndpoints, _processes[0].Endpoint];
        for (int i = 0; i < _clients.Length; i++)
        {
            var c = _clients[i] = new SimClient(i, _directoryEndpoint - 1 - (ulong)i);
            uint salt = (uint)_random.NextUInt64();
            At(_random.NextInRange(0, Math.Max(1, Scenario.StartWindow)) + 50_000, () =>
            {
                c.Node = new GroupClientNode(new NodeId(c.Endpoint, 1), GroupName, seeds, salt, systemKey: null, groupKey: null, SimClientPacing);
                c.NextAt = _now;
                FlushClient(c);
            });
        }
    }

    private SimClient? ClientAt(ulong endpoint) =>
        _clients != null && endpoint < _directoryEndpoint && endpoint >= _directoryEndpoint - (ulong)_clients.Length ? _clients[(int)(_directoryEndpoint - 1 - endpoint)] : null;

    /// <summary>Ticks the clients and issues their next requests: up to three outstanding each, through the first half of the heal phase.</summary>
    private void TickClients()
    {
        if (_clients == null) return;
        foreach (SimClient c in _clients)
        {
            if (c.Node is not { } node) continue;
            if (node.NextDeadline <= _now) node.Tick(_now);
            if (_now >= c.NextAt && c.Waiting.Count < OutstandingPerClient && c.Issued < Scenario.MessagesPerProcess && _now <= Scenario.FaultPhase + Scenario.HealPhase / 2)
            {
                c.NextAt = _now + _random.NextInRange(1_000, 20_000);
                double pick = _random.NextDouble();
                ClientPrimitive primitive = pick < 0.2 ? ClientPrimitive.Send : pick < 0.5 ? ClientPrimitive.Ordered : pick < 0.85 ? ClientPrimitive.Safe : ClientPrimitive.Query;
                var payload = new byte[8];
                BinaryPrimitives.WriteInt32LittleEndian(payload, c.Index);
                BinaryPrimitives.WriteInt32LittleEndian(payload.AsSpan(4), ++c.Issued);
                long number = node.Issue(primitive, payload, primitive == ClientPrimitive.Query ? -1 : 0, 60_000_000, _now);
                c.Waiting.Add(number);
                if (RecordsHistory) History.RecordClientRequestIssued(_now, node.Self, _group, number, KindOf(primitive));
            }
            FlushClient(c);
        }
    }

    private static MessageKind KindOf(ClientPrimitive primitive) => primitive switch
    {
        ClientPrimitive.Send => MessageKind.Send,
        ClientPrimitive.Ordered => MessageKind.Ordered,
        ClientPrimitive.Safe => MessageKind.Safe,
        _ => MessageKind.QueryOrdered,
    };

    private void FlushClient(SimClient c)
    {
        if (c.Node != null) NodeStep.Run(c.Node, null, new ClientPorts(this, c));
    }

    /// <summary>A client's I/O: the simulated network, and its answers to the history.</summary>
    private readonly struct ClientPorts(Simulator sim, SimClient client) : INodePorts
    {
        public bool MakeDurable(StepSource source, in Ready ready) => true;

        public void Send(StepSource source, in OutboundPacket packet) => sim._network.Send(client.Endpoint, packet.Destination, packet.Bytes.ToArray(), sim._now);

        public void FlushSends()
        {
        }

        public void Deliver(StepSource source, NodeEvent e, long time)
        {
            switch (e)
            {
                case ClientAnswered a:
                    client.Waiting.Remove(a.Number);
                    sim.ClientTotals = (sim.ClientTotals.Answered + 1, sim.ClientTotals.FailedOver);
                    if (sim.RecordsHistory) sim.History.RecordClientRequestAnswered(sim._now, client.Node!.Self, sim._group, a.Number, a.Outcome.ToString());
                    break;
                case ClientFailedOver:
                    sim.ClientTotals = (sim.ClientTotals.Answered, sim.ClientTotals.FailedOver + 1);
                    break;
            }
        }
    }

    /// <summary>A member's events that concern the clients: a request to relay, a relayed message delivered, a relayed query completed.</summary>
    private void OnClientEvent(SimProcess p, NodeEvent e)
    {
        if (p.App.Clients is not { } relay || p.Node is not { } node) return;
        switch (e)
        {
            case ClientRequestArrived r when r.Group == _group:
                // The runtime relays off its event loop: a little later.
                At(_now + _random.NextInRange(0, 500), () => Relay(p, node, relay, r));
                break;
            case MessageDelivered d when d.Group == _group:
            {
                ReadOnlySpan<byte> body = d.Kind.IsQuery() ? d.Payload.Span[Math.Min(8, d.Payload.Length)..] : d.Payload.Span;
                if (body.Length != ClientPayloadBytes || body[0] != ClientTag) return;
                var client = new NodeId(BinaryPrimitives.ReadUInt64LittleEndian(body[2..]), BinaryPrimitives.ReadUInt32LittleEndian(body[10..]));
                long number = BinaryPrimitives.ReadInt64LittleEndian(body[14..]), floor = BinaryPrimitives.ReadInt64LittleEndian(body[22..]);
                if (relay.Sessions.TryBegin(client, number, floor) && RecordsHistory) History.RecordClientRequestRan(_now, node.Self, _group, d.ViewId, client, number);
                if (relay.Requests.TryGetValue((client, number), out Relayed? mine) && mine.Primitive != ClientPrimitive.Query && mine.Outcome == null)
                {
                    mine.Outcome = ClientOutcome.Done;
                    At(_now, () => AnswerRelayed(p, node, client, number, mine));
                }
                break;
            }
            case QueryCompleted q when q.Group == _group && relay.Queries.Remove(q.QueryId, out var key):
                if (!relay.Requests.TryGetValue(key, out Relayed? asked)) return;
                asked.Outcome = q.Outcome switch { QueryOutcome.Completed => ClientOutcome.Replies, QueryOutcome.Aborted => ClientOutcome.Aborted, _ => ClientOutcome.TimedOut };
                asked.Replies = q.Outcome == QueryOutcome.TimedOut ? [.. q.Missing.Select(m => new ClientReply(m, []))]
                    : [.. q.Replies.Where(x => x.Kind is ReplyKind.Values or ReplyKind.Abort).Select(x => new ClientReply(x.Replier, x.Payload))];
                At(_now, () => AnswerRelayed(p, node, key.Client, key.Number, asked));
                break;
        }
    }

    /// <summary>The runtime's OnClientRequest and Relay: a known request is answered from the relay's table; a new one is issued in the group.</summary>
    private void Relay(SimProcess p, ProcessNode node, ClientRelay relay, ClientRequestArrived r)
    {
        if (p.Node != node || node.IsShutDown || p.App.Clients != relay) return;
        var key = (r.Client, r.Number);
        if (relay.Requests.TryGetValue(key, out Relayed? known))
        {
            node.AnswerClient(_group, r.Client, r.Number, known.Outcome ?? ClientOutcome.Working, known.Replies, null, _now);
        }
        else if (node.FindGroup(_group) is not { State: MemberState.Active })
        {
            node.AnswerClient(_group, r.Client, r.Number, ClientOutcome.Refused, null, "not an active member", _now);
        }
        else
        {
            relay.Requests[key] = new Relayed(r.Primitive);
            node.AnswerClient(_group, r.Client, r.Number, ClientOutcome.Working, null, null, _now);
            var payload = new byte[ClientPayloadBytes];
            payload[0] = ClientTag;
            payload[1] = (byte)r.Primitive;
            BinaryPrimitives.WriteUInt64LittleEndian(payload.AsSpan(2), r.Client.Endpoint);
            BinaryPrimitives.WriteUInt32LittleEndian(payload.AsSpan(10), r.Client.Incarnation);
            BinaryPrimitives.WriteInt64LittleEndian(payload.AsSpan(14), r.Number);
            BinaryPrimitives.WriteInt64LittleEndian(payload.AsSpan(22), r.Floor);
            if (r.Primitive == ClientPrimitive.Query)
            {
                relay.Queries[++p.QueryIds] = key;
                node.Query(_group, p.QueryIds, MessageKind.QueryOrdered, payload, QueryTracker.All, timeout: 60_000_000, QueryTimeoutAction.Abort, _now);
            }
            else
            {
                node.Send(_group, payload, _now, KindOf(r.Primitive));
            }
        }
        Flush(p);
    }

    private void AnswerRelayed(SimProcess p, ProcessNode node, NodeId client, long number, Relayed relayed)
    {
        if (p.Node != node || node.IsShutDown) return;
        node.AnswerClient(_group, client, number, relayed.Outcome!.Value, relayed.Replies, null, _now);
        Flush(p);
    }

    /// <summary>The client sessions' part of a checkpoint.</summary>
    private byte[] ClientChunk(SimProcess p) => TaggedChunk(ClientChunkMagic, p.App.Clients!.Sessions.Snapshot());

    /// <summary>A joiner loads the client sessions from its checkpoint; true if the chunk was theirs.</summary>
    private bool LoadClientChunk(SimProcess p, byte[] chunk)
    {
        if (!TryReadTaggedChunk(chunk, ClientChunkMagic, out byte[] snapshot)) return false;
        if (p.App.Clients is { } relay)
        {
            var sessions = new ClientSessions(Scenario.Protocol.Mutations);
            Invariant(sessions.Load(snapshot), "a checkpoint's client sessions load");
            relay.Sessions = sessions;
        }
        return true;
    }
}
