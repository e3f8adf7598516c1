using System.Collections.Concurrent;
using System.Globalization;
using System.Text;
using System.Text.Json.Nodes;
using Isis;
using Isis.MemberHost;
using Isis.Simulation.Checking;

// A group member (or, with --service-only, a membership-service host) for the multi-process and
// multi-host tests. Usage:
//
//   dotnet Isis.MemberHost.dll --service-port P [--service-address A] [--replicas A:P,B:P,C:P [--replica-data DIR]]
//       [--bind B] [--group G]
//       [--index I] [--sends N] [--expect-members K] [--expect-deliveries T] [--host-service]
//       [--service-only] [--transport udp|tcp] [--multicast-port P [--multicast-range CIDR]] [--event-log PATH] [--heartbeat-ms H] [--suspicion S] [--opcode-check]
//       [--primitive send|ordered|safe|safequery] [--phi PHI] [--order-file PATH] [--slow-replies]
//       [--safelog DIR] [--seq-from S] [--embedded [--seeds A:P,B:P,...]] [--joins-late]
//
// --joins-late: this member joins a group whose members have sent already, so its first delivery
// from each sender may carry any seq (FIFO is checked from there on).
// --system-key HEX, --group-key HEX: IsisOptions.SystemKey and Group.SetKey (32 bytes each, in hex).
// --state: the member keeps a replicated state and transfers it to joiners (ReplicatedState.cs): the
// messages it applied plus a blob that "fill N" grows by N MiB; "state" prints its digest
// ({"event":"state","pairs":..,"blobBytes":..,"sha256":..}); "stateMade" and "stateLoaded" lines
// report each checkpoint; "joined" reports how long Join took. --checkpoints DIR (with --state) keeps
// the checkpoint on disk (Group.PersistCheckpoints); "save" saves it now and answers "saved" (or "saveFailed").
// With --embedded the membership service is the zero-configuration default: embedded in the
// member processes and moving between them; P is then the machine's well-known port (a private
// one per test) and --host-service, --service-only and --replicas do not apply; --seeds lists the
// well-known addresses of the other machines (IsisOptions.MembershipSeeds, first seed founds).
// With --replicas the membership service is replicated at those addresses (a --host-service or
// --service-only process hosts the first one it can bind, keeping its log in --replica-data).
// The membership service is at A:P (A defaults to 127.0.0.1); this process binds its own socket to
// address B (default 127.0.0.1, port chosen by the OS). --host-service hosts the service here (it
// binds A:P, so A must be an address of this machine or network namespace). --service-only hosts
// the service and nothing else: it joins no group, writes only "ready", "stats", "shutdown",
// "error" and "exit" lines, and understands only "stats" and "quit"; it keeps serving after a
// "shutdown" (its own process membership ended, its replica goes on) until "quit".
//
// Otherwise it joins group G, waits until the view has K members, sends N messages (1, I, seq) with
// seq = 1, 2, ..., and checks that every sender's messages are delivered in FIFO order (seq
// consecutive per sender index). --primitive chooses Send (default), OrderedSend or SafeSendAsync
// (issued in batches of 64, each batch awaited), or "safequery": SafeSendAsync for odd seqs and
// SafeQueryAsync<int>(Group.ALL, 3, I, seq) for even ones, whose handler records the message
// as request code 1's does and replies with the member's index; --phi sets the SafeSend threshold once the view
// has K members (0, the default, keeps "every member"). The member records its delivery order
// (the (sender, seq) pairs in the order its handler ran); with --order-file it appends them to
// PATH, one "sender seq" line each, every 100 ms, on "dump", on "crash" and on exit, so a killed
// member leaves a prefix of what it delivered. Request code 2 is a query: each member answers
// with its index (after 3 s with --slow-replies). --safelog keeps the group's SafeSend history in
// DIR (SafeSendDurability.Disk: after a restart of every member, the group recovers it from the
// members' logs and replays it to each member before anything else). --seq-from S numbers this
// member's messages from S + 1 instead of 1 (a restarted member continues the numbering of its
// earlier incarnation, whose messages the replay delivers; "sent" reports the last seq, so S + the
// number sent). It writes one JSON object per line on stdout:
//
//   {"event":"ready","address":"127.0.0.1:40001#17","endpoint":"127.0.0.1:40001","port":40001,"incarnation":17,"pid":123}
//   {"event":"view","id":3,"members":["..."],"rank":1}
//   {"event":"sent","sent":10000}                           after each batch of sends
//   {"event":"progress","total":123,"perSender":{"0":50},"fifoOk":true}   at most every 200 ms
//   {"event":"done","total":50000,"perSender":{...},"fifoOk":true}        when T deliveries are reached
//   {"event":"stats", ...IsisStatistics fields...}
//   {"event":"shutdown","reason":"expelled ..."}             the membership protocol stopped it
//   {"event":"error","message":"..."}
//   {"event":"order","count":1500,"sha256":"ab12..."}        the delivery order's digest
//   {"event":"dumped","count":1500}                          the order file holds every delivery so far
//   {"event":"queryReceived","from":"..."}                   this member's query handler started
//   {"event":"queryDone","replies":[0,1,2]}                  a query this member issued completed
//   {"event":"queryFailed","message":"..."}
//   {"event":"crashing","delivered":700}                     "crash": SIGKILL of itself follows
//
// and reads commands on stdin, one per line: "stats", "status" (a progress line now), "view",
// "send N" (N more messages), "order" (digest line), "dump" (write the order file now),
// "query" (QueryAsync<int>(Group.ALL, 2, ...), answered by "queryDone"), "query-expel MS" (the same
// with a timeout of MS ms that expels the members that did not answer), "crash" and
// "crash-at N" (see below), "quit". It exits when stdin closes, and after a protocol shutdown.
//
// "crash" SIGKILLs this process from its own event loop, between two iterations: the event log and
// the order file are written first, so they hold everything this process did (a SIGKILL from
// outside can land after a batch's datagrams left but before its events reached the log, and the
// history checker would then see a delivery of a message that was never sent, or a SafeSend
// delivered before an acceptor held it). "crash-at N" does the same once N messages are delivered here.
// With --opcode-check a message that matches no handler (Undeliverable) makes fifoOk false.

