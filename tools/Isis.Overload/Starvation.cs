using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using Isis.Tools;

namespace Isis.Overload;

/// <summary>
/// The three ways the experiment starves one replica, each bounded in time and undone at the end:
/// CPU hogs pinned to its CPU, a lower priority (nice) for each of its threads, and a flood of junk
/// datagrams to its Isis UDP socket, from loopback to 127.0.0.1 only.
/// </summary>
internal static class Starvation
{
    /// <summary>
    /// <c>hog --threads N --seconds S</c>: N threads that spin until S seconds have passed, then the
    /// process exits by itself (the parent also kills it when the overload ends).
    /// </summary>
    public static int RunHog(string[] args)
    {
        int threads = 1;
        double seconds = 1;
        for (int i = 0; i + 1 < args.Length; i++)
        {
            if (args[i] == "--threads") threads = int.Parse(args[++i], CultureInfo.InvariantCulture);
            else if (args[i] == "--seconds") seconds = double.Parse(args[++i], CultureInfo.InvariantCulture);
        }
        var limit = TimeSpan.FromSeconds(seconds);
        var clock = Stopwatch.StartNew();
        var spinners = Enumerable.Range(0, threads).Select(_ => new Thread(() =>
        {
            ulong x = 88172645463325252UL;
            while (clock.Elapsed < limit)
            {
                for (int k = 0; k < 100_000; k++)
                {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
            }
            GC.KeepAlive(x);
        }) { IsBackground = true }).ToList();
        spinners.ForEach(t => t.Start());
        spinners.ForEach(t => t.Join());
        return 0;
    }

    /// <summary>True if util-linux's <c>taskset</c> can pin processes here (Linux with more than one CPU).</summary>
    public static bool CanPin() =>
        OperatingSystem.IsLinux() && Environment.ProcessorCount > 1 && ToolProcess.Exec(TimeSpan.FromSeconds(5), "taskset", "--version").Code == 0;

    /// <summary>
    /// Sets the nice value of every thread of <paramref name="pid"/> (on Linux nice is per thread, and
    /// <c>renice -p PID</c> alone changes only the main thread; threads started later inherit it from
    /// the thread that starts them). Null on success, else why not.
    /// </summary>
    public static string? Renice(int pid, int nice)
    {
        string tasks = $"/proc/{pid}/task";
        if (!Directory.Exists(tasks)) return $"no {tasks}: cannot renice the threads of process {pid} here";
        string[] tids = [.. Directory.GetDirectories(tasks).Select(Path.GetFileName).OfType<string>()];
        (int code, string output) = ToolProcess.Exec(TimeSpan.FromSeconds(10), "renice", ["-n", nice.ToString(CultureInfo.InvariantCulture), "-p", .. tids]);
        return code == 0 ? null : $"renice -n {nice} on {tids.Length} threads of process {pid} failed ({code}): {output.Trim()}";
    }

}

/// <summary>
/// Junk datagrams (random bytes, 32 to 1,200 of them) to one UDP endpoint on loopback, at a bounded
/// rate, for a bounded time, on a thread of its own; the runtime that receives them drops each as
/// malformed and counts it.
/// </summary>
internal sealed class UdpFlood
{
    private readonly IPEndPoint _target;
    private readonly int _rate;
    private readonly TimeSpan _duration;
    private readonly byte[][] _junk;
    private readonly Thread _thread;
    private volatile bool _stop;

    public UdpFlood(IPEndPoint target, int ratePerSecond, TimeSpan duration, int seed)
    {
        if (!IPAddress.IsLoopback(target.Address)) throw new ArgumentException($"the flood only targets loopback; {target} is not");
        _target = target;
        _rate = ratePerSecond;
        _duration = duration;
        var random = new Random(seed);
        _junk = [.. Enumerable.Range(0, 256).Select(_ =>
        {
            var b = new byte[random.Next(32, 1201)];
            random.NextBytes(b);
            return b;
        })];
        _thread = new Thread(Run) { IsBackground = true, Name = "udp-flood" };
    }

    public long Sent { get; private set; }

    public long SendErrors { get; private set; }

    public double Seconds { get; private set; }

    public void Start() => _thread.Start();

    /// <summary>Stops the flood (if its time has not run out already) and waits for its thread.</summary>
    public void Stop()
    {
        _stop = true;
        _thread.Join();
    }

    private void Run()
    {
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        socket.Connect(_target);
        var clock = Stopwatch.StartNew();
        long sent = 0, errors = 0;
        int next = 0;
        while (!_stop && clock.Elapsed < _duration)
        {
            // Paced on the clock: what is due by now, at most a millisecond's worth of catch-up (1 ms
            // pauses between bursts keep the parent's own CPU use bounded).
            long due = (long)(clock.Elapsed.TotalSeconds * _rate);
            long burst = Math.Min(due - (sent + errors), Math.Max(1, _rate / 1000) * 2);
            for (long i = 0; i < burst; i++)
            {
                try
                {
                    socket.Send(_junk[next++ & 255]);
                    sent++;
                }
                catch (SocketException)
                {
                    errors++; // ICMP port unreachable from a closed port comes back as a send error on a connected socket
                }
            }
            Thread.Sleep(1);
        }
        Seconds = clock.Elapsed.TotalSeconds;
        Sent = sent;
        SendErrors = errors;
    }
}
