using System.Net;
using System.Net.Sockets;

namespace Isis.Tests.Runtime;

/// <summary>Creates runtimes that share a private membership service on a free loopback port.</summary>
internal sealed class TestRuntimes : IDisposable
{
    private readonly List<IsisRuntime> _runtimes = new();

    public TestRuntimes()
    {
        ServicePort = FreeUdpPort();
    }

    public int ServicePort { get; }

    public IsisOptions Options(Action<IsisOptions>? adjust = null)
    {
        // Failures are detected after 10 silent heartbeats (0.5 s; a process without the service gives up
        // after about 1 s): CI runs these tests beside multi-process ones on two cores, where an event
        // loop can stall for half a second, and 4 heartbeats let such a stall read as a failure.
        var o = new IsisOptions { MembershipServicePort = ServicePort, HeartbeatInterval = TimeSpan.FromMilliseconds(50), SuspicionCount = 10 };
        adjust?.Invoke(o);
        return o;
    }

    public IsisRuntime Start(Action<IsisOptions>? adjust = null)
    {
        var r = new IsisRuntime(Options(adjust));
        r.Start();
        lock (_runtimes) _runtimes.Add(r);
        return r;
    }

    /// <summary>
    /// A port for a membership service (or anything else a process binds later), below the
    /// ephemeral range (<see cref="Isis.Tools.LoopbackPorts"/>). A replica file an earlier run left
    /// for that port is removed: its replicas are gone, and a stranger's socket on one of their old
    /// ports would make a founder wait for a service that is not there. So is the log a single
    /// fixed replica at that port kept (in the default folder): a new service must not restore
    /// an earlier run's groups.
    /// </summary>
    public static int FreeUdpPort()
    {
        int port = Isis.Tools.LoopbackPorts.Next();
        DeleteIfPresent(new IsisOptions { MembershipServicePort = port }.EmbeddedDirectoryPath);
        ForgetSingleReplicaLog(port);
        ForgetDurableGroups(port);
        return port;
    }

    /// <summary>
    /// Deletes the log a single fixed replica at <paramref name="port"/> keeps in the default
    /// folder (the account's data, not a temporary folder): after a test, so none is left behind.
    /// </summary>
    public static void ForgetSingleReplicaLog(int port)
    {
        var options = new IsisOptions { MembershipServicePort = port };
        try
        {
            DeleteIfPresent(options.ReplicaLogPath(options.ServiceReplicaEndPoints[0]));
        }
        catch (IOException)
        {
            // Best effort: FreeUdpPort removes it before the port is used again.
        }
    }

    /// <summary>
    /// Deletes the registry of durable groups of the system at <paramref name="port"/> (in the
    /// account's data folder): a test's new system must not inherit an earlier run's groups.
    /// </summary>
    public static void ForgetDurableGroups(int port)
    {
        string folder = new IsisOptions { MembershipServicePort = port }.DurableGroupRegistryFolder;
        try
        {
            if (Directory.Exists(folder)) Directory.Delete(folder, recursive: true);
        }
        catch (IOException)
        {
            // Best effort: FreeUdpPort removes it before the port is used again.
        }
    }

    /// <summary>Deletes a file if it (and its folder) exist.</summary>
    private static void DeleteIfPresent(string path)
    {
        if (File.Exists(path)) File.Delete(path);
    }

    /// <summary>Waits until <paramref name="condition"/> holds; a generous liveness bound, never a timing assertion.</summary>
    public static void WaitUntil(Func<bool> condition, string what, int seconds = 20)
    {
        var deadline = DateTime.UtcNow.AddSeconds(seconds);
        while (!condition())
        {
            if (DateTime.UtcNow > deadline) throw new TimeoutException($"not within {seconds} s: {what}");
            Thread.Sleep(5);
        }
    }

    public void Dispose()
    {
        // Stop the service host last, so the others can leave cleanly.
        foreach (IsisRuntime r in _runtimes.OrderBy(r => r.HostsMembershipService)) r.Dispose();
        ForgetSingleReplicaLog(ServicePort);
        ForgetDurableGroups(ServicePort);
    }
}
