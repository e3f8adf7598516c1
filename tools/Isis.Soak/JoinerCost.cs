using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Isis.Tools;
using Microsoft.Extensions.Logging;
using Serilog;
using Serilog.Events;

namespace Isis.Soak;

/// <summary>
/// Issue 25, Targets: what a joiner of a durable group with a long SafeSend history costs, with and
/// without a persistent checkpoint near the end of the history, measured in one run.
/// <para>In-process runtimes on 127.0.0.1, each phase on a membership port of its own. The history
/// is made of real SafeSends (nothing is synthesized; one member, a window of them in flight): one
/// member founds group "joiner-cost" with disk durability and no checkpoints and issues entries -
/// 2 x tail SafeSends. A copy of its directory, restarted with persistent checkpoints, saves one,
/// issues tail more and saves another, so its log is trimmed to the first: the checkpointed base
/// (newest checkpoint at entries - tail). The original restarts and issues tail more too: the
/// untrimmed base. Then, per round, one phase on a fresh copy of each base: the source restarts on
/// it (timed), issues the last tail SafeSends (the history now holds exactly --entries), a joiner
/// with an empty directory and the same configuration joins (timed from JoinAsync to its
/// completion, with where the time went) and its state is compared with the source's, the joiner
/// leaves, and the source restarts once more on its own directory (timed: with no checkpoint, a
/// replay of the whole history at restart).</para>
/// <para>The application state is small on purpose (a count, a running hash of every update in
/// order, and a table of 4,096 longs: about 20 KB as a checkpoint file), so the figures are those
/// of the history's copy and replay, not of a large state.</para>
/// </summary>
internal static class JoinerCost
{
    public const string Usage = """
        Isis.Soak joiner-cost: a joiner's cost in a durable group with a long SafeSend history (issue 25, Targets),
        with a persistent checkpoint near the end of the history (checkpoint + tail) and without (the whole history
        copied and replayed), measured in the same run; also the restart of the source, which with no checkpoint
        replays the whole history from its own log. In-process runtimes, 127.0.0.1 only; real SafeSends build the
        history (one member, disk durability, a window in flight: 40,000/s on a loaded 2-core machine).

          dotnet run -c Release --project tools/Isis.Soak -- joiner-cost [options]

          --entries N     SafeSends in the history when the joiner joins (default 1000000)
          --tail N        of those, issued after the newest checkpoint (default 10000): the joiner copies that
                          checkpoint and them (the source's log holds 2 x N: it is trimmed to its older checkpoint)
          --rounds N      rounds of the two phases (default 3; odd rounds measure "without" first, even rounds "with")
          --window N      SafeSends in flight while building the history (default 2048)
          --out DIR       data directories and results.json (default artifacts/joiner-cost; deleted first)
          --step-timeout T  bound on each join, restart and build (default 20m)
          --suspicion-count N  IsisOptions.SuspicionCount of every runtime (default 5, the library's: expelled after
                          about 0.5 s without a heartbeat; a process that pauses longer while it copies or replays a
                          long history is expelled, and the run stops there)
        """;

    private const string GroupName = "joiner-cost";
    private const int Update = 1;

    internal sealed record Options(long Entries, long Tail, int Rounds, int Window, string Out, TimeSpan StepTimeout, int SuspicionCount = 5);

