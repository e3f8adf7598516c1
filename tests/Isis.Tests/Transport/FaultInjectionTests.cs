using Isis.Transport;
using static Isis.Tests.Transport.TransportTestKit;

namespace Isis.Tests.Transport;

public sealed class FaultInjectionTests
{
    [Fact]
    public void FaultsAreOffByDefault()
    {
        Assert.Null(new UdpTransportOptions().Faults);
        using var a = new Peer();
        for (int i = 0; i < 100; i++)
        {
            a.Transport.Enqueue(a.Endpoint, [1]);
            a.Transport.Flush();
        }
        Assert.True(WaitUntil(() => a.Inbox.Count == 100));
        Assert.Equal(0, a.Transport.Counters.InjectedFaults);
    }

    [Fact]
    public void DropProbabilityDropsRoughlyThatFraction()
    {
        const int Count = 2_000;
        using var a = new Peer(new UdpTransportOptions { Faults = new TransportFaultOptions { Seed = 5, DropProbability = 0.3 } });
        using var b = new Peer();

        // One packet per datagram, so each packet faces the drop decision alone.
        for (int i = 0; i < Count; i++)
        {
            a.Transport.Enqueue(b.Endpoint, SequencedPacket(i, 16));
            a.Transport.Flush();
        }

        long dropped = a.Transport.Counters.InjectedDrops;
        Assert.InRange(dropped, Count * 0.2, Count * 0.4);
        Assert.Equal(dropped, a.Transport.Counters.InjectedFaults);
        Assert.Equal(Count - dropped, a.Transport.Counters.DatagramsSent);
        Assert.True(WaitUntil(() => b.Inbox.Count == Count - dropped), $"received {b.Inbox.Count}, expected {Count - dropped}");
        // The survivors still arrive in order.
        var sequences = b.Inbox.Snapshot().Select(p => SequenceOf(p.Packet)).ToList();
        Assert.Equal(sequences.Order(), sequences);
    }

    [Fact]
    public void DuplicatesAndDelaysDeliverEverythingAtLeastOnce()
    {
        const int Count = 1_000;
        var faults = new TransportFaultOptions
        {
            Seed = 9,
            DuplicateProbability = 0.2,
            DelayProbability = 0.2,
            MaxDelay = TimeSpan.FromMilliseconds(2),
            MaxHeldDatagrams = 50,
        };
        using var a = new Peer(new UdpTransportOptions { Faults = faults });
        using var b = new Peer();

        for (int i = 0; i < Count; i++)
        {
            a.Transport.Enqueue(b.Endpoint, SequencedPacket(i, 16));
            a.Transport.Flush();
            Assert.True(a.Transport.HeldFaultDatagrams <= faults.MaxHeldDatagrams);
        }
        // Held datagrams leave from the send path: keep flushing until they are all out.
        Assert.True(WaitUntil(() =>
        {
            a.Transport.Flush();
            return a.Transport.HeldFaultDatagrams == 0;
        }));

        TransportCounters c = a.Transport.Counters;
        Assert.InRange(c.InjectedDuplicates, Count * 0.1, Count * 0.3);
        Assert.InRange(c.InjectedDelays, Count * 0.1, Count * 0.4);
        long expected = Count + c.InjectedDuplicates;
        Assert.Equal(expected, c.DatagramsSent);
        Assert.True(WaitUntil(() => b.Inbox.Count == expected), $"received {b.Inbox.Count}, expected {expected}");
        var sequences = b.Inbox.Snapshot().Select(p => SequenceOf(p.Packet)).ToList();
        Assert.Equal(Enumerable.Range(0, Count), sequences.Distinct().Order());
    }

    [Fact]
    public void InvalidProbabilitiesAreRejected()
    {
        var options = new UdpTransportOptions { Faults = new TransportFaultOptions { DropProbability = 1.5 } };
        Assert.Throws<ArgumentOutOfRangeException>(options.Validate);
    }
}
