using Isis.Core.Groups;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

public class SendTests
{
    private static List<string> Expected(int sender, int count, int firstSeq = 1) =>
        Enumerable.Range(firstSeq, count).Select(s => $"{sender}:{s}:m{s}").ToList();

    private static void SendMany(TestCluster c, int sender, int count, int firstSeq = 1)
    {
        for (int s = firstSeq; s < firstSeq + count; s++) c.Send(sender, $"m{s}");
    }

    [Fact]
    public void SenderGetsMessageSentAndItsOwnDeliveryAtOnceBeforeAnyPacketIsDelivered()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        int viewId = c.CurrentView(0)!.Id;
        int eventsBefore = c.Events[0].Count;

        c.Send(0, "m1");

        List<NodeEvent> fresh = c.Events[0].Skip(eventsBefore).ToList();
        Assert.Equal(2, fresh.Count);
        var sent = Assert.IsType<MessageSent>(fresh[0]);
        var delivered = Assert.IsType<MessageDelivered>(fresh[1]);
        Assert.Equal((viewId, 1L), (sent.ViewId, sent.Seq));
        Assert.Equal((viewId, 1L, c.Id(0)), (delivered.ViewId, delivered.Seq, delivered.Sender));
        Assert.Equal("m1"u8.ToArray(), delivered.Payload.ToArray());
        // Nothing has crossed the network yet: the Data packets are still in flight.
        Assert.Equal(2, c.InFlight);
        Assert.Empty(c.Delivered(1));
        Assert.Empty(c.Delivered(2));