    private static Options Parse(string[] args)
    {
        var o = new Options(1_000_000, 10_000, 3, 2048, Path.Combine("artifacts", "joiner-cost"), TimeSpan.FromMinutes(20));
        for (int i = 0; i < args.Length; i++)
        {
            string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            long Long() => long.Parse(Value(), CultureInfo.InvariantCulture);
            o = args[i] switch
            {
                "--entries" => o with { Entries = Long() },
                "--tail" => o with { Tail = Long() },
                "--rounds" => o with { Rounds = (int)Long() },
                "--window" => o with { Window = (int)Long() },
                "--out" => o with { Out = Value() },
                "--step-timeout" => o with { StepTimeout = SoakOptions.Time(Value()) },
                "--suspicion-count" => o with { SuspicionCount = (int)Long() },
                _ => throw new ArgumentException("unknown joiner-cost argument " + args[i]),
            };
        }
        if (o.Tail < 1 || o.Entries <= 2 * o.Tail || o.Entries > 20_000_000) throw new ArgumentException("--tail is at least 1 and below half of --entries, which is at most 20000000");
        if (o.Rounds is < 1 or > 20) throw new ArgumentException("--rounds is 1 to 20");
        if (o.Window is < 1 or > 65_536) throw new ArgumentException("--window is 1 to 65536");
        if (o.SuspicionCount is < 3 or > 1000) throw new ArgumentException("--suspicion-count is 3 to 1000");
        if (o.StepTimeout < TimeSpan.FromSeconds(10)) throw new ArgumentException("--step-timeout is at least 10s");
        return o;
    }

    public static int Run(string[] args)
    {
        Options o = Parse(args);
        if (Directory.Exists(o.Out)) Directory.Delete(o.Out, recursive: true);
        Directory.CreateDirectory(o.Out);
        using ILoggerFactory logging = LoggerFactory.Create(b => b.AddSerilog(new LoggerConfiguration()
            .MinimumLevel.Warning()
            .WriteTo.Console(standardErrorFromLevel: LogEventLevel.Verbose, outputTemplate: "{Timestamp:HH:mm:ss.fff} {Level:u3} {Message:lj}{NewLine}{Exception}")
            .CreateLogger(), dispose: true));
        var run = new Experiment(o, logging);
        try
        {
            return run.All();
        }
        catch (IsisShutdownException e)
        {
            // A process that pauses longer than the failure detector allows while it copies or replays a long history.
            run.Say($"a runtime was shut down, the run stops: {e.Message} (failure detection: {o.SuspicionCount} x 100 ms; --suspicion-count raises it)");
            return 1;
        }
    }

    /// <summary>One round's figures, in seconds.</summary>
    internal sealed record Round(int Number, string Order, double JoinWithout, double JoinWith, double RestartWithout, double RestartWith,
        double RestartBaseWithout, double RestartBaseWith, long JoinerReplayedWithout, long JoinerReplayedWith, long JoinerLogBytesWithout, long JoinerLogBytesWith,
        long JoinerCheckpointBytesWith, Breakdown JoinWithoutParts, Breakdown JoinWithParts)
    {
        public double Ratio => JoinWithout / JoinWith;
    }

    /// <summary>What joiner-cost writes to results.json: the run's facts, the history's size and every round.</summary>
    internal sealed class JoinerCostReport : RunReport
    {
        public long Entries { get; set; }
        public long Tail { get; set; }
        public double BuildSafeSendsPerSecond { get; set; }
        public List<Round> Rounds { get; set; } = [];
        public double RatioMedian { get; set; }
        public double RatioBest { get; set; }
    }

    internal sealed class Experiment
    {
        private readonly Stopwatch _clock = Stopwatch.StartNew();
        private readonly JoinerCostReport _report = new();
        private readonly string _untrimmed;
        private readonly string _checkpointed;

        public Experiment(Options options, ILoggerFactory logging)
        {
            O = options;
            Logging = logging;
            _untrimmed = Path.GetFullPath(Path.Combine(options.Out, "base-untrimmed"));
            _checkpointed = Path.GetFullPath(Path.Combine(options.Out, "base-checkpointed"));
        }

        private Options O { get; }

        private ILoggerFactory Logging { get; }

