using System.Text;
using System.Text.Json.Nodes;
using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>The multi-process tests run one at a time and never alongside other tests: they time heartbeats on real processes.</summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class MultiProcessCollection
{
    public const string Name = "MultiProcess";
}

/// <summary>
/// The membership service, hosted in the test process on a free port (so the test can read its
/// counters), plus the member processes the test starts. Disposing kills every child (also when
/// the test failed), then stops the service. With <see cref="Embedded"/>, there is no service in
/// the test process: the members run the zero-configuration default, the service embedded in them,
/// with a free port as the machine's well-known one.
/// </summary>
internal sealed class MultiProcessCluster : IDisposable
{
    private readonly List<MemberProcess> _members = new();
    private readonly ElapsedLog _log;

    /// <param name="output">The test's output.</param>
    /// <param name="group">The group every member joins.</param>
    /// <param name="suspicionCount">
    /// Heartbeat periods (100 ms) without news before the service expels a process. The default
    /// of 5 expels healthy members on this 2-core machine when it is loaded (event loops were seen
    /// stalled 300-700 ms, and processes isolated at startup with 10, by CPU contention while other builds ran at load averages of 13-22), so the tests use 20 (2 s).
    /// </param>
    public MultiProcessCluster(ITestOutputHelper output, string group, int suspicionCount = 5)
        : this(output, group, suspicionCount, embedded: false, "udp")
    {
    }

    private MultiProcessCluster(ITestOutputHelper output, string group, int suspicionCount, bool embedded, string transport)
    {
        _log = new ElapsedLog(output);
        Group = group;
        Suspicion = suspicionCount;
        ServicePort = TestRuntimes.FreeUdpPort();
        IsEmbedded = embedded;
        Transport = transport;
        if (embedded)
        {
            Log($"embedded membership service; well-known port 127.0.0.1:{ServicePort}; heartbeat {HeartbeatMs} ms, expulsion after {Suspicion} missed; transport {transport}");
            return;
        }
        _service = new IsisRuntime(new IsisOptions
        {
            MembershipServicePort = ServicePort,
            MembershipService = MembershipServiceMode.Host,
            HeartbeatInterval = TimeSpan.FromMilliseconds(HeartbeatMs),
            SuspicionCount = Suspicion,
        });
        _service.Start();
        Log($"membership service on 127.0.0.1:{ServicePort}; heartbeat {HeartbeatMs} ms, expulsion after {Suspicion} missed");
    }

    public const int HeartbeatMs = 100;

    public int Suspicion { get; }

    public string Group { get; }

    public int ServicePort { get; }

    /// <summary>Members that run the default, embedded membership service (no service in the test process).</summary>
    /// <param name="output">The test's output.</param>
    /// <param name="group">The group every member joins.</param>
    /// <param name="suspicionCount">As for the constructor.</param>
    /// <param name="transport">"udp" (the default) or "tcp": what every member's packets travel over.</param>
    public static MultiProcessCluster Embedded(ITestOutputHelper output, string group, int suspicionCount = 5, string transport = "udp") =>
        new(output, group, suspicionCount, embedded: true, transport);

    /// <summary>"udp" or "tcp": passed to every member as --transport (a cluster with a service in the test process is UDP only).</summary>
    public string Transport { get; }

    public bool IsEmbedded { get; }

    private readonly IsisRuntime? _service;

    /// <summary>The in-process runtime hosting the membership service (not a member of the group).</summary>
    public IsisRuntime Service => _service ?? throw new InvalidOperationException("an embedded cluster has no membership service in the test process");

    public IReadOnlyList<MemberProcess> Members => _members;

    public static readonly TimeSpan Deadline = TimeSpan.FromSeconds(60);

    /// <summary>Starts member <paramref name="index"/> (its sender index) with extra arguments.</summary>
    public MemberProcess Start(int index, params string[] extra)
    {
        var args = new List<string>
        {
            "--service-port", ServicePort.ToString(System.Globalization.CultureInfo.InvariantCulture),
            "--group", Group,
            "--index", index.ToString(System.Globalization.CultureInfo.InvariantCulture),
            "--heartbeat-ms", HeartbeatMs.ToString(System.Globalization.CultureInfo.InvariantCulture),
            "--suspicion", Suspicion.ToString(System.Globalization.CultureInfo.InvariantCulture),
            "--opcode-check",
        };
        if (IsEmbedded) args.Add("--embedded");
        args.AddRange(["--transport", Transport]);
        args.AddRange(extra);
        MemberProcess m = MemberProcess.Start($"member{index}", [.. args]);
        lock (_members) _members.Add(m);
        Log($"started member{index}: pid {m.Pid}, {m.Address}");
        return m;
    }

    /// <summary>Starts <paramref name="count"/> members in parallel (each waits for its "ready").</summary>
    public MemberProcess[] StartMany(int count, Func<int, string[]> extra)
    {
        var started = new MemberProcess[count];
        Parallel.For(0, count, new ParallelOptions { MaxDegreeOfParallelism = count }, i => started[i] = Start(i, extra(i)));
        return started;
    }

    /// <summary>
    /// Waits until every given member installs a view with id &gt; <paramref name="afterViewId"/>
    /// holding exactly <paramref name="expected"/>; returns the highest such view id.
    /// </summary>
    public int WaitForView(IEnumerable<MemberProcess> members, IReadOnlyCollection<MemberProcess> expected, int afterViewId, TimeSpan timeout, string what)
    {
        var want = expected.Select(m => m.Address).ToHashSet();
        int id = afterViewId;
        foreach (MemberProcess m in members)
        {
            JsonObject view = m.WaitFor("view", timeout, v =>
                (int)v["id"]! > afterViewId && ((JsonArray)v["members"]!).Select(x => (string)x!).ToHashSet().SetEquals(want));
            id = Math.Max(id, (int)view["id"]!);
        }
        Log($"{what} (view {id})");
        return id;
    }

    /// <summary>Logs each running member's worst event-loop stall so far (the member host measures it).</summary>
    public void LogLoopStalls()
    {
        lock (_members)
        {
            foreach (MemberProcess m in _members.Where(m => !m.HasExited))
            {
                try
                {
                    JsonObject p = m.Status();
                    Log($"{m.Name}: worst event-loop stall {p["maxLoopLatencyMs"]} ms, {p["loopStallsOver100Ms"]} probes over 100 ms");
                }
                catch (TimeoutException)
                {
                    Log($"{m.Name}: no status");
                }
            }
        }
    }

    public void Log(string text) => _log.Write(text);

    /// <summary>Every child's recent output, for failure messages.</summary>
    public string Describe()
    {
        var sb = new StringBuilder();
        lock (_members)
        {
            foreach (MemberProcess m in _members) sb.Append(m.Describe());
        }
        return sb.ToString();
    }

    public void Dispose()
    {
        lock (_members)
        {
            foreach (MemberProcess m in _members) m.Dispose();
        }
        _service?.Dispose();
        TestRuntimes.ForgetSingleReplicaLog(ServicePort);
        TestRuntimes.ForgetDurableGroups(ServicePort);
        Log("cluster disposed");
    }
}
