using System.Buffers.Binary;
using System.Collections.Concurrent;
using System.Net;
using Isis.Core.Bft;
using Isis.Core.Node;
using Isis.Runtime;
using Isis.Tests.Runtime;
using Isis.Transport;

namespace Isis.Tests.Bft;

/// <summary>
/// A BFT service of four replicas and a client over real UDP sockets on loopback, each node on a
/// thread of its own (<see cref="NodeHost"/>): the protocols of the simulator, on the wire.
/// </summary>
public sealed class BftOverUdpTests
{
    private sealed class Service : IDisposable
    {
        public readonly BftDeployment Deployment = new();
        public readonly List<NodeHost> Replicas = new();
        public readonly NodeHost ClientHost;
        public readonly BftClient Client;
        public readonly BlockingCollection<(long Number, long Total)> Answers = new();

        public Service()
        {
            IPEndPoint[] replicas = [.. Enumerable.Range(0, 4).Select(_ => new IPEndPoint(IPAddress.Loopback, TestRuntimes.FreeUdpPort()))];
            var client = new IPEndPoint(IPAddress.Loopback, TestRuntimes.FreeUdpPort());
            Deployment.AddService("counter", [.. replicas.Select(EndpointConversions.FromIPEndPoint)]);
            int clientPrincipal = Deployment.AddClient(EndpointConversions.FromIPEndPoint(client));
            byte[] master = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
            var options = new BftOptions { ViewChangeTimeout = 300_000 };
            for (int i = 0; i < replicas.Length; i++)
            {
                var replica = new PbftReplica(Deployment, "counter", i, BftKeys.Derive(master, Deployment, Deployment.Service("counter").Replicas[i]), options, NodeHost.Now());
                long total = 0;
                NodeHost? host = null;
                host = new NodeHost(replica, replicas[i], (e, _) =>
                {
                    if (e is not BftRequestOrdered ordered) return;
                    total += BinaryPrimitives.ReadInt64LittleEndian(ordered.Operation);
                    byte[] result = BitConverter.GetBytes(total);
                    host!.Post(now => replica.Reply(ordered.Client, ordered.Number, result, now));
                }, $"counter {i}").Start();
                Replicas.Add(host);
            }
            Client = new BftClient(Deployment, "counter", BftKeys.Derive(master, Deployment, clientPrincipal), options);
            ClientHost = new NodeHost(Client, client, (e, _) =>
            {
                if (e is BftReplyAccepted accepted) Answers.Add((accepted.Number, BinaryPrimitives.ReadInt64LittleEndian(accepted.Result)));
            }, "client").Start();
        }

        /// <summary>Adds <paramref name="amount"/> and waits for the service's answer: the new total.</summary>
        public long Add(long amount)
        {
            ClientHost.Post(now => Client.Invoke(BitConverter.GetBytes(amount), now));
            Assert.True(Answers.TryTake(out var answer, TimeSpan.FromSeconds(20)), "no answer within 20 s");
            return answer.Total;
        }

        public void Dispose()
        {
            ClientHost.Dispose();
            foreach (NodeHost r in Replicas) r.Dispose();
        }
    }

    [Fact]
    public void Four_replicas_answer_a_client_over_udp_and_survive_a_backup_then_the_primary_being_killed()
    {
        using var service = new Service();
        long expected = 0;
        for (int i = 1; i <= 30; i++)
        {
            if (i == 11) service.Replicas[2].Dispose(); // a backup
            expected += i;
            Assert.Equal(expected, service.Add(i));
        }
        Assert.All(service.Replicas.Where((_, i) => i != 2), r => Assert.Null(r.StoppedBecause));
    }

    [Fact]
    public void A_killed_primary_is_replaced_by_a_view_change_and_no_answer_is_lost()
    {
        using var service = new Service();
        long expected = 0;
        for (int i = 1; i <= 20; i++)
        {
            if (i == 8) service.Replicas[0].Dispose(); // view 0's primary
            expected += i;
            Assert.Equal(expected, service.Add(i));
        }
    }
}
