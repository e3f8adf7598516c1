using System.Globalization;
using System.Text;
using System.Text.Json.Nodes;
using Isis.Tests.MultiProcess;
using Xunit.Abstractions;

namespace Isis.Tests.MultiHost;

/// <summary>Where one membership-service host runs: a host (namespace index) of the network, and its UDP port.</summary>
internal readonly record struct ServiceHost(int Host, int Port);

/// <summary>
/// Member processes (tests/Isis.MemberHost) on the hosts of a <see cref="NamespaceNetwork"/>, plus
/// the membership service at the given <see cref="ServiceHost"/>s. Disposing kills every child and
/// deletes the namespaces, also when the test failed.
/// </summary>
internal sealed class MultiHostCluster : IDisposable
{
    public const int HeartbeatMs = 100;

    private readonly List<MemberProcess> _members = new();
    private readonly List<MemberProcess> _serviceProcesses = new();
    private readonly ElapsedLog _log;

    /// <param name="output">The test's output.</param>
    /// <param name="hosts">Number of hosts (network namespaces).</param>
    /// <param name="services">Where the membership service runs; none: the default, embedded in the members (seeds: every host).</param>
    /// <param name="group">The group every member joins.</param>
    /// <param name="suspicionCount">Heartbeat periods without news before the service expels a process (see <see cref="MultiProcessCluster"/> for why the tests use 20).</param>
    /// <param name="transport">What every process's packets travel over: "udp" (the default) or "tcp" (the overlay).</param>
    /// <param name="everyProcess">More arguments for every process, service hosts included (settings that must be the same everywhere, such as multicast).</param>
    /// <param name="beforeStart">Runs once the network exists, before any process starts (multicast routes, loss rules).</param>
    public MultiHostCluster(ITestOutputHelper output, int hosts, IReadOnlyList<ServiceHost> services, string group, int suspicionCount, string transport = "udp",
        IReadOnlyList<string>? everyProcess = null, Action<NamespaceNetwork>? beforeStart = null)
    {
        Transport = transport;
        _everyProcess = everyProcess ?? [];
        _log = new ElapsedLog(output);
        Services = services;
        Group = group;
        Suspicion = suspicionCount;
        Network = new NamespaceNetwork(hosts);
        Log($"network {Network.Id}: {hosts} hosts, {Network.Address(0)}-{Network.Address(hosts - 1)}, transport {transport}");
        try
        {
            beforeStart?.Invoke(Network);
            StartServiceHosts();
        }
        catch
        {
            Dispose();
            throw;
        }
    }

    public NamespaceNetwork Network { get; }

    public IReadOnlyList<ServiceHost> Services { get; }

    public string Group { get; }

    public int Suspicion { get; }

    /// <summary>"udp" or "tcp": passed to every process as --transport.</summary>
    public string Transport { get; }

    private readonly IReadOnlyList<string> _everyProcess;

    /// <summary>The processes hosting the membership service (not members of the group).</summary>
    public IReadOnlyList<MemberProcess> ServiceProcesses => _serviceProcesses;

    // ---------------------------------------------------------------- where the service runs
    // The two members below are all that knows how the service is deployed: one replica per
    // service host, each a member host started with --service-only in its namespace.

    private readonly DirectoryInfo _replicaData = Directory.CreateTempSubdirectory("isis-multihost-replicas-");

    private string ReplicaList => string.Join(",", Services.Select(s => $"{Network.Address(s.Host)}:{S(s.Port)}"));

    private void StartServiceHosts()
    {
        foreach (ServiceHost s in Services)
        {
            string address = Network.Address(s.Host).ToString();
            // Each replica binds the listed address of its own namespace (the others are not local there).
            MemberProcess p = MemberProcess.Start($"replica@{s.Host}", Network.ExecPrefix(s.Host),
            [
                "--service-only", "--bind", address, "--replicas", ReplicaList, "--replica-data", _replicaData.FullName,
                "--heartbeat-ms", S(HeartbeatMs), "--suspicion", S(Suspicion), "--transport", Transport, .. _everyProcess,
            ]);
            _serviceProcesses.Add(p);
            Log($"membership replica on host {s.Host} ({address}:{s.Port}), pid {p.Pid}");
        }
        Log(Services.Count > 0
            ? $"membership service: {Services.Count} replica(s); heartbeat {HeartbeatMs} ms, expulsion after {Suspicion} missed"
            : $"membership service embedded in the members, seeds: every host's port 7345; heartbeat {HeartbeatMs} ms, expulsion after {Suspicion} missed");
    }