        public int All()
        {
            _report.Begin("Isis.Soak joiner-cost " + string.Join(' ', Environment.GetCommandLineArgs().Skip(1).SkipWhile(a => a != "joiner-cost").Skip(1)), quick: false);
            Say($"joiner-cost: {O.Entries:N0} entries ({O.Entries - O.Tail:N0} before the checkpoint, a tail of {O.Tail:N0}), {O.Rounds} rounds; load average {MachineFacts.LoadAverage()}; out {O.Out}");
            double buildRate = Build();
            var rounds = new List<Round>();
            for (int r = 1; r <= O.Rounds; r++)
            {
                string load = MachineFacts.LoadAverage();
                bool withoutFirst = r % 2 == 1;
                PhaseResult without = default, with = default;
                if (withoutFirst) without = Phase(r, checkpoints: false);
                with = Phase(r, checkpoints: true);
                if (!withoutFirst) without = Phase(r, checkpoints: false);
                var round = new Round(r, withoutFirst ? "without, then with" : "with, then without",
                    without.Join, with.Join, without.RestartAfter, with.RestartAfter, without.RestartBase, with.RestartBase,
                    without.JoinerReplayed, with.JoinerReplayed, without.JoinerLogBytes, with.JoinerLogBytes, with.JoinerCheckpointBytes, without.Parts, with.Parts);
                rounds.Add(round);
                Say($"round {r} (load average at its start {load}): join without a checkpoint {without.Join:F2} s, with one {with.Join:F2} s: ratio {round.Ratio:F1}; " +
                    $"restart on the whole history {without.RestartAfter:F2} s, on checkpoint + tail {with.RestartAfter:F2} s");
            }
            double[] ratios = [.. rounds.Select(r => r.Ratio).Order()];
            Console.WriteLine();
            Console.WriteLine($"joiner-cost: {O.Entries:N0}-entry history, tail {O.Tail:N0} after the checkpoint; history built at {buildRate:F0} SafeSends/s; load average now {MachineFacts.LoadAverage()}");
            Console.WriteLine("round  order                join without (s)  join with (s)  ratio  restart whole history (s)  restart checkpoint+tail (s)");
            foreach (Round r in rounds)
                Console.WriteLine($"{r.Number,5}  {r.Order,-19}  {r.JoinWithout,16:F2}  {r.JoinWith,13:F2}  {r.Ratio,5:F1}  {r.RestartWithout,25:F2}  {r.RestartWith,27:F2}");
            Console.WriteLine($"ratio median {Median(ratios):F1}, best {ratios[^1]:F1}, worst {ratios[0]:F1}; join without: median {Median(rounds.Select(r => r.JoinWithout)):F2} s, best {rounds.Min(r => r.JoinWithout):F2} s; " +
                              $"join with: median {Median(rounds.Select(r => r.JoinWith)):F2} s, best {rounds.Min(r => r.JoinWith):F2} s");
            _report.Entries = O.Entries;
            _report.Tail = O.Tail;
            _report.BuildSafeSendsPerSecond = Math.Round(buildRate);
            _report.Rounds = rounds;
            _report.RatioMedian = Median(ratios);
            _report.RatioBest = ratios[^1];
            _report.End();
            RunReport.WriteFile(Path.Combine(O.Out, "results.json"), _report.ToJson());
            return 0;
        }

        /// <summary>
        /// The two bases, each a history of entries - tail SafeSends. One member founds the group with
        /// no checkpoints and issues all but the last tail of them (a window in flight); a copy of its
        /// directory, restarted with persistent checkpoints, saves one, issues the last tail and saves
        /// another, so its log is trimmed to the first (its log holds the tail, the newest checkpoint
        /// all of it); the original restarts and issues the last tail too (its log holds everything).
        /// </summary>
        private double Build()
        {
            long first = O.Entries - 2 * O.Tail;
            var clock = Stopwatch.StartNew();
            using (var member = new Member(this, _untrimmed, checkpoints: false, MembershipFolder("build"), LoopbackPorts.Next()))
            {
                member.Join();
                member.Issue(first, progress: true);
            }
            double rate = first / clock.Elapsed.TotalSeconds;
            Say($"built the history: {first:N0} SafeSends in {clock.Elapsed.TotalSeconds:F0} s ({rate:F0}/s, founding and shutdown included); log {Mib(LogBytes(_untrimmed))}");
            Copy(_untrimmed, _checkpointed);
            using (var member = new Member(this, _checkpointed, checkpoints: true, MembershipFolder("checkpointed"), LoopbackPorts.Next()))
            {
                double restart = member.Join();
                Say($"checkpointed base: restarted on the untrimmed history of {first:N0} entries in {restart:F2} s (replayed {member.State.Applied:N0})");
                member.Group.SaveCheckpointAsync().WaitAsync(O.StepTimeout).GetAwaiter().GetResult();
                member.Issue(O.Tail, progress: false);
                member.Group.SaveCheckpointAsync().WaitAsync(O.StepTimeout).GetAwaiter().GetResult();
            }
            Say($"checkpointed base: log {Mib(LogBytes(_checkpointed))}, checkpoints {Kib(DirectoryBytes(_checkpointed) - LogBytes(_checkpointed))}");
            using (var member = new Member(this, _untrimmed, checkpoints: false, MembershipFolder("untrimmed"), LoopbackPorts.Next()))
            {
                double restart = member.Join();
                Say($"untrimmed base: restarted on {first:N0} entries in {restart:F2} s (replayed {member.State.Applied:N0})");
                member.Issue(O.Tail, progress: false);
            }
            Say($"untrimmed base: log {Mib(LogBytes(_untrimmed))}");
            return rate;
        }

