using System.Diagnostics;
using System.Text.Json;

namespace Isis.Bench;

/// <summary>
/// One member process. Member 0 is the sender; members 1 and 2 are receivers. Timestamps are
/// <see cref="Stopwatch.GetTimestamp"/> values, which on Linux read CLOCK_MONOTONIC and so compare
/// across processes on one machine: a receiver subtracts the send timestamp carried in the message
/// from its own delivery timestamp.
/// </summary>
/// <remarks>
/// Phases, driven by the sender:
/// <list type="number">
/// <item>Join; receivers announce READY once their view holds all three members.</item>
/// <item>Latency: the sender Sends PING(round, timestamp, padding) and waits until both receivers
/// answered ACK(round) before the next round; receivers record delivery - send in their handler.</item>
/// <item>Throughput: the sender Sends DATA(payload) as fast as flow control lets it; each receiver
/// timestamps its first and last delivery and, having all of them, Sends DONE.</item>
/// <item>The sender Sends FINISH; everyone writes its result file and shuts down.</item>
/// </list>
/// </remarks>
internal static class Member
{
    private const string GroupName = "isis-bench";
    private const int Ready = 1, Ping = 2, Ack = 3, Data = 4, Done = 5, Finish = 6;
    private static readonly TimeSpan RoundTimeout = TimeSpan.FromSeconds(5);

    public static int Run(BenchOptions o)
    {
        if (o.Index is < 0 or >= BenchOptions.Members || o.ServicePort == 0 || o.ResultPath == null)
            throw new ArgumentException("member needs --index 0..2, --service-port and --result");
        var deadline = Stopwatch.StartNew();
        StartWatchdog(o, deadline);

        var runtime = new IsisRuntime(Coordinator.Options(MembershipServiceMode.Client, o.ServicePort));
        runtime.ShutDown += (_, e) =>
        {
            Console.Error.WriteLine($"member {o.Index}: runtime shut down: {e.Reason}");
            Environment.Exit(5);
        };
        runtime.Start();
        var state = new State(o);
        var g = new Group(runtime, GroupName);
        Register(g, state, o);
        g.Join();

        WaitFor(() => g.GetView()?.Members.Length == BenchOptions.Members, "a view with all three members", o, deadline);
        var result = new MemberResult { Index = o.Index };
        if (o.Index == 0) RunSender(g, runtime, state, o, deadline, result);
        else RunReceiver(g, runtime, state, o, deadline, result);

        result.Final = Stats(runtime);
        File.WriteAllText(o.ResultPath, JsonSerializer.Serialize(result, ResultJson.Options));
        runtime.Shutdown();
        return 0;
    }

    /// <summary>Everything the handlers share with the main thread.</summary>
    private sealed class State(BenchOptions o)
    {
        public readonly CountdownEvent ReadyReceivers = new(BenchOptions.Members - 1);
        public readonly long[] Latency = new long[o.Samples];
        public int LatencyCount;
        public long CurrentRound = -1;
        public int Acks;
        public readonly ManualResetEventSlim RoundDone = new(false);
        public readonly ManualResetEventSlim LatencyPhaseOver = new(false);
        public long DataCount;
        public long FirstData;
        public long LastData;
        public readonly CountdownEvent DoneReceivers = new(BenchOptions.Members - 1);
        public readonly Dictionary<int, (long Count, long First, long Last)> Reported = new();
        public readonly ManualResetEventSlim Finished = new(false);
    }

    private static void Register(Group g, State s, BenchOptions o)
    {
        g.Handlers[Ready] += (Action<int>)(index =>
        {
            if (o.Index == 0 && index != 0) s.ReadyReceivers.Signal();
        });
        g.Handlers[Ping] += (Action<long, long, byte[]>)((round, sentAt, _) =>
        {
            long now = Stopwatch.GetTimestamp();
            if (o.Index == 0) return;
            if (round >= o.Warmup) s.Latency[s.LatencyCount++] = now - sentAt;
            g.Send(Ack, o.Index, round);
            if (round == o.Warmup + o.Samples - 1) s.LatencyPhaseOver.Set();
        });
        g.Handlers[Ack] += (Action<int, long>)((_, round) =>
        {
            if (o.Index != 0 || round != Volatile.Read(ref s.CurrentRound)) return;
            if (++s.Acks == BenchOptions.Members - 1) s.RoundDone.Set();
        });
        g.Handlers[Data] += (Action<byte[]>)(_ =>
        {
            long now = Stopwatch.GetTimestamp();
            if (s.DataCount++ == 0) s.FirstData = now;
            s.LastData = now;
            if (o.Index != 0 && s.DataCount == o.Messages) g.Send(Done, o.Index, s.DataCount, s.FirstData, s.LastData);
        });
        g.Handlers[Done] += (Action<int, long, long, long>)((index, count, first, last) =>
        {
            if (o.Index != 0) return;
            lock (s.Reported) s.Reported[index] = (count, first, last);
            s.DoneReceivers.Signal();
        });
        g.Handlers[Finish] += (Action)(() => s.Finished.Set());
    }

