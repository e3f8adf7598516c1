using System.Diagnostics;
using System.Net;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text;

namespace Isis.Tests.MultiHost;

/// <summary>
/// A private network of <c>N</c> hosts made of Linux network namespaces (root only), for tests
/// that need several machines: each host is a namespace named <c>isis-XXXXXX-i</c> (six random hex
/// digits per network, so parallel or leftover runs never collide) with <c>lo</c> up and one
/// interface <c>eth0</c> at 10.b.c.(i+1)/24; the other end of each host's veth pair sits in one more
/// namespace, <c>isis-XXXXXX-sw</c>, attached to bridge <c>br0</c>. <see cref="Partition"/> moves some
/// hosts' ports to a second bridge, <c>br1</c>, so each side still reaches itself but not the other;
/// <see cref="Heal"/> moves them back. Nothing is added to the machine's own namespace, and the hosts
/// have no route anywhere else: all traffic stays between them.
/// </summary>
/// <remarks>
/// Disposing kills every process in the namespaces (those started by <see cref="Run"/> and any other
/// started through <see cref="ExecPrefix"/>) and deletes the namespaces; it may be called again and
/// then retries whatever failed. Every <c>ip</c> command that fails throws with its command line and
/// its stderr.
/// </remarks>
internal sealed class NamespaceNetwork : IDisposable
{
    public const string IpPath = "/usr/sbin/ip";

    private const int SigKill = 9; // Linux numbering (x86-64 and arm64)
    private const int SigCont = 18;
    private static readonly TimeSpan CommandTimeout = TimeSpan.FromSeconds(30);
    private static readonly Lazy<string?> s_unavailable = new(Probe, LazyThreadSafetyMode.ExecutionAndPublication);

    private readonly object _gate = new();
    private readonly List<string> _namespaces = new(); // created and not yet deleted, in creation order
    private readonly List<Process> _processes = new();
    private readonly int _subnetB;
    private readonly int _subnetC;