        private record struct PhaseResult(double RestartBase, double Join, double RestartAfter, long JoinerReplayed, long JoinerLogBytes, long JoinerCheckpointBytes, Breakdown Parts);

        /// <summary>
        /// One phase: the source restarts on a copy of its base and issues the tail; a joiner joins
        /// (timed) and is compared with it, then leaves; the source restarts again (timed).
        /// </summary>
        private PhaseResult Phase(int round, bool checkpoints)
        {
            string name = checkpoints ? "with" : "without";
            string dir = Path.GetFullPath(Path.Combine(O.Out, $"round-{round}-{name}"));
            string source = Path.Combine(dir, "source"), joinerDir = Path.Combine(dir, "joiner");
            Copy(checkpoints ? _checkpointed : _untrimmed, source);
            int port = LoopbackPorts.Next();
            string membership = MembershipFolder($"round-{round}-{name}");
            var result = new PhaseResult();
            using (var s = new Member(this, source, checkpoints, membership, port))
            {
                result.RestartBase = s.Join();
                s.Issue(O.Tail, progress: false);
                Check(s.State.Count == O.Entries, $"the source holds {s.State.Count} entries after the tail, not {O.Entries}");
                // Settle: the tail's last SafeSends are delivered and logged before the joiner asks.
                Thread.Sleep(500);
                GcNow();
                using (var j = new Member(this, joinerDir, checkpoints, membership, port))
                {
                    using (var watch = new LogRewriteWatch(joinerDir))
                    using (var probe = new LoopProbe(j.Runtime))
                    {
                        result.Join = j.Join();
                        probe.Stop();
                        result.Parts = Breakdown.Of(j, watch.FirstSeen, result.Join, probe);
                    }
                    Check(j.State.Count == s.State.Count && j.State.Hash == s.State.Hash,
                        $"the joiner's state ({j.State.Count} entries, hash {j.State.Hash:x16}) is not the source's ({s.State.Count}, {s.State.Hash:x16})");
                    result.JoinerReplayed = j.State.Applied;
                    result.JoinerLogBytes = LogBytes(joinerDir);
                    result.JoinerCheckpointBytes = DirectoryBytes(joinerDir) - result.JoinerLogBytes;
                    Say($"round {round} {name} checkpoints: source restarted in {result.RestartBase:F2} s; joiner joined in {result.Join:F2} s " +
                        $"(restored {j.State.Restored:N0} entries from a checkpoint, replayed {j.State.Applied:N0}; its log {Mib(result.JoinerLogBytes)}, checkpoint {Kib(result.JoinerCheckpointBytes)}); {result.Parts}");
                    j.Group.Leave();
                }
            }
            GcNow();
            using (var again = new Member(this, source, checkpoints, MembershipFolder($"round-{round}-{name}-again"), LoopbackPorts.Next()))
            {
                result.RestartAfter = again.Join();
                Check(again.State.Count == O.Entries, $"the source restarted with {again.State.Count} entries, not {O.Entries}");
                Say($"round {round} {name} checkpoints: source restarted on its {O.Entries:N0}-entry history in {result.RestartAfter:F2} s " +
                    $"(restored {again.State.Restored:N0} from a checkpoint, replayed {again.State.Applied:N0})");
            }
            Directory.Delete(dir, recursive: true);
            return result;
        }

