using System.Diagnostics;
using System.Globalization;
using Isis.Tools;

namespace Isis.Bench;

/// <summary>
/// The member processes of one scale run and the steps that drive them (see <see cref="ScaleCoordinator"/>).
/// The members' report lines arrive on thread-pool threads; everything they change is guarded by
/// <see cref="_sync"/>, which the waiting main thread sleeps on.
/// </summary>
internal sealed class ScaleGroup : IDisposable
{
    private readonly BenchOptions _o;
    private readonly ScaleRun _run;
    private readonly object _sync = new();
    private readonly List<ScaleChild> _children = [];
    private readonly List<string> _unexpectedLeavers = [];
    private IsisRuntime? _service;
    private ScaleChild? _victim;
    private string? _cancelled;

    public ScaleGroup(BenchOptions o, ScaleRun run)
    {
        _o = o;
        _run = run;
    }

    private TimeSpan WaitLimit => TimeSpan.FromSeconds(_o.TimeoutSeconds);

    /// <summary>Ends the run's current wait (Ctrl-C, SIGTERM).</summary>
    public void Cancel(string reason)
    {
        lock (_sync)
        {
            _cancelled ??= reason;
            Monitor.PulseAll(_sync);
        }
    }

    public int Run()
    {
        int servicePort = LoopbackPorts.Next();
        Coordinator.FreshServiceData(servicePort);
        _service = new IsisRuntime(Coordinator.Options(MembershipServiceMode.Host, servicePort, _o));
        _service.Start();
        Console.WriteLine($"  membership service on 127.0.0.1:{servicePort}, hosted by this process (pid {Environment.ProcessId})");

        // 1. Start every member as fast as Process.Start allows.
        int n = _o.Members;
        int hardLimit = 4 * _o.TimeoutSeconds + 2 * _o.IdleSeconds + 60; // members exit by themselves after this
        long firstStart = Stopwatch.GetTimestamp(), lastStart = firstStart;
        for (int i = 0; i < n; i++)
        {
            lock (_sync)
            {
                if (_cancelled != null) return Fail($"interrupted ({_cancelled}) after starting {i} of {n} members");
            }
            lastStart = Stopwatch.GetTimestamp();
            var child = new ScaleChild(i, lastStart);
            lock (_sync) _children.Add(child);
            Start(child, servicePort, hardLimit);
        }
        _run.StartSpanMs = ScaleCoordinator.Ms(lastStart - firstStart);
        Console.WriteLine($"  started {n} member processes in {_run.StartSpanMs:F0} ms");

        // 2. Every member installs a view with all N members.
        if (!WaitAll($"install a view with all {n} members", c => c.FormedAt != 0, _children, showProgress: true)) return 1;
        _run.RssAfterFormMb = Distribution.Of("VmRSS after forming", "MB", Rss());
        // A member's view handler may report the full view just before its Join call returns.
        if (!WaitAll("return from Join", c => c.JoinedAt != 0, _children)) return 1;
        lock (_sync)
        {
            _run.FormFromFirstStartMs = ScaleCoordinator.Ms(_children.Max(c => c.FormedAt) - firstStart);
            _run.FormFromLastStartMs = ScaleCoordinator.Ms(_children.Max(c => c.FormedAt) - lastStart);
            _run.FormedMs = Distribution.Of("formed, per member, from the first start", "ms", _children.Select(c => ScaleCoordinator.Ms(c.FormedAt - firstStart)));
            _run.StartToMainMs = Distribution.Of("process start -> Main", "ms", _children.Select(c => ScaleCoordinator.Ms(c.MainAt - c.StartedAt)));
            _run.MainToJoinedMs = Distribution.Of("Main -> Join returned", "ms", _children.Select(c => ScaleCoordinator.Ms(c.JoinedAt - c.MainAt)));
            _run.ViewsToForm = Distribution.Of("views installed until the full view", "views", _children.Select(c => (double)c.ViewsToForm));
            _run.FormedViewId = _children.Max(c => c.FormedViewId);
        }
        Console.WriteLine($"  group formed: {_run.FormFromFirstStartMs:F0} ms from the first start, {_run.FormFromLastStartMs:F0} ms from the last");

        // 3. Idle: the formed group's CPU use in two windows of --idle-seconds, the first right after
        //    forming (start-up work still finishing: tiered JIT, the last flushes) and the second steady.
        if (!RequestStats("report stats after forming")) return 1;
        _run.HeapAfterFormMb = Distribution.Of("managed heap after forming (live, after a full GC)", "MB", _children.Select(c => Long(c.Stats!, "heap") / 1e6));
        _run.GcCommittedAfterFormMb = Distribution.Of("GC heap committed after forming (after that GC)", "MB", _children.Select(c => Long(c.Stats!, "committed") / 1e6));
        if (IdleWindow("first") is not { } settling) return 1;
        _run.IdleCpuFirstWindowPercentPerMember = settling.PerMember;
        Dictionary<ScaleChild, Dictionary<string, string>> beforeIdle = _children.ToDictionary(c => c, c => c.Stats!);
        if (IdleWindow("second") is not { } steady) return 1;
        _run.IdleCpuPercentPerMember = steady.PerMember;
        _run.IdleCpuPercentAllMembers = steady.AllMembers;
        _run.IdleCpuPercentParent = steady.Parent;
        _run.IdleDatagramsReceivedPerSecond = Distribution.Of("datagrams received per member per second, idle", "1/s", _children.Select(c =>
        {
            double dt = ScaleCoordinator.Ms(Long(c.Stats!, "at") - Long(beforeIdle[c], "at")) / 1000;
            return dt > 0 ? (Long(c.Stats!, "datagramsReceived") - Long(beforeIdle[c], "datagramsReceived")) / dt : 0;
        }));

        // 4. Every member Sends K messages; every member must deliver all N x K, FIFO per sender.
        _run.DeliveriesPerMember = (long)n * _o.Sends;
        long sendAt = Stopwatch.GetTimestamp();
        foreach (ScaleChild c in _children) Command(c, "send");
        if (!WaitAll($"deliver all {_run.DeliveriesPerMember} messages", c => c.DeliveredAt != 0, _children, onTimeout: AskStatus)) return 1;
        List<ScaleChild> badFifo;
        lock (_sync) badFifo = _children.Where(c => !c.FifoOk).ToList();
        if (badFifo.Count > 0) return Fail($"members {Names(badFifo)} delivered out of FIFO order");
        lock (_sync)
        {
            _run.SendsAllDeliveredMs = ScaleCoordinator.Ms(_children.Max(c => c.DeliveredAt) - sendAt);
            _run.SendsDeliveredMs = Distribution.Of("sends: all delivered, per member", "ms", _children.Select(c => ScaleCoordinator.Ms(c.DeliveredAt - sendAt)));
        }
        _run.RssAfterSendsMb = Distribution.Of("VmRSS after the Sends", "MB", Rss());
        if (!RequestStats("report stats after the Sends")) return 1;
        _run.HeapAfterSendsMb = Distribution.Of("managed heap after the Sends (live, after a full GC)", "MB", _children.Select(c => Long(c.Stats!, "heap") / 1e6));
        _run.GcCommittedAfterSendsMb = Distribution.Of("GC heap committed after the Sends (after that GC)", "MB", _children.Select(c => Long(c.Stats!, "committed") / 1e6));
        _run.PeakRssMb = Distribution.Of("VmHWM (peak RSS) after the Sends", "MB", Rss("VmHWM"));
        _run.RssAfterGcMb = Distribution.Of("VmRSS after the Sends and a full GC", "MB", Rss());
        Console.WriteLine($"  Sends: every member delivered {_run.DeliveriesPerMember} within {_run.SendsAllDeliveredMs:F0} ms");

        // 5. SIGKILL one member in the middle of the view (never the oldest), then every survivor installs the view without it.
        ScaleChild victim;
        List<ScaleChild> survivors;
        lock (_sync)
        {
            if (_children.FirstOrDefault(c => c.FormedRank == n / 2) is not { } middle)
                return Fail($"no member reported rank {n / 2} in the view of all {n} members");
            victim = middle;
            survivors = _children.Where(c => c != victim).ToList();
            _victim = victim;
            victim.Killed = true;
        }
        _run.KilledMember = victim.Index;
        _run.KilledRank = victim.FormedRank;
        long killAt = Stopwatch.GetTimestamp();
        victim.Process.Kill(); // SIGKILL
        victim.Process.WaitForExit(5_000);
        Console.WriteLine($"  SIGKILLed member {victim.Index} (pid {victim.Pid}, rank {victim.FormedRank}, {victim.Address})");
        if (!WaitAll($"install a view without member {victim.Index}", c => c.GoneAt != 0, survivors)) return 1;
        List<ScaleChild> wrongSize;
        lock (_sync)
        {
            wrongSize = survivors.Where(c => c.GoneViewMembers != n - 1).ToList();
            _run.KillToViewMs = Distribution.Of("SIGKILL -> view without it, per survivor", "ms", survivors.Select(c => ScaleCoordinator.Ms(c.GoneAt - killAt)));
        }
        if (wrongSize.Count > 0) return Fail($"members {Names(wrongSize)} installed a view without member {victim.Index} that does not hold the other {n - 1}");
        Console.WriteLine($"  every survivor installed the view without it {_run.KillToViewMs.Max:F0} ms after the kill");

        // 6. Orderly end: every survivor shuts its runtime down; whatever does not exit in time is killed by KillAll.
        foreach (ScaleChild c in survivors) Command(c, "quit");
        var quitting = Stopwatch.StartNew();
        foreach (ScaleChild c in survivors) c.Process.WaitForExit(TimeSpan.FromSeconds(Math.Max(0.1, 15 - quitting.Elapsed.TotalSeconds)));
        return 0;
    }

