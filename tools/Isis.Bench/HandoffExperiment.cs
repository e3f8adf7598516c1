using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using static Isis.Bench.HarnessShell;
using static Isis.Tools.ToolProcess;

using Isis.Tools;

namespace Isis.Bench;

/// <summary>
/// What one thread hand-off costs on this machine (issue 12, item 1): 100 B UDP ping-pong over
/// loopback between this process and an echo child (blocking receive, send back), measured with
/// the round trip's receiving end on the sending thread itself (no hand-off), then behind one and
/// two hand-offs (a receive thread wakes the measuring thread, or wakes a relay thread that wakes
/// it), for three ways to wait: <see cref="ManualResetEventSlim"/>, <see cref="SemaphoreSlim"/>, and
/// spin-then-block. The C ping-pong from ../shared/peers/limit runs in the same run as the floor.
/// </summary>
internal static class HandoffExperiment
{
    public const string Usage =
        "--handoff [--round-trips N] [--repeat R]: the cost of one thread hand-off, from UDP ping-pong with 0, 1 and 2 hand-offs " +
        "(ManualResetEventSlim, SemaphoreSlim, spin-then-block), beside the C ping-pong floor; N round trips per variant (default 20000), R passes (default 2).";

    private const int Payload = 100;

    public static int Run(string[] args)
    {
        int n = Option(args, "--round-trips", 20_000);
        int repeat = Option(args, "--repeat", 2);
        Console.WriteLine($"Isis.Bench hand-off: 100 B UDP ping-pong on loopback, {n:N0} round trips per variant, {repeat} passes, " +
            $"{Environment.ProcessorCount} CPUs, load average {MachineFacts.LoadAverage()}");
        Console.WriteLine(CFloor(n));

        using Process echo = StartEcho(out int echoPort);
        try
        {
            var endpoint = new IPEndPoint(IPAddress.Loopback, echoPort);
            var results = new List<(string Name, int Handoffs, double P50, double P99)>();
            for (int pass = 1; pass <= repeat; pass++)
            {
                results.Add(Measure("blocking receive on the measuring thread", 0, null, endpoint, n));
                results.Add(Measure("busy-polling receive on the measuring thread (never sleeps)", 0, null, endpoint, n, poll: true));
                foreach ((string kind, Func<IHandoff> make) in Kinds)
                {
                    results.Add(Measure($"1 hand-off, {kind}", 1, make, endpoint, n));
                    results.Add(Measure($"2 hand-offs, {kind}", 2, make, endpoint, n));
                }
            }

            Console.WriteLine();
            // The busy-polling round trip has no wake-up and no hand-off in it: what each variant adds to it is
            // the price of sleeping (a blocked thread's wake-up) and of its hand-offs.
            double floor = Median(results.Where(r => r.Name.StartsWith("busy-polling", StringComparison.Ordinal)).Select(r => r.P50));
            Console.WriteLine("| variant | round trip p50, median of passes (each pass) | p99 | p50 minus busy-polling p50 |");
            Console.WriteLine("| --- | ---: | ---: | ---: |");
            foreach (var group in results.GroupBy(r => r.Name))
            {
                double p50 = Median(group.Select(r => r.P50)), p99 = Median(group.Select(r => r.P99));
                string passes = string.Join(", ", group.Select(r => r.P50.ToString("F1", CultureInfo.InvariantCulture)));
                Console.WriteLine($"| {group.Key} | {p50:F1} us ({passes}) | {p99:F1} us | {p50 - floor:+0.0;-0.0} us |");
            }
            return 0;
        }
        finally
        {
            if (!echo.HasExited) echo.Kill();
        }
    }

    /// <summary>The echo side: prints its port, then sends every datagram back to where it came from, until its standard input closes (the parent exited).</summary>
    public static int Echo()
    {
        new Thread(() =>
        {
            Console.In.ReadToEnd();
            Environment.Exit(0);
        }) { IsBackground = true }.Start();
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        socket.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        Console.WriteLine(((IPEndPoint)socket.LocalEndPoint!).Port.ToString(CultureInfo.InvariantCulture));
        Console.Out.Flush();
        var buffer = new byte[2048];
        EndPoint from = new IPEndPoint(IPAddress.Any, 0);
        while (true)
        {
            int length = socket.ReceiveFrom(buffer, ref from);
            socket.SendTo(buffer.AsSpan(0, length), SocketFlags.None, from);
        }
    }

    private static readonly (string, Func<IHandoff>)[] Kinds =
    [
        ("ManualResetEventSlim", () => new EventHandoff()),
        ("SemaphoreSlim", () => new SemaphoreHandoff()),
        ("spin then block", () => new SpinThenBlockHandoff()),
    ];

