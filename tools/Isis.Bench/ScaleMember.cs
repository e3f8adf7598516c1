using System.Diagnostics;
using System.Globalization;
using System.Runtime;

namespace Isis.Bench;

/// <summary>
/// One member process of scale mode (<see cref="ScaleCoordinator"/>). It reports on stdout, one
/// "@scale kind key=value ..." line per event, with <see cref="Stopwatch.GetTimestamp"/> values
/// (CLOCK_MONOTONIC, comparable with the parent's), and takes commands on stdin:
/// <list type="bullet">
/// <item><c>main at=T</c> when Main starts; <c>runtime at=T address=A</c> once the runtime started;
/// <c>joined at=T</c> when Join returned;</item>
/// <item><c>view id=V members=N rank=R at=T leavers=A,B|-</c> for every view, from the view handler;</item>
/// <item><c>send</c> (command): Sends --sends messages (index, seq, byte[--payload]); every member
/// expects N x K deliveries, FIFO per sender, and reports <c>delivered total=X at=T fifo=ok|bad</c>
/// when it has them; <c>sent at=T</c> after its own Sends returned;</item>
/// <item><c>stats</c> (command): managed heap and protocol counters in a <c>stats</c> line;</item>
/// <item><c>status</c> (command): the current view and the senders still missing deliveries;</item>
/// <item><c>quit</c> (command): shut down and exit 0. End of stdin (the parent is gone): exit 4.</item>
/// </list>
/// Nothing here polls: between commands the process is idle apart from the runtime itself, so the
/// parent's CPU samples show what the runtime costs.
/// </summary>
internal static class ScaleMember
{
    private const string GroupName = "isis-bench-scale";
    private const int Msg = 1;
    private static readonly Lock OutputLock = new();

    public static int Run(BenchOptions o)
    {
        long mainAt = Stopwatch.GetTimestamp();
        if (o.Index < 0 || o.Index >= o.Members || o.ServicePort == 0)
            throw new ArgumentException($"scale-member needs --index 0..{o.Members - 1} and --service-port");
        Line($"main at={mainAt}");
        // Hard limit: no member outlives a run whose parent stopped reading (a one-shot timer, not a polling thread).
        using var hardLimit = new Timer(_ =>
        {
            Console.Error.WriteLine($"member {o.Index}: hard time limit of {o.TimeoutSeconds} s; exiting");
            Environment.Exit(4);
        }, null, TimeSpan.FromSeconds(o.TimeoutSeconds), Timeout.InfiniteTimeSpan);

        var runtime = new IsisRuntime(Coordinator.Options(MembershipServiceMode.Client, o.ServicePort, o));
        runtime.ShutDown += (_, e) =>
        {
            Line($"shutdown reason={Word(e.Reason)}");
            Console.Error.WriteLine($"member {o.Index}: runtime shut down: {e.Reason}");
            Environment.Exit(5);
        };
        runtime.Start();
        Line($"runtime at={Stopwatch.GetTimestamp()} address={runtime.Address}");

        var g = new Group(runtime, GroupName);
        long expected = (long)o.Members * o.Sends;
        var nextSeq = new int[o.Members]; // per sender index: the next seq expected (handlers run one at a time)
        long total = 0;
        bool fifoOk = true;
        g.ViewHandlers += (ViewHandler)(v =>
        {
            long at = Stopwatch.GetTimestamp();
            string leavers = v.Leavers.Length == 0 ? "-" : string.Join(',', v.Leavers.Select(a => a.ToString()));
            Line($"view id={v.ViewId} members={v.Members.Length} rank={v.GetMyRank()} at={at} leavers={leavers}");
        });
        g.Handlers[Msg] += (Action<int, int, byte[]>)((sender, seq, _) =>
        {
            if (sender < 0 || sender >= o.Members || seq != nextSeq[sender] + 1) fifoOk = false;
            else nextSeq[sender] = seq;
            if (Interlocked.Increment(ref total) == expected)
                Line($"delivered total={expected} at={Stopwatch.GetTimestamp()} fifo={(fifoOk ? "ok" : "bad")}");
        });

        // Commands arrive only once the group has formed; end of stdin while joining still ends the process.
        var quit = new ManualResetEventSlim(false);
        new Thread(() =>
        {
            string? line;
            while ((line = Console.In.ReadLine()) != null)
            {
                switch (line.Trim())
                {
                    case "send":
                        var payload = new byte[o.Payload];
                        for (int seq = 1; seq <= o.Sends; seq++) g.Send(Msg, o.Index, seq, payload);
                        Line($"sent at={Stopwatch.GetTimestamp()}");
                        break;
                    case "stats":
                        Line(Stats(runtime));
                        break;
                    case "status":
                        View? view = g.GetView();
                        string missing = string.Join(',', nextSeq.Select((n, i) => (n, i)).Where(x => x.n < o.Sends).Take(20).Select(x => $"{x.i}:{x.n}"));
                        Line($"status view={view?.ViewId ?? -1} members={view?.Members.Length ?? 0} delivered={Interlocked.Read(ref total)} " +
                             $"fifo={(fifoOk ? "ok" : "bad")} missing={(missing.Length == 0 ? "-" : missing)}");
                        break;
                    case "quit":
                        quit.Set();
                        return;
                    default:
                        Console.Error.WriteLine($"member {o.Index}: unknown command '{line}'");
                        break;
                }
            }
            Console.Error.WriteLine($"member {o.Index}: stdin closed (the parent is gone); exiting");
            Environment.Exit(4);
        }) { IsBackground = true, Name = "scale-commands" }.Start();

        g.Join();
        Line($"joined at={Stopwatch.GetTimestamp()}");
        quit.Wait();
        runtime.Shutdown();
        return 0;
    }

    /// <summary>
    /// The managed heap after a full compacting collection (the parent has read VmRSS before
    /// asking): live bytes (heap size less fragmentation) and what the GC keeps committed, both from
    /// that collection's GCMemoryInfo. Not GC.GetTotalMemory: on .NET 10.0.12 it returned -1.1 MB
    /// for one member at 100 members (dotnet/runtime#106712, regions GC). Also the counters that
    /// show repair and firewall work.
    /// </summary>
    private static string Stats(IsisRuntime runtime)
    {
        IsisStatistics s = runtime.GetStatistics();
        GC.Collect(GC.MaxGeneration, GCCollectionMode.Forced, blocking: true, compacting: true);
        GCMemoryInfo gc = GC.GetGCMemoryInfo(GCKind.FullBlocking);
        return string.Create(CultureInfo.InvariantCulture,
            $"stats at={Stopwatch.GetTimestamp()} heap={gc.HeapSizeBytes - gc.FragmentedBytes} committed={gc.TotalCommittedBytes} " +
            $"allocated={GC.GetTotalAllocatedBytes()} gen0={GC.CollectionCount(0)} gen1={GC.CollectionCount(1)} gen2={GC.CollectionCount(2)} " +
            $"server={GCSettings.IsServerGC} datagramsSent={s.DatagramsSent} datagramsReceived={s.DatagramsReceived} " +
            $"naks={s.NaksSent} duplicates={s.Duplicates} wrongView={s.DroppedWrongView} firewall={s.DroppedFirewall}");
    }

    private static string Word(string s) => s.Replace(' ', '_');

    private static void Line(string s)
    {
        lock (OutputLock) Console.Out.WriteLine("@scale " + s);
    }
}
