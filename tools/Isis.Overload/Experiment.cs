using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Text.Json;
using Isis.Tools;

namespace Isis.Overload;

/// <summary>
/// The parent: starts the three instances, runs the writer, the query threads and the /stats poller
/// from the start of the warm-up to the end of the after phase, starves one replica in between, and
/// writes the report. Every loop and every child process is bounded in time; the children are killed
/// when the experiment ends, whatever happens.
/// </summary>
internal sealed class Experiment
{
    private const int Key = 0;
    private static readonly TimeSpan StatsLimit = TimeSpan.FromSeconds(2);
    private static readonly TimeSpan WriteLimit = TimeSpan.FromSeconds(10);

    private readonly OverloadOptions _o;
    private readonly Stopwatch _clock = new();
    private readonly List<Instance> _instances = new();
    private readonly List<WriteRecord> _writes = new();
    private readonly List<List<ReadRecord>> _reads = new();
    private readonly List<StatsSample> _stats = new();
    private volatile bool _stop;
    private long _missedPeriods;
    private Instance _starved = null!, _writer = null!, _control = null!;

    private Experiment(OverloadOptions o) => _o = o;

    private double Now => _clock.Elapsed.TotalSeconds;

    public static int Run(OverloadOptions o)
    {
        var report = new OverloadReport { Settings = o };
        report.Begin(RunReport.DotnetRun("tools/Isis.Overload", Environment.GetCommandLineArgs().Skip(1)), o.Quick);
        Console.WriteLine($"Isis.Overload: load average {report.LoadAverageAtStart}; {o.WarmupSeconds} s warm-up, {o.OverloadSeconds} s overload, {o.AfterSeconds} s after" +
                          (o.Quick ? " (quick mode: a smoke test, its figures are not meaningful)" : ""));
        string membershipDirectory = Directory.CreateTempSubdirectory("isis-overload-").FullName;
        var experiment = new Experiment(o);
        try
        {
            experiment.Measure(report, membershipDirectory);
        }
        catch (Exception e) when (e is TimeoutException or InvalidOperationException or HttpRequestException)
        {
            report.Problems.Add(e.Message);
            Console.Error.WriteLine("Isis.Overload: " + e.Message);
        }
        finally
        {
            experiment._stop = true;
            foreach (Instance i in experiment._instances) i.Stop(TimeSpan.FromSeconds(5));
            foreach (Instance i in experiment._instances) i.Dispose();
            try
            {
                Directory.Delete(membershipDirectory, recursive: true);
            }
            catch (IOException)
            {
                // an instance still writing its directory file as it stopped: a temporary folder, left for the system
            }
        }
        report.End();
        Console.WriteLine(Report.Markdown(report));
        Write(report, o);
        foreach (string p in report.Problems) Console.Error.WriteLine("Isis.Overload: " + p);
        if (!report.Final.Converged) Console.Error.WriteLine("Isis.Overload: the instances did not end with the same value and history length");
        return report.Problems.Count == 0 && report.Final.Converged ? 0 : 1;
    }