    // poll: Spin on Poll(0) before each receive instead of sleeping in it: the round trip without any wake-up.
    private static (string, int, double, double) Measure(string name, int handoffs, Func<IHandoff>? make, IPEndPoint echo, int n, bool poll = false)
    {
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        socket.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        socket.Connect(echo);
        var payload = new byte[Payload];
        var buffer = new byte[2048];
        IHandoff? last = null;
        var threads = new List<Thread>();
        if (handoffs > 0)
        {
            IHandoff first = make!();
            threads.Add(new Thread(() => Loop(() => { socket.Receive(buffer); }, first)) { IsBackground = true, Name = "receive" });
            last = first;
            if (handoffs == 2)
            {
                IHandoff second = make();
                threads.Add(new Thread(() => Loop(first.Wait, second)) { IsBackground = true, Name = "relay" });
                last = second;
            }
            foreach (Thread t in threads) t.Start();
        }

        var rtt = new double[n];
        for (int i = -1000; i < n; i++)
        {
            long t0 = Stopwatch.GetTimestamp();
            socket.Send(payload);
            if (last is null)
            {
                while (poll && !socket.Poll(0, SelectMode.SelectRead)) { }
                socket.Receive(buffer);
            }
            else
            {
                last.Wait();
            }
            if (i >= 0) rtt[i] = Stopwatch.GetElapsedTime(t0).TotalMicroseconds;
        }
        socket.Close(); // ends the receive thread (its Receive throws); the relay is a background thread
        Array.Sort(rtt);
        (string, int, double, double) r = (name, handoffs, rtt[n / 2], rtt[(int)(n * 0.99)]);
        Console.WriteLine($"{name}: round trip p50 {r.Item3:F1} us, p99 {r.Item4:F1} us");
        return r;
    }

    private static void Loop(Action wait, IHandoff next)
    {
        try
        {
            while (true)
            {
                wait();
                next.Signal();
            }
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException)
        {
            // The socket closed: the variant is over.
        }
    }

    /// <summary>One producer wakes one consumer, once per message, strictly alternating.</summary>
    private interface IHandoff
    {
        void Signal();

        void Wait();
    }

    private sealed class EventHandoff : IHandoff
    {
        private readonly ManualResetEventSlim _event = new(false, spinCount: 0);

        public void Signal() => _event.Set();

        public void Wait()
        {
            _event.Wait();
            _event.Reset();
        }
    }

    private sealed class SemaphoreHandoff : IHandoff
    {
        private readonly SemaphoreSlim _semaphore = new(0);

        public void Signal() => _semaphore.Release();

        public void Wait() => _semaphore.Wait();
    }

    /// <summary>Spins (without sleeping) for up to about 50 us, then blocks on an event that the producer sets only if the consumer said it sleeps.</summary>
    private sealed class SpinThenBlockHandoff : IHandoff
    {
        private static readonly long SpinTicks = Stopwatch.Frequency / 20_000;
        private readonly ManualResetEventSlim _event = new(false, spinCount: 0);
        private int _ready;
        private int _sleeping;

        public void Signal()
        {
            Interlocked.Exchange(ref _ready, 1);
            if (Volatile.Read(ref _sleeping) == 1) _event.Set();
        }

        public void Wait()
        {
            long until = Stopwatch.GetTimestamp() + SpinTicks;
            var spin = new SpinWait();
            while (Volatile.Read(ref _ready) == 0)
            {
                if (Stopwatch.GetTimestamp() > until)
                {
                    _event.Reset();
                    Interlocked.Exchange(ref _sleeping, 1);
                    if (Volatile.Read(ref _ready) == 0) _event.Wait();
                    Interlocked.Exchange(ref _sleeping, 0);
                    break;
                }
                spin.SpinOnce(sleep1Threshold: -1);
            }
            Interlocked.Exchange(ref _ready, 0);
        }
    }

    private static Process StartEcho(out int port)
    {
        var psi = new ProcessStartInfo(Environment.ProcessPath!) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardInput = true };
        // Run as "dotnet Isis.Bench.dll handoff-echo" or as the apphost, whichever started this process.
        if (Path.GetFileNameWithoutExtension(Environment.ProcessPath!) == "dotnet") psi.ArgumentList.Add(typeof(HandoffExperiment).Assembly.Location);
        psi.ArgumentList.Add("handoff-echo");
        Process p = Process.Start(psi)!;
        port = int.Parse(p.StandardOutput.ReadLine() ?? throw new InvalidOperationException("the echo process printed no port"), CultureInfo.InvariantCulture);
        return p;
    }

    /// <summary>The C ping-pong of ../shared/peers/limit, compiled here, or why it could not run.</summary>
    private static string CFloor(int n)
    {
        string? source = RepoFile(Path.Combine("shared", "peers", "limit", "udp_pingpong.c"));
        if (source is null) return "C floor: skipped (../shared/peers/limit/udp_pingpong.c not found)";
        string binary = Path.Combine(Path.GetTempPath(), $"isis-pingpong-{Environment.ProcessId}");
        try
        {
            (int code, string output) = Exec(TimeSpan.FromMinutes(1), "gcc", "-O2", "-o", binary, source);
            if (code != 0) return $"C floor: skipped (gcc failed or is missing: {output.Trim()})";
            int port = 47000 + Environment.ProcessId % 2000 * 2;
            (code, output) = Exec(TimeSpan.FromMinutes(5), binary, n.ToString(CultureInfo.InvariantCulture), port.ToString(CultureInfo.InvariantCulture));
            return code == 0 ? "C floor: " + output.Trim() : $"C floor: failed ({output.Trim()})";
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            return $"C floor: skipped ({e.Message})";
        }
        finally
        {
            File.Delete(binary);
        }
    }
}