        c.RunFor(10_000);
        Assert.Equal(["0:1:m1"], c.Delivered(1));
        Assert.Equal(["0:1:m1"], c.Delivered(2));
        Assert.Equal(["0:1:m1"], c.Delivered(0)); // delivered once at the sender, not again
    }

    [Fact]
    public void EachEventCarriesTheTimeOfTheStepThatProducedItWhenSeveralStepsPrecedeTheDrain()
    {
        // A driver may run several steps before it drains, and a process may be paused (SIGSTOP)
        // between them: an event log must stamp a Send with its own step's time, which the lease
        // checked, not with the drain's (after the pause, possibly after the service expelled it).
        var c = new TestCluster(2);
        c.FormGroup(2);
        ProcessNode node = c[0];
        long sendAt = c.Now + 7;
        long laterStep = sendAt + 10 * c.Options.HeartbeatInterval;

        node.Send(TestCluster.G, "m"u8.ToArray(), sendAt);
        node.Tick(laterStep);

        NodeOutputs step = node.TakeOutputs();
        int sent = step.Events.FindIndex(e => e is MessageSent);
        int delivered = step.Events.FindIndex(e => e is MessageDelivered);
        Assert.True(sent >= 0 && delivered >= 0, "the Send step produced MessageSent and the sender's own delivery");
        Assert.Equal(sendAt, step.EventTimes[sent]);
        Assert.Equal(sendAt, step.EventTimes[delivered]);
        Assert.Equal(laterStep, node.Now);
        Assert.False(node.HasReady); // advanced: the next step starts empty
    }

    [Fact]
    public void ReceiversDeliverEachSendersMessagesInFifoOrder()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        for (int s = 1; s <= 20; s++)
        {
            c.Send(0, $"a{s}");
            c.Send(1, $"b{s}");
            if (s % 5 == 0) c.RunFor(1_000);
        }
        c.RunFor(50_000);

        for (int i = 0; i < 3; i++)
        {
            List<string> d = c.Delivered(i);
            Assert.Equal(40, d.Count);
            Assert.Equal(Enumerable.Range(1, 20).Select(s => $"0:{s}:a{s}"), d.Where(x => x.StartsWith("0:")));
            Assert.Equal(Enumerable.Range(1, 20).Select(s => $"1:{s}:b{s}"), d.Where(x => x.StartsWith("1:")));
        }
    }

    [Fact]
    public void DroppedDataPacketIsRepairedByNakAndDeliveryStaysFifo()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        c.DropFirst(e => e.Kind == PacketKind.Data && e.Header.Number == 3 && e.To == c.Id(2).Endpoint);

        SendMany(c, 0, 6);
        c.RunFor(10_000 + 2 * c.Options.NakInterval);

        Assert.Single(c.Dropped);
        Assert.True(c[2].Counters.NaksSent > 0);
        Assert.True(c[2].Counters.Retransmissions > 0 || c[0].Counters.NaksSent == 0);
        Assert.Equal(Expected(0, 6), c.Delivered(2));
        Assert.Equal(Expected(0, 6), c.Delivered(1));
        Assert.Equal(0, c[1].Counters.NaksSent);
    }

    [Fact]
    public void HeldBackMessagesAreNotDeliveredAcrossAGap()
    {
        var c = new TestCluster(2);
        c.FormGroup(2);
        c.DropFirst(e => e.Kind == PacketKind.Data && e.Header.Number == 2);

        SendMany(c, 0, 4);
        c.DeliverAll();
        Assert.Equal(Expected(0, 1), c.Delivered(1)); // 3 and 4 wait for 2

        c.RunFor(3 * c.Options.NakInterval);
        Assert.Equal(Expected(0, 4), c.Delivered(1));
    }

    [Fact]
    public void TailLossIsRepairedThroughDigests()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        // The last message reaches nobody: only the sender's digest can reveal it exists.
        // (Two one-shot rules: the original packet to each receiver; NAK repairs pass.)
        for (int k = 0; k < 2; k++) c.DropFirst(e => e.Kind == PacketKind.Data && e.Header.Number == 5 && e.DataOrigin == 0);

        SendMany(c, 0, 5);
        c.DeliverAll();
        Assert.Equal(Expected(0, 4), c.Delivered(1));
        Assert.Equal(Expected(0, 4), c.Delivered(2));

        c.RunFor(c.Options.DigestInterval + 3 * c.Options.NakInterval);

        Assert.Equal(2, c.Dropped.Count);
        Assert.Equal(Expected(0, 5), c.Delivered(1));
        Assert.Equal(Expected(0, 5), c.Delivered(2));
        Assert.True(c[1].Counters.NaksSent > 0 && c[2].Counters.NaksSent > 0);
    }

    [Fact]
    public void StableMessagesAreGarbageCollectedOnceDigestsFlow()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        GroupMember sender = c[0].FindGroup(TestCluster.G)!;

        SendMany(c, 0, 10);
        Assert.Equal(10, sender.UnstableOwnMessages);

        c.RunFor(10 * c.Options.DigestInterval);
        Assert.Equal(0, sender.UnstableOwnMessages);
        // Receivers hold nothing above stability either: a flush report would carry no messages.
        Assert.All(Enumerable.Range(0, 3), i => Assert.Contains("r0:c10/d10/s10/h0", c[i].FindGroup(TestCluster.G)!.Describe()));
    }

    [Fact]
    public void MessagesStayUnstableWhileAMemberLacksThem()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        GroupMember sender = c[0].FindGroup(TestCluster.G)!;
        c.DropWhere(e => e.Kind is PacketKind.Data or PacketKind.Nak && (e.To == c.Id(2).Endpoint || e.From == c.Id(2).Endpoint));

        SendMany(c, 0, 3);
        c.RunFor(10 * c.Options.DigestInterval);
        Assert.Equal(3, sender.UnstableOwnMessages);

        c.ClearDrops();
        c.RunFor(10 * c.Options.DigestInterval);
        Assert.Equal(0, sender.UnstableOwnMessages);
        Assert.Equal(Expected(0, 3), c.Delivered(2));
    }

    [Fact]
    public void SendsIssuedWhileJoiningAreSentAfterTheFirstViewInstalls()
    {
        var c = new TestCluster(2);
        c.FormGroup(1);
        GroupMember joiner = c.Join(1);
        c.Send(1, "early1");
        c.Send(1, "early2");

        Assert.Equal(MemberState.Joining, joiner.State);
        Assert.Equal(2, joiner.PendingSends);
        Assert.Empty(c.Events[1].OfType<MessageSent>());

        c.RunUntil(() => c.CurrentView(1) != null);
        c.RunFor(20_000);

        int viewId = c.CurrentView(1)!.Id;
        List<NodeEvent> log = c.Events[1];
        int installedAt = log.FindIndex(e => e is ViewInstalled);
        int firstSentAt = log.FindIndex(e => e is MessageSent);
        Assert.True(installedAt >= 0 && firstSentAt > installedAt, "sent only after the first view installed");
        Assert.All(log.OfType<MessageSent>(), m => Assert.Equal(viewId, m.ViewId));
        Assert.Equal(0, joiner.PendingSends);
        Assert.Equal(["1:1:early1", "1:2:early2"], c.Delivered(0));
        Assert.Equal(["1:1:early1", "1:2:early2"], c.Delivered(1));
        Assert.All(c.Events[0].OfType<MessageDelivered>(), d => Assert.Equal(viewId, d.ViewId));
    }
}