    private void Measure(OverloadReport report, string membershipDirectory)
    {
        // CPUs: the starved replica and the hogs on the last CPU this process may use, the other two
        // instances on the rest; the parent is not pinned.
        int[] cpus = AllowedCpus();
        bool pin = _o.Pin && cpus.Length > 1 && Starvation.CanPin();
        string starvedCpus = pin ? cpus[^1].ToString(CultureInfo.InvariantCulture) : "";
        string otherCpus = pin ? string.Join(',', cpus[..^1]) : "";
        report.Stress.Pinned = pin;
        report.Stress.StarvedCpus = pin ? starvedCpus : "any";
        report.Stress.OtherCpus = pin ? otherCpus : "any";
        if (_o.Pin && !pin) report.Notes.Add(cpus.Length < 2 ? "one CPU only: the instances and the hogs are not pinned" : "taskset is not available: the instances and the hogs are not pinned");

        // One by one, each healthy (in the group) before the next starts: the first is the oldest member, the collection's sequencer.
        int membershipPort = LoopbackPorts.Next();
        for (int i = 0; i < 3; i++)
        {
            var instance = new Instance(i, !pin ? null : i == 2 ? starvedCpus : otherCpus, membershipPort, membershipDirectory, _o);
            _instances.Add(instance);
            instance.WaitHealthy(TimeSpan.FromSeconds(60));
        }
        InstanceStats[] initial = WaitForOneView();
        // The writer goes through the sequencer and the control replica is the other non-sequencer: in the
        // steady state the control and the starved replica receive each merge the same way, one hop after the writer's instance.
        _writer = _instances[0];
        _control = _instances[1];
        _starved = _instances[2];
        if (initial[2].Rank == 0) throw new InvalidOperationException("the last instance to join is the oldest member of the view: it would be the sequencer, which the experiment does not starve");
        string[] roles = ["sequencer (oldest member), writer's instance", "control reads", "starved"];
        foreach (Instance i in _instances)
        {
            InstanceStats s = initial[i.Index];
            report.Instances.Add(new InstanceInfo
            {
                Index = i.Index, Role = roles[i.Index], ProcessId = s.ProcessId, Url = i.Url, IsisAddress = s.IsisAddress, DataPort = s.DataPort,
                MembershipReplicaPort = s.MembershipReplicaPort, Rank = s.Rank, Cpus = i.Cpus ?? "any",
            });
            Console.WriteLine($"instance {i.Index}: {roles[i.Index]}, pid {s.ProcessId}, {i.Url}, Isis {s.IsisAddress}, rank {s.Rank}, CPUs {i.Cpus ?? "any"}");
        }
        int initialView = initial[0].ViewId;
        string starvedAddress = initial[2].IsisAddress;

        // The measurement: writer, readers and poller from now to the end of the after phase.
        _clock.Start();
        double[] cpuMarks = new double[4];
        cpuMarks[0] = CpuSeconds(_starved.ProcessId);
        var threads = new List<Thread> { new(WriterLoop) { Name = "writer", IsBackground = true }, new(StatsLoop) { Name = "stats", IsBackground = true } };
        for (int t = 0; t < _o.Threads + _o.ControlThreads; t++)
        {
            var mine = new List<ReadRecord>();
            _reads.Add(mine);
            int thread = t;
            bool starved = t < _o.Threads;
            threads.Add(new Thread(() => ReadLoop(thread, starved ? _starved : _control, starved, mine)) { Name = $"reader-{t}", IsBackground = true });
        }
        threads.ForEach(t => t.Start());

        SleepUntil(_o.WarmupSeconds);
        report.StarvedBefore = _starved.Stats(StatsLimit);
        cpuMarks[1] = CpuSeconds(_starved.ProcessId);
        report.OverloadStart = Now;
        Console.WriteLine($"{Now,6:F1} s: overload starts");
        Overload(report);
        report.OverloadEnd = Now;
        cpuMarks[2] = CpuSeconds(_starved.ProcessId);
        Console.WriteLine($"{Now,6:F1} s: overload ends");
        report.StarvedAtOverloadEnd = _starved.Stats(StatsLimit);

        SleepUntil(report.OverloadEnd + _o.AfterSeconds);
        _stop = true;
        threads.ForEach(t => t.Join());
        report.MeasurementEnd = Now;
        cpuMarks[3] = CpuSeconds(_starved.ProcessId);
        double[] lengths = [report.OverloadStart, report.OverloadEnd - report.OverloadStart, report.MeasurementEnd - report.OverloadEnd];
        report.Stress.StarvedCpuPercent = [.. Enumerable.Range(0, 3).Select(p => cpuMarks[p] < 0 || cpuMarks[p + 1] < 0 ? -1 : Math.Round(100 * (cpuMarks[p + 1] - cpuMarks[p]) / lengths[p], 1))];

        report.Final = Quiesce(out InstanceStats?[] final);
        report.StarvedAfter = final[2];
        if (report.StarvedBefore?.Runtime is { } before && report.StarvedAfter?.Runtime is { } after)
        {
            report.Flood.DroppedMalformedAtStarved = after.DroppedMalformed - before.DroppedMalformed;
            report.Flood.DatagramsReceivedAtStarved = after.DatagramsReceived - before.DatagramsReceived;
        }
        CollectViews(report, final, initialView, starvedAddress);
        Analysis.Fill(report, _o, _writes, [.. _reads.SelectMany(r => r)], _stats, _missedPeriods);
        report.Writer.Instance = _writer.Index;
    }

