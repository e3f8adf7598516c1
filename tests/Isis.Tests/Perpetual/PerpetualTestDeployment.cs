using System.Net;
using System.Security.Cryptography;
using Isis.Perpetual;
using Isis.Tests.Runtime;

namespace Isis.Tests.Perpetual;

/// <summary>
/// A deployment on loopback for the tests: services of the sizes asked, a client "front" of the
/// first, fresh ports and key; it starts replicas and disposes all of them.
/// </summary>
internal sealed class PerpetualTestDeployment : IDisposable
{
    public readonly PerpetualDeployment Deployment = new(RandomNumberGenerator.GetBytes(32));
    public readonly List<PerpetualReplica> Replicas = new();
    private readonly List<IDisposable> _others = new();

    public static readonly PerpetualOptions Options = new() { ViewChangeTimeout = TimeSpan.FromMilliseconds(300) };

    public PerpetualTestDeployment(params (string Name, int Replicas)[] services)
    {
        foreach (var (name, n) in services)
            Deployment.AddService(name, [.. Enumerable.Range(0, n).Select(_ => Loopback())]);
        Deployment.AddClient("front", Loopback());
    }

    public static IPEndPoint Loopback() => new(IPAddress.Loopback, TestRuntimes.FreeUdpPort());

    /// <summary>Starts every replica of <paramref name="service"/> with <paramref name="loop"/> (given the replica).</summary>
    public IReadOnlyList<PerpetualReplica> Start(string service, Func<PerpetualReplica, Task> loop)
    {
        var started = Enumerable.Range(0, Deployment.ReplicasOf(service).Count).Select(i => PerpetualReplica.Start(Deployment, service, i, loop, Options)).ToList();
        Replicas.AddRange(started);
        return started;
    }

    public PerpetualClient Client(string service)
    {
        var client = new PerpetualClient(Deployment, "front", service, Options);
        _others.Add(client);
        return client;
    }

    public void Dispose()
    {
        foreach (IDisposable d in _others) d.Dispose();
        foreach (PerpetualReplica r in Replicas) r.Dispose();
    }
}
