using System.Diagnostics;
using System.Net;
using System.Net.Sockets;

namespace Isis.Benchmarks;

/// <summary>What the loopback suites share: a free port for a private membership service, and a bounded spin-wait.</summary>
internal static class Loopback
{
    public static readonly TimeSpan Limit = TimeSpan.FromSeconds(30);

    /// <summary>Spins (never sleeps, so the measurement is not rounded to the scheduler tick) until <paramref name="condition"/> holds, or fails after <see cref="Limit"/>.</summary>
    public static void WaitUntil(Func<bool> condition, string what)
    {
        var clock = Stopwatch.StartNew();
        var spin = new SpinWait();
        while (!condition())
        {
            if (clock.Elapsed > Limit) throw new TimeoutException($"no {what} within {Limit.TotalSeconds} s");
            spin.SpinOnce(sleep1Threshold: -1);
        }
    }

    /// <summary>
    /// Starts <paramref name="count"/> runtimes on loopback that share a private membership service
    /// hosted by the first. The service's log and the registry of durable groups go to a fresh
    /// temporary folder, not the account's: a port picked again in a later run must not find the
    /// records of an earlier one (a checkpointed group would then refuse to start empty).
    /// </summary>
    public static IsisRuntime[] StartRuntimes(int count)
    {
        int port = Isis.Tools.LoopbackPorts.Next();
        string data = Directory.CreateTempSubdirectory("isis-bench-membership-").FullName;
        var runtimes = new IsisRuntime[count];
        for (int i = 0; i < count; i++)
        {
            runtimes[i] = new IsisRuntime(new IsisOptions
            {
                MembershipServicePort = port,
                MembershipService = i == 0 ? MembershipServiceMode.Host : MembershipServiceMode.Client,
                MembershipDataDirectory = data,
            });
            runtimes[i].Start();
        }
        return runtimes;
    }

    /// <summary>Disposes runtimes from <see cref="StartRuntimes"/>, the service's host last, and deletes their private data folder.</summary>
    public static void StopRuntimes(IsisRuntime[] runtimes)
    {
        foreach (IsisRuntime r in runtimes.Reverse()) r.Dispose();
        if (runtimes.Length > 0 && runtimes[0].Options.MembershipDataDirectory is { } data && Directory.Exists(data)) Directory.Delete(data, recursive: true);
    }
}
