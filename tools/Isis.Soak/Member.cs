using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Text.Json.Nodes;
using Microsoft.Extensions.Logging;
using Serilog;
using Serilog.Events;

namespace Isis.Soak;

/// <summary>
/// One member process of the soak group, started by the parent as
/// <c>dotnet Isis.Soak.dll member --index I --port P --data DIR --rate R --payload B --checkpoint-ms C --inflight N --seed S</c>.
/// It joins group "soak" with the zero-configuration embedded membership service (well-known port
/// P, private to this run), SafeSend disk durability and persistent checkpoints in DIR (kept across
/// its restarts), and then sends a seeded mix of SafeSend, SafeQuery, OrderedSend and Send at R per
/// second with at most N in flight.
/// <para>Its replicated state is a <see cref="Ledger"/> of the history: the (member, seq) of every
/// SafeSend and SafeQuery folded in the order its handlers ran (the effect of a replicated log or
/// of a dictionary updated by them), in a size that does not grow with the run, checkpointed with
/// MakeChkpt/LoadChkpt. After a restart the library restores this member's checkpoint and replays
/// the SafeSends after it, or, for a member that rejoins a running group, transfers the state;
/// either way the ledger must come back equal to the group's.</para>
/// <para>Every SafeSend or SafeQuery whose completion it awaited is appended to DIR/acked.txt
/// ("member seq" per line) and flushed to the OS before the next one, so a SIGKILL leaves every
/// acknowledgement but possibly the last one: the checker requires each listed operation to be in
/// the recovered history exactly once.</para>
/// <para>Output: one JSON object per line (joined, view, progress each second, paused, status,
/// dumped, left, shutdown, violation, error). Commands on stdin: "pause" (stop issuing, wait for
/// the operations in flight), "resume", "status", "dump PATH" (write the ledger there), "leave"
/// (graceful Leave, then exit 0). Closing stdin leaves too.</para>
/// </summary>
internal static class Member
{
    public static int Run(string[] args)
    {
        var o = MemberOptions.Parse(args);
        Directory.CreateDirectory(o.DataDirectory);
        int incarnation = NextIncarnation(o.DataDirectory);
        var output = new JsonLines();
        var state = new HistoryState(o.PayloadBytes, output);
        using var acks = new AckFile(Path.Combine(o.DataDirectory, "acked.txt"));

        using ILoggerFactory logging = LoggerFactory.Create(b => b.AddSerilog(new LoggerConfiguration()
            .MinimumLevel.Warning()
            .WriteTo.Console(standardErrorFromLevel: LogEventLevel.Verbose, outputTemplate: "{Timestamp:HH:mm:ss.fff} {Level:u3} {Message:lj}{NewLine}{Exception}")
            .CreateLogger(), dispose: true));
        var runtime = new IsisRuntime(new IsisOptions
        {
            BindAddress = System.Net.IPAddress.Loopback,
            MembershipServiceAddress = System.Net.IPAddress.Loopback,
            MembershipServicePort = o.ServicePort,
            MembershipService = MembershipServiceMode.Auto,
            // The machine's registry of durable groups goes beside the members' data, which every run
            // starts empty: a later run on the same port must not take this run's group as its own.
            MembershipDataDirectory = Path.Combine(Path.GetDirectoryName(Path.GetFullPath(o.DataDirectory))!, "membership"),
            LoggerFactory = logging,
        });
        int exiting = 0, leaving = 0;
        void Exit(int code, string why)
        {
            // Another thread is ending the process already: this one goes no further.
            if (Interlocked.Exchange(ref exiting, 1) != 0) Thread.Sleep(Timeout.Infinite);
            output.Write(new JsonObject { ["event"] = "exit", ["code"] = code, ["why"] = why });
            Environment.Exit(code);
        }
        runtime.ShutDown += (_, e) =>
        {
            // Expelled (a false suspicion on a busy machine) or stopped by the protocol: the parent
            // restarts this member on its directory, as it would a killed one.
            output.Write(new JsonObject { ["event"] = "shutdown", ["reason"] = e.Reason });
            // A shutdown that races with a graceful leave asked by the parent is part of that leave (exit 0).
            if (Volatile.Read(ref leaving) == 0) _ = Task.Run(() => Exit(3, "shutdown: " + e.Reason));
        };
        runtime.Start();

        var group = new Group(runtime, Protocol.GroupName);
        group.SetSafeSendDurability(SafeSendDurability.Disk, o.DataDirectory);
        group.PersistCheckpoints(o.DataDirectory, TimeSpan.FromMilliseconds(o.CheckpointMs));
        state.Attach(group, o.Index);
        group.ViewHandlers += (ViewHandler)(v => output.Write(new JsonObject
        {
            ["event"] = "view",
            ["id"] = v.ViewId,
            ["members"] = v.Members.Length,
            ["rank"] = v.GetMyRank(),
        }));
        output.Write(new JsonObject { ["event"] = "started", ["pid"] = Environment.ProcessId, ["incarnation"] = incarnation, ["address"] = runtime.Address?.ToString(), ["hostsService"] = runtime.HostsMembershipService });

        var joinClock = Stopwatch.StartNew();
        try
        {
            group.Join();
        }
        catch (IsisShutdownException e)
        {
            // Expelled while joining (missed heartbeats while this machine was busy starting the
            // others): like any protocol shutdown, code 3, and the parent restarts this member.
            output.Write(new JsonObject { ["event"] = "shutdown", ["reason"] = e.Message });
            Exit(3, "shutdown while joining: " + e.Message);
        }
        output.Write(new JsonObject { ["event"] = "joined", ["ms"] = Math.Round(joinClock.Elapsed.TotalMilliseconds), ["history"] = state.Count });

        var load = new LoadLoop(group, o, incarnation, acks);
        var loadThread = new Thread(load.Run) { IsBackground = true, Name = "load" };
        loadThread.Start();
        var progress = new Thread(() =>
        {
            while (Volatile.Read(ref exiting) == 0)
            {
                Thread.Sleep(1000);
                output.Write(load.Progress("progress", state.Count));
            }
        })
        { IsBackground = true, Name = "progress" };
        progress.Start();

        string? line;
        while ((line = Console.In.ReadLine()) != null)
        {
            string[] words = line.Split(' ', 2, StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
            if (words.Length == 0) continue;
            switch (words[0])
            {
                case "pause":
                    load.Pause();
                    output.Write(load.Progress("paused", state.Count));
                    break;
                case "resume":
                    load.Resume();
                    break;
                case "status":
                    output.Write(load.Progress("status", state.Count));
                    break;
                case "dump" when words.Length == 2:
                    (long count, string hash) = state.Dump(words[1]);
                    output.Write(new JsonObject { ["event"] = "dumped", ["count"] = count, ["hash"] = hash });
                    break;
                case "leave":
                    Volatile.Write(ref leaving, 1);
                    Leave(group, runtime, load, output);
                    Exit(0, "left");
                    break;
                default:
                    output.Write(new JsonObject { ["event"] = "error", ["message"] = "unknown command: " + line });
                    break;
            }
        }
        Volatile.Write(ref leaving, 1);
        Leave(group, runtime, load, output);
        Exit(0, "stdin closed");
        return 0;
    }

    private static void Leave(Group group, IsisRuntime runtime, LoadLoop load, JsonLines output)
    {
        load.Pause();
        var clock = Stopwatch.StartNew();
        try
        {
            group.Leave();
            runtime.Shutdown();
            output.Write(new JsonObject { ["event"] = "left", ["ms"] = Math.Round(clock.Elapsed.TotalMilliseconds) });
        }
        catch (Exception e)
        {
            output.Write(new JsonObject { ["event"] = "error", ["message"] = $"leave: {e.GetType().Name}: {e.Message}" });
        }
    }

    /// <summary>The harness's own files in a member's data directory (acknowledgements, incarnation counter), which are not the library's store.</summary>
    public static bool HarnessFile(string name) => name == "acked.txt" || name.StartsWith("incarnation", StringComparison.Ordinal);

    /// <summary>This start's number (1, 2, ...), kept in DIR/incarnation so that sequence numbers never repeat across restarts.</summary>
    private static int NextIncarnation(string directory)
    {
        string path = Path.Combine(directory, "incarnation");
        int previous = File.Exists(path) && int.TryParse(File.ReadAllText(path).Trim(), CultureInfo.InvariantCulture, out int n) ? n : 0;
        int next = previous + 1;
        // Written aside and renamed, with fsync: a SIGKILL or a crash never leaves a number that was already used.
        string aside = path + ".new";
        using (var f = new FileStream(aside, FileMode.Create, FileAccess.Write))
        {
            f.Write(Encoding.ASCII.GetBytes(next.ToString(CultureInfo.InvariantCulture)));
            f.Flush(flushToDisk: true);
        }
        File.Move(aside, path, overwrite: true);
        return next;
    }
}

/// <summary>The member's command line (see <see cref="Member"/>).</summary>
internal sealed record MemberOptions
{
    public int Index { get; private set; }
    public int ServicePort { get; private set; }
    public string DataDirectory { get; private set; } = "";
    public double Rate { get; private set; } = 50;
    public int PayloadBytes { get; private set; } = 1024;
    public int CheckpointMs { get; private set; } = 10_000;
    public int InFlight { get; private set; } = 16;
    public int Seed { get; private set; } = 1;

