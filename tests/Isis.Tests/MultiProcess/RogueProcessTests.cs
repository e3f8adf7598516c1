using System.Buffers.Binary;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.Json.Nodes;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// Rogue processes against a keyed group of real processes (issue 14, item 4): the default
/// embedded membership service with a system key, a group with its own key. A process with another
/// group key is refused; one without the system key reaches no service; a datagram captured on the
/// loopback interface and sent again with its original source (a raw socket: root) is dropped as a
/// replay. Waits are liveness bounds, never timings.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class RogueProcessTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Long = TimeSpan.FromSeconds(60);
    private static readonly string SystemKey = Convert.ToHexString(Enumerable.Range(0, 32).Select(i => (byte)(0x11 * i)).ToArray());
    private static readonly string GroupKey = Convert.ToHexString(Enumerable.Range(0, 32).Select(i => (byte)(0xE0 ^ i)).ToArray());
    private static readonly string OtherGroupKey = Convert.ToHexString(Enumerable.Range(0, 32).Select(i => (byte)(0x0F + i)).ToArray());

    private static string S(long n) => n.ToString(CultureInfo.InvariantCulture);

    [Fact]
    public void A_process_with_another_group_key_is_refused_one_without_the_system_key_reaches_nothing_and_a_replayed_datagram_is_dropped()
    {
        if (Environment.UserName != "root")
        {
            output.WriteLine("skipped: capturing and re-sending a datagram with its original source needs raw sockets (root)");
            return;
        }
        const int Members = 3, Sends = 200;
        using var cluster = MultiProcessCluster.Embedded(output, "rogue", suspicionCount: 20);
        try
        {
            MemberProcess[] members = cluster.StartMany(Members, _ => ["--system-key", SystemKey, "--group-key", GroupKey, "--expect-members", S(Members)]);
            int formed = cluster.WaitForView(members, members, 0, Long, "three keyed members formed");

            // Another group key: its Join fails with the reason, and the group is back to three.
            MemberProcess wrongKey = cluster.Start(Members, "--system-key", SystemKey, "--group-key", OtherGroupKey, "--expect-members", S(Members + 1));
            JsonObject refused = wrongKey.WaitFor("error", Long);
            Assert.Contains("key", (string)refused["message"]!);
            cluster.WaitForView(members, members, formed, Long, "the members without the process that had another key");
            Assert.True(members.Sum(m => (long)m.Stats()["droppedUnauthenticated"]!) > 0);

            // No system key: it finds no service that answers it and stops, naming the key.
            MemberProcess keyless = cluster.Start(Members + 1, "--expect-members", S(Members + 2));
            JsonObject stopped = keyless.WaitFor("shutdown", Long);
            Assert.Contains("SystemKey", (string)stopped["reason"]!);

            // A replay: capture what member 0 sends member 1, then send it again with member 0's source.
            int from = (int)members[0].WaitFor("ready", Long)["port"]!;
            int to = (int)members[1].WaitFor("ready", Long)["port"]!;
            using var sniffer = new Socket(AddressFamily.InterNetwork, SocketType.Raw, ProtocolType.Udp);
            sniffer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
            sniffer.ReceiveTimeout = 1000;
            members[0].Command($"send {Sends}");
            byte[]? captured = Capture(sniffer, from, to);
            Assert.NotNull(captured);
            members[1].WaitFor("progress", Long, p => (long)p["total"]! == Sends);
            long replayedBefore = (long)members[1].Stats()["droppedReplayed"]!;

            using var injector = new Socket(AddressFamily.InterNetwork, SocketType.Raw, ProtocolType.Raw); // IPPROTO_RAW: we give the IP header
            int ipHeader = (captured![0] & 0x0F) * 4;
            BinaryPrimitives.WriteUInt16BigEndian(captured.AsSpan(ipHeader + 6), 0); // no UDP checksum (loopback leaves it partial)
            injector.SendTo(captured, new IPEndPoint(IPAddress.Loopback, 0));
            DateTime deadline = DateTime.UtcNow + Long;
            while ((long)members[1].Stats()["droppedReplayed"]! == replayedBefore)
            {
                Assert.True(DateTime.UtcNow < deadline, "the replayed datagram was never counted as a replay");
                Thread.Sleep(100);
            }
            // Nothing was delivered twice, and the group goes on.
            Assert.Equal(Sends, (long)members[1].Status()["total"]!);
            Assert.True((bool)members[1].Status()["fifoOk"]!);
            cluster.Log($"replayed a {captured.Length}-byte datagram from port {from} to {to}: counted as a replay, nothing delivered twice");
        }
        catch
        {
            output.WriteLine(cluster.Describe());
            throw;
        }
    }

    /// <summary>The first IPv4 datagram from 127.0.0.1:<paramref name="fromPort"/> to :<paramref name="toPort"/> the raw socket sees (IP header included), or null.</summary>
    private static byte[]? Capture(Socket sniffer, int fromPort, int toPort)
    {
        var buffer = new byte[70_000];
        DateTime deadline = DateTime.UtcNow + TimeSpan.FromSeconds(30);
        while (DateTime.UtcNow < deadline)
        {
            int n;
            try { n = sniffer.Receive(buffer); }
            catch (SocketException) { continue; } // a quiet second
            int ipHeader = (buffer[0] & 0x0F) * 4;
            if (n < ipHeader + 8) continue;
            int source = BinaryPrimitives.ReadUInt16BigEndian(buffer.AsSpan(ipHeader));
            int destination = BinaryPrimitives.ReadUInt16BigEndian(buffer.AsSpan(ipHeader + 2));
            if (source == fromPort && destination == toPort && n > ipHeader + 8 + 100) return buffer.AsSpan(0, n).ToArray();
        }
        return null;
    }
}