    private void Start(ScaleChild child, int servicePort, int hardLimit)
    {
        var (host, dll) = ToolProcess.SelfCommand();
        var psi = new ProcessStartInfo(host)
        {
            UseShellExecute = false,
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        if (dll != null) psi.ArgumentList.Add(dll);
        foreach (string a in _o.ScaleMemberArguments(child.Index, servicePort, hardLimit)) psi.ArgumentList.Add(a);
        var p = new Process { StartInfo = psi };
        p.OutputDataReceived += (_, e) => { if (e.Data != null) OnLine(child, e.Data); };
        p.ErrorDataReceived += (_, e) =>
        {
            if (e.Data == null) return;
            lock (_sync) child.Remember(e.Data);
            Console.Error.WriteLine($"[member {child.Index}] {e.Data}");
        };
        p.Start();
        child.Process = p;
        child.Pid = p.Id;
        p.BeginOutputReadLine();
        p.BeginErrorReadLine();
    }

    /// <summary>One line of a member's stdout: "@scale kind key=value ...", anything else is echoed.</summary>
    private void OnLine(ScaleChild c, string line)
    {
        const string Prefix = "@scale ";
        if (!line.StartsWith(Prefix, StringComparison.Ordinal))
        {
            lock (_sync) c.Remember(line);
            Console.WriteLine($"[member {c.Index}] {line}");
            return;
        }
        string[] words = line[Prefix.Length..].Split(' ', StringSplitOptions.RemoveEmptyEntries);
        var f = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (string w in words.Skip(1))
        {
            int eq = w.IndexOf('=', StringComparison.Ordinal);
            if (eq > 0) f[w[..eq]] = w[(eq + 1)..];
        }
        lock (_sync)
        {
            switch (words.Length > 0 ? words[0] : "")
            {
                case "main":
                    c.MainAt = Long(f, "at");
                    break;
                case "runtime":
                    c.Address = f.GetValueOrDefault("address");
                    break;
                case "joined":
                    c.JoinedAt = Long(f, "at");
                    break;
                case "view":
                    OnView(c, f);
                    break;
                case "delivered":
                    c.FifoOk = f.GetValueOrDefault("fifo") == "ok";
                    c.DeliveredAt = Long(f, "at");
                    break;
                case "stats":
                    c.Stats = f;
                    c.StatsVersion++;
                    break;
                case "status":
                    c.Status = line[Prefix.Length..];
                    break;
                default:
                    c.Remember(line);
                    break;
            }
            Monitor.PulseAll(_sync);
        }
    }

    private void OnView(ScaleChild c, Dictionary<string, string> f)
    {
        int id = (int)Long(f, "id"), members = (int)Long(f, "members");
        c.Views++;
        c.LastViewId = id;
        c.LastViewMembers = members;
        if (members == _o.Members && c.FormedAt == 0)
        {
            c.FormedAt = Long(f, "at");
            c.FormedRank = (int)Long(f, "rank");
            c.FormedViewId = id;
            c.ViewsToForm = c.Views;
        }
        string leavers = f.GetValueOrDefault("leavers", "-");
        if (leavers == "-") return;
        string[] gone = leavers.Split(',');
        if (_victim?.Address is { } victim && gone.Contains(victim) && c.GoneAt == 0)
        {
            c.GoneAt = Long(f, "at");
            c.GoneViewMembers = members;
        }
        string[] others = [.. gone.Where(a => a != _victim?.Address)];
        if (others.Length > 0)
        {
            string who = string.Join(", ", others.Select(a => _children.FirstOrDefault(x => x.Address == a) is { } x ? $"member {x.Index} ({a})" : a));
            _unexpectedLeavers.Add($"member {c.Index} installed view {id} without {who}");
        }
    }

    /// <summary>
    /// Waits until <paramref name="done"/> holds for every member of <paramref name="who"/>, at most
    /// --timeout. Ends early, with a message naming the members concerned, if a member exits or is
    /// expelled unexpectedly or the run is interrupted.
    /// </summary>
    private bool WaitAll(string what, Func<ScaleChild, bool> done, IReadOnlyList<ScaleChild> who, bool showProgress = false, Action<List<ScaleChild>>? onTimeout = null)
    {
        var waited = Stopwatch.StartNew();
        TimeSpan nextProgress = TimeSpan.FromSeconds(2);
        List<ScaleChild> late;
        lock (_sync)
        {
            while (true)
            {
                if (who.All(done)) return true;
                if (_cancelled != null) return Failed($"interrupted ({_cancelled}) while waiting for every member to {what}");
                if (_unexpectedLeavers.Count > 0)
                {
                    return Failed($"a member was expelled while waiting for every member to {what} (raise --suspicion or --heartbeat-ms):\n    " +
                                  string.Join("\n    ", _unexpectedLeavers.Take(10)));
                }
                if (_children.FirstOrDefault(c => !c.Killed && c.Process.HasExited) is { } dead)
                {
                    return Failed($"member {dead.Index} (pid {dead.Pid}) exited with code {dead.Process.ExitCode} while waiting for every member to {what}; " +
                                  $"its last lines:\n    {string.Join("\n    ", dead.Tail)}");
                }
                if (waited.Elapsed > WaitLimit)
                {
                    late = who.Where(c => !done(c)).ToList();
                    break;
                }
                if (showProgress && waited.Elapsed >= nextProgress)
                {
                    nextProgress += TimeSpan.FromSeconds(2);
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"    {waited.Elapsed.TotalSeconds,5:F1} s: in Main {_children.Count(c => c.MainAt != 0)}, runtime up {_children.Count(c => c.Address != null)}, " +
                        $"joined {_children.Count(c => c.JoinedAt != 0)}, full view {_children.Count(c => c.FormedAt != 0)} of {_o.Members}; " +
                        $"largest view {_children.Max(c => c.LastViewMembers)}; load average {MachineFacts.LoadAverage()}"));
                }
                Monitor.Wait(_sync, 100);
            }
        }
        onTimeout?.Invoke(late);
        string detail;
        lock (_sync)
        {
            detail = string.Join("\n    ", late.Take(20).Select(c =>
                $"member {c.Index} (pid {c.Pid}): " + (c.MainAt == 0 ? "Main never ran" : c.Address == null ? "runtime not started" :
                    $"last view {c.LastViewId} of {c.LastViewMembers} members" + (c.Status != null ? $"; {c.Status}" : ""))));
        }
        return Failed($"after {WaitLimit.TotalSeconds:F0} s, {late.Count} of {who.Count} members did not {what}: {Names(late)}\n    {detail}");
    }

    /// <summary>Asks the late members where they stand, and waits up to 3 s for their answers.</summary>
    private void AskStatus(List<ScaleChild> late)
    {
        foreach (ScaleChild c in late.Take(20)) Command(c, "status");
        var wait = Stopwatch.StartNew();
        lock (_sync)
        {
            while (wait.Elapsed < TimeSpan.FromSeconds(3) && late.Take(20).Any(c => c.Status == null)) Monitor.Wait(_sync, 100);
        }
    }

    private bool RequestStats(string what)
    {
        Dictionary<ScaleChild, int> before;
        lock (_sync) before = _children.Where(c => !c.Killed).ToDictionary(c => c, c => c.StatsVersion);
        foreach (ScaleChild c in before.Keys) Command(c, "stats");
        return WaitAll(what, c => c.StatsVersion > before[c], [.. before.Keys]);
    }

    /// <summary>
    /// CPU time of every member (user + system, /proc/PID/stat) and of this process over --idle-seconds
    /// of doing nothing, then the members' stats (their datagram counters bracket the next window).
    /// </summary>
    private (Distribution PerMember, double AllMembers, double Parent)? IdleWindow(string which)
    {
        var before = _children.ToDictionary(c => c, c => ProcFile.CpuTicks(c.Pid));
        long parentBefore = ProcFile.CpuTicks(Environment.ProcessId);
        var idle = Stopwatch.StartNew();
        if (!Idle(TimeSpan.FromSeconds(_o.IdleSeconds))) return null;
        double seconds = idle.Elapsed.TotalSeconds;
        var cpu = _children.Select(c => (ProcFile.CpuTicks(c.Pid) - before[c]) / ProcFile.ClockTicksPerSecond / seconds * 100).ToList();
        double parent = (ProcFile.CpuTicks(Environment.ProcessId) - parentBefore) / ProcFile.ClockTicksPerSecond / seconds * 100;
        var perMember = Distribution.Of($"idle CPU per member, {which} {_o.IdleSeconds} s after forming", "% of a core", cpu);
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"  idle, {which} {seconds:F1} s: CPU per member {perMember.Median:F1} % of a core median, all members {cpu.Sum():F0} %, this process {parent:F1} %; load average {MachineFacts.LoadAverage()}"));
        if (!RequestStats($"report stats after the {which} idle window")) return null;
        return (perMember, cpu.Sum(), parent);
    }

    /// <summary>Sleeps, still noticing members that exit or get expelled.</summary>
    private bool Idle(TimeSpan span)
    {
        var until = Stopwatch.StartNew();
        return WaitAll("stay in the group while idle", _ => until.Elapsed >= span, [.. _children.Take(1)]);
    }

    /// <summary>A memory figure of every member still running, from /proc/PID/status, in MB.</summary>
    private List<double> Rss(string field = "VmRSS")
    {
        List<ScaleChild> alive;
        lock (_sync) alive = _children.Where(c => !c.Killed).ToList();
        return alive.Select(c => ProcFile.StatusKb(c.Pid, field)).Where(kb => kb > 0).Select(kb => kb * 1024 / 1e6).ToList();
    }

    private static void Command(ScaleChild c, string command)
    {
        try
        {
            c.Process.StandardInput.WriteLine(command);
            c.Process.StandardInput.Flush();
        }
        catch (IOException)
        {
            // it died; the waits report it
        }
    }

    private static long Long(Dictionary<string, string> f, string key) =>
        f.TryGetValue(key, out string? v) && long.TryParse(v, NumberStyles.Integer, CultureInfo.InvariantCulture, out long x) ? x : 0;

    private static string Names(IEnumerable<ScaleChild> children)
    {
        List<int> idx = children.Select(c => c.Index).ToList();
        return string.Join(", ", idx.Take(40)) + (idx.Count > 40 ? $" and {idx.Count - 40} more" : "");
    }

    /// <summary>Reports why the run failed; returns the exit code 1.</summary>
    private static int Fail(string message)
    {
        Console.Error.WriteLine("Isis.Bench scale: FAILED: " + message);
        return 1;
    }

    private static bool Failed(string message) => Fail(message) == 0;

    /// <summary>Kills every member still running and stops the membership service; safe to call more than once.</summary>
    public void KillAll()
    {
        List<ScaleChild> children;
        lock (_sync) children = [.. _children];
        foreach (ScaleChild c in children)
        {
            if (c.Process == null) continue;
            try
            {
                if (!c.Process.HasExited) c.Process.Kill(entireProcessTree: true);
            }
            catch (InvalidOperationException)
            {
                // it exited meanwhile, or never started
            }
        }
        foreach (ScaleChild c in children)
        {
            c.Process?.WaitForExit(2_000);
            c.Process?.Dispose();
        }
        lock (_sync) _children.Clear();
        _service?.Shutdown();
        _service = null;
    }

    public void Dispose() => KillAll();
}