        /// <summary>A full blocking collection, so that the garbage of one step is not collected in the middle of the next one's timing.</summary>
        private static void GcNow()
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        private string MembershipFolder(string name) => Path.GetFullPath(Path.Combine(O.Out, "membership", name));

        private static void Check(bool ok, string problem)
        {
            if (!ok) throw new InvalidOperationException("joiner-cost: " + problem);
        }

        private static void Copy(string from, string to)
        {
            Directory.CreateDirectory(to);
            foreach (string f in Directory.GetFiles(from)) File.Copy(f, Path.Combine(to, Path.GetFileName(f)), overwrite: true);
        }

        private static long LogBytes(string dir) => ProcFs.DirectoryBytes(dir, ProcFs.IsSafeSendLogSegment);

        private static long DirectoryBytes(string dir) => ProcFs.DirectoryBytes(dir, _ => true);

        private static string Mib(long bytes) => Soak.Mib(bytes);

        private static string Kib(long bytes) => (bytes / 1024.0).ToString("F1", CultureInfo.InvariantCulture) + " KiB";

        private static double Median(IEnumerable<double> values)
        {
            double[] v = [.. values.Order()];
            return v.Length % 2 == 1 ? v[v.Length / 2] : (v[v.Length / 2 - 1] + v[v.Length / 2]) / 2;
        }

        public void Say(string line) => Console.WriteLine($"[{_clock.Elapsed.TotalSeconds,7:F1} s] {line}");

        /// <summary>One member: its own runtime on the phase's membership port, the group with disk durability in its directory.</summary>
        internal sealed class Member : IDisposable
        {
            private readonly Experiment _run;
            private readonly IsisRuntime _runtime;

            public Member(Experiment run, string directory, bool checkpoints, string membershipFolder, int port)
            {
                _run = run;
                _runtime = new IsisRuntime(new IsisOptions
                {
                    BindAddress = System.Net.IPAddress.Loopback,
                    MembershipServiceAddress = System.Net.IPAddress.Loopback,
                    MembershipServicePort = port,
                    MembershipService = MembershipServiceMode.Auto,
                    MembershipDataDirectory = membershipFolder,
                    LoggerFactory = run.Logging,
                    SuspicionCount = run.O.SuspicionCount,
                });
                _runtime.Start();
                Group = new Group(_runtime, GroupName);
                Group.SetSafeSendDurability(SafeSendDurability.Disk, directory);
                if (checkpoints) Group.PersistCheckpoints(directory, Timeout.InfiniteTimeSpan);
                State.Attach(Group);
                Group.ViewHandlers += (ViewHandler)(_ =>
                {
                    if (FirstView == 0) FirstView = Stopwatch.GetTimestamp();
                });
            }

            /// <summary>When the first view reached the application (a <see cref="Stopwatch"/> timestamp; 0: not yet): after the history is durable here, before its replay.</summary>
            public long FirstView { get; private set; }

            public Group Group { get; }

            public IsisRuntime Runtime => _runtime;

            public AppState State { get; } = new();

            /// <summary>Joins (a restart when its directory holds a log); returns the seconds from JoinAsync to its completion.</summary>
            public double Join()
            {
                JoinStarted = Stopwatch.GetTimestamp();
                Group.JoinAsync().WaitAsync(_run.O.StepTimeout).GetAwaiter().GetResult();
                return Stopwatch.GetElapsedTime(JoinStarted).TotalSeconds;
            }

            /// <summary>When <see cref="Join"/> called JoinAsync (a <see cref="Stopwatch"/> timestamp).</summary>
            public long JoinStarted { get; private set; }

