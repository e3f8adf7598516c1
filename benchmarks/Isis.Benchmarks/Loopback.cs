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

    /// <summary>Starts <paramref name="count"/> runtimes on loopback that share a private membership service hosted by the first.</summary>
    public static IsisRuntime[] StartRuntimes(int count)
    {
        int port = Isis.Tools.LoopbackPorts.Next();
        var runtimes = new IsisRuntime[count];
        for (int i = 0; i < count; i++)
        {
            runtimes[i] = new IsisRuntime(new IsisOptions
            {
                MembershipServicePort = port,
                MembershipService = i == 0 ? MembershipServiceMode.Host : MembershipServiceMode.Client,
            });
            runtimes[i].Start();
        }
        return runtimes;
    }
}