    /// <summary>
    /// The member host arguments that say where the membership service is: the replica list; or,
    /// with no service hosts, the default embedded service, with every host's well-known address
    /// (port 7345 of its own namespace) as the seeds, host 0 first.
    /// </summary>
    private string[] ServiceArguments(int host) => Services.Count > 0
        ? ["--replicas", ReplicaList]
        : ["--embedded", "--service-address", Network.Address(host).ToString(), "--service-port", "7345",
           "--seeds", string.Join(",", Enumerable.Range(0, Network.Count).Select(h => $"{Network.Address(h)}:7345"))];

    // ---------------------------------------------------------------- members

    /// <summary>Starts a member with sender index <paramref name="index"/> on <paramref name="host"/> and waits for its "ready" line.</summary>
    public MemberProcess StartMember(int host, int index, params string[] extra)
    {
        var args = new List<string>(ServiceArguments(host))
        {
            "--bind", Network.Address(host).ToString(),
            "--group", Group,
            "--index", S(index),
            "--heartbeat-ms", S(HeartbeatMs),
            "--suspicion", S(Suspicion),
            "--transport", Transport,
            "--opcode-check",
        };
        args.AddRange(_everyProcess);
        args.AddRange(extra);
        MemberProcess m = MemberProcess.Start($"member{index}@{host}", Network.ExecPrefix(host), args);
        lock (_members) _members.Add(m);
        Log($"started {m.Name}: pid {m.Pid}, {m.Address}");
        return m;
    }

    /// <summary>
    /// Waits until every given member installs a view with id &gt; <paramref name="afterViewId"/>
    /// holding exactly <paramref name="expected"/>; returns the highest such view id.
    /// </summary>
    public int WaitForView(IEnumerable<MemberProcess> members, IReadOnlyCollection<MemberProcess> expected, int afterViewId, TimeSpan timeout, string what)
    {
        var want = expected.Select(m => m.Address).ToHashSet();
        int id = afterViewId;
        DateTime deadline = DateTime.UtcNow + timeout;
        foreach (MemberProcess m in members)
        {
            JsonObject view = m.WaitFor("view", Left(deadline), v => (int)v["id"]! > afterViewId && MembersOf(v).SetEquals(want));
            id = Math.Max(id, (int)view["id"]!);
        }
        Log($"{what} (view {id})");
        return id;
    }

    /// <summary>Polls a member's progress until <paramref name="done"/> holds for it, within the deadline.</summary>
    public JsonObject WaitForProgress(MemberProcess m, Func<JsonObject, bool> done, DateTime deadline, string what)
    {
        while (true)
        {
            JsonObject p = m.Status(Left(deadline));
            if (done(p)) return p;
            if (DateTime.UtcNow >= deadline) throw new TimeoutException($"{m.Name}: {what} did not happen in time; last progress {p.ToJsonString()}\n{m.Describe()}");
            Thread.Sleep(200);
        }
    }

    public static HashSet<string> MembersOf(JsonObject view) => ((JsonArray)view["members"]!).Select(x => (string)x!).ToHashSet();

    public static TimeSpan Left(DateTime deadline)
    {
        TimeSpan left = deadline - DateTime.UtcNow;
        return left > TimeSpan.FromSeconds(1) ? left : TimeSpan.FromSeconds(1);
    }

    public static string S(int n) => n.ToString(CultureInfo.InvariantCulture);

    public void Log(string text) => _log.Write(text);

    /// <summary>Every child's recent output, for failure messages.</summary>
    public string Describe()
    {
        var sb = new StringBuilder();
        lock (_members)
        {
            foreach (MemberProcess m in _serviceProcesses.Concat(_members)) sb.Append(m.Describe());
        }
        return sb.ToString();
    }

    /// <summary>Kills every child, then deletes the namespaces (which kills anything left in them); throws if a namespace could not be deleted.</summary>
    public void Dispose()
    {
        try
        {
            lock (_members)
            {
                foreach (MemberProcess m in _members.Concat(_serviceProcesses))
                {
                    try { m.Dispose(); }
                    catch (Exception e) when (e is InvalidOperationException or System.ComponentModel.Win32Exception) { Log($"{m.Name}: {e.Message}"); }
                }
            }
        }
        finally
        {
            Network.Dispose();
            try { _replicaData.Delete(recursive: true); } catch (IOException) { /* best effort */ }
        }
        Log($"cluster disposed, namespaces {Network.Id}-* deleted");
    }
}
