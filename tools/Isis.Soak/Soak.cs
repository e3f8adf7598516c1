using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Isis.Tools;

namespace Isis.Soak;

/// <summary>
/// The parent of a soak run: starts the members, runs the fault schedule while they load the group,
/// samples every process each second, checks durability after every whole-group restart and at the
/// end, and writes the results and the report.
/// <para>Faults run one at a time, each to its end (the group settled again: every running member
/// joined and in a view of all of them) before the next. That keeps the one rule a durable group
/// needs after a total crash, that every member of its last view comes back, and it makes each
/// recovery time mean one thing. A step that does not complete within --step-timeout is a
/// violation (a hang), and the run stops there.</para>
/// </summary>
internal sealed class Soak
{
    private readonly SoakOptions _o;
    private readonly Random _random;
    private readonly Stopwatch _clock = new();
    private readonly List<MemberSlot> _slots = new();
    private readonly MemberSlot _extra;
    private readonly SoakResults _results;
    private readonly Lock _resultsLock = new();
    private readonly string _dumps;
    private readonly int _servicePort;
    private Ledger _previousHistory = new();
    private bool _stopped; // a hang: the run ends at once

    private Soak(SoakOptions o)
    {
        _o = o;
        _random = new Random(o.Seed);
        string data = Path.Combine(o.Out, "data"), logs = Path.Combine(o.Out, "logs");
        _dumps = Path.Combine(o.Out, "dumps");
        foreach (string dir in (string[])[data, logs, _dumps])
        {
            if (Directory.Exists(dir)) Directory.Delete(dir, recursive: true);
            Directory.CreateDirectory(dir);
        }
        for (int i = 0; i <= o.Members; i++)
        {
            string name = i < o.Members ? $"member {i}" : "extra";
            string file = i < o.Members ? $"member-{i}" : "extra";
            var log = new StreamWriter(Path.Combine(logs, file + ".log")) { AutoFlush = true };
            _slots.Add(new MemberSlot(i, name, Path.GetFullPath(Path.Combine(data, file)), log));
        }
        _extra = _slots[^1];
        // The membership service's well-known port, private to this run (never port 0: LoopbackPorts).
        _servicePort = LoopbackPorts.Next();
        _results = new SoakResults
        {
            Members = o.Members,
            Rate = o.Rate,
            PayloadBytes = o.PayloadBytes,
            Mix = o.Mix,
            StopAfterSafeSends = o.StopAfterSafeSends,
            InFlight = o.InFlight,
            CheckpointIntervalSeconds = o.CheckpointInterval.TotalSeconds,
            KillEverySeconds = o.KillEvery.TotalSeconds,
            CrashEverySeconds = o.CrashEvery.TotalSeconds,
            JoinEverySeconds = o.JoinEvery.TotalSeconds,
            ExtraStaysSeconds = o.ExtraStays.TotalSeconds,
            Seed = o.Seed,
            DurationSeconds = o.Duration.TotalSeconds,
            Processes = _slots.Select(s => s.Name).ToList(),
        };
    }

    public static int Run(SoakOptions o)
    {
        var soak = new Soak(o);
        try
        {
            return soak.RunAll();
        }
        finally
        {
            foreach (MemberSlot s in soak._slots)
            {
                s.Current?.Kill();
                s.Log.Dispose();
            }
        }
    }

