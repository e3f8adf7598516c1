using System.Diagnostics;
using System.Globalization;
using System.Text.Json;

using Isis.Tools;

namespace Isis.Bench;

/// <summary>
/// One member process. Member 0 is the sender; the others are receivers. Timestamps are
/// <see cref="Stopwatch.GetTimestamp"/> values, which on Linux read CLOCK_MONOTONIC and so compare
/// across processes on one machine: a receiver subtracts the send timestamp carried in the message
/// from its own delivery timestamp.
/// </summary>
/// <remarks>
/// Phases, driven by the sender, for each primitive in turn (phase i is the i-th of --primitive):
/// <list type="number">
/// <item>Join; receivers announce READY once their view holds all members.</item>
/// <item>Latency: the sender multicasts PING(phase, round, timestamp, padding) with the primitive
/// and waits until every receiver answered ACK(round) (a Send) before the next round; every member
/// records delivery - send in its handler. Query: QueryAsync(ALL, QPING...) instead, every member
/// Replies, and the round ends when the task completes. --warmup rounds come first and --cooldown
/// rounds last; only the --samples rounds between them are recorded.</item>
/// <item>Throughput: the sender multicasts DATA(phase, payload) as fast as flow control lets it
/// (Query: QDATA with at most 1,000 queries in flight); each member timestamps its first and last
/// delivery and the edges of the measured window (the first and the last tenth of the deliveries
/// are warm-up and cool-down, not counted) and each receiver, having all of them, Sends DONE.</item>
/// </list>
/// Then, with --response-delay, the sender times bursts of K Sends + Flush against K SafeSends;
/// finally it Sends FINISH and everyone writes its result file and shuts down.
/// </remarks>
internal static class Member
{
    private const string GroupName = "isis-bench";
    private const int Ready = 1, Ping = 2, Ack = 3, Data = 4, Done = 5, Finish = 6, QPing = 7, QData = 8, Update = 9;
    private const int QueriesInFlight = 1_000;

    /// <summary>
    /// How long one latency or response-delay round may take before the run fails: 5 s, or the failure-detection
    /// time if longer (20 s from 20 members on). A round that stalls longer than a silent member would take to
    /// be expelled is a stuck protocol, not a slow machine; a shorter limit made 50-member runs fail on 2 cores.
    /// </summary>
    private static TimeSpan RoundTimeout(BenchOptions o) =>
        TimeSpan.FromMilliseconds(Math.Max(5_000, (long)o.HeartbeatMs * o.Suspicion));

    public static int Run(BenchOptions o)
    {
        if (o.Index < 0 || o.Index >= o.Members || o.ServicePort == 0 || o.ResultPath == null)
            throw new ArgumentException($"member needs --index 0..{o.Members - 1}, --service-port and --result");
        var deadline = Stopwatch.StartNew();
        StartWatchdog(o, deadline);

        var runtime = new IsisRuntime(Coordinator.Options(MembershipServiceMode.Client, o.ServicePort, o));
        runtime.ShutDown += (_, e) =>
        {
            Console.Error.WriteLine($"member {o.Index}: runtime shut down: {e.Reason}");
            Environment.Exit(5);
        };
        runtime.Start();
        var state = new State(o);
        var g = new Group(runtime, GroupName);
        if (o.Keys) g.SetKey(BenchOptions.BenchGroupKey);
        string? safeLog = o.SafeLogDirectory == null ? null : Path.Combine(o.SafeLogDirectory, $"member-{o.Index}-{Environment.ProcessId}");
        if (safeLog != null) g.SetSafeSendDurability(SafeSendDurability.Disk, safeLog);
        Register(g, runtime, state, o);
        g.Join();

        WaitFor(() => g.GetView()?.Members.Length == o.Members, $"a view with all {o.Members} members", o, deadline);
        var result = new MemberResult { Index = o.Index };
        if (o.Index == 0) RunSender(g, state, o, deadline, result);
        else RunReceiver(g, state, o, deadline, result);

        result.Final = Stats(runtime);
        File.WriteAllText(o.ResultPath, JsonSerializer.Serialize(result, RunReport.Json));
        runtime.Shutdown();
        if (safeLog != null) Directory.Delete(safeLog, recursive: true);
        return 0;
    }