/// <summary>What the parent knows about one member process.</summary>
internal sealed class ScaleChild(int index, long startedAt)
{
    public int Index { get; } = index;
    /// <summary>The parent's timestamp just before its Process.Start call.</summary>
    public long StartedAt { get; } = startedAt;
    public Process Process { get; set; } = null!;
    public int Pid { get; set; }
    public bool Killed { get; set; }

    public long MainAt { get; set; }
    public string? Address { get; set; }
    public long JoinedAt { get; set; }
    public int Views { get; set; }
    public int LastViewId { get; set; }
    public int LastViewMembers { get; set; }
    public long FormedAt { get; set; }
    public int FormedRank { get; set; } = -1;
    public int FormedViewId { get; set; }
    public int ViewsToForm { get; set; }
    public long DeliveredAt { get; set; }
    public bool FifoOk { get; set; }
    public long GoneAt { get; set; }
    public int GoneViewMembers { get; set; }
    public Dictionary<string, string>? Stats { get; set; }
    public int StatsVersion { get; set; }
    public string? Status { get; set; }

    /// <summary>The last lines this member printed that were not report lines (its errors).</summary>
    public Queue<string> Tail { get; } = new();

    public void Remember(string line)
    {
        Tail.Enqueue(line);
        while (Tail.Count > 20) Tail.Dequeue();
    }
}