    private int RunAll()
    {
        _results.Begin(_o.Command, quick: false);
        Say($"{_o.Members} members, {_o.Rate:F0} operations/s of {_o.PayloadBytes} B ({_o.Mix} mix), {_o.Duration.TotalSeconds:F0} s" +
            (_o.StopAfterSafeSends > 0 ? $" or {_o.StopAfterSafeSends} acknowledged SafeSends" : "") + $", seed {_o.Seed}; membership service port {_servicePort}; out {_o.Out}");
        _clock.Start();
        using var stopSampling = new CancellationTokenSource();
        var sampler = new Thread(() => Sample(stopSampling.Token)) { IsBackground = true, Name = "sampler" };
        sampler.Start();

        // The first member alone, so that it founds the membership service and the group's history; then the others.
        Start(_slots[0]);
        if (WaitUntil("member 0 joins and founds the group", () => _slots[0].Current!.Joined))
        {
            foreach (MemberSlot s in _slots.Take(_o.Members).Skip(1)) Start(s);
            WaitSettled("every member joins");
        }
        Fault("start", $"{_o.Members} members joined", _clock.Elapsed.TotalSeconds);
        double loadStart = _clock.Elapsed.TotalSeconds, loadEnd = loadStart + _o.Duration.TotalSeconds;

        double nextKill = Next(loadStart, _o.KillEvery), nextCrash = Next(loadStart, _o.CrashEvery), nextJoin = Next(loadStart, _o.JoinEvery);
        double extraLeaves = double.PositiveInfinity;
        while (!_stopped && Now < loadEnd)
        {
            if (_o.StopAfterSafeSends > 0 && _slots.Sum(s => s.AckedTotal) >= _o.StopAfterSafeSends)
            {
                Say($"{_slots.Sum(s => s.AckedTotal)} SafeSends/SafeQueries acknowledged: the load ends (--stop-after-safesends {_o.StopAfterSafeSends})");
                break;
            }
            HandleUnplannedExits();
            double now = Now;
            // The fault due first; a fault that came due while another ran goes next.
            double due = new[] { nextKill, nextCrash, nextJoin, extraLeaves }.Min();
            if (due > now)
            {
                Thread.Sleep(TimeSpan.FromSeconds(Math.Min(0.2, Math.Max(0.01, Math.Min(due, loadEnd) - now))));
                continue;
            }
            // Each fault starts from a settled group (a member an expulsion took out is back and joined).
            if (!WaitSettled("the group settles before the next fault")) break;
            if (due == extraLeaves)
            {
                ExtraLeaves();
                extraLeaves = double.PositiveInfinity;
            }
            else if (due == nextCrash)
            {
                WholeGroupCrash();
                nextCrash = Next(Now, _o.CrashEvery);
            }
            else if (due == nextKill)
            {
                KillOne();
                nextKill = Next(Now, _o.KillEvery);
            }
            else
            {
                if (!_extra.Live && ExtraJoins()) extraLeaves = Now + _o.ExtraStays.TotalSeconds;
                nextJoin = Next(Now, _o.JoinEvery);
            }
        }
        _results.LoadSeconds = Now - loadStart;
        if (!_stopped) Check("the end of the run", resume: false); // the members leave from the state checked
        Stop();
        stopSampling.Cancel();
        sampler.Join(TimeSpan.FromSeconds(5));
        _results.End();
        Summarize(loadStart);
        Write();
        PrintSummary();
        return _results.Violations.Count == 0 ? 0 : 1;
    }

    private double Now => _clock.Elapsed.TotalSeconds;

    /// <summary>The next time of a fault that comes about every <paramref name="every"/>: within +-25 % of it, seeded.</summary>
    private double Next(double from, TimeSpan every) =>
        every <= TimeSpan.Zero ? double.PositiveInfinity : from + every.TotalSeconds * (0.75 + 0.5 * _random.NextDouble());

    private void Start(MemberSlot slot)
    {
        if (slot.Current != null) Retire(slot);
        slot.Starts++;
        slot.Current = new MemberProcess(slot, _o, _servicePort, slot.Log, (p, message) => Violation($"{p.Slot.Name} (pid {p.Pid}) reported: {message}"));
    }

    /// <summary>Adds an ended incarnation's counts to its slot's.</summary>
    private static void Retire(MemberSlot slot)
    {
        if (slot.Current is not { } p) return;
        slot.AckedBefore += p.Acked;
        slot.CompletedBefore += p.Completed;
        slot.FailedBefore += p.Failed;
        slot.Current = null;
    }

    private List<MemberSlot> Live => _slots.Where(s => s.Live).ToList();