    /// <summary>Starves the last instance for the overload's length: nice, hogs on its CPU, the flood on its Isis socket; then undoes all three.</summary>
    private void Overload(OverloadReport report)
    {
        double end = Now + _o.OverloadSeconds;
        report.Stress.HogThreads = _o.Hogs;
        report.Stress.Nice = _o.Nice;
        if (_o.Nice > 0)
        {
            string? failed = Starvation.Renice(_starved.ProcessId, _o.Nice);
            report.Stress.ReniceApplied = failed == null;
            if (failed != null) report.Notes.Add(failed);
        }
        Process? hog = null;
        if (_o.Hogs > 0)
        {
            string[] hogArgs = [Instance.SelfDll, "hog", "--threads", _o.Hogs.ToString(CultureInfo.InvariantCulture), "--seconds", (_o.OverloadSeconds + 1).ToString(CultureInfo.InvariantCulture)];
            var psi = report.Stress.Pinned ? new ProcessStartInfo("taskset") : new ProcessStartInfo(Instance.Dotnet);
            foreach (string a in report.Stress.Pinned ? ["-c", report.Stress.StarvedCpus, Instance.Dotnet, .. hogArgs] : hogArgs) psi.ArgumentList.Add(a);
            psi.UseShellExecute = false;
            hog = Process.Start(psi);
        }
        UdpFlood? flood = null;
        InstanceStats? target = report.StarvedBefore ?? _starved.Stats(StatsLimit);
        if (_o.FloodRate > 0 && target is { DataPort: > 0 })
        {
            var endpoint = new IPEndPoint(IPAddress.Loopback, target.DataPort);
            flood = new UdpFlood(endpoint, _o.FloodRate, TimeSpan.FromSeconds(_o.OverloadSeconds), _o.Seed);
            report.Flood.Target = endpoint.ToString();
            report.Flood.RatePerSecond = _o.FloodRate;
            report.Flood.KernelReceiveBufferErrors = -UdpReceiveBufferErrors();
            flood.Start();
        }
        else if (_o.FloodRate > 0)
        {
            report.Problems.Add("the starved instance did not tell its Isis port before the overload: no flood");
        }

        SleepUntil(end);

        if (flood != null)
        {
            flood.Stop();
            report.Flood.DatagramsSent = flood.Sent;
            report.Flood.SendErrors = flood.SendErrors;
            report.Flood.Seconds = Math.Round(flood.Seconds, 3);
            report.Flood.KernelReceiveBufferErrors += UdpReceiveBufferErrors();
        }
        if (hog != null)
        {
            try
            {
                if (!hog.HasExited) hog.Kill(entireProcessTree: true);
            }
            catch (InvalidOperationException)
            {
                // it ran out of time by itself meanwhile
            }
            hog.WaitForExit(5000);
            hog.Dispose();
        }
        if (report.Stress.ReniceApplied && _starved.HasExited)
        {
            report.Notes.Add("the starved instance's process had stopped before the overload ended: nothing to renice back");
        }
        else if (report.Stress.ReniceApplied)
        {
            // Lowering the value back needs privileges (root or CAP_SYS_NICE): without them the starved instance keeps its nice value, and the report says so.
            string? failed = Starvation.Renice(_starved.ProcessId, 0);
            report.Stress.ReniceRestored = failed == null;
            if (failed != null) report.Notes.Add(failed + " (the starved instance kept its nice value after the overload)");
        }
    }

