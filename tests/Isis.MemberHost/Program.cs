using System.Collections.Concurrent;
using System.Globalization;
using System.Text;
using System.Text.Json.Nodes;
using Isis;
using Isis.Core.Identity;
using Isis.MemberHost;

// A group member for the multi-process tests. Usage:
//
//   dotnet Isis.MemberHost.dll --service-port P [--group G] [--index I] [--sends N]
//       [--expect-members K] [--expect-deliveries T] [--host-service] [--event-log PATH]
//       [--heartbeat-ms H] [--suspicion S] [--opcode-check]
//
// It joins group G, waits until the view has K members, sends N messages Send(1, I, seq) with
// seq = 1, 2, ..., and checks that every sender's messages are delivered in FIFO order (seq
// consecutive per sender index). It writes one JSON object per line on stdout:
//
//   {"event":"ready","address":"127.0.0.1:40001#17","endpoint":"127.0.0.1:40001","port":40001,"incarnation":17,"pid":123}
//   {"event":"view","id":3,"members":["..."],"rank":1}
//   {"event":"sent","sent":10000}                           after each batch of sends
//   {"event":"progress","total":123,"perSender":{"0":50},"fifoOk":true}   at most every 200 ms
//   {"event":"done","total":50000,"perSender":{...},"fifoOk":true}        when T deliveries are reached
//   {"event":"stats", ...IsisStatistics fields...}
//   {"event":"shutdown","reason":"expelled ..."}             the membership protocol stopped it
//   {"event":"error","message":"..."}
//
// and reads commands on stdin, one per line: "stats", "status" (a progress line now), "view",
// "send N" (N more messages), "quit". It exits when stdin closes, and after a protocol shutdown.
// With --opcode-check a message that matches no handler (Undeliverable) makes fifoOk false.

var options = HostOptions.Parse(args);
var output = new JsonLines();
var tracker = new DeliveryTracker(options.OpcodeCheck);
EventLogWriter? eventLog = options.EventLog is { } path ? new EventLogWriter(path) : null;

var runtime = new IsisRuntime(new IsisOptions
{
    MembershipServicePort = options.ServicePort,
    MembershipService = options.HostService ? MembershipServiceMode.Host : MembershipServiceMode.Client,
    HeartbeatInterval = TimeSpan.FromMilliseconds(options.HeartbeatMs),
    SuspicionCount = options.Suspicion,
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
    tracker.EmitProgress(output, force: true);
    eventLog?.Dispose();
    output.Write(new JsonObject { ["event"] = "exit", ["code"] = code });
    Environment.Exit(code);
}

runtime.ShutDown += (_, e) =>
{
    output.Write(new JsonObject { ["event"] = "shutdown", ["reason"] = e.Reason });
    output.Write(Stats(runtime));
    Exit(0);
};

runtime.Start();
var group = new Group(runtime, options.Group);
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
group.Handlers[1] += (Action<int, int>)((sender, seq) =>
{
    tracker.OnDeliver(sender, seq);
    if (options.ExpectDeliveries > 0 && tracker.Total == options.ExpectDeliveries) tracker.EmitDone(output);
});
group.Undeliverable += (_, e) => tracker.OnUndeliverable(e.Opcode, e.Reason);

output.Write(new JsonObject
{
    ["event"] = "ready",
    ["address"] = runtime.Address!.ToString(),
    ["endpoint"] = runtime.Address.Endpoint,
    ["port"] = int.Parse(runtime.Address.Endpoint.AsSpan(runtime.Address.Endpoint.LastIndexOf(':') + 1), CultureInfo.InvariantCulture),
    ["incarnation"] = runtime.Address.Incarnation,
    ["pid"] = Environment.ProcessId,
});

// Commands and the initial batch of sends run on one sender thread, so seqs stay in order.
var sendRequests = new BlockingCollection<int>();
var sender = new Thread(() =>
{
    try
    {
        eventLog?.RecordJoinRequested(runtime.Address.Node, GroupId.FromName(options.Group));
        group.Join();
        if (!bigEnough.Wait(TimeSpan.FromSeconds(60)))
        {
            output.Write(new JsonObject { ["event"] = "error", ["message"] = $"the view never reached {options.ExpectMembers} members" });
        }
        if (options.Sends > 0) sendRequests.Add(options.Sends);
        int seq = 0;
        foreach (int n in sendRequests.GetConsumingEnumerable())
        {
            for (int i = 0; i < n; i++) group.Send(1, options.Index, ++seq);
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
        case "quit":
            Exit(0);
            break;
        default:
            output.Write(new JsonObject { ["event"] = "error", ["message"] = "unknown command: " + line });
            break;
    }
}
Exit(0); // stdin closed: the test is gone or done with us

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
        json["naksSent"] = s.NaksSent;
        json["handlerMismatches"] = s.HandlerMismatches;
        json["handlerExceptions"] = s.HandlerExceptions;
        json["datagramsSent"] = s.DatagramsSent;
        json["datagramsReceived"] = s.DatagramsReceived;
        json["membershipServiceDroppedFirewall"] = s.MembershipServiceDroppedFirewall;
    }
    catch (Exception e)
    {
        json["error"] = e.Message;
    }
    return json;
}

namespace Isis.MemberHost
{
    internal sealed record HostOptions
    {
        public int ServicePort { get; private set; } = 7345;
        public string Group { get; private set; } = "multiprocess";
        public int Index { get; private set; }
        public int Sends { get; private set; }
        public int ExpectMembers { get; private set; } = 1;
        public long ExpectDeliveries { get; private set; } = -1;
        public bool HostService { get; private set; }
        public string? EventLog { get; private set; }
        public int HeartbeatMs { get; private set; } = 100;
        public int Suspicion { get; private set; } = 5;
        public bool OpcodeCheck { get; private set; }

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

        public DeliveryTracker(bool opcodeCheck) => _opcodeCheck = opcodeCheck;

        public long Total => Interlocked.Read(ref _total);

        public void OnDeliver(int sender, int seq)
        {
            lock (_gate)
            {
                _last.TryGetValue(sender, out int last);
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
