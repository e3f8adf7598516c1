using System.Globalization;
using System.Net;
using System.Text.Json.Nodes;
using Isis;

// Runs one replica of the Isis membership service, on its own (see docs/operations.md).
//
//   dotnet Isis.Oracle.dll --replicas 10.0.0.1:7345,10.0.0.2:7345,10.0.0.3:7345 --data /var/lib/isis
//       [--heartbeat-ms 100] [--suspicion 5] [--status-ms 1000]
//       [--system-key-file FILE [--accepted-system-key-file FILE ...]]
//
// With a system key (IsisOptions.SystemKey at the application processes), every replica needs it
// too: --system-key-file names a file holding its base64 (as the setting Isis:SystemKey), readable
// only by the service's account; a key never goes on a command line, where ps shows it. During a
// rolling rotation, --accepted-system-key-file (repeatable) names the other key
// (IsisOptions.AcceptedSystemKeys; docs/operations.md, "Rotating the system key").
//
// Every replica and every application process must be given the same --replicas list, in the same
// order (applications: IsisOptions.MembershipReplicas). This process hosts the first replica in the
// list whose address it can bind: an address of this machine that no other process holds. Its log
// lives in --data (required, exit code 2 without it) and must survive restarts: a replica that lost
// its log must not rejoin under the same address.
//
// It writes one JSON object per line on stdout:
//   {"event":"ready","replica":"10.0.0.1:7345","address":"...","port":7345,"pid":123}
//   {"event":"status","leader":true,"term":4,"committed":57,"firewallDrops":0}   every --status-ms and on "status"
//   {"event":"processShutdown","reason":"..."}   this host's own process membership ended (the replica goes on,
//                                                unless its log could not be written: then it exits with code 1)
// and reads commands on stdin: "status", "quit". It exits on "quit", when stdin closes (unless
// --detached), and on SIGTERM or Ctrl-C.
return OracleCommand.Run(args);