    private void KillOne()
    {
        List<MemberSlot> live = Live;
        MemberSlot victim = live[_random.Next(live.Count)];
        MemberProcess p = victim.Current!;
        p.Kill();
        p.WaitForExit(TimeSpan.FromSeconds(10));
        double at = Now;
        Fault("kill", $"SIGKILL of {victim.Name} (pid {p.Pid}), alone");
        // Sometimes it comes back before the group noticed it was gone, sometimes after.
        Thread.Sleep(TimeSpan.FromSeconds(_random.NextDouble() * 3));
        Start(victim);
        if (WaitSettled($"{victim.Name} restarts on its data directory and rejoins"))
            Fault("restart", $"{victim.Name} back (pid {victim.Current!.Pid}), joined in {victim.Current.JoinMs / 1000:F1} s", Now - at);
    }

    private void WholeGroupCrash()
    {
        List<MemberSlot> members = Live;
        foreach (MemberSlot s in members) s.Current!.Kill();
        foreach (MemberSlot s in members) s.Current!.WaitForExit(TimeSpan.FromSeconds(10));
        double at = Now;
        Fault("crash", $"SIGKILL of every member at once: {string.Join(", ", members.Select(s => $"{s.Name} (pid {s.Current!.Pid})"))}");
        List<MemberSlot> order = members.OrderBy(_ => _random.Next()).ToList();
        foreach (MemberSlot s in order)
        {
            Start(s);
            Thread.Sleep(TimeSpan.FromSeconds(_random.NextDouble() * 0.5));
        }
        if (!WaitSettled("every member restarts and the group recovers its history")) return;
        Fault("crash-restart", $"all {order.Count} back, started in the order {string.Join(", ", order.Select(s => s.Name))}", Now - at);
        Check($"whole-group crash {_results.Faults.Count(f => f.Kind == "crash")}");
    }

    private bool ExtraJoins()
    {
        double at = Now;
        Start(_extra);
        if (!WaitSettled("the extra member joins")) return false;
        Fault("join", $"extra (pid {_extra.Current!.Pid}) joined in {_extra.Current.JoinMs / 1000:F1} s (history {_extra.Current.History})", Now - at);
        return true;
    }

    private void ExtraLeaves()
    {
        if (!_extra.Live) return; // killed meanwhile and restarted? then it is live; gone only after a failed start
        double at = Now;
        MemberProcess p = _extra.Current!;
        p.Stopping = true;
        p.Tell("leave");
        p.WaitForExit(_o.StepTimeout);
        if (!p.HasExited)
        {
            Hang($"the extra member (pid {p.Pid}) did not leave gracefully within {_o.StepTimeout.TotalSeconds:F0} s");
            p.Kill();
            return;
        }
        if (p.ExitCode != 0) Violation($"the extra member (pid {p.Pid}) exited with code {p.ExitCode} on a graceful leave");
        if (WaitSettled("the others install a view without the extra member"))
            Fault("leave", $"extra (pid {p.Pid}) left gracefully", Now - at);
    }

    /// <summary>
    /// A member that exited without being told (expelled after a false suspicion, or a crash of its
    /// own) is restarted on its directory like a killed one. An exit by the protocol's shutdown
    /// (code 3) is an event; any other exit code is a violation: the member program failed.
    /// </summary>
    private void HandleUnplannedExits()
    {
        foreach (MemberSlot s in _slots)
        {
            if (s.Current is not { HasExited: true, Stopping: false } p) continue;
            string why = p.ShutdownReason != null ? $"shut down by the protocol: {p.ShutdownReason}" : $"exit code {p.ExitCode}";
            p.Stopping = true; // seen: handled once
            Fault("unplanned-exit", $"{s.Name} (pid {p.Pid}) exited unasked: {why}");
            if (p.ExitCode != 3) Violation($"{s.Name} (pid {p.Pid}) exited with code {p.ExitCode}, unasked (its log: logs/{Path.GetFileName(s.DataDirectory)}.log)");
            if (s == _extra && p.ExitCode != 3) continue;
            Start(s);
        }
    }

