using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Isis.Perpetual;

namespace PaymentChain;

/// <summary>
/// The deployment of the chain on this machine: the three services of four replicas each (f = 1)
/// and the front end as the store's client, on loopback ports; and the replica processes.
/// </summary>
public sealed class Chain
{
    public static readonly string[] ServiceNames = [Services.Store, Services.Gateway, Services.Bank];
    public const int ReplicasPerService = 4;

    private Chain(byte[] key, int[] ports)
    {
        Key = key;
        Ports = ports;
        Deployment = new PerpetualDeployment(key);
        for (int s = 0; s < ServiceNames.Length; s++)
            Deployment.AddService(ServiceNames[s], [.. ports.Skip(s * ReplicasPerService).Take(ReplicasPerService).Select(p => new IPEndPoint(IPAddress.Loopback, p))]);
        Deployment.AddClient("front-end", new IPEndPoint(IPAddress.Loopback, ports[^1]));
    }

    public byte[] Key { get; }

    /// <summary>The replicas' ports, service after service, then the front end's.</summary>
    public int[] Ports { get; }

    public PerpetualDeployment Deployment { get; }

    /// <summary>A new chain: a fresh key and free ports.</summary>
    public static Chain Create() => new(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32), FreeUdpPorts(ServiceNames.Length * ReplicasPerService + 1));

    /// <summary>The chain a replica process was started for: <c>--key K --ports P,P,...</c>.</summary>
    public static Chain FromArguments(string key, string ports) =>
        new(Convert.FromBase64String(key), [.. ports.Split(',').Select(p => int.Parse(p, System.Globalization.CultureInfo.InvariantCulture))]);

    /// <summary>Starts replica <paramref name="index"/> of <paramref name="service"/> as a process of this program.</summary>
    public Process StartReplica(string service, int index)
    {
        string[] arguments = ["replica", service, index.ToString(System.Globalization.CultureInfo.InvariantCulture), "--key", Convert.ToBase64String(Key), "--ports", string.Join(',', Ports)];
        var start = new ProcessStartInfo(Environment.ProcessPath!) { UseShellExecute = false, RedirectStandardInput = true, RedirectStandardOutput = true };
        // Started as "dotnet PaymentChain.dll", ProcessPath is the dotnet host.
        if (Path.GetFileNameWithoutExtension(Environment.ProcessPath!) == "dotnet") start.ArgumentList.Add(typeof(Chain).Assembly.Location);
        foreach (string a in arguments) start.ArgumentList.Add(a);
        Process process = Process.Start(start)!;
        if (process.StandardOutput.ReadLine() != "ready") throw new InvalidOperationException($"{service}[{index}] did not start");
        return process;
    }

    /// <summary>Runs one replica until its parent closes its standard input (or dies).</summary>
    public void RunReplica(string service, int index)
    {
        Func<PerpetualReplica, Task> loop = service switch
        {
            Services.Store => Services.StoreLoop,
            Services.Gateway => Services.GatewayLoop,
            Services.Bank => Services.BankLoop,
            _ => throw new ArgumentException($"no service {service}: store, gateway or bank"),
        };
        using PerpetualReplica replica = PerpetualReplica.Start(Deployment, service, index, loop);
        Console.WriteLine("ready");
        Console.In.ReadToEnd();
    }

    private static int[] FreeUdpPorts(int count)
    {
        var sockets = Enumerable.Range(0, count).Select(_ =>
        {
            var s = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
            s.Bind(new IPEndPoint(IPAddress.Loopback, 0));
            return s;
        }).ToList();
        int[] ports = [.. sockets.Select(s => ((IPEndPoint)s.LocalEndPoint!).Port)];
        foreach (Socket s in sockets) s.Dispose();
        return ports;
    }
}