internal static class OracleCommand
{
    public static int Run(string[] args)
    {
        if (args.Length == 0 || args.Contains("--help") || args.Contains("-h"))
        {
            Console.WriteLine("usage: Isis.Oracle --replicas A:P,B:P,C:P --data DIR [--heartbeat-ms 100] [--suspicion 5] [--status-ms 1000] [--detached]\n" +
                "                   [--system-key-file FILE [--accepted-system-key-file FILE ...]]");
            return args.Length == 0 ? 2 : 0;
        }
        string? Option(string name)
        {
            int i = Array.IndexOf(args, name);
            return i >= 0 && i + 1 < args.Length ? args[i + 1] : null;
        }
        List<IPEndPoint> replicas;
        byte[]? systemKey;
        List<byte[]> acceptedKeys;
        try
        {
            systemKey = Option("--system-key-file") is { } keyFile ? ReadKey("--system-key-file", keyFile) : null;
            acceptedKeys = [.. args.Select((a, i) => (a, i)).Where(x => x.a == "--accepted-system-key-file")
                .Select(x => x.i + 1 < args.Length ? ReadKey("--accepted-system-key-file", args[x.i + 1]) : throw new ArgumentException("--accepted-system-key-file needs a file"))];
            if (acceptedKeys.Count > 0 && systemKey is null)
                throw new ArgumentException("--accepted-system-key-file needs --system-key-file: the key this replica seals with; the accepted ones only open.");
            replicas = (Option("--replicas") ?? throw new ArgumentException("--replicas is required: the service's replica addresses, e.g. 10.0.0.1:7345,10.0.0.2:7345,10.0.0.3:7345"))
                .Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
                .Select(s => IPEndPoint.TryParse(s, out IPEndPoint? e) && e.Port != 0 ? e : throw new ArgumentException($"--replicas: '{s}' is not an address:port"))
                .ToList();
        }
        catch (ArgumentException e)
        {
            Console.Error.WriteLine(e.Message);
            return 2;
        }
        // The replica's term, vote and log: a replica that lost them must not rejoin under its
        // address, so no default (a temporary folder may be emptied at a reboot).
        if (Option("--data") is not { } data)
        {
            Console.Error.WriteLine("--data is required: a directory of this replica's own that survives restarts and reboots (for example /var/lib/isis), " +
                "where it keeps its term, vote and log; not a temporary folder. See docs/operations.md.");
            return 2;
        }
        int heartbeatMs = int.Parse(Option("--heartbeat-ms") ?? "100", CultureInfo.InvariantCulture);
        int suspicion = int.Parse(Option("--suspicion") ?? "5", CultureInfo.InvariantCulture);
        int statusMs = int.Parse(Option("--status-ms") ?? "1000", CultureInfo.InvariantCulture);
        bool detached = args.Contains("--detached");

        var runtime = new IsisRuntime(new IsisOptions
        {
            // The host's own process socket binds to this machine's replica address, where the others can reach it.
            BindAddress = LocalReplicaAddress(replicas),
            MembershipReplicas = replicas,
            MembershipDataDirectory = data,
            MembershipService = MembershipServiceMode.Host,
            HeartbeatInterval = TimeSpan.FromMilliseconds(heartbeatMs),
            SuspicionCount = suspicion,
            SystemKey = systemKey,
            AcceptedSystemKeys = acceptedKeys,
        });
        var output = new object();
        void Write(JsonObject line)
        {
            lock (output) Console.Out.WriteLine(line.ToJsonString());
        }
        using var stop = new ManualResetEventSlim(false);
        // The replica outlives its host's own membership (which the protocol may end if this machine is cut off).
        // A replica whose log cannot be written stops with the process (the reason names the file):
        // then this program exits (code 1), for its supervisor to see, instead of idling without a replica.
        bool replicaStopped = false;
        runtime.ShutDown += (_, e) =>
        {
            Write(new JsonObject { ["event"] = "processShutdown", ["reason"] = e.Reason });
            if (!stop.IsSet && runtime.HostedMembershipReplica is null)
            {
                replicaStopped = true;
                stop.Set();
            }
        };
        try
        {
            runtime.Start();
        }
        catch (Exception e) when (e is InvalidOperationException or System.Net.Sockets.SocketException)
        {
            Console.Error.WriteLine("cannot host a membership replica: " + e.Message);
            return 1;
        }
        IPEndPoint hosted = runtime.HostedMembershipReplica!;
        Write(new JsonObject
        {
            ["event"] = "ready", ["replica"] = hosted.ToString(), ["address"] = hosted.ToString(), ["port"] = hosted.Port,
            ["pid"] = Environment.ProcessId, ["data"] = data,
        });

        void Status()
        {
            IsisStatistics s = runtime.GetStatistics();
            Write(new JsonObject
            {
                ["event"] = "status", ["leader"] = s.MembershipReplicaIsLeader, ["term"] = s.MembershipReplicaTerm,
                ["committed"] = s.MembershipReplicaCommitIndex, ["firewallDrops"] = s.MembershipServiceDroppedFirewall,
            });
        }
        Console.CancelKeyPress += (_, e) => { e.Cancel = true; stop.Set(); };
        AppDomain.CurrentDomain.ProcessExit += (_, _) => stop.Set();
        var reader = new Thread(() =>
        {
            while (Console.In.ReadLine() is { } line)
            {
                switch (line.Trim())
                {
                    case "status": Status(); break;
                    case "quit": stop.Set(); return;
                }
            }
            if (!detached) stop.Set();
        }) { IsBackground = true };
        reader.Start();
        while (!stop.Wait(statusMs > 0 ? statusMs : Timeout.Infinite))
        {
            if (runtime.HostedMembershipReplica is null)
            {
                replicaStopped = true;
                break;
            }
            Status();
        }
        runtime.Shutdown();
        if (replicaStopped) Console.Error.WriteLine("the membership replica stopped (see the processShutdown line or the log for why)");
        return replicaStopped ? 1 : 0;
    }

    /// <summary>A key file: the base64 of 32 bytes (surrounding whitespace ignored), as the setting Isis:SystemKey takes it.</summary>
    private static byte[] ReadKey(string option, string path)
    {
        string text;
        try
        {
            text = File.ReadAllText(path).Trim();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw new ArgumentException($"{option} {path}: {e.Message}");
        }
        byte[] key;
        try
        {
            key = Convert.FromBase64String(text);
        }
        catch (FormatException)
        {
            throw new ArgumentException($"{option} {path}: the file must hold the base64 of 32 random bytes (for example Convert.ToBase64String(RandomNumberGenerator.GetBytes(32))); it is not base64.");
        }
        return key.Length == 32 ? key : throw new ArgumentException($"{option} {path}: the key must be 32 bytes (a 256-bit key); the file's base64 decodes to {key.Length}.");
    }

    private static IPAddress LocalReplicaAddress(List<IPEndPoint> replicas)
    {
        var local = System.Net.NetworkInformation.NetworkInterface.GetAllNetworkInterfaces()
            .SelectMany(n => n.GetIPProperties().UnicastAddresses).Select(a => a.Address).ToHashSet();
        return replicas.Select(r => r.Address).FirstOrDefault(a => IPAddress.IsLoopback(a) || local.Contains(a)) ?? IPAddress.Loopback;
    }
}
