using System.Buffers.Binary;
using System.Globalization;
using System.Net;
using Isis.Core.Bft;
using Isis.Core.Node;
using Isis.Perpetual;
using Isis.Perpetual.Runtime;
using Isis.Runtime;
using MessagePack;

// One replica of a two-tier deployment: "caller" (the store) serves each client request by calling
// "target" (the bank), which adds the amount to a total and answers it; the caller answers
// [its own count of requests, the target's total]. Arguments:
//   <caller|target> <index> <key, base64> <caller ports, comma-separated> <target ports> <client port> [byzantine] [--record FILE]
// A byzantine target answers every request with a wrong total and, as primary, sends half of the
// backups a pre-prepare other than the other half's (equivocation). It prints "ready" once listening,
// and a correct replica prints "stats view=V executed=E divergent=D dropped=P" when its stdin closes.

string role = args[0];
int index = int.Parse(args[1], CultureInfo.InvariantCulture);
byte[] key = Convert.FromBase64String(args[2]);
IPEndPoint[] Ports(string csv) => [.. csv.Split(',').Select(p => new IPEndPoint(IPAddress.Loopback, int.Parse(p, CultureInfo.InvariantCulture)))];
var deployment = new PerpetualDeployment(key)
    .AddService("caller", Ports(args[3]))
    .AddService("target", Ports(args[4]))
    .AddClient("test", Ports(args[5])[0]);
bool byzantine = args.Contains("byzantine");
int recordAt = Array.IndexOf(args, "--record");
using StreamWriter? record = recordAt > 0 ? new StreamWriter(args[recordAt + 1]) { AutoFlush = true } : null; // line by line: the process may be SIGKILLed
var options = new PerpetualOptions { ViewChangeTimeout = TimeSpan.FromMilliseconds(300) };

IDisposable running = byzantine ? ByzantineTarget.Start(deployment, index, options) : PerpetualReplica.Start(deployment, role, index, role switch
{
    "caller" => Caller,
    "target" => Target,
    _ => throw new ArgumentException($"role {role}: caller or target"),
}, options, record == null ? null : e => Record(record, e));
Console.WriteLine("ready");
Console.Out.Flush();
Console.In.ReadToEnd(); // until the test closes stdin or kills the process
if (running is PerpetualReplica replica)
    Console.WriteLine($"stats view={replica.View} executed={replica.Executed} divergent={replica.DivergentMessages} dropped={replica.DroppedPackets}");
Console.Out.Flush();
running.Dispose();
return 0;

// What the replica did, one line per event, for the simulator's checker (tests/Isis.Tests/MultiProcess/PerpetualRecords.cs).
static void Record(StreamWriter record, NodeEvent e)
{
    string line = e switch
    {
        BftRequestOrdered o => $"ordered {o.Position} {o.Client} {o.Number} {Convert.ToHexString(o.Operation)} {o.Time} {o.Seed}",
        BftCallCompleted c => $"completed {c.Position} {c.Target} {c.Number} {(c.Result == null ? "-" : Convert.ToHexString(c.Result))} {c.Time} {c.Seed}",
        PerpetualAnswered a => $"answered {a.Client} {a.Number} {Convert.ToHexString(a.Result)}",
        PerpetualCalled c => $"called {c.Target} {c.Number} {Convert.ToHexString(c.Operation)}",
        _ => "",
    };
    if (line.Length == 0) return;
    lock (record) record.WriteLine(line);
}

static async Task Target(PerpetualReplica r)
{
    long total = 0;
    while (true)
    {
        PerpetualRequest request = await r.ReceiveRequestAsync();
        total += request.Read<long>();
        r.SendReply(total, request);
    }
}

static async Task Caller(PerpetualReplica r)
{
    long served = 0;
    while (true)
    {
        PerpetualRequest request = await r.ReceiveRequestAsync();
        served++;
        _ = Serve(r, request, served); // asynchronous: the next request is taken while this one's call is out
    }
}

static async Task Serve(PerpetualReplica r, PerpetualRequest request, long served)
{
    PerpetualReply reply = await r.SendReceiveAsync("target", request.Read<long>(), TimeSpan.FromSeconds(20));
    r.SendReply(new[] { served, reply.Aborted ? -1 : reply.Read<long>() }, request);
}

/// <summary>The Byzantine build of a target replica: the protocol driven directly, lying in its replies and, as primary, in its pre-prepares.</summary>
internal static class ByzantineTarget
{
    public static IDisposable Start(PerpetualDeployment deployment, int index, PerpetualOptions options)
    {
        PerpetualDeployment.Built built = deployment.Build();
        BftService service = built.Service("target");
        BftKeys keys = built.KeysOf(service.Replicas[index]);
        var protocol = new PbftReplica(built.Deployment, "target", index, keys, options.ToProtocol(), NodeHost.Now());
        long total = 0;
        NodeHost? host = null;
        host = new NodeHost(protocol, deployment.ReplicasOf("target")[index], (e, _) =>
        {
            if (e is not BftRequestOrdered ordered) return;
            total += MessagePackSerializer.Deserialize<long>(ordered.Operation);
            byte[] wrong = MessagePackSerializer.Serialize(total + 1_000_003);
            host!.Post(now => protocol.Reply(ordered.Client, ordered.Number, wrong, now));
        }, $"byzantine target {index}", outbound: packet => Equivocate(packet, built.Deployment, service, keys)).Start();
        return host;
    }

    /// <summary>To odd-indexed backups, a pre-prepare for the same (view, seq) with the request stamped a microsecond later: another proposal.</summary>
    private static OutboundPacket Equivocate(OutboundPacket packet, BftDeployment deployment, BftService service, BftKeys keys)
    {
        ReadOnlySpan<byte> bytes = packet.Bytes.Span;
        int to = service.IndexOf(deployment.PrincipalAt(packet.Destination));
        if (bytes.Length < 2 || bytes[1] != (byte)BftKind.PrePrepare || to % 2 == 0
            || !BftWire.TryReadPrePrepare(BftWire.BodyOf(bytes), out long view, out long seq, out ReadOnlySpan<byte> proposal) || proposal.Length < 9) return packet;
        byte[] other = Proposal.Stamp(proposal, BinaryPrimitives.ReadInt64LittleEndian(proposal[1..]) + 1);
        return packet with { Bytes = BftWire.Seal(keys, BftKind.PrePrepare, BftWire.PrePrepare(view, seq, other), [service.Replicas[to]]) };
    }
}