    /// <summary>One acknowledged update at a time, one per period: PUT value = 1, 2, 3, ... through the writer's instance.</summary>
    private void WriterLoop()
    {
        double period = _o.UpdateMs / 1000.0, next = 0;
        long value = 0;
        while (!_stop)
        {
            double now = Now;
            if (now < next)
            {
                Thread.Sleep(TimeSpan.FromSeconds(Math.Min(next - now, 0.1)));
                continue;
            }
            long missed = (long)((now - next) / period);
            _missedPeriods += missed;
            next += (missed + 1) * period;
            value++;
            double sent = Now;
            bool ok = Put(value);
            var record = new WriteRecord(value, sent, Now, ok);
            lock (_writes) _writes.Add(record);
        }
    }

    private bool Put(long value)
    {
        using var cancel = new CancellationTokenSource(WriteLimit);
        try
        {
            using HttpResponseMessage r = _writer.Http.Send(new HttpRequestMessage(HttpMethod.Put, $"/values/{Key}?value={value}"), cancel.Token);
            return r.IsSuccessStatusCode;
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            return false;
        }
    }

    /// <summary>A query thread: GET the key from <paramref name="target"/>, a short pause, again, until the end.</summary>
    private void ReadLoop(int thread, Instance target, bool starved, List<ReadRecord> records)
    {
        var limit = TimeSpan.FromMilliseconds(_o.ReadTimeoutMs);
        while (!_stop)
        {
            double sent = Now;
            long value = -1;
            bool answered = false;
            using (var cancel = new CancellationTokenSource(limit))
            {
                try
                {
                    using HttpResponseMessage r = target.Http.Send(new HttpRequestMessage(HttpMethod.Get, $"/values/{Key}"), HttpCompletionOption.ResponseContentRead, cancel.Token);
                    if (r.IsSuccessStatusCode)
                    {
                        using var reader = new StreamReader(r.Content.ReadAsStream(cancel.Token));
                        answered = long.TryParse(reader.ReadToEnd(), NumberStyles.Integer, CultureInfo.InvariantCulture, out value);
                    }
                }
                catch (Exception e) when (e is HttpRequestException or OperationCanceledException or IOException)
                {
                }
            }
            records.Add(new ReadRecord(thread, starved, sent, Now, answered ? value : -1, answered));
            if (_o.ReadPauseMs > 0) Thread.Sleep(_o.ReadPauseMs);
            else if (!answered) Thread.Sleep(1); // no tight loop on a refused connection
        }
    }

    /// <summary>
    /// /stats rounds: the healthy instances first, then the starved one, so a round in which the
    /// starved history is at least as long as the healthy ones' means it holds what they held before it was asked.
    /// </summary>
    private void StatsLoop()
    {
        int[] order = [_writer.Index, _control.Index, _starved.Index];
        for (int round = 0; !_stop; round++)
        {
            double start = Now;
            foreach (int i in order)
            {
                double sent = Now;
                InstanceStats? s = _instances[i].Stats(StatsLimit);
                var sample = new StatsSample(round, i, sent, Now, s);
                lock (_stats) _stats.Add(sample);
            }
            double rest = start + _o.StatsMs / 1000.0 - Now;
            if (rest > 0) Thread.Sleep(TimeSpan.FromSeconds(rest));
        }
    }

    /// <summary>After the writer stopped: waits (up to 30 s) until every instance holds the same value and history length.</summary>
    private FinalState Quiesce(out InstanceStats?[] last)
    {
        var clock = Stopwatch.StartNew();
        last = new InstanceStats?[3];
        while (true)
        {
            for (int i = 0; i < 3; i++) last[i] = _instances[i].Stats(StatsLimit);
            bool same = last.All(s => s != null) && last.Select(s => (s!.Value, s.Collection.HistoryLength)).Distinct().Count() == 1;
            // An instance whose process stopped (expelled) will not catch up: no use waiting for it.
            if (same || clock.Elapsed > TimeSpan.FromSeconds(30) || _instances.Any(i => i.HasExited))
            {
                return new FinalState
                {
                    Converged = same,
                    SecondsToQuiesce = Math.Round(clock.Elapsed.TotalSeconds, 3),
                    Instances = [.. last.Select((s, i) => new FinalInstance { Index = i, Answered = s != null, Value = s?.Value ?? -1, HistoryLength = s?.Collection.HistoryLength ?? -1 })],
                };
            }
            Thread.Sleep(200);
        }
    }