    /// <summary>
    /// Every member that should run (started and not told to stop: one that exited unasked is
    /// restarted first) is running and joined, and each one's latest view holds exactly them.
    /// </summary>
    private bool WaitSettled(string what) => WaitUntil(what, () =>
    {
        List<MemberSlot> wanted = _slots.Where(s => s.Current is { Stopping: false }).ToList();
        return wanted.All(s => !s.Current!.HasExited && s.Current.Joined && s.Current.ViewSize == wanted.Count);
    });

    private bool WaitUntil(string what, Func<bool> done)
    {
        var clock = Stopwatch.StartNew();
        int exitsBefore = _results.Faults.Count(f => f.Kind == "unplanned-exit");
        while (true)
        {
            // First: a member that died meanwhile is restarted, never silently left out of "done".
            HandleUnplannedExits();
            if (done()) return true;
            if (clock.Elapsed > _o.StepTimeout)
            {
                List<FaultEvent> exits = _results.Faults.Where(f => f.Kind == "unplanned-exit").Skip(exitsBefore).ToList();
                Hang($"not within {_o.StepTimeout.TotalSeconds:F0} s: {what}; " + string.Join("; ", _slots.Where(s => s.Current != null).Select(Describe)) +
                     (exits.Count > 0 ? $"; {exits.Count} unplanned exits meanwhile, the first: {exits[0].Detail}; the last: {exits[^1].Detail}" : "") +
                     $" (the members' output: {Path.Combine(_o.Out, "logs")})");
                return false;
            }
            Thread.Sleep(50);
        }
    }

    private static string Describe(MemberSlot s)
    {
        MemberProcess p = s.Current!;
        return $"{s.Name} pid {p.Pid}: {(p.HasExited ? $"exited ({p.ExitCode})" : "running")}, {(p.Joined ? "joined" : "not joined")}, view of {p.ViewSize}, history {p.History}, acked {p.Acked}, failed {p.Failed}{(p.LastFailure != null ? $" (last: {p.LastFailure})" : "")}";
    }