            /// <summary>Issues <paramref name="count"/> SafeSends, a window of them in flight, and waits for all.</summary>
            public void Issue(long count, bool progress)
            {
                using var slots = new SemaphoreSlim(_run.O.Window, _run.O.Window);
                long first = State.Count + 1, failed = 0;
                var clock = Stopwatch.StartNew();
                long step = Math.Max(1, count / 10);
                for (long i = 0; i < count; i++)
                {
                    if (!slots.Wait(_run.O.StepTimeout)) throw new TimeoutException($"joiner-cost: no SafeSend completed within {_run.O.StepTimeout}");
                    long n = first + i;
                    Group.SafeSendAsync(Update, n % AppState.TableSize, n).ContinueWith(t =>
                    {
                        if (t.IsFaulted) Interlocked.Increment(ref failed);
                        slots.Release();
                    }, TaskScheduler.Default);
                    if (progress && (i + 1) % step == 0)
                        _run.Say($"  {i + 1:N0} SafeSends issued ({(i + 1) / clock.Elapsed.TotalSeconds:F0}/s), load average {MachineFacts.LoadAverage()}");
                }
                for (int k = 0; k < _run.O.Window; k++)
                {
                    if (!slots.Wait(_run.O.StepTimeout)) throw new TimeoutException("joiner-cost: the last SafeSends did not complete");
                }
                if (Interlocked.Read(ref failed) > 0) throw new InvalidOperationException($"joiner-cost: {failed} SafeSends failed");
                // A SafeSend completes when it is delivered here, which may be before its handler ran: wait for the handlers too.
                var handlers = Stopwatch.StartNew();
                while (State.Count < first + count - 1)
                {
                    if (handlers.Elapsed > _run.O.StepTimeout) throw new TimeoutException($"joiner-cost: the handlers applied {State.Count - first + 1} of {count} SafeSends");
                    Thread.Sleep(5);
                }
            }

            public void Dispose() => _runtime.Shutdown();
        }
    }

    /// <summary>
    /// Where a join's time went, in seconds from JoinAsync, as seen from outside the library: the
    /// joiner's log rewrite began (the copied history's first part is written aside: the file
    /// "*.safelog.next" appears; the copy is written there in parts as it arrives and renamed over
    /// the log with its last; -1 if the watch missed it), its first view reached the application
    /// (the new log is durable, the replay is about to start), the first and the last replayed
    /// update ran, and JoinAsync completed.
    /// </summary>
    internal sealed record Breakdown(double RewriteSeen, double FirstView, double FirstApply, double LastApply, double Joined, double LongestStall, double LongestStallFrom)
    {
        public static Breakdown Of(Experiment.Member m, long rewriteSeen, double joined, LoopProbe probe)
        {
            double At(long stamp) => stamp == 0 ? -1 : Math.Round(Stopwatch.GetElapsedTime(m.JoinStarted, stamp).TotalSeconds, 3);
            return new Breakdown(At(rewriteSeen), At(m.FirstView), At(m.State.FirstApply), At(m.State.LastApply), Math.Round(joined, 3),
                Math.Round(probe.Longest, 3), At(probe.LongestFrom));
        }

        public override string ToString() =>
            $"rewrite seen at {RewriteSeen:F2} s, first view {FirstView:F2} s, replay {FirstApply:F2}-{LastApply:F2} s, joined {Joined:F2} s; " +
            $"the joiner's event loop answered no probe for {LongestStall:F2} s from {LongestStallFrom:F2} s";
    }

    /// <summary>
    /// How long the joiner's event loop goes without answering: a thread asks it for its statistics
    /// (IsisRuntime.GetStatistics posts to the loop and waits for the answer) every 5 ms, and keeps
    /// the longest wait and when it began. The loop also sends the heartbeats, so a wait longer than
    /// SuspicionCount x HeartbeatInterval is one in which the membership service may expel it.
    /// </summary>
    internal sealed class LoopProbe : IDisposable
    {
        private readonly CancellationTokenSource _stop = new();
        private readonly Thread _thread;