var options = HostOptions.Parse(args);
var output = new JsonLines();
var tracker = new DeliveryTracker(options.OpcodeCheck, options.JoinsLate);
EventLogWriter? eventLog = options.EventLog is { } path ? new EventLogWriter(path) : null;
var order = new OrderRecorder(options.OrderFile);
const int SafeBatch = 64; // SafeSendAsync calls issued before awaiting them

var runtime = new IsisRuntime(new IsisOptions
{
    BindAddress = options.Bind,
    MembershipServiceAddress = options.ServiceAddress,
    MembershipServicePort = options.ServicePort,
    MembershipReplicas = options.Replicas,
    MembershipSeeds = options.Seeds,
    MembershipDataDirectory = options.ReplicaData,
    MembershipService = options.Embedded ? MembershipServiceMode.Auto
        : options.HostService || options.ServiceOnly ? MembershipServiceMode.Host : MembershipServiceMode.Client,
    HeartbeatInterval = TimeSpan.FromMilliseconds(options.HeartbeatMs),
    SuspicionCount = options.Suspicion,
    Transport = options.Transport,
    Multicast = options.MulticastPort > 0
        ? new MulticastOptions { Port = options.MulticastPort, AddressRange = options.MulticastRange, Interface = options.Bind.Equals(System.Net.IPAddress.Any) ? null : options.Bind }
        : null,
    SystemKey = options.SystemKey,
});
if (eventLog != null) runtime.CoreEvent += eventLog.OnCoreEvent;

int exiting = 0;
void Exit(int code)
{
    if (Interlocked.Exchange(ref exiting, 1) != 0) return;
    try
    {
        if (runtime.IsRunning) runtime.Shutdown();
    }
    catch (Exception e)
    {
        output.Write(new JsonObject { ["event"] = "error", ["message"] = "shutdown: " + e.Message });
    }
    if (!options.ServiceOnly) tracker.EmitProgress(output, force: true);
    eventLog?.Dispose();
    order.Dispose();
    output.Write(new JsonObject { ["event"] = "exit", ["code"] = code });
    Environment.Exit(code);
}

runtime.ShutDown += (_, e) =>
{
    output.Write(new JsonObject { ["event"] = "shutdown", ["reason"] = e.Reason });
    output.Write(Stats(runtime));
    // A replica host's replica outlives its own process membership: it rejoins the service when the network heals.
    if (!options.ServiceOnly) Exit(0);
};

