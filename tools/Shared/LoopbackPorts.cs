using System.Net;
using System.Net.Sockets;

namespace Isis.Tools;

/// <summary>
/// Ports for a process that binds them later: a child process, an app that is built before it
/// runs, a runtime told where its membership service will be. A port the kernel hands out for
/// port 0 is free only at that moment, and it goes on handing that range to every other socket
/// on the machine meanwhile, so a port picked that way is sometimes taken by the time it is bound
/// (a membership port held by a stranger's socket answers nobody). These come from below the
/// kernel's ephemeral range instead, are free for both UDP and TCP when handed out, and are
/// never handed out twice by one process. Compiled into the tools, the benchmarks and the tests.
/// </summary>
internal static class LoopbackPorts
{
    private const int Lowest = 20_000;
    private static readonly HashSet<int> HandedOut = new();
    private static readonly int EphemeralLow = ReadEphemeralLow();

    /// <summary>A port free on loopback for UDP and TCP now, outside the ephemeral range where the machine allows it.</summary>
    public static int Next()
    {
        if (EphemeralLow - Lowest < 1_000) return FromKernel();
        for (int attempt = 0; attempt < 10_000; attempt++)
        {
            int port = Random.Shared.Next(Lowest, EphemeralLow);
            lock (HandedOut)
            {
                if (HandedOut.Contains(port) || !IsFree(port)) continue;
                HandedOut.Add(port);
                return port;
            }
        }
        throw new InvalidOperationException($"no free loopback port in {Lowest}-{EphemeralLow - 1} after 10,000 attempts");
    }

    private static bool IsFree(int port)
    {
        try
        {
            // Any address, so a socket bound to loopback alone or to all addresses counts as taken.
            using var udp = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
            udp.Bind(new IPEndPoint(IPAddress.Any, port));
            using var tcp = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            tcp.Bind(new IPEndPoint(IPAddress.Any, port));
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    /// <summary>Where the machine has no room below its ephemeral range: a port the kernel picks, as a last resort.</summary>
    private static int FromKernel()
    {
        using var s = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        s.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        return ((IPEndPoint)s.LocalEndPoint!).Port;
    }

    /// <summary>The lowest ephemeral port: Linux says in /proc; elsewhere the IANA range (49152-65535) is the rule.</summary>
    private static int ReadEphemeralLow()
    {
        try
        {
            string[] range = File.ReadAllText("/proc/sys/net/ipv4/ip_local_port_range").Split((char[])[' ', '\t', '\n'], StringSplitOptions.RemoveEmptyEntries);
            if (range.Length == 2 && int.TryParse(range[0], out int low) && low > 0) return low;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
        }
        return 49_152;
    }
}