    /// <summary>Everything the handlers share with the main thread (handlers run on one delivery thread).</summary>
    private sealed class State
    {
        public State(BenchOptions o)
        {
            int n = o.PrimitiveList.Length;
            ReadyReceivers = new CountdownEvent(o.Members - 1);
            DoneReceivers = new CountdownEvent(o.Members - 1);
            Latency = [.. Enumerable.Range(0, n).Select(_ => new long[o.Samples])];
            LatencyCount = new int[n];
            DataCount = new long[n];
            FirstData = new long[n];
            LastData = new long[n];
            WindowStart = new long[n];
            WindowEnd = new long[n];
            BlastStart = new StatsSnapshot?[n];
            BlastEnd = new StatsSnapshot?[n];
        }

        public readonly CountdownEvent ReadyReceivers;
        public readonly long[][] Latency;
        public readonly int[] LatencyCount;
        public int CurrentPhase = -1;
        public long CurrentRound = -1;
        public int Acks;
        public readonly ManualResetEventSlim RoundDone = new(false);
        public readonly long[] DataCount;
        public readonly long[] FirstData;
        public readonly long[] LastData;
        /// <summary>Throughput: this member's delivery that opens the measured window (the first after the warm-up tenth) and the one that closes it.</summary>
        public readonly long[] WindowStart;
        public readonly long[] WindowEnd;
        public readonly StatsSnapshot?[] BlastStart;
        public readonly StatsSnapshot?[] BlastEnd;
        public readonly CountdownEvent DoneReceivers;
        public readonly Dictionary<int, BlastTimes> Reported = new();
        public readonly ManualResetEventSlim Finished = new(false);
    }

    private static void Register(Group g, IsisRuntime runtime, State s, BenchOptions o)
    {
        g.Handlers[Ready] += (Action<int>)(index =>
        {
            if (o.Index == 0 && index != 0) s.ReadyReceivers.Signal();
        });
        void OnPing(int phase, long round, long sentAt, bool query)
        {
            long now = Stopwatch.GetTimestamp();
            // Warm-up and cool-down rounds are delivered and acknowledged like the others but not recorded.
            if (round >= o.Warmup && round < o.Warmup + o.Samples && s.LatencyCount[phase] < o.Samples) s.Latency[phase][s.LatencyCount[phase]++] = now - sentAt;
            if (query) g.Reply(o.Index);
            else if (o.Index != 0) g.Send(Ack, o.Index, phase, round);
        }
        g.Handlers[Ping] += (Action<int, long, long, byte[]>)((phase, round, sentAt, _) => OnPing(phase, round, sentAt, query: false));
        g.Handlers[QPing] += (Action<int, long, long, byte[]>)((phase, round, sentAt, _) => OnPing(phase, round, sentAt, query: true));
        g.Handlers[Ack] += (Action<int, int, long>)((_, phase, round) =>
        {
            if (o.Index != 0 || phase != Volatile.Read(ref s.CurrentPhase) || round != Volatile.Read(ref s.CurrentRound)) return;
            // A P2PSend's round is acknowledged by its one receiver.
            if (++s.Acks == (o.PrimitiveList[phase] == Primitive.P2P ? 1 : o.Members - 1)) s.RoundDone.Set();
        });
        void OnData(int phase, bool query)
        {
            long now = Stopwatch.GetTimestamp();
            int n = o.MessagesFor(o.PrimitiveList[phase]);
            int edge = BenchOptions.BlastEdge(n);
            long count = ++s.DataCount[phase];
            if (count == 1)
            {
                s.FirstData[phase] = now;
                if (o.Index != 0) s.BlastStart[phase] = Stats(runtime);
            }
            if (count == edge + 1) s.WindowStart[phase] = now;
            if (count == n - edge) s.WindowEnd[phase] = now;
            s.LastData[phase] = now;
            if (query) g.Reply(o.Index);
            if (o.Index != 0 && count == n)
            {
                s.BlastEnd[phase] = Stats(runtime);
                g.Send(Done, o.Index, count, s.FirstData[phase], s.LastData[phase], s.WindowStart[phase], s.WindowEnd[phase]);
            }
        }
        g.Handlers[Data] += (Action<int, byte[]>)((phase, _) => OnData(phase, query: false));
        g.Handlers[QData] += (Action<int, byte[]>)((phase, _) => OnData(phase, query: true));
        g.Handlers[Done] += (Action<int, long, long, long, long, long>)((index, count, first, last, windowStart, windowEnd) =>
        {
            if (o.Index != 0) return;
            lock (s.Reported) s.Reported[index] = new BlastTimes(count, first, last, windowStart, windowEnd);
            s.DoneReceivers.Signal();
        });
        g.Handlers[Update] += (Action<int>)(_ => { });
        g.Handlers[Finish] += (Action)(() => s.Finished.Set());
    }