runtime.Start();
if (runtime.Address is null) throw new InvalidOperationException("the runtime started without an address");
// The checker compares every founding it sees: one service per run, or two were founded.
if (runtime.Loop is { Founded: true, ServiceReplica: { } founded }) eventLog?.RecordFounded(founded);
// A founding after the start (this process took the well-known port over and found no service).
if (eventLog != null)
{
    runtime.CoreEvent += (_, e, _) => eventLog.WatchFounding(e, () => runtime.Loop is { FoundedLaterAfter: > 0 } loop ? loop.ServiceReplica : null);
}
if (options.ServiceOnly)
{
    output.Write(Ready(runtime));
    string? command;
    while ((command = Console.In.ReadLine()) != null)
    {
        switch (command.Trim())
        {
            case "": break;
            case "stats": output.Write(Stats(runtime)); break;
            case "quit": Exit(0); break;
            default: output.Write(new JsonObject { ["event"] = "error", ["message"] = "unknown command (--service-only): " + command }); break;
        }
    }
    Exit(0);
}
var group = new Group(runtime, options.Group);
if (options.GroupKey != null) group.SetKey(options.GroupKey);
if (options.SafeLog != null)
{
    group.SetSafeSendDurability(SafeSendDurability.Disk, options.SafeLog);
}
ReplicatedState? state = options.State ? new ReplicatedState(group, output) : null;
if (options.Checkpoints != null) group.PersistCheckpoints(options.Checkpoints, Timeout.InfiniteTimeSpan);
var bigEnough = new ManualResetEventSlim(false);
group.ViewHandlers += (ViewHandler)(v =>
{
    output.Write(new JsonObject
    {
        ["event"] = "view",
        ["id"] = v.ViewId,
        ["members"] = new JsonArray(v.Members.Select(m => (JsonNode)JsonValue.Create(m.ToString())).ToArray()),
        ["rank"] = v.GetMyRank(),
    });
    if (v.Members.Length >= options.ExpectMembers) bigEnough.Set();
});
long crashAt = long.MaxValue;
int crashing = 0;
group.Handlers[1] += (Action<int, int>)((sender, seq) =>
{
    tracker.OnDeliver(sender, seq);
    state?.Apply(sender, seq);
    long count = order.Add(sender, seq);
    if (options.ExpectDeliveries > 0 && tracker.Total == options.ExpectDeliveries) tracker.EmitDone(output);
    if (count == Interlocked.Read(ref crashAt)) Crash();
});
group.Handlers[3] += (Action<int, int>)((sender, seq) =>
{
    tracker.OnDeliver(sender, seq);
    long count = order.Add(sender, seq);
    if (options.ExpectDeliveries > 0 && tracker.Total == options.ExpectDeliveries) tracker.EmitDone(output);
    group.Reply(options.Index); // a replayed SafeQuery's reply goes nowhere
    if (count == Interlocked.Read(ref crashAt)) Crash();
});
group.Handlers[2] += (Action<int>)(token =>
{
    output.Write(new JsonObject { ["event"] = "queryReceived", ["token"] = token });
    if (options.SlowReplies) Thread.Sleep(3000);
    group.Reply(options.Index);
});
group.Undeliverable += (_, e) => tracker.OnUndeliverable(e.Opcode, e.Reason);

output.Write(Ready(runtime));