    /// <summary>"default" (the seeded mix of the four operations) or "safesend" (every operation a SafeSend).</summary>
    public string Mix { get; private set; } = "default";

    public static MemberOptions Parse(string[] args)
    {
        var o = new MemberOptions();
        for (int i = 0; i < args.Length; i++)
        {
            string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            int Int() => int.Parse(Value(), CultureInfo.InvariantCulture);
            switch (args[i])
            {
                case "--index": o.Index = Int(); break;
                case "--port": o.ServicePort = Int(); break;
                case "--data": o.DataDirectory = Value(); break;
                case "--rate": o.Rate = double.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--payload": o.PayloadBytes = Int(); break;
                case "--checkpoint-ms": o.CheckpointMs = Int(); break;
                case "--inflight": o.InFlight = Int(); break;
                case "--seed": o.Seed = Int(); break;
                case "--mix": o.Mix = Value(); break;
                default: throw new ArgumentException("unknown member argument " + args[i]);
            }
        }
        if (o.ServicePort <= 0 || o.DataDirectory.Length == 0) throw new ArgumentException("a member needs --port and --data");
        return o;
    }
}

/// <summary>
/// The replicated state: a <see cref="Ledger"/> of the SafeSends and SafeQueries in delivery order,
/// checkpointed whole (it stays some kilobytes however long the run). Handlers also check every
/// payload; a mismatch is reported as a violation.
/// </summary>
internal sealed class HistoryState(int payloadBytes, JsonLines output)
{
    private readonly Lock _lock = new();
    private Ledger _ledger = new();
    private Group? _group;