    private static void RunSender(Group g, IsisRuntime runtime, State s, BenchOptions o, Stopwatch deadline, MemberResult result)
    {
        WaitFor(() => s.ReadyReceivers.IsSet, "READY from both receivers", o, deadline, s.ReadyReceivers.WaitHandle);

        // Latency: one message at a time, each acknowledged by both receivers before the next.
        var pad = new byte[Math.Max(0, o.Payload - 16)];
        var roundTrips = new long[o.Samples];
        for (long round = 0; round < o.Warmup + o.Samples; round++)
        {
            s.Acks = 0;
            s.RoundDone.Reset();
            Volatile.Write(ref s.CurrentRound, round);
            long sentAt = Stopwatch.GetTimestamp();
            g.Send(Ping, round, sentAt, pad);
            if (!s.RoundDone.Wait(RoundTimeout))
                throw new TimeoutException($"round {round}: both receivers did not acknowledge within {RoundTimeout.TotalSeconds} s");
            if (round >= o.Warmup) roundTrips[round - o.Warmup] = Stopwatch.GetTimestamp() - sentAt;
            CheckDeadline(o, deadline);
        }
        result.RoundTripTicks = roundTrips;
        result.AfterLatency = Stats(runtime);

        // Throughput: one sender, as fast as Send lets it (it blocks when the unstable window is full).
        var payload = new byte[o.Payload];
        long start = Stopwatch.GetTimestamp();
        for (int i = 0; i < o.Messages; i++) g.Send(Data, payload);
        result.SendCallsSeconds = Stopwatch.GetElapsedTime(start).TotalSeconds;
        WaitFor(() => s.DoneReceivers.IsSet, "DONE from both receivers", o, deadline, s.DoneReceivers.WaitHandle);
        lock (s.Reported)
        {
            result.Throughput = s.Reported.OrderBy(r => r.Key)
                .Select(r => Rate(r.Key, r.Value.Count, r.Value.First, r.Value.Last))
                .Prepend(Rate(0, s.DataCount, s.FirstData, s.LastData))
                .ToList();
        }
        result.SendStartTicks = start;
        g.Send(Finish);
    }

    private static void RunReceiver(Group g, IsisRuntime runtime, State s, BenchOptions o, Stopwatch deadline, MemberResult result)
    {
        g.Send(Ready, o.Index);
        WaitFor(() => s.LatencyPhaseOver.IsSet, "the end of the latency phase", o, deadline, s.LatencyPhaseOver.WaitHandle);
        result.LatencyTicks = s.Latency[..s.LatencyCount];
        result.AfterLatency = Stats(runtime);
        WaitFor(() => s.Finished.IsSet, "FINISH from the sender", o, deadline, s.Finished.WaitHandle);
        result.Throughput = [Rate(o.Index, s.DataCount, s.FirstData, s.LastData)];
    }

    private static ThroughputResult Rate(int index, long count, long first, long last)
    {
        double seconds = (last - first) / (double)Stopwatch.Frequency;
        return new ThroughputResult
        {
            Member = index,
            Deliveries = count,
            Seconds = seconds,
            DeliveriesPerSecond = count > 1 && seconds > 0 ? (count - 1) / seconds : 0,
        };
    }

    private static StatsSnapshot Stats(IsisRuntime runtime)
    {
        IsisStatistics st = runtime.GetStatistics();
        return new StatsSnapshot
        {
            DatagramsSent = st.DatagramsSent,
            DatagramsReceived = st.DatagramsReceived,
            PacketsReceived = st.PacketsReceived,
            NaksSent = st.NaksSent,
            Duplicates = st.Duplicates,
            HandlerMismatches = st.HandlerMismatches,
        };
    }

    private static void WaitFor(Func<bool> condition, string what, BenchOptions o, Stopwatch deadline, WaitHandle? handle = null)
    {
        while (!condition())
        {
            CheckDeadline(o, deadline, what);
            if (handle != null) handle.WaitOne(TimeSpan.FromMilliseconds(100));
            else Thread.Sleep(5);
        }
    }

    private static void CheckDeadline(BenchOptions o, Stopwatch deadline, string? what = null)
    {
        if (deadline.Elapsed.TotalSeconds > o.TimeoutSeconds)
            throw new TimeoutException($"member {o.Index}: over the {o.TimeoutSeconds} s limit" + (what == null ? "" : " waiting for " + what));
    }

    /// <summary>Exits if the parent disappears or the hard limit passes, so no member outlives a run.</summary>
    private static void StartWatchdog(BenchOptions o, Stopwatch deadline)
    {
        new Thread(() =>
        {
            while (true)
            {
                Thread.Sleep(250);
                bool parentGone;
                try
                {
                    using var parent = Process.GetProcessById(o.ParentPid);
                    parentGone = parent.HasExited;
                }
                catch (ArgumentException)
                {
                    parentGone = true;
                }
                if (parentGone || deadline.Elapsed.TotalSeconds > o.TimeoutSeconds + 5)
                {
                    Console.Error.WriteLine($"member {o.Index}: " + (parentGone ? "parent exited" : "hard time limit") + "; exiting");
                    Environment.Exit(4);
                }
            }
        }) { IsBackground = true, Name = "bench-watchdog" }.Start();
    }
}