// Commands and the initial batch of sends run on one sender thread, so seqs stay in order.
var sendRequests = new BlockingCollection<int>();
var sender = new Thread(() =>
{
    try
    {
        eventLog?.RecordJoinRequested(runtime.Address.Node, options.Group);
        var joinClock = System.Diagnostics.Stopwatch.StartNew();
        group.Join();
        output.Write(new JsonObject { ["event"] = "joined", ["ms"] = joinClock.Elapsed.TotalMilliseconds });
        if (!bigEnough.Wait(TimeSpan.FromSeconds(60)))
        {
            output.Write(new JsonObject { ["event"] = "error", ["message"] = $"the view never reached {options.ExpectMembers} members" });
        }
        if (options.Phi > 0) group.SetSafeSendThreshold(options.Phi);
        if (options.Sends > 0) sendRequests.Add(options.Sends);
        int seq = options.SeqFrom;
        var pending = new List<Task>(SafeBatch);
        foreach (int n in sendRequests.GetConsumingEnumerable())
        {
            for (int i = 0; i < n; i++)
            {
                switch (options.Primitive)
                {
                    case "send":
                        group.Send(1, options.Index, ++seq);
                        break;
                    case "ordered":
                        group.OrderedSend(1, options.Index, ++seq);
                        break;
                    case "safequery" when (seq + 1) % 2 == 0:
                        pending.Add(group.SafeQueryAsync<int>(Group.ALL, 3, options.Index, ++seq));
                        if (pending.Count == SafeBatch)
                        {
                            Task.WaitAll(pending);
                            pending.Clear();
                        }
                        break;
                    default:
                        pending.Add(group.SafeSendAsync(1, options.Index, ++seq));
                        if (pending.Count == SafeBatch)
                        {
                            Task.WaitAll(pending);
                            pending.Clear();
                        }
                        break;
                }
            }
            Task.WaitAll(pending);
            pending.Clear();
            output.Write(new JsonObject { ["event"] = "sent", ["sent"] = seq });
        }
    }
    catch (Exception e)
    {
        output.Write(new JsonObject { ["event"] = "error", ["message"] = $"{e.GetType().Name}: {e.Message}" });
    }
})
{ IsBackground = true, Name = "sender" };
sender.Start();

// Event loop responsiveness, for diagnosing missed heartbeats: every 20 ms a no-op is posted to
// the loop and the time until it runs is measured; the worst stalls are reported.
var loopProbe = new Thread(() =>
{
    var clock = System.Diagnostics.Stopwatch.StartNew();
    while (true)
    {
        Thread.Sleep(20);
        if (runtime.Loop is not { } loop || !runtime.IsRunning) continue;
        long posted = clock.ElapsedTicks;
        loop.Post(() => tracker.OnLoopLatency((clock.ElapsedTicks - posted) * 1000.0 / System.Diagnostics.Stopwatch.Frequency));
    }
})
{ IsBackground = true, Name = "loop-probe" };
loopProbe.Start();

var progress = new Thread(() =>
{
    while (true)
    {
        Thread.Sleep(200);
        tracker.EmitProgress(output, force: false);
    }
})
{ IsBackground = true, Name = "progress" };
progress.Start();

// SIGKILL from the event loop, between iterations: every event of the iterations that ran is in
// the log (they are handed over after each iteration's datagrams are sent), and nothing of a later
// one happened.
void Crash()
{
    if (Interlocked.Exchange(ref crashing, 1) != 0) return;
    void Die()
    {
        eventLog?.Flush();
        order.Flush();
        output.Write(new JsonObject { ["event"] = "crashing", ["delivered"] = order.Count });
        NativeMethods.Kill(Environment.ProcessId, NativeMethods.SigKill);
    }
    if (runtime.Loop is { } loop && runtime.IsRunning) loop.Post(Die);
    else Die();
}

// A query this member issues, off the command loop: "queryDone" with the replies, or "queryFailed".
void IssueQuery(Func<Task<IReadOnlyList<int>>> query)
{
    eventLog?.RecordQueryIssued(runtime.Address!.Node, options.Group);
    _ = Task.Run(async () =>
    {
        try
        {
            IReadOnlyList<int> replies = await query().ConfigureAwait(false);
            output.Write(new JsonObject
            {
                ["event"] = "queryDone",
                ["replies"] = new JsonArray(replies.Order().Select(r => (JsonNode)JsonValue.Create(r)).ToArray()),
            });
        }
        catch (Exception e)
        {
            output.Write(new JsonObject { ["event"] = "queryFailed", ["message"] = $"{e.GetType().Name}: {e.Message}" });
        }
    });
}