    public long Count
    {
        get { lock (_lock) return _ledger.Count; }
    }

    public void Attach(Group group, int index)
    {
        _group = group;
        group.Handlers[Protocol.SafeUpdate] += (Action<int, long, byte[]>)((member, seq, payload) => Apply("SafeSend", member, seq, payload));
        group.Handlers[Protocol.SafeQueryUpdate] += (Action<int, long, byte[]>)((member, seq, payload) =>
        {
            Apply("SafeQuery", member, seq, payload);
            group.Reply(index); // a replayed SafeQuery's reply goes nowhere
        });
        group.Handlers[Protocol.PlainSend] += (Action<int, long, byte[]>)((member, seq, payload) => Check("Send", member, seq, payload));
        group.Handlers[Protocol.Ordered] += (Action<int, long, byte[]>)((member, seq, payload) => Check("OrderedSend", member, seq, payload));
        group.MakeChkpt += (ChkptMaker)(_ => Make());
        group.LoadChkpt += (Action<byte[]>)(bytes =>
        {
            Ledger loaded = Ledger.Deserialize(bytes);
            lock (_lock) _ledger = loaded;
        });
        group.Undeliverable += (_, e) => output.Write(new JsonObject { ["event"] = "violation", ["message"] = $"undeliverable message, opcode {e.Opcode}: {e.Reason}" });
    }