    /// <summary>Waits until the three instances report one view with the three of them; their /stats in it.</summary>
    private InstanceStats[] WaitForOneView()
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < TimeSpan.FromSeconds(60))
        {
            InstanceStats?[] s = [.. _instances.Select(i => i.Stats(StatsLimit))];
            if (s.All(x => x is { Members.Length: 3 }) && s.Select(x => x!.ViewId).Distinct().Count() == 1) return s!;
            Thread.Sleep(100);
        }
        throw new TimeoutException("the three instances did not report one three-member view within 60 s");
    }

    private void CollectViews(OverloadReport report, InstanceStats?[] final, int initialView, string starvedAddress)
    {
        long startUnixMs = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() - (long)(Now * 1000);
        for (int i = 0; i < 3; i++)
        {
            InstanceStats? s = final[i] ?? _stats.LastOrDefault(x => x.Instance == i && x.Stats != null).Stats;
            if (s == null) continue;
            foreach (ViewRecord v in s.Views.Where(v => v.ViewId > initialView))
            {
                report.ViewChanges.Add(new ViewChange { Instance = i, ViewId = v.ViewId, Members = v.Members, Leavers = v.Leavers, At = Math.Round((v.AtUnixMs - startUnixMs) / 1000.0, 3) });
            }
        }
        report.StarvedExpelled = _starved.HasExited || final[2] is not { Running: true }
                                 || report.ViewChanges.Any(v => v.Leavers.Contains(starvedAddress) || !v.Members.Contains(starvedAddress));
        if (report.StarvedExpelled) report.Problems.Add("the starved instance left the group during the run (see the view changes)");
    }

    private void SleepUntil(double t)
    {
        while (Now < t) Thread.Sleep(TimeSpan.FromSeconds(Math.Min(t - Now, 0.05)));
    }

    /// <summary>User + system CPU seconds of a process so far (fields 14 and 15 of /proc/PID/stat, in clock ticks of 1/100 s); -1 if unknown.</summary>
    private static double CpuSeconds(int pid)
    {
        try
        {
            string stat = File.ReadAllText($"/proc/{pid}/stat");
            string[] fields = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
            return (long.Parse(fields[11], CultureInfo.InvariantCulture) + long.Parse(fields[12], CultureInfo.InvariantCulture)) / 100.0;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException)
        {
            return -1;
        }
    }

    /// <summary>The kernel's count of UDP datagrams dropped for a full receive buffer (RcvbufErrors in /proc/net/snmp, this network namespace); 0 if unknown.</summary>
    private static long UdpReceiveBufferErrors()
    {
        try
        {
            string[] udp = [.. File.ReadAllLines("/proc/net/snmp").Where(l => l.StartsWith("Udp: ", StringComparison.Ordinal))];
            int column = Array.IndexOf(udp[0].Split(' '), "RcvbufErrors");
            return column < 0 ? 0 : long.Parse(udp[1].Split(' ')[column], CultureInfo.InvariantCulture);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException)
        {
            return 0;
        }
    }

    /// <summary>The CPUs this process may run on (its affinity), lowest first.</summary>
    private static int[] AllowedCpus()
    {
        if (!OperatingSystem.IsLinux()) return [.. Enumerable.Range(0, Environment.ProcessorCount)];
        long mask = (long)Process.GetCurrentProcess().ProcessorAffinity;
        int[] cpus = [.. Enumerable.Range(0, 64).Where(c => (mask & (1L << c)) != 0)];
        return cpus.Length > 0 ? cpus : [.. Enumerable.Range(0, Environment.ProcessorCount)];
    }

    private static void Write(OverloadReport report, OverloadOptions o)
    {
        if (o.Out != null) RunReport.WriteFile(o.Out, report.ToJson());
        if (o.Html != null) RunReport.WriteFile(o.Html, Report.Html(report));
        if (o.Markdown != null) RunReport.WriteFile(o.Markdown, Report.Markdown(report));
    }

}