string? line;
while ((line = Console.In.ReadLine()) != null)
{
    string[] words = line.Split(' ', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
    if (words.Length == 0) continue;
    switch (words[0])
    {
        case "stats":
            output.Write(Stats(runtime));
            break;
        case "status":
            tracker.EmitProgress(output, force: true);
            break;
        case "view":
            View? view = group.GetView();
            output.Write(new JsonObject
            {
                ["event"] = "view",
                ["id"] = view?.ViewId ?? -1,
                ["members"] = new JsonArray((view?.Members ?? []).Select(m => (JsonNode)JsonValue.Create(m.ToString())).ToArray()),
                ["rank"] = view?.GetMyRank() ?? -1,
            });
            break;
        case "send" when words.Length == 2 && int.TryParse(words[1], CultureInfo.InvariantCulture, out int n) && n > 0:
            sendRequests.Add(n);
            break;
        case "order":
            (long count, string sha) = order.Digest();
            output.Write(new JsonObject { ["event"] = "order", ["count"] = count, ["sha256"] = sha });
            break;
        case "dump":
            order.Flush();
            output.Write(new JsonObject { ["event"] = "dumped", ["count"] = order.Count });
            break;
        case "query":
            IssueQuery(() => group.QueryAsync<int>(Group.ALL, 2, 0));
            break;
        case "query-expel" when words.Length == 2 && int.TryParse(words[1], CultureInfo.InvariantCulture, out int timeoutMs) && timeoutMs > 0:
            // Query(ALL) whose members that do not answer within the timeout are expelled.
            IssueQuery(() => group.QueryAsync<int>(Group.ALL, new QueryTimeout(TimeSpan.FromMilliseconds(timeoutMs), QueryTimeoutAction.ExpelSlowMembers), 2, 0));
            break;
        case "crash":
            Crash();
            break;
        case "fill" when state != null && words.Length == 2 && int.TryParse(words[1], CultureInfo.InvariantCulture, out int mebibytes) && mebibytes > 0:
            _ = Task.Run(() => state.Fill(mebibytes));
            break;
        case "state" when state != null:
            output.Write(state.Describe());
            break;
        case "save" when options.Checkpoints != null:
            _ = Task.Run(() =>
            {
                try
                {
                    group.SaveCheckpoint();
                    output.Write(new JsonObject { ["event"] = "saved" });
                }
                catch (Exception e)
                {
                    output.Write(new JsonObject { ["event"] = "saveFailed", ["message"] = $"{e.GetType().Name}: {e.Message}" });
                }
            });
            break;
        case "crash-at" when words.Length == 2 && long.TryParse(words[1], CultureInfo.InvariantCulture, out long at) && at > 0:
            Interlocked.Exchange(ref crashAt, at);
            if (order.Count >= at) Crash();
            break;
        case "quit":
            Exit(0);
            break;
        default:
            output.Write(new JsonObject { ["event"] = "error", ["message"] = "unknown command: " + line });
            break;
    }
}
Exit(0); // stdin closed: the test is gone or done with us

static JsonObject Ready(IsisRuntime runtime) => new()
{
    ["event"] = "ready",
    ["address"] = runtime.Address!.ToString(),
    ["endpoint"] = runtime.Address.Endpoint,
    ["port"] = int.Parse(runtime.Address.Endpoint.AsSpan(runtime.Address.Endpoint.LastIndexOf(':') + 1), CultureInfo.InvariantCulture),
    ["incarnation"] = runtime.Address.Incarnation,
    ["pid"] = Environment.ProcessId,
    ["founded"] = runtime.Loop?.Founded ?? false,
};

static JsonObject Stats(IsisRuntime runtime)
{
    var json = new JsonObject { ["event"] = "stats" };
    try
    {
        IsisStatistics s = runtime.GetStatistics();
        json["packetsReceived"] = s.PacketsReceived;
        json["droppedMalformed"] = s.DroppedMalformed;
        json["droppedFirewall"] = s.DroppedFirewall;
        json["droppedWrongView"] = s.DroppedWrongView;
        json["droppedUnknownGroup"] = s.DroppedUnknownGroup;
        json["duplicates"] = s.Duplicates;
        json["droppedUnauthenticated"] = s.DroppedUnauthenticated;
        json["droppedReplayed"] = s.DroppedReplayed;
        json["naksSent"] = s.NaksSent;
        json["handlerMismatches"] = s.HandlerMismatches;
        json["handlerExceptions"] = s.HandlerExceptions;
        json["datagramsSent"] = s.DatagramsSent;
        json["datagramsReceived"] = s.DatagramsReceived;
        json["membershipServiceDroppedFirewall"] = s.MembershipServiceDroppedFirewall;
        json["membershipReplicaIsLeader"] = s.MembershipReplicaIsLeader;
        json["membershipReplicaTerm"] = s.MembershipReplicaTerm;
        json["membershipReplicaCommitIndex"] = s.MembershipReplicaCommitIndex;
        json["hostsMembershipService"] = runtime.HostsMembershipService;
        json["foundedService"] = runtime.Loop?.Founded ?? false;
        // This process's own multicasts, looped back to it and skipped: more than zero when its Sends went by IP multicast.
        if (runtime.Loop?.Transport is { } transport)
        {
            json["multicastEchoes"] = Interlocked.Read(ref transport.Counters.MulticastEchoes);
            json["multicastReceived"] = Interlocked.Read(ref transport.Counters.MulticastDatagramsReceived);
        }
    }
    catch (Exception e)
    {
        json["error"] = e.Message;
    }
    return json;
}

namespace Isis.MemberHost
{
    internal static class NativeMethods
    {
        public const int SigKill = 9;

        [System.Runtime.InteropServices.DllImport("libc", EntryPoint = "kill", SetLastError = true)]
        public static extern int Kill(int pid, int signal);
    }

    internal sealed record HostOptions
    {
        public int ServicePort { get; private set; } = 7345;
        public System.Net.IPAddress ServiceAddress { get; private set; } = System.Net.IPAddress.Loopback;
        public System.Net.IPAddress Bind { get; private set; } = System.Net.IPAddress.Loopback;
        public bool ServiceOnly { get; private set; }
        public List<System.Net.IPEndPoint> Replicas { get; private set; } = new();
        public string? ReplicaData { get; private set; }
        public string Group { get; private set; } = "multiprocess";
        public int Index { get; private set; }
        public int Sends { get; private set; }
        public int ExpectMembers { get; private set; } = 1;
        public long ExpectDeliveries { get; private set; } = -1;
        public bool HostService { get; private set; }
        public bool Embedded { get; private set; }
        public bool JoinsLate { get; private set; }
        public bool State { get; private set; }

        public string? Checkpoints { get; private set; }
        public byte[]? SystemKey { get; private set; }
        public byte[]? GroupKey { get; private set; }
        public List<System.Net.IPEndPoint> Seeds { get; private set; } = new();
        public string? EventLog { get; private set; }
        public int HeartbeatMs { get; private set; } = 100;
        public int Suspicion { get; private set; } = 5;
        public bool OpcodeCheck { get; private set; }
        public string Primitive { get; private set; } = "send";
        public int Phi { get; private set; }
        public string? OrderFile { get; private set; }
        public bool SlowReplies { get; private set; }
        public string? SafeLog { get; private set; }
        public int SeqFrom { get; private set; }
        public IsisTransport Transport { get; private set; } = IsisTransport.Udp;
        public int MulticastPort { get; private set; }
        public string MulticastRange { get; private set; } = "239.192.77.0/24";

        public static HostOptions Parse(string[] args)
        {
            var o = new HostOptions();
            for (int i = 0; i < args.Length; i++)
            {
                string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
                int Int() => int.Parse(Value(), CultureInfo.InvariantCulture);
                switch (args[i])
                {
                    case "--service-port": o.ServicePort = Int(); break;
                    case "--service-address": o.ServiceAddress = System.Net.IPAddress.Parse(Value()); break;
                    case "--bind": o.Bind = System.Net.IPAddress.Parse(Value()); break;
                    case "--service-only": o.ServiceOnly = true; break;
                    case "--replicas": o.Replicas = Value().Split(',').Select(System.Net.IPEndPoint.Parse).ToList(); break;
                    case "--replica-data": o.ReplicaData = Value(); break;
                    case "--group": o.Group = Value(); break;
                    case "--index": o.Index = Int(); break;
                    case "--sends": o.Sends = Int(); break;
                    case "--expect-members": o.ExpectMembers = Int(); break;
                    case "--expect-deliveries": o.ExpectDeliveries = long.Parse(Value(), CultureInfo.InvariantCulture); break;
                    case "--host-service": o.HostService = true; break;
                    case "--event-log": o.EventLog = Value(); break;
                    case "--heartbeat-ms": o.HeartbeatMs = Int(); break;
                    case "--suspicion": o.Suspicion = Int(); break;
                    case "--opcode-check": o.OpcodeCheck = true; break;
                    case "--primitive":
                        o.Primitive = Value();
                        if (o.Primitive is not ("send" or "ordered" or "safe" or "safequery")) throw new ArgumentException("--primitive is send, ordered, safe or safequery");
                        break;
                    case "--phi": o.Phi = Int(); break;
                    case "--order-file": o.OrderFile = Value(); break;
                    case "--slow-replies": o.SlowReplies = true; break;
                    case "--safelog": o.SafeLog = Value(); break;
                    case "--seq-from": o.SeqFrom = Int(); break;
                    case "--multicast-port": o.MulticastPort = Int(); break;
                    case "--multicast-range": o.MulticastRange = Value(); break;
                    case "--transport":
                        o.Transport = Value() switch
                        {
                            "udp" => IsisTransport.Udp,
                            "tcp" => IsisTransport.Tcp,
                            var t => throw new ArgumentException($"--transport is udp or tcp, not {t}"),
                        };
                        break;
                    case "--embedded": o.Embedded = true; break;
                    case "--joins-late": o.JoinsLate = true; break;
                    case "--state": o.State = true; break;
                    case "--checkpoints": o.Checkpoints = Value(); break;
                    case "--system-key": o.SystemKey = Convert.FromHexString(Value()); break;
                    case "--group-key": o.GroupKey = Convert.FromHexString(Value()); break;
                    case "--seeds": o.Seeds = Value().Split(',').Select(System.Net.IPEndPoint.Parse).ToList(); break;
                    default: throw new ArgumentException("unknown argument " + args[i]);
                }
            }
            if (o.ExpectDeliveries < 0 && o.Sends > 0) o.ExpectDeliveries = (long)o.Sends * o.ExpectMembers;
            return o;
        }
    }

    /// <summary>One JSON object per line on stdout, flushed after every line.</summary>
    internal sealed class JsonLines
    {
        private readonly object _gate = new();
        private readonly StreamWriter _out = new(Console.OpenStandardOutput(), new UTF8Encoding(false)) { AutoFlush = false };

        public void Write(JsonObject json)
        {
            string text = json.ToJsonString();
            lock (_gate)
            {
                try
                {
                    _out.Write(text);
                    _out.Write('\n');
                    _out.Flush();
                }
                catch (IOException)
                {
                    // The test closed our stdout; stdin closing will end us.
                }
            }
        }
    }

    /// <summary>
    /// The delivery order: every (sender, seq) in the order the handler ran, with a digest (count and
    /// SHA-256 of the pairs as little-endian int32s) and, given a path, a file of "sender seq" lines
    /// appended every 100 ms and on <see cref="Flush"/> (a SIGKILL leaves a prefix).
    /// </summary>
    internal sealed class OrderRecorder : IDisposable
    {
        private readonly object _gate = new();
        private readonly object _fileGate = new();
        private readonly List<(int Sender, int Seq)> _order = new();
        private readonly FileStream? _file;
        private readonly Thread? _flusher;
        private readonly ManualResetEventSlim _stop = new(false);
        private int _written;

        public OrderRecorder(string? path)
        {
            if (path == null) return;
            _file = new FileStream(path, FileMode.Create, FileAccess.Write, FileShare.Read);
            _flusher = new Thread(() =>
            {
                while (!_stop.Wait(TimeSpan.FromMilliseconds(100))) Flush();
            })
            { IsBackground = true, Name = "order-file" };
            _flusher.Start();
        }

        public long Count
        {
            get { lock (_gate) return _order.Count; }
        }

        /// <summary>Records a delivery; returns the number of deliveries so far.</summary>
        public long Add(int sender, int seq)
        {
            lock (_gate)
            {
                _order.Add((sender, seq));
                return _order.Count;
            }
        }

        public (long Count, string Sha256) Digest()
        {
            byte[] bytes;
            lock (_gate)
            {
                bytes = new byte[_order.Count * 8];
                for (int i = 0; i < _order.Count; i++)
                {
                    System.Buffers.Binary.BinaryPrimitives.WriteInt32LittleEndian(bytes.AsSpan(i * 8), _order[i].Sender);
                    System.Buffers.Binary.BinaryPrimitives.WriteInt32LittleEndian(bytes.AsSpan(i * 8 + 4), _order[i].Seq);
                }
            }
            return (bytes.Length / 8, Convert.ToHexStringLower(System.Security.Cryptography.SHA256.HashData(bytes)));
        }

        /// <summary>Appends the deliveries not yet in the file and hands them to the OS.</summary>
        public void Flush()
        {
            if (_file == null) return;
            lock (_fileGate)
            {
                var text = new StringBuilder();
                lock (_gate)
                {
                    for (; _written < _order.Count; _written++)
                    {
                        text.Append(_order[_written].Sender.ToString(CultureInfo.InvariantCulture)).Append(' ')
                            .Append(_order[_written].Seq.ToString(CultureInfo.InvariantCulture)).Append('\n');
                    }
                }
                if (text.Length == 0 || !_file.CanWrite) return;
                _file.Write(Encoding.ASCII.GetBytes(text.ToString()));
                _file.Flush();
            }
        }

        public void Dispose()
        {
            _stop.Set();
            Flush();
            lock (_fileGate) _file?.Dispose();
        }
    }

    /// <summary>Deliveries per sender index, checked for FIFO order (consecutive seqs from 1).</summary>
    internal sealed class DeliveryTracker
    {
        private readonly object _gate = new();
        private readonly SortedDictionary<int, int> _last = new();
        private readonly bool _opcodeCheck;
        private long _total;
        private long _reported = -1;
        private bool _fifoOk = true;
        private bool _done;
        private string? _firstViolation;
        private long _undeliverable;
        private double _maxLoopLatencyMs;
        private long _loopStallsOver100Ms;

        private readonly bool _joinsLate;

        /// <param name="opcodeCheck">A message that matches no handler breaks FIFO (see --opcode-check).</param>
        /// <param name="joinsLate">This member joins a group whose members already sent: each sender's first delivery here may be any seq.</param>
        public DeliveryTracker(bool opcodeCheck, bool joinsLate = false)
        {
            _opcodeCheck = opcodeCheck;
            _joinsLate = joinsLate;
        }

        public long Total => Interlocked.Read(ref _total);

        public void OnDeliver(int sender, int seq)
        {
            lock (_gate)
            {
                if (!_last.TryGetValue(sender, out int last) && _joinsLate) last = seq - 1;
                if (seq != last + 1 && _fifoOk)
                {
                    _fifoOk = false;
                    _firstViolation = $"from sender {sender}: seq {seq} delivered after seq {last}";
                }
                _last[sender] = Math.Max(last, seq);
                Interlocked.Increment(ref _total);
            }
        }

        public void OnLoopLatency(double ms)
        {
            lock (_gate)
            {
                _maxLoopLatencyMs = Math.Max(_maxLoopLatencyMs, ms);
                if (ms > 100) _loopStallsOver100Ms++;
            }
        }

        public void OnUndeliverable(int opcode, string reason)
        {
            lock (_gate)
            {
                _undeliverable++;
                if (_opcodeCheck && _fifoOk)
                {
                    _fifoOk = false;
                    _firstViolation = $"undeliverable message with opcode {opcode}: {reason}";
                }
            }
        }

        public void EmitProgress(JsonLines output, bool force)
        {
            JsonObject json;
            lock (_gate)
            {
                if (!force && _reported == _total) return;
                _reported = _total;
                json = Snapshot("progress");
            }
            output.Write(json);
        }

        public void EmitDone(JsonLines output)
        {
            JsonObject json;
            lock (_gate)
            {
                if (_done) return;
                _done = true;
                json = Snapshot("done");
            }
            output.Write(json);
        }

        private JsonObject Snapshot(string kind)
        {
            var perSender = new JsonObject();
            foreach ((int s, int n) in _last) perSender[s.ToString(CultureInfo.InvariantCulture)] = n;
            var json = new JsonObject
            {
                ["event"] = kind,
                ["total"] = _total,
                ["perSender"] = perSender,
                ["fifoOk"] = _fifoOk,
                ["undeliverable"] = _undeliverable,
                ["maxLoopLatencyMs"] = Math.Round(_maxLoopLatencyMs, 1),
                ["loopStallsOver100Ms"] = _loopStallsOver100Ms,
            };
            if (_firstViolation != null) json["violation"] = _firstViolation;
            return json;
        }
    }
}