    private static void RunSender(Group g, State s, BenchOptions o, Stopwatch deadline, MemberResult result)
    {
        WaitFor(() => s.ReadyReceivers.IsSet, "READY from every receiver", o, deadline, s.ReadyReceivers.WaitHandle);
        result.FormedSeconds = deadline.Elapsed.TotalSeconds;
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"member 0: all {o.Members} members joined at {result.FormedSeconds:F1} s"));
        var pad = new byte[Math.Max(0, o.Payload - 24)];
        var payload = new byte[o.Payload];
        for (int phase = 0; phase < o.PrimitiveList.Length; phase++)
        {
            Primitive p = o.PrimitiveList[phase];
            var r = new PhaseResult { Primitive = p.Name() };
            if (p.IsSafe()) g.SetSafeSendThreshold(p.Phi(o.Members));
            Volatile.Write(ref s.CurrentPhase, phase);

            // Latency: one operation at a time, each acknowledged by every receiver before the next:
            // warm-up rounds, the recorded rounds, then cool-down rounds (run, not recorded).
            var roundTrips = new long[o.Samples];
            var completions = p.IsSafe() || p == Primitive.Query ? new long[o.Samples] : null;
            TimeSpan roundTimeout = RoundTimeout(o);
            // A P2PSend goes to the oldest receiver of the view.
            View formed = g.GetView()!;
            Address? p2pTarget = formed.Members.Where((_, rank) => rank != formed.GetMyRank()).FirstOrDefault();
            // The timed warm-up first: negative round numbers, which receivers acknowledge and never record.
            var warming = Stopwatch.StartNew();
            for (long round = -1; warming.Elapsed.TotalSeconds < o.WarmupSeconds; round--)
            {
                Round(round);
                CheckDeadline(o, deadline);
            }
            for (long round = 0; round < o.Warmup + o.Samples + o.Cooldown; round++)
            {
                (long sentAt, long completed, long end) = Round(round);
                if (round >= o.Warmup && round < o.Warmup + o.Samples)
                {
                    roundTrips[round - o.Warmup] = end - sentAt;
                    if (completions != null) completions[round - o.Warmup] = completed - sentAt;
                }
                CheckDeadline(o, deadline);
            }

            (long SentAt, long Completed, long End) Round(long round)
            {
                s.Acks = 0;
                s.RoundDone.Reset();
                Volatile.Write(ref s.CurrentRound, round);
                long sentAt = Stopwatch.GetTimestamp();
                long completed = 0;
                switch (p)
                {
                    case Primitive.Send:
                        g.Send(Ping, phase, round, sentAt, pad);
                        break;
                    case Primitive.Causal:
                        g.CausalSend(Ping, phase, round, sentAt, pad);
                        break;
                    case Primitive.P2P:
                        g.P2PSend(p2pTarget!, Ping, phase, round, sentAt, pad);
                        break;
                    case Primitive.Ordered:
                        g.OrderedSend(Ping, phase, round, sentAt, pad);
                        break;
                    case Primitive.Query:
                        Task<IReadOnlyList<int>> q = g.QueryAsync<int>(Group.ALL, QPing, phase, round, sentAt, pad);
                        if (!q.Wait(roundTimeout)) throw new TimeoutException($"{p.Name()} round {round}: the query did not complete within {roundTimeout.TotalSeconds} s");
                        completed = Stopwatch.GetTimestamp();
                        if (q.Result.Count != o.Members) throw new InvalidOperationException($"query round {round}: {q.Result.Count} replies, expected {o.Members}");
                        s.RoundDone.Set();
                        break;
                    default:
                        Task t = g.SafeSendAsync(Ping, phase, round, sentAt, pad);
                        if (!t.Wait(roundTimeout)) throw new TimeoutException($"{p.Name()} round {round}: not delivered here within {roundTimeout.TotalSeconds} s");
                        completed = Stopwatch.GetTimestamp();
                        break;
                }
                if (!s.RoundDone.Wait(roundTimeout))
                    throw new TimeoutException($"{p.Name()} round {round}: the receivers did not acknowledge within {roundTimeout.TotalSeconds} s");
                return (sentAt, completed, p == Primitive.Query ? completed : Stopwatch.GetTimestamp());
            }
            r.RoundTripTicks = roundTrips;
            r.CompletionTicks = completions ?? [];
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"member 0: {p.Name()} latency rounds done at {deadline.Elapsed.TotalSeconds:F1} s"));

            // Throughput: one sender, as fast as the primitive lets it (calls block when the unstable window is full).
            // The calls' rate is taken over the same middle window as the deliveries' (calls edge .. n - edge - 1).
            int n = o.MessagesFor(p);
            int edge = BenchOptions.BlastEdge(n);
            long callsFrom = 0, callsTo = 0;
            void Mark(int i)
            {
                if (i == edge) callsFrom = Stopwatch.GetTimestamp();
                else if (i == n - edge) callsTo = Stopwatch.GetTimestamp();
            }
            s.DoneReceivers.Reset();
            lock (s.Reported) s.Reported.Clear();
            long start = Stopwatch.GetTimestamp();
            long lastCompleted = 0;
            switch (p)
            {
                case Primitive.Send:
                    for (int i = 0; i < n; i++)
                    {
                        Mark(i);
                        g.Send(Data, phase, payload);
                    }
                    break;
                case Primitive.Ordered:
                    for (int i = 0; i < n; i++)
                    {
                        Mark(i);
                        g.OrderedSend(Data, phase, payload);
                    }
                    break;
                case Primitive.Causal:
                    for (int i = 0; i < n; i++)
                    {
                        Mark(i);
                        g.CausalSend(Data, phase, payload);
                    }
                    break;
                case Primitive.P2P:
                {
                    Address[] everyone = g.GetView()!.Members;
                    for (int i = 0; i < n; i++)
                    {
                        Mark(i);
                        g.SubsetSend(everyone, Data, phase, payload);
                    }
                    break;
                }
                case Primitive.Query:
                {
                    using var inFlight = new SemaphoreSlim(QueriesInFlight);
                    using var all = new CountdownEvent(n);
                    int failures = 0;
                    for (int i = 0; i < n; i++)
                    {
                        Mark(i);
                        inFlight.Wait();
                        g.QueryAsync<int>(Group.ALL, QData, phase, payload).ContinueWith(t =>
                        {
                            if (!t.IsCompletedSuccessfully || t.Result.Count != o.Members) Interlocked.Increment(ref failures);
                            inFlight.Release();
                            all.Signal();
                        }, TaskContinuationOptions.ExecuteSynchronously);
                    }
                    r.SendCallsSeconds = Stopwatch.GetElapsedTime(start).TotalSeconds;
                    WaitFor(() => all.IsSet, "the blast's queries", o, deadline, all.WaitHandle);
                    lastCompleted = Stopwatch.GetTimestamp();
                    if (failures > 0) throw new InvalidOperationException($"{failures} queries of the blast failed or lacked replies");
                    break;
                }
                default:
                {
                    var tasks = new Task[n];
                    for (int i = 0; i < n; i++)
                    {
                        Mark(i);
                        tasks[i] = g.SafeSendAsync(Data, phase, payload);
                    }
                    r.SendCallsSeconds = Stopwatch.GetElapsedTime(start).TotalSeconds;
                    if (!Task.WaitAll(tasks, TimeSpan.FromSeconds(Math.Max(1, o.TimeoutSeconds - deadline.Elapsed.TotalSeconds))))
                        throw new TimeoutException("the blast's SafeSends did not complete");
                    lastCompleted = Stopwatch.GetTimestamp();
                    break;
                }
            }
            if (r.SendCallsSeconds == 0) r.SendCallsSeconds = Stopwatch.GetElapsedTime(start).TotalSeconds;
            if (callsTo == 0) callsTo = Stopwatch.GetTimestamp(); // edge == 0: the window is the whole blast
            r.MeasuredCalls = n - 2 * edge;
            r.MeasuredCallsSeconds = (callsTo - callsFrom) / (double)Stopwatch.Frequency;
            if (lastCompleted != 0) r.CompletedSeconds = (lastCompleted - start) / (double)Stopwatch.Frequency;
            WaitFor(() => s.DoneReceivers.IsSet, "DONE from every receiver", o, deadline, s.DoneReceivers.WaitHandle);
            lock (s.Reported)
            {
                r.Throughput = s.Reported.OrderBy(x => x.Key)
                    .Select(x => Rate(x.Key, x.Value, edge))
                    .Prepend(Rate(0, new BlastTimes(s.DataCount[phase], s.FirstData[phase], s.LastData[phase], s.WindowStart[phase], s.WindowEnd[phase]), edge))
                    .ToList();
            }
            r.LatencyTicks = s.Latency[phase][..s.LatencyCount[phase]];
            result.Phases.Add(r);
            Console.WriteLine($"member 0: {p.Name()} done at {deadline.Elapsed.TotalSeconds:F1} s");
        }

        if (o.ResponseDelayBursts.Length > 0) RunResponseDelay(g, o, deadline, result);
        g.Send(Finish);
    }

    /// <summary>
    /// Isis2 Figure 8: after K updates, when may the application answer an outside user?
    /// (a) K Sends then Flush(): from the first Send until Flush returns (every member holds them);
    /// (b) K SafeSendAsync: from the first call until the last task completed (delivered here, durable).
    /// </summary>
    private static void RunResponseDelay(Group g, BenchOptions o, Stopwatch deadline, MemberResult result)
    {
        var modes = new List<(string Name, int Phi)> { ("send+flush", 0) };
        if (o.Members > 3) modes.Add(("safesend phi=3", 3));
        modes.Add(("safesend phi=all", o.Members));
        int warmup = o.ResponseWarmup, cooldown = o.ResponseCooldown;
        TimeSpan roundTimeout = RoundTimeout(o);
        foreach (int k in o.ResponseDelayBursts)
        {
            foreach (var (name, phi) in modes)
            {
                if (phi > 0) g.SetSafeSendThreshold(phi);
                var ticks = new long[o.Rounds];
                var tasks = new Task[k];
                for (int round = 0; round < warmup + o.Rounds + cooldown; round++)
                {
                    long start = Stopwatch.GetTimestamp();
                    if (phi == 0)
                    {
                        for (int i = 0; i < k; i++) g.Send(Update, i);
                        g.Flush();
                    }
                    else
                    {
                        for (int i = 0; i < k; i++) tasks[i] = g.SafeSendAsync(Update, i);
                        if (!Task.WaitAll(tasks, roundTimeout)) throw new TimeoutException($"{name} K={k}: not complete within {roundTimeout.TotalSeconds} s");
                    }
                    if (round >= warmup && round < warmup + o.Rounds) ticks[round - warmup] = Stopwatch.GetTimestamp() - start;
                    CheckDeadline(o, deadline);
                }
                result.ResponseDelay.Add(new ResponseDelayRaw { K = k, Mode = name, Ticks = ticks });
            }
        }
        Console.WriteLine($"member 0: response delay done at {deadline.Elapsed.TotalSeconds:F1} s");
    }

    private static void RunReceiver(Group g, State s, BenchOptions o, Stopwatch deadline, MemberResult result)
    {
        g.Send(Ready, o.Index);
        WaitFor(() => s.Finished.IsSet, "FINISH from the sender", o, deadline, s.Finished.WaitHandle);
        for (int phase = 0; phase < o.PrimitiveList.Length; phase++)
        {
            result.Phases.Add(new PhaseResult
            {
                Primitive = o.PrimitiveList[phase].Name(),
                LatencyTicks = s.Latency[phase][..s.LatencyCount[phase]],
                Throughput = [Rate(o.Index, new BlastTimes(s.DataCount[phase], s.FirstData[phase], s.LastData[phase], s.WindowStart[phase], s.WindowEnd[phase]),
                    BenchOptions.BlastEdge(o.MessagesFor(o.PrimitiveList[phase])))],
                BlastStart = s.BlastStart[phase],
                BlastEnd = s.BlastEnd[phase],
            });
        }
    }

    /// <summary>A member's blast: deliveries, first and last delivery, and the deliveries that open and close the measured window.</summary>
    internal readonly record struct BlastTimes(long Count, long First, long Last, long WindowStart, long WindowEnd);

    /// <summary>
    /// Deliveries per second over the measured window: from the delivery after the <paramref name="edge"/>
    /// warm-up deliveries to the last before the <paramref name="edge"/> cool-down ones, (measured - 1) / seconds
    /// (measured deliveries make measured - 1 intervals); the whole blast's rate is kept beside it.
    /// </summary>
    private static ThroughputResult Rate(int index, BlastTimes b, int edge)
    {
        double whole = (b.Last - b.First) / (double)Stopwatch.Frequency;
        long measured = Math.Max(0, b.Count - 2 * edge);
        double seconds = edge == 0 ? whole : (b.WindowEnd - b.WindowStart) / (double)Stopwatch.Frequency;
        return new ThroughputResult
        {
            Member = index,
            Deliveries = b.Count,
            WarmupDeliveries = edge,
            MeasuredDeliveries = measured,
            CooldownDeliveries = edge,
            Seconds = seconds,
            DeliveriesPerSecond = measured > 1 && seconds > 0 ? (measured - 1) / seconds : 0,
            WholeBlastSeconds = whole,
            WholeBlastPerSecond = b.Count > 1 && whole > 0 ? (b.Count - 1) / whole : 0,
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