    /// <summary>
    /// The durability check. Every running member stops issuing and finishes what it has in flight;
    /// once all hold histories of the same length, each writes its <see cref="Ledger"/>, and:
    /// every member's history is the same (length and hash chain); no operation is in it twice and
    /// each sender's sequence numbers grow along it (FIFO per sender, across its restarts), as each
    /// ledger saw while appending; the history of the previous check is a prefix of it (its marks
    /// are among this one's: nothing lost or reordered since, through the crashes); and every
    /// operation that any incarnation of any member recorded as acknowledged is in it.
    /// </summary>
    private void Check(string after, bool resume = true)
    {
        // Every member is compared: one that an expulsion took out meanwhile is back first.
        if (!WaitSettled($"every member runs and is joined before the check after {after}")) return;
        double at = Now;
        var check = new CheckResult { T = at, After = after };
        List<MemberSlot> live = Live;
        check.MembersCompared = live.Count;

        Parallel.ForEach(live, s =>
        {
            var paused = s.Current!.Ask("pause", "paused", _o.StepTimeout);
            string? problem = paused == null ? $"{s.Name} did not pause"
                : (int?)paused["inFlight"] is > 0 and int n ? $"{s.Name} still had {n} operations in flight 60 s after the load paused (a hang)"
                : null;
            if (problem != null) lock (check.Problems) check.Problems.Add(problem);
        });
        // A SafeSend is delivered at its sender first and at the others a moment later: wait until all hold as many.
        var settle = Stopwatch.StartNew();
        long[] lengths = [];
        while (settle.Elapsed < TimeSpan.FromSeconds(30))
        {
            lengths = live.Select(s => (long?)s.Current!.Ask("status", "status", TimeSpan.FromSeconds(10))?["history"] ?? -1).ToArray();
            if (lengths.Distinct().Count() == 1) break;
            Thread.Sleep(200);
        }
        if (lengths.Distinct().Count() != 1)
            check.Problems.Add($"the members' histories did not reach one length within 30 s of the pause: {string.Join(", ", live.Zip(lengths, (s, n) => $"{s.Name} {n}"))}");

        // Read after the pause: every acknowledgement recorded by then was delivered at its sender before the dump below.
        var acked = new List<(int Member, long Seq, string Where)>();
        foreach (MemberSlot s in _slots.Where(s => s.Starts > 0)) acked.AddRange(ReadAcked(s));
        check.AcknowledgedChecked = acked.Count;

        var histories = new List<(MemberSlot Slot, Ledger History)>();
        int k = _results.Checks.Count + 1;
        foreach (MemberSlot s in live)
        {
            string path = Path.GetFullPath(Path.Combine(_dumps, $"check-{k}-{Path.GetFileName(s.DataDirectory)}.ledger"));
            if (s.Current!.Ask("dump " + path, "dumped", _o.StepTimeout) == null || !File.Exists(path))
            {
                check.Problems.Add($"{s.Name} did not write its history");
                continue;
            }
            histories.Add((s, Ledger.Deserialize(File.ReadAllBytes(path))));
        }

        if (k == 1) InjectViolation(acked, histories);
        if (histories.Count > 0)
        {
            Ledger reference = histories.MaxBy(h => h.History.Count).History;
            check.HistoryLength = reference.Count;
            check.PreviousHistoryLength = _previousHistory.Count;
            foreach (var (slot, history) in histories)
            {
                if (!history.SameHistory(reference))
                {
                    check.Problems.Add($"{slot.Name}'s history differs from the longest one ({history.Count} against {reference.Count} operations, " +
                        $"first apart within the first {history.FirstMarkDifference(reference)})");
                }
                // Duplicates and operations out of their sender's order, as each member's ledger saw them.
                foreach (string problem in history.Problems) check.Problems.Add($"{slot.Name}: {problem}");
                if (history.ProblemCount > history.Problems.Count) check.Problems.Add($"{slot.Name}: {history.ProblemCount - history.Problems.Count} more such problems");
            }
            if (reference.WhereNotPrefix(_previousHistory) is string lost)
                check.Problems.Add($"the history of the previous check ({_previousHistory.Count} operations) is not a prefix of this one: {lost}");
            var missing = acked.Where(a => !reference.Contains(a.Member, a.Seq)).ToList();
            if (missing.Count > 0)
            {
                check.Problems.Add($"{missing.Count} acknowledged operations are missing from the recovered history, e.g. " +
                    string.Join(", ", missing.Take(5).Select(m => $"{Ledger.Op(m.Member, m.Seq)} ({m.Where})")));
            }
            _previousHistory = reference;
        }

        if (resume) foreach (MemberSlot s in live) s.Current!.Tell("resume");
        check.Passed = check.Problems.Count == 0;
        lock (_resultsLock) _results.Checks.Add(check);
        foreach (string problem in check.Problems) Violation($"check after {after}: {problem}");
        Fault("check", check.Passed
            ? $"after {after}: passed: {check.MembersCompared} members hold one history of {check.HistoryLength} operations, with each of the {check.AcknowledgedChecked} acknowledged ones in it once"
            : $"after {after}: FAILED, {check.Problems.Count} problems (above); {check.MembersCompared} members, longest history {check.HistoryLength} operations, {check.AcknowledgedChecked} acknowledged", Now - at);
    }

    /// <summary>--inject-violation: plants what the checker must find, in its input only (the members and their files are untouched).</summary>
    private void InjectViolation(List<(int Member, long Seq, string Where)> acked, List<(MemberSlot Slot, Ledger History)> histories)
    {
        switch (_o.InjectViolation)
        {
            case "missing-ack":
                acked.Add((0, Protocol.SeqBase + Protocol.SeqBase / 2 - 1, "planted by --inject-violation missing-ack"));
                Say("--inject-violation: an acknowledgement of an operation never sent is planted in this check");
                break;
            case "duplicate" when histories.Count > 0 && Enumerable.Range(0, _o.Members).FirstOrDefault(m => histories[^1].History.Last(m) != null, -1) is int member and >= 0:
                histories[^1].History.Append(member, histories[^1].History.Last(member)!.Value);
                Say($"--inject-violation: {histories[^1].Slot.Name}'s history as read repeats member {member}'s last operation at its end");
                break;
        }
    }

