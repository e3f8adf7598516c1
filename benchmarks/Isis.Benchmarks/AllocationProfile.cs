using System.Diagnostics.Tracing;
using System.Globalization;

namespace Isis.Benchmarks;

/// <summary>
/// Where the steady-state Send path allocates: three real runtimes on loopback in this process, a
/// warm-up, then a measured run of Sends. Reports the process-wide bytes allocated per message
/// (<see cref="GC.GetTotalAllocatedBytes(bool)"/>, exact) and, from the runtime's sampled
/// allocation events (one event per ~100 KB allocated, carrying the type and the thread), which
/// types and which threads the bytes came from. BenchmarkDotNet's memory diagnoser gives the same
/// total; this says what to fix.
/// </summary>
/// <remarks>
/// Run: <c>dotnet run -c Release --project benchmarks/Isis.Benchmarks -- --allocations [--safe] [--messages N] [--payload BYTES]</c>
/// (<c>--safe</c>: SafeSendAsync, phi = all, instead of Send).
/// The sender reuses one argument array. One phase sends no arguments (what is allocated is the
/// library's), one a byte[] that each member's handler receives as its own copy (the user's argument).
/// </remarks>
internal static class AllocationProfile
{
    private const int Opcode = 1;

    public static int Run(string[] args)
    {
        int messages = Option(args, "--messages", 500_000);
        int payloadBytes = Option(args, "--payload", 100);
        // --safe: SafeSendAsync with phi = all (3) instead of Send, to profile the SafeSend path.
        bool safe = args.Contains("--safe");
        int warmup = Math.Max(20_000, messages / 5); // per kind and round
        var delivered = new long[3];
        IsisRuntime[] runtimes = Loopback.StartRuntimes(3);
        var groups = new Group[3];
        for (int i = 0; i < 3; i++)
        {
            int me = i;
            groups[i] = new Group(runtimes[i], "alloc");
            // Two handlers: one whose argument is the payload (the user's own byte[] per delivery),
            // one without arguments (nothing of the user's is created: what remains is the library's).
            groups[i].Handlers[Opcode] += (Action<byte[]>)(_ => Interlocked.Increment(ref delivered[me]));
            groups[i].Handlers[Opcode] += (Action)(() => Interlocked.Increment(ref delivered[me]));
            groups[i].Join();
        }
        Loopback.WaitUntil(() => groups.All(g => g.GetView()?.Members.Length == 3), "a 3-member view");

        object?[] withPayload = [new byte[payloadBytes]];
        object?[] noArguments = [];
        long sent = 0;
        // The wait must not allocate either (no LINQ, one delegate): it runs on the measured clock.
        Func<bool> allDelivered = () =>
        {
            for (int i = 0; i < delivered.Length; i++)
            {
                if (Interlocked.Read(ref delivered[i]) < sent) return false;
            }
            return true;
        };
        void SendMany(int count, object?[] arguments)
        {
            for (int i = 0; i < count; i++)
            {
                if (safe) _ = groups[0].SafeSendAsync(Opcode, arguments);
                else groups[0].Send(Opcode, arguments);
                // Bursts of 1,000 then wait: steady flow without filling the flow-control window.
                if (++sent % 1_000 == 0) Loopback.WaitUntil(allDelivered, "delivery");
            }
            Loopback.WaitUntil(allDelivered, "delivery");
        }
        long Measure(object?[] arguments)
        {
            long before = GC.GetTotalAllocatedBytes(precise: true);
            SendMany(messages, arguments);
            return GC.GetTotalAllocatedBytes(precise: true) - before;
        }

        // Warm up both kinds of message a few times over: the pools, free lists and collections
        // grow to their working size (and the JIT settles) before anything is measured.
        for (int round = 0; round < 3; round++)
        {
            SendMany(warmup, withPayload);
            SendMany(warmup, noArguments);
        }
        long library = Measure(noArguments);
        long total = Measure(withPayload);
        using var listener = new AllocationListener();
        SendMany(messages, noArguments);
        listener.Stop();
        Loopback.StopRuntimes(runtimes);

        Console.WriteLine($"{(safe ? "SafeSend (phi = all)" : "Send")}: 3 members in one process (sender + 2 receivers), {messages:N0} messages per phase after {6 * warmup:N0} warm-up; every thread counted");
        Console.WriteLine($"no handler arguments:          {library:N0} B in all, {library / (double)messages:N1} B per message (the library's own allocations)");
        Console.WriteLine($"a byte[{payloadBytes}] argument:        {total:N0} B in all, {total / (double)messages:N1} B per message (including the byte[] each of the 3 handlers receives)");
        Console.WriteLine($"where a third phase (no arguments) allocated, from {listener.Samples} sampled allocation events (the listener's own thread, \".NET Long Running\", is its overhead):");
        foreach (var (name, count) in listener.ByThreadAndType.OrderByDescending(p => p.Value).Take(20))
            Console.WriteLine($"  {Share(count, listener.Samples),6}  {name}");
        return 0;
    }

    private static string Share(long count, long total) => total == 0 ? "-" : (100.0 * count / total).ToString("0.0", CultureInfo.InvariantCulture) + "%";

    private static int Option(string[] args, string name, int fallback)
    {
        int i = Array.IndexOf(args, name);
        return i >= 0 && i + 1 < args.Length ? int.Parse(args[i + 1], CultureInfo.InvariantCulture) : fallback;
    }

    /// <summary>Counts GCAllocationTick events by type name and by thread name (from /proc on Linux).</summary>
    private sealed class AllocationListener : EventListener
    {
        private const EventKeywords GcKeyword = (EventKeywords)0x1;
        private readonly Lock _gate = new();
        private volatile bool _stopped;

        public Dictionary<string, long> ByThreadAndType { get; } = new();

        public long Samples { get; private set; }

        public void Stop() => _stopped = true;

        protected override void OnEventSourceCreated(EventSource source)
        {
            if (source.Name == "Microsoft-Windows-DotNETRuntime") EnableEvents(source, EventLevel.Verbose, GcKeyword);
        }

        protected override void OnEventWritten(EventWrittenEventArgs e)
        {
            if (_stopped || e.EventName == null || !e.EventName.StartsWith("GCAllocationTick", StringComparison.Ordinal)) return;
            int typeIndex = e.PayloadNames?.IndexOf("TypeName") ?? -1;
            string type = typeIndex >= 0 ? e.Payload![typeIndex] as string ?? "?" : "?";
            string thread = ThreadName(e.OSThreadId);
            lock (_gate)
            {
                Samples++;
                string key = thread + ": " + type;
                ByThreadAndType[key] = ByThreadAndType.GetValueOrDefault(key) + 1;
            }
        }

        private static string ThreadName(long osThreadId)
        {
            try
            {
                string name = File.ReadAllText($"/proc/self/task/{osThreadId}/comm").Trim();
                // Several runtimes share thread names; the role is what matters.
                return name.StartsWith(".NET", StringComparison.Ordinal) ? name : name.TrimEnd('0', '1', '2', '3', '4', '5', '6', '7', '8', '9');
            }
            catch (IOException)
            {
                return "thread " + osThreadId;
            }
        }
    }
}