        public LoopProbe(IsisRuntime runtime)
        {
            _thread = new Thread(() =>
            {
                while (!_stop.IsCancellationRequested)
                {
                    long asked = Stopwatch.GetTimestamp();
                    try
                    {
                        runtime.GetStatistics();
                    }
                    catch (Exception e) when (e is IsisException or InvalidOperationException or ObjectDisposedException)
                    {
                        return; // stopped
                    }
                    double waited = Stopwatch.GetElapsedTime(asked).TotalSeconds;
                    if (waited > Longest) (Longest, LongestFrom) = (waited, asked);
                    _stop.Token.WaitHandle.WaitOne(5);
                }
            }) { IsBackground = true, Name = "loop-probe" };
            _thread.Start();
        }

        public double Longest { get; private set; }

        public long LongestFrom { get; private set; }

        public void Stop()
        {
            _stop.Cancel();
            _thread.Join(TimeSpan.FromSeconds(10));
        }

        public void Dispose()
        {
            Stop();
            _stop.Dispose();
        }
    }

    /// <summary>Polls a directory every 2 ms for the SafeSend log written aside ("*.safelog.next"); FirstSeen is when it first appeared (0: never).</summary>
    private sealed class LogRewriteWatch : IDisposable
    {
        private readonly CancellationTokenSource _stop = new();
        private readonly Thread _thread;
        private long _firstSeen;

        public LogRewriteWatch(string directory)
        {
            _thread = new Thread(() =>
            {
                while (!_stop.IsCancellationRequested && Volatile.Read(ref _firstSeen) == 0)
                {
                    if (Directory.Exists(directory) && Directory.EnumerateFiles(directory, "*.safelog.next").Any()) Volatile.Write(ref _firstSeen, Stopwatch.GetTimestamp());
                    else _stop.Token.WaitHandle.WaitOne(2);
                }
            }) { IsBackground = true, Name = "rewrite-watch" };
            _thread.Start();
        }

        public long FirstSeen => Volatile.Read(ref _firstSeen);

        public void Dispose()
        {
            _stop.Cancel();
            _thread.Join(TimeSpan.FromSeconds(5));
            _stop.Dispose();
        }
    }

    /// <summary>
    /// The replicated state: how many updates were applied, a running hash of them in order (so a
    /// joiner that got any update twice, lost one or reordered two differs), and the last value
    /// written to each of 4,096 slots. Restored and applied are counted apart for the report.
    /// </summary>
    internal sealed class AppState
    {
        public const int TableSize = 4096;
        private readonly Lock _lock = new();
        private long[] _table = new long[TableSize];

        public long Count { get { lock (_lock) return _count; } }

        public ulong Hash { get { lock (_lock) return _hash; } }

        /// <summary>Updates applied by the handler in this incarnation (replayed or live).</summary>
        public long Applied { get { lock (_lock) return _applied; } }

        /// <summary>The count a checkpoint restored (0: none).</summary>
        public long Restored { get { lock (_lock) return _restored; } }

        private long _count, _applied, _restored;

        /// <summary>When the first and the latest update ran here (<see cref="Stopwatch"/> timestamps; 0: none yet).</summary>
        public long FirstApply { get; private set; }

        public long LastApply { get; private set; }
        private ulong _hash = 14695981039346656037UL;

        public void Attach(Group group)
        {
            group.Handlers[Update] += (Action<long, long>)Apply;
            group.MakeChkpt += (ChkptMaker)(_ =>
            {
                long count;
                ulong hash;
                long[] table;
                lock (_lock) (count, hash, table) = (_count, _hash, [.. _table]);
                group.SendChkpt(count, (long)hash, table);
                group.EndOfChkpt();
            });
            group.LoadChkpt += (Action<long, long, long[]>)((count, hash, table) =>
            {
                lock (_lock) (_count, _hash, _table, _restored) = (count, (ulong)hash, table, count);
            });
        }

        private void Apply(long slot, long value)
        {
            lock (_lock)
            {
                _table[slot] = value;
                _hash = (_hash ^ (ulong)value) * 1099511628211UL;
                _count++;
                _applied++;
                LastApply = Stopwatch.GetTimestamp();
                if (FirstApply == 0) FirstApply = LastApply;
            }
        }
    }
}