    /// <summary>The slot's acknowledgements; a last line cut short by a SIGKILL (no newline) is not one.</summary>
    private static IEnumerable<(int Member, long Seq, string Where)> ReadAcked(MemberSlot slot)
    {
        string path = Path.Combine(slot.DataDirectory, "acked.txt");
        if (!File.Exists(path)) yield break;
        string text;
        using (var f = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.ReadWrite))
        using (var r = new StreamReader(f))
            text = r.ReadToEnd();
        int end = text.LastIndexOf('\n');
        if (end < 0) yield break;
        foreach (string line in text[..end].Split('\n'))
        {
            if (Parse(line) is { } op) yield return (op.Member, op.Seq, $"acknowledged by {slot.Name}");
        }
    }

    private static (int Member, long Seq)? Parse(string line)
    {
        int space = line.IndexOf(' ');
        return space > 0 && int.TryParse(line.AsSpan(0, space), NumberStyles.Integer, CultureInfo.InvariantCulture, out int member)
               && long.TryParse(line.AsSpan(space + 1), NumberStyles.Integer, CultureInfo.InvariantCulture, out long seq)
            ? (member, seq)
            : null;
    }

    /// <summary>
    /// At the end: every member leaves gracefully, within 30 s for all of them, then whatever is left
    /// is killed (after a hang, members still inside Join do not read their commands).
    /// </summary>
    private void Stop()
    {
        List<MemberSlot> live = Live;
        foreach (MemberSlot s in live)
        {
            s.Current!.Stopping = true;
            s.Current.Tell("leave");
        }
        var deadline = Stopwatch.StartNew();
        foreach (MemberSlot s in live)
        {
            s.Current!.WaitForExit(TimeSpan.FromSeconds(Math.Max(0, 30 - deadline.Elapsed.TotalSeconds)));
            if (!s.Current.HasExited) Say($"{s.Name} (pid {s.Current.Pid}) had not left 30 s after the end; killed");
            s.Current.Kill();
        }
    }

    /// <summary>Every second: each member's RSS, data directory and SafeSend log, and the group's throughput.</summary>
    private void Sample(CancellationToken stop)
    {
        double lastT = Now;
        long lastAcked = 0, lastCompleted = 0;
        while (!stop.WaitHandle.WaitOne(TimeSpan.FromSeconds(1)))
        {
            double t = Now;
            var samples = new List<ProcessSample>();
            long acked = 0, completed = 0;
            foreach (MemberSlot s in _slots)
            {
                if (s.Starts == 0) continue;
                MemberProcess? p = s.Current;
                acked += s.AckedBefore + (p?.Acked ?? 0);
                completed += s.CompletedBefore + (p?.Completed ?? 0);
                int? pid = p is { HasExited: false } ? p.Pid : null;
                List<ProcFs.FileBytes> files = ProcFs.Files(s.DataDirectory); // one listing for the four sums
                samples.Add(new ProcessSample
                {
                    T = Math.Round(t, 2),
                    Process = s.Name,
                    Pid = pid,
                    RssBytes = pid is int id ? ProcFs.RssBytes(id) : null,
                    HeapBytes = pid is null ? null : p!.HeapBytes,
                    Gen2Collections = pid is null ? null : p!.Gen2Collections,
                    DiskBytes = files.Where(f => !Member.HarnessFile(f.Name)).Sum(f => f.Allocated),
                    LogBytes = files.Where(f => ProcFs.IsSafeSendLogSegment(f.Name)).Sum(f => f.Bytes),
                    SpareBytes = files.Where(f => ProcFs.IsSpareSegment(f.Name)).Sum(f => f.Allocated),
                    CheckpointBytes = files.Where(f => f.Name.Contains(".checkpoint", StringComparison.Ordinal)).Sum(f => f.Bytes),
                });
            }
            double dt = Math.Max(1e-3, t - lastT);
            lock (_resultsLock)
            {
                _results.Samples.AddRange(samples);
                _results.Throughput.Add(new ThroughputSample
                {
                    T = Math.Round(t, 2),
                    AckedPerSecond = Math.Round(Math.Max(0, acked - lastAcked) / dt, 1),
                    CompletedPerSecond = Math.Round(Math.Max(0, completed - lastCompleted) / dt, 1),
                    AckedTotal = acked,
                });
            }
            (lastT, lastAcked, lastCompleted) = (t, Math.Max(acked, lastAcked), Math.Max(completed, lastCompleted));
        }
    }

    private void Summarize(double loadStart)
    {
        SoakSummary m = _results.Summary;
        m.AcknowledgedOperations = _slots.Sum(s => (long)ReadAcked(s).Count());
        foreach (MemberSlot s in _slots) Retire(s);
        m.CompletedOperations = _slots.Sum(s => s.CompletedBefore);
        m.FailedOperations = _slots.Sum(s => s.FailedBefore);
        m.Kills = _results.Faults.Count(f => f.Kind == "kill");
        m.WholeGroupCrashes = _results.Faults.Count(f => f.Kind == "crash");
        m.Joins = _results.Faults.Count(f => f.Kind == "join");
        m.Leaves = _results.Faults.Count(f => f.Kind == "leave");
        m.UnplannedExits = _results.Faults.Count(f => f.Kind == "unplanned-exit");
        m.Checks = _results.Checks.Count;
        m.ChecksPassed = _results.Checks.Count(c => c.Passed);
        m.Violations = _results.Violations.Count;
        m.AcknowledgedPerSecond = Math.Round(m.AcknowledgedOperations / Math.Max(1e-3, _results.LoadSeconds), 1);
        double tail = Math.Min(_results.LoadSeconds, _o.Tail?.TotalSeconds ?? 0.25 * _results.LoadSeconds);
        m.TailFromSeconds = Math.Round(loadStart + _results.LoadSeconds - tail, 1);
        foreach (string name in _results.Processes)
        {
            var window = _results.Samples.Where(x => x.Process == name && x.T >= m.TailFromSeconds && x.T <= loadStart + _results.LoadSeconds).ToList();
            if (window.Count == 0) continue;
            long[] rss = window.Where(x => x.RssBytes != null).Select(x => x.RssBytes!.Value).Order().ToArray();
            long[] disk = window.Select(x => x.DiskBytes).Order().ToArray();
            m.Processes.Add(new ProcessTail
            {
                Process = name,
                Samples = window.Count,
                RssMedian = rss.Length > 0 ? rss[rss.Length / 2] : 0,
                RssMax = rss.Length > 0 ? rss[^1] : 0,
                DiskMedian = disk[disk.Length / 2],
                DiskMax = disk[^1],
                LogMedian = window.Select(x => x.LogBytes).Order().ElementAt(window.Count / 2),
                LogMax = window.Max(x => x.LogBytes),
                RssMaxOverMedian = rss.Length > 0 ? Math.Round((double)rss[^1] / rss[rss.Length / 2], 3) : 0,
                DiskMaxOverMedian = Math.Round((double)disk[^1] / Math.Max(1, disk[disk.Length / 2]), 3),
            });
        }
        foreach (string name in _results.Processes)
        {
            var all = _results.Samples.Where(x => x.Process == name).ToList();
            if (all.Count == 0) continue;
            ProcessSample largest = all.MaxBy(x => x.DiskBytes)!;
            m.RunMaxima.Add(new ProcessRunMax
            {
                Process = name,
                Samples = all.Count,
                RssMax = all.Max(x => x.RssBytes ?? 0),
                DiskMax = largest.DiskBytes,
                LogMax = all.Max(x => x.LogBytes),
                CheckpointMax = all.Max(x => x.CheckpointBytes),
                SpareAtDiskMax = largest.SpareBytes,
                OtherAtDiskMax = largest.DiskBytes - largest.LogBytes - largest.SpareBytes - largest.CheckpointBytes,
            });
        }
    }

    private void Write()
    {
        string json = Path.Combine(_o.Out, "results.json"), html = Path.Combine(_o.Out, "report.html");
        lock (_resultsLock)
        {
            File.WriteAllText(json, _results.ToJson());
            File.WriteAllText(html, HtmlReport.Render(_results));
        }
    }

    private void PrintSummary()
    {
        SoakSummary m = _results.Summary;
        Console.WriteLine($"Isis.Soak: summary of {_results.LoadSeconds:F0} s of load ({_results.WallSeconds:F0} s in all), {_o.Members} members, seed {_o.Seed}");
        Console.WriteLine($"  operations acknowledged: {m.AcknowledgedOperations} SafeSend/SafeQuery (the members' acknowledgement files); {m.CompletedOperations} operations completed in all, {m.FailedOperations} failed (not acknowledged)");
        Console.WriteLine($"  faults: {m.Kills} kills, {m.WholeGroupCrashes} whole-group crashes, {m.Joins} joins, {m.Leaves} leaves, {m.UnplannedExits} unplanned exits");
        Console.WriteLine($"  checks: {m.ChecksPassed} of {m.Checks} passed; violations: {m.Violations}");
        Console.WriteLine($"  acknowledged SafeSend/SafeQuery per second over the load: {m.AcknowledgedPerSecond:F1}");
        Console.WriteLine($"  per process from {m.TailFromSeconds:F0} s to the end of the load (disk: what the library's files take, spare log segments included; log: the live SafeSend log):");
        foreach (ProcessTail p in m.Processes)
            Console.WriteLine($"    {p.Process,-9} RSS median {Mib(p.RssMedian)} max {Mib(p.RssMax)} ({p.RssMaxOverMedian:F2}x); disk median {Mib(p.DiskMedian)} max {Mib(p.DiskMax)} ({p.DiskMaxOverMedian:F2}x); SafeSend log median {Mib(p.LogMedian)} max {Mib(p.LogMax)} ({p.Samples} samples)");
        Console.WriteLine("  per process over the whole run (the largest sample of each):");
        foreach (ProcessRunMax p in m.RunMaxima)
            Console.WriteLine($"    {p.Process,-9} RSS max {Mib(p.RssMax)}; disk max {Mib(p.DiskMax)} (spare log segments then {Mib(p.SpareAtDiskMax)}, the rest beyond the live log and checkpoints {Mib(p.OtherAtDiskMax)}); SafeSend log max {Mib(p.LogMax)}; checkpoints max {Mib(p.CheckpointMax)} ({p.Samples} samples)");
        foreach (string v in _results.Violations) Console.WriteLine("  VIOLATION: " + v);
        Console.WriteLine($"  results: {Path.Combine(_o.Out, "results.json")}; report: {Path.Combine(_o.Out, "report.html")}; member logs: {Path.Combine(_o.Out, "logs")}");
    }

    internal static string Mib(long bytes) => (bytes / (1024.0 * 1024.0)).ToString("F1", CultureInfo.InvariantCulture) + " MiB";

    private void Fault(string kind, string detail, double? seconds = null)
    {
        var e = new FaultEvent { T = Math.Round(Now, 2), Kind = kind, Detail = detail, Seconds = seconds is double s ? Math.Round(s, 2) : null };
        lock (_resultsLock) _results.Faults.Add(e);
        Say($"{kind}: {detail}{(seconds is double d ? $" ({d:F1} s)" : "")}");
    }

    private void Violation(string message)
    {
        lock (_resultsLock) _results.Violations.Add(message);
        Console.WriteLine($"[{Now,7:F1} s] VIOLATION: {message}");
    }

    private void Hang(string message)
    {
        Violation("hang: " + message);
        _stopped = true;
    }

    private void Say(string line) => Console.WriteLine($"[{Now,7:F1} s] {line}");
}