    private void Apply(string kind, int member, long seq, byte[] payload)
    {
        Check(kind, member, seq, payload);
        lock (_lock) _ledger.Append(member, seq);
    }

    private void Check(string kind, int member, long seq, byte[] payload)
    {
        if (!Protocol.PayloadMatches(payload, member, seq, payloadBytes))
        {
            output.Write(new JsonObject { ["event"] = "violation", ["message"] = $"{kind} ({member}, {seq}) delivered with a payload of {payload.Length} bytes that is not the one sent" });
        }
    }

    /// <summary>The checkpoint: the ledger, serialized.</summary>
    private void Make()
    {
        byte[] bytes;
        lock (_lock) bytes = _ledger.Serialize();
        _group!.SendChkpt(bytes);
        _group.EndOfChkpt();
    }

    /// <summary>Writes the ledger to <paramref name="path"/>; returns the history's length and hash.</summary>
    public (long Count, string Hash) Dump(string path)
    {
        byte[] bytes;
        long count;
        string hash;
        lock (_lock) (bytes, count, hash) = (_ledger.Serialize(), _ledger.Count, _ledger.HashHex);
        string aside = path + ".new";
        File.WriteAllBytes(aside, bytes);
        File.Move(aside, path, overwrite: true);
        return (count, hash);
    }
}

/// <summary>DIR/acked.txt: one "member seq" line per operation whose completion this member awaited, flushed to the OS at once.</summary>
internal sealed class AckFile : IDisposable
{
    private readonly FileStream _file;

    public AckFile(string path)
    {
        _file = new FileStream(path, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.Read);
        // A line that an earlier incarnation's SIGKILL cut short was never an acknowledgement; it goes,
        // so that this incarnation's first line is not glued to it (a cut "0 1000000042" would read as another operation).
        long keep = _file.Length;
        while (keep > 0)
        {
            _file.Position = keep - 1;
            if (_file.ReadByte() == '\n') break;
            keep--;
        }
        _file.SetLength(keep);
        _file.Position = keep;
    }

    public void Record(int member, long seq)
    {
        byte[] line = Encoding.ASCII.GetBytes(string.Create(CultureInfo.InvariantCulture, $"{member} {seq}\n"));
        lock (_file)
        {
            _file.Write(line);
            _file.Flush(); // to the OS: a SIGKILL of this process keeps it (a machine crash is not a fault of this soak)
        }
    }

    public void Dispose()
    {
        lock (_file) _file.Dispose();
    }
}

/// <summary>
/// The member's load: a seeded mix (40 % SafeSend, 10 % SafeQuery, 25 % OrderedSend, 25 % Send)
/// paced at the rate given, each operation a task, at most N in flight (the loop waits for a slot,
/// so a stalled group slows the load instead of piling it up).
/// </summary>
internal sealed class LoadLoop(Group group, MemberOptions o, int incarnation, AckFile acks)
{
    private readonly SemaphoreSlim _slots = new(o.InFlight, o.InFlight);
    private readonly ManualResetEventSlim _running = new(true);
    private readonly Lock _pauseLock = new();
    // Durable operations (SafeSend, SafeQuery) are numbered 1, 2, 3... in the incarnation, so the
    // ledger's runs break only where one was never delivered; the others count from the middle.
    private long _durableSeq = incarnation * Protocol.SeqBase;
    private long _otherSeq = incarnation * Protocol.SeqBase + Protocol.SeqBase / 2;
    private long _issued, _acked, _completed, _failed;
    private int _inFlight;
    private string? _lastFailure;