    /// <summary>Creates the switch namespace and <paramref name="hosts"/> host namespaces; on failure deletes what it made.</summary>
    public NamespaceNetwork(int hosts)
    {
        if (hosts is < 1 or > 200) throw new ArgumentOutOfRangeException(nameof(hosts), hosts, "1 to 200 hosts");
        Count = hosts;
        Id = "isis-" + Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(3));
        // Each network has its own switch, so two runs with the same subnet could not see each
        // other anyway; a random subnet just keeps logs of different runs apart.
        _subnetB = RandomNumberGenerator.GetInt32(64, 255);
        _subnetC = RandomNumberGenerator.GetInt32(0, 256);
        try
        {
            AddNamespace(SwitchName);
            Ip("-n", SwitchName, "link", "set", "lo", "up");
            foreach (string bridge in new[] { "br0", "br1" })
            {
                Ip("-n", SwitchName, "link", "add", bridge, "type", "bridge");
                Ip("-n", SwitchName, "link", "set", bridge, "up");
            }
            for (int i = 0; i < hosts; i++)
            {
                string ns = Name(i);
                AddNamespace(ns);
                Ip("-n", SwitchName, "link", "add", SwitchPort(i), "type", "veth", "peer", "name", "eth0", "netns", ns);
                Ip("-n", SwitchName, "link", "set", SwitchPort(i), "master", "br0");
                Ip("-n", SwitchName, "link", "set", SwitchPort(i), "up");
                Ip("-n", ns, "addr", "add", Address(i) + "/24", "dev", "eth0");
                Ip("-n", ns, "link", "set", "eth0", "up");
                Ip("-n", ns, "link", "set", "lo", "up");
            }
        }
        catch
        {
            try { Dispose(); }
            catch (InvalidOperationException) { /* the construction failure is the one to report */ }
            throw;
        }
    }

    /// <summary>
    /// Null when this machine can run namespace tests; otherwise why not (not root, no
    /// <c>ip</c>, or creating a namespace, veth pair or bridge failed). Probed once per process.
    /// </summary>
    public static string? Unavailable => s_unavailable.Value;

    /// <summary>The prefix of every namespace name of this network ("isis-" and six hex digits).</summary>
    public string Id { get; }

    /// <summary>Number of host namespaces.</summary>
    public int Count { get; }

    /// <summary>The namespace holding the two bridges.</summary>
    public string SwitchName => Id + "-sw";

    /// <summary>Host <paramref name="host"/>'s namespace name.</summary>
    public string Name(int host) => Id + "-" + Check(host).ToString(System.Globalization.CultureInfo.InvariantCulture);

    /// <summary>Host <paramref name="host"/>'s address on the network.</summary>
    public IPAddress Address(int host) => new([10, (byte)_subnetB, (byte)_subnetC, (byte)(Check(host) + 1)]);

    /// <summary>The command line prefix that runs a command inside host <paramref name="host"/>'s namespace (it execs the command: same process id).</summary>
    public IReadOnlyList<string> ExecPrefix(int host) => [IpPath, "netns", "exec", Name(host)];

    /// <summary>
    /// Starts <paramref name="fileName"/> inside host <paramref name="host"/>'s namespace, with
    /// stdin, stdout and stderr redirected (the caller reads them); <see cref="Dispose"/> kills it.
    /// </summary>
    public Process Run(int host, string fileName, params string[] args)
    {
        var psi = new ProcessStartInfo(IpPath)
        {
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (string a in ExecPrefix(host).Skip(1)) psi.ArgumentList.Add(a);
        psi.ArgumentList.Add(fileName);
        foreach (string a in args) psi.ArgumentList.Add(a);
        var process = new Process { StartInfo = psi };
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_namespaces.Count == 0, this);
            process.Start();
            _processes.Add(process);
        }
        return process;
    }

    /// <summary>
    /// Cuts the network in two: the hosts in <paramref name="sideA"/> move to bridge br1, every
    /// other host is on br0. Each side reaches only itself.
    /// </summary>
    public void Partition(int[] sideA)
    {
        var a = sideA.Select(Check).ToHashSet();
        for (int i = 0; i < Count; i++) Ip("-n", SwitchName, "link", "set", SwitchPort(i), "master", a.Contains(i) ? "br1" : "br0");
    }

    /// <summary>Puts every host back on br0.</summary>
    public void Heal()
    {
        for (int i = 0; i < Count; i++) Ip("-n", SwitchName, "link", "set", SwitchPort(i), "master", "br0");
    }

    /// <summary>Where nft (nftables) is expected; the loss rules need it.</summary>
    public const string NftPath = "/usr/sbin/nft";

    /// <summary>Null when <see cref="DropIncoming"/> can work; otherwise why not.</summary>
    public static string? NftUnavailable => File.Exists(NftPath) ? null : $"random loss needs {NftPath} (apt-get install nftables); it is missing.";

    /// <summary>
    /// Lets IP multicast cross the switch to every host: the bridges flood it (no IGMP snooping, as
    /// a switch without a querier would), and each host routes 224.0.0.0/4 out of its eth0.
    /// </summary>
    public void EnableMulticast()
    {
        foreach (string bridge in new[] { "br0", "br1" }) Ip("-n", SwitchName, "link", "set", bridge, "type", "bridge", "mcast_snooping", "0");
        for (int i = 0; i < Count; i++) Ip("-n", Name(i), "route", "add", "224.0.0.0/4", "dev", "eth0");
    }

    /// <summary>Host <paramref name="host"/> drops <paramref name="percent"/> % of the UDP datagrams it receives, at random (nft in its namespace).</summary>
    public void DropIncoming(int host, int percent)
    {
        string ns = Name(host);
        Ip("netns", "exec", ns, NftPath, "add", "table", "inet", "isis_loss");
        Ip("netns", "exec", ns, NftPath, "add", "chain", "inet", "isis_loss", "input", "{", "type", "filter", "hook", "input", "priority", "0", ";", "}");
        Ip("netns", "exec", ns, NftPath, "add", "rule", "inet", "isis_loss", "input", "meta", "l4proto", "udp", "numgen", "random", "mod", "100", "<",
            percent.ToString(System.Globalization.CultureInfo.InvariantCulture), "counter", "drop");
    }

    /// <summary>What host <paramref name="host"/>'s loss rule dropped so far (nft's counter), as nft prints it.</summary>
    public string DropCounter(int host) => Ip("netns", "exec", Name(host), NftPath, "list", "chain", "inet", "isis_loss", "input");

    /// <summary>Kills every process in the namespaces, then deletes them. Idempotent; a failure is thrown after everything was tried.</summary>
    public void Dispose()
    {
        List<Process> processes;
        List<string> namespaces;
        lock (_gate)
        {
            processes = [.. _processes];
            _processes.Clear();
            namespaces = [.. _namespaces];
        }
        var errors = new List<string>();
        foreach (Process p in processes)
        {
            try
            {
                if (!p.HasExited)
                {
                    _ = SysKill(p.Id, SigCont); // a stopped process dies only once it runs
                    p.Kill(entireProcessTree: true);
                    p.WaitForExit(5000);
                }
            }
            catch (Exception e) when (e is InvalidOperationException or System.ComponentModel.Win32Exception)
            {
                // already gone, or never started
            }
            p.Dispose();
        }
        foreach (string ns in namespaces)
        {
            if (!Exists(ns)) continue;
            try { KillEverythingIn(ns); }
            catch (Exception e) when (e is InvalidOperationException or TimeoutException) { errors.Add(e.Message); }
        }
        // Hosts first, the switch last (deleting a host also deletes its veth pair).
        foreach (string ns in Enumerable.Reverse(namespaces))
        {
            try
            {
                if (Exists(ns)) Ip("netns", "del", ns); // else someone deleted it already
                lock (_gate) _namespaces.Remove(ns);
            }
            catch (InvalidOperationException e)
            {
                errors.Add(e.Message);
            }
        }
        if (errors.Count > 0) throw new InvalidOperationException("Network namespace cleanup failed:\n" + string.Join("\n", errors));
    }

    // ---------------------------------------------------------------- helpers

    private int Check(int host) =>
        host >= 0 && host < Count ? host : throw new ArgumentOutOfRangeException(nameof(host), host, $"hosts are 0-{Count - 1}");

    private static string SwitchPort(int host) => "h" + host.ToString(System.Globalization.CultureInfo.InvariantCulture);

    private static bool Exists(string ns) => File.Exists("/run/netns/" + ns);

    private void AddNamespace(string name)
    {
        Ip("netns", "add", name);
        lock (_gate) _namespaces.Add(name);
    }

    /// <summary>SIGKILLs every process whose network namespace is <paramref name="ns"/> and waits until none is left.</summary>
    private static void KillEverythingIn(string ns)
    {
        DateTime deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
        while (true)
        {
            int[] pids = Ip("netns", "pids", ns)
                .Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
                .Select(p => int.Parse(p, System.Globalization.CultureInfo.InvariantCulture))
                .ToArray();
            if (pids.Length == 0) return;
            if (DateTime.UtcNow > deadline) throw new TimeoutException($"processes {string.Join(", ", pids)} in namespace {ns} survived SIGKILL for 10 s");
            foreach (int pid in pids)
            {
                _ = SysKill(pid, SigCont);
                _ = SysKill(pid, SigKill);
            }
            Thread.Sleep(50);
        }
    }

    /// <summary>Runs <c>ip</c> with <paramref name="args"/>; returns its stdout, or throws with the command line and stderr.</summary>
    private static string Ip(params string[] args)
    {
        string commandLine = IpPath + " " + string.Join(" ", args);
        var psi = new ProcessStartInfo(IpPath)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (string a in args) psi.ArgumentList.Add(a);
        using var process = new Process { StartInfo = psi };
        var stdout = new StringBuilder();
        var stderr = new StringBuilder();
        process.OutputDataReceived += (_, e) => { if (e.Data != null) lock (stdout) stdout.AppendLine(e.Data); };
        process.ErrorDataReceived += (_, e) => { if (e.Data != null) lock (stderr) stderr.AppendLine(e.Data); };
        try
        {
            process.Start();
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            throw new InvalidOperationException($"`{commandLine}` could not start: {e.Message}", e);
        }
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        if (!process.WaitForExit(CommandTimeout))
        {
            try { process.Kill(); } catch (InvalidOperationException) { }
            throw new InvalidOperationException($"`{commandLine}` did not finish within {CommandTimeout.TotalSeconds:0} s");
        }
        process.WaitForExit(); // drains the output readers
        if (process.ExitCode != 0)
        {
            string err;
            lock (stderr) err = stderr.ToString().Trim();
            throw new InvalidOperationException($"`{commandLine}` failed with exit code {process.ExitCode}: {(err.Length > 0 ? err : "(no stderr)")}");
        }
        lock (stdout) return stdout.ToString();
    }

    private static string? Probe()
    {
        if (!OperatingSystem.IsLinux()) return "multi-host tests need Linux network namespaces; this is not Linux.";
        uint euid = GetEuid();
        if (euid != 0) return $"multi-host tests need root to create network namespaces (running as uid {euid}); run `dotnet test` as root to include them.";
        if (!File.Exists(IpPath)) return $"multi-host tests need {IpPath} (iproute2) to create network namespaces; it is missing.";
        try
        {
            using var probe = new NamespaceNetwork(1);
        }
        catch (Exception e) when (e is InvalidOperationException or TimeoutException)
        {
            return "multi-host tests could not create a network namespace with a veth pair and a bridge (no CAP_SYS_ADMIN?): " + e.Message;
        }
        return null;
    }

    [DllImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static extern int SysKill(int pid, int signal);

    [DllImport("libc", EntryPoint = "geteuid")]
    private static extern uint GetEuid();
}