    public void Run()
    {
        var random = new Random(unchecked(o.Seed * 7919 + o.Index * 104_729 + incarnation));
        var clock = Stopwatch.StartNew();
        double interval = 1.0 / o.Rate;
        double next = 0;
        while (true)
        {
            _running.Wait();
            _slots.Wait();
            lock (_pauseLock)
            {
                // Paused while this loop waited for its slot: give the slot back and wait again.
                if (!_running.IsSet)
                {
                    _slots.Release();
                    continue;
                }
                Interlocked.Increment(ref _inFlight);
            }
            // Paced: operation k goes at k / rate; after a stall the loop does not burst to catch up.
            double now = clock.Elapsed.TotalSeconds;
            if (next > now) Thread.Sleep(TimeSpan.FromSeconds(next - now));
            next = Math.Max(next + interval, clock.Elapsed.TotalSeconds - 1);
            int pick = random.Next(100);
            if (o.Mix == "safesend") pick = 0; // every operation a SafeSend (the draw above keeps the seeded sequence as it was)
            long seq = pick < 50 ? ++_durableSeq : ++_otherSeq;
            Interlocked.Increment(ref _issued);
            _ = Issue(pick, seq);
        }
    }

    private async Task Issue(int pick, long seq)
    {
        byte[] payload = Protocol.Payload(o.Index, seq, o.PayloadBytes);
        try
        {
            bool durable = pick < 50;
            if (pick < 40) await group.SafeSendAsync(Protocol.SafeUpdate, o.Index, seq, payload).ConfigureAwait(false);
            else if (pick < 50) await group.SafeQueryAsync<int>(Group.ALL, Protocol.SafeQueryUpdate, o.Index, seq, payload).ConfigureAwait(false);
            else if (pick < 75) await group.OrderedSendAsync(Protocol.Ordered, o.Index, seq, payload).ConfigureAwait(false);
            else await group.SendAsync(Protocol.PlainSend, o.Index, seq, payload).ConfigureAwait(false);
            if (durable)
            {
                acks.Record(o.Index, seq);
                Interlocked.Increment(ref _acked);
            }
            Interlocked.Increment(ref _completed);
        }
        catch (Exception e)
        {
            // Not acknowledged: the operation may or may not be in the history, and nothing is claimed about it.
            Interlocked.Increment(ref _failed);
            _lastFailure = $"{e.GetType().Name}: {e.Message}";
        }
        finally
        {
            Interlocked.Decrement(ref _inFlight);
            _slots.Release();
        }
    }

    /// <summary>Stops issuing and waits (at most 60 s) until nothing is in flight.</summary>
    public void Pause()
    {
        lock (_pauseLock) _running.Reset();
        var clock = Stopwatch.StartNew();
        while (Volatile.Read(ref _inFlight) > 0 && clock.Elapsed < TimeSpan.FromSeconds(60)) Thread.Sleep(10);
    }

    public void Resume() => _running.Set();

    public JsonObject Progress(string kind, long history) => new()
    {
        ["event"] = kind,
        ["issued"] = Interlocked.Read(ref _issued),
        ["acked"] = Interlocked.Read(ref _acked),
        ["completed"] = Interlocked.Read(ref _completed),
        ["failed"] = Interlocked.Read(ref _failed),
        ["inFlight"] = Volatile.Read(ref _inFlight),
        ["history"] = history,
        ["lastFailure"] = _lastFailure,
        // What the process's memory is made of: the managed heap as the last collection left it, and how many full collections ran.
        // (Before its first collection a process has no such figure: what it allocated so far stands in.)
        ["heapBytes"] = GC.GetGCMemoryInfo() is { Index: > 0 } info ? info.HeapSizeBytes : GC.GetTotalMemory(false),
        ["gen2Collections"] = GC.CollectionCount(2),
    };
}

/// <summary>One JSON object per line on stdout, flushed after every line.</summary>
internal sealed class JsonLines
{
    private readonly Lock _gate = new();
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
                // The parent is gone; stdin closing ends this process.
            }
        }
    }
}
