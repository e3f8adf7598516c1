using Isis.Core.Groups;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

/// <summary>
/// State transfer in the core (GroupMember.StateTransfer.cs): where the maker is asked, what a
/// joiner holds back until its checkpoint is whole, the window, restarts, and hostile packets.
/// </summary>
public class StateTransferTests
{
    private static byte[][] Chunks(int count, int size) =>
        Enumerable.Range(0, count).Select(k => Enumerable.Repeat((byte)k, size).ToArray()).ToArray();

    private static GroupMember Member(TestCluster c, int i) => c[i].FindGroup(TestCluster.G)!;

    [Fact]
    public void The_maker_is_asked_right_after_the_view_and_the_joiner_gets_the_chunks_then_the_view_then_the_messages()
    {
        var c = new TestCluster(3);
        c.Checkpoint = (_, _) => Chunks(5, 100);
        c.FormGroup(2);
        c.Send(0, "before");
        c.RunUntil(() => c.Delivered(1).Count == 1);

        c.Join(2);
        c.Send(2, "mine"); // issued while joining: held until the state is loaded
        c.RunUntil(() => c.CurrentView(2) is { Members.Length: 3 });
        c.Send(0, "after");
        c.RunUntil(() => c.Delivered(2).Count == 2 && c.Delivered(0).Count == 3);

        // The maker: the oldest member, asked right after installing the view, before any delivery in it.
        List<NodeEvent> maker = c.Events[0];
        int install = maker.FindIndex(e => e is ViewInstalled { View.Members.Length: 3 });
        Assert.IsType<StateRequested>(maker[install + 1]);
        Assert.Equal([c.Id(2)], ((StateRequested)maker[install + 1]).Joiners);
        Assert.Empty(c.Events[1].OfType<StateRequested>());

        // The joiner: five chunks in order, the end, its first view, then the view's messages (its own included).
        List<NodeEvent> joiner = c.Events[2];
        var chunks = joiner.OfType<StateChunkReceived>().Select(e => e.Chunk[0]).ToList();
        Assert.Equal([0, 1, 2, 3, 4], chunks);
        int received = joiner.FindIndex(e => e is StateReceived);
        int firstView = joiner.FindIndex(e => e is ViewInstalled);
        int firstDelivery = joiner.FindIndex(e => e is MessageDelivered);
        int firstSent = joiner.FindIndex(e => e is MessageSent);
        Assert.True(joiner.FindLastIndex(e => e is StateChunkReceived) < received && received < firstView && firstView < firstDelivery && firstView < firstSent,
            string.Join(", ", joiner.Select(e => e.GetType().Name)));
        Assert.DoesNotContain(c.Delivered(2), d => d.EndsWith(":before", StringComparison.Ordinal)); // that one is in the state
        Assert.False(Member(c, 2).AwaitingState);
        ClusterChecks.AssertVirtualSynchronyAndFifo(c);
    }

    [Fact]
    public void A_group_that_forms_with_several_new_members_is_founded_by_its_oldest_and_the_others_load_its_state()
    {
        // Each application would start from a checkpoint of its own (persistent checkpoints): only
        // the oldest of the first view may, and the others take its state, so all start equal.
        var c = new TestCluster(3);
        c.Checkpoint = (i, _) => [[(byte)i, 1], [(byte)i, 2]];
        for (int i = 0; i < 3; i++) c.Join(i);
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => c.CurrentView(i)?.Members.Length == 3));

        // Whatever the service batched into the first view, exactly one process founded the state,
        // before its first view, and every other loaded that founder's chunks before its first view.
        int[] founders = Enumerable.Range(0, 3).Where(i => c.Events[i].OfType<StateReset>().Any()).ToArray();
        int founder = Assert.Single(founders);
        StateReset founded = c.Events[founder].OfType<StateReset>().Single();
        Assert.Equal(StateOrigin.Founded, founded.Origin);
        Assert.True(c.Events[founder].IndexOf(founded) < c.Events[founder].FindIndex(e => e is ViewInstalled));
        Assert.Equal(c.Id(founder), c.Views(founder).First().Members[0]);
        Assert.Equal(3, c.Views(founder).First().Members.Length); // the joins arrived together: one view of three new members
        foreach (int other in Enumerable.Range(0, 3).Where(i => i != founder))
        {
            List<NodeEvent> events = c.Events[other];
            Assert.Equal([founder, founder], events.OfType<StateChunkReceived>().Select(ch => (int)ch.Chunk[0]));
            Assert.True(events.FindIndex(e => e is StateReceived) < events.FindIndex(e => e is ViewInstalled));
        }
        ClusterChecks.AssertVirtualSynchronyAndFifo(c);
    }

    [Fact]
    public void A_maker_sends_no_more_than_a_window_ahead_of_a_joiner_that_does_not_acknowledge()
    {
        var c = new TestCluster(3, new ProtocolOptions { StateWindowBytes = 4_000 });
        c.Checkpoint = (_, _) => Chunks(100, 1_000);
        c.FormGroup(2);
        c.DropWhere(e => e.Kind == PacketKind.StateAck); // the joiner's acknowledgements never arrive
        c.Join(2);
        c.RunFor(30_000); // less than the retransmission interval
        int sent = c.Events[2].OfType<StateChunkReceived>().Count();
        Assert.InRange(sent, 1, 5); // 4,000 bytes: four chunks of 1,000, plus the one that fills it
        Assert.True(Member(c, 2).AwaitingState);
        Assert.Equal(100_000, Member(c, 0).StateBacklogBytes); // the rest waits at the maker, nothing of it released

        c.ClearDrops();
        c.RunUntil(() => !Member(c, 2).AwaitingState, limit: 20_000_000);
        Assert.Equal(100, c.Events[2].OfType<StateChunkReceived>().Count());
        c.RunUntil(() => Member(c, 0).StateBacklogBytes == 0);
    }

    [Fact]
    public void A_maker_that_crashes_mid_transfer_is_replaced_and_the_joiner_loads_a_whole_checkpoint_made_later()
    {
        var c = new TestCluster(4, new ProtocolOptions { StateWindowBytes = 2_000 });
        c.Checkpoint = (i, r) => Chunks(20, 1_000).Select(ch => (byte[])[(byte)i, .. ch]).ToArray();
        c.FormGroup(3);
        // The oldest member makes the checkpoint; only its first three chunks get through, then it stops (a crash).
        c.DropWhere(e => e.Kind == PacketKind.StateChunk && e.From == c.Id(0).Endpoint && e.Header.Number > 3);
        c.Join(3);
        c.RunUntil(() => c.Events[3].OfType<StateChunkReceived>().Count() == 3);
        c[3].Flush(TestCluster.G, token: 42, minHolders: 0, c.Now); // issued while it waits: it must complete across the restart
        c.Stop(0);
        c.RunUntil(() => c.CurrentView(3) != null && !Member(c, 3).AwaitingState, limit: 20_000_000);

        List<NodeEvent> joiner = c.Events[3];
        Assert.Single(joiner.OfType<StateTransferAborted>());
        // What it loaded came whole from the next holder (process 1): the aborted chunks were voided.
        int aborted = joiner.FindIndex(e => e is StateTransferAborted);
        var after = joiner.Skip(aborted).OfType<StateChunkReceived>().ToList();
        Assert.Equal(20, after.Count);
        Assert.All(after, ch => Assert.Equal(1, ch.Chunk[0]));
        // The application saw its first view only after the whole checkpoint, and that view lacks the maker.
        GroupView first = joiner.OfType<ViewInstalled>().First().View;
        Assert.DoesNotContain(c.Id(0), first.Members);
        Assert.True(joiner.FindIndex(e => e is StateReceived) < joiner.FindIndex(e => e is ViewInstalled));
        c.RunUntil(() => c.Events[3].OfType<FlushCompleted>().Any(f => f.Token == 42));
    }

    [Fact]
    public void Chunks_from_a_member_that_is_not_the_maker_and_acknowledgements_from_a_stranger_are_dropped_and_counted()
    {
        var c = new TestCluster(3);
        c.FormGroup(3);
        GroupView view = c.CurrentView(0)!;
        long notForMe = c[2].Counters.DroppedNotForMe;
        // Member 1 claims a chunk of a transfer member 2 is not waiting for.
        c.Inject(2, c.Id(1).Endpoint, new PacketWriter().Begin(new PacketHeader(PacketKind.StateChunk, c.Id(1), TestCluster.G, view.Id, 1)).U8(1).Tail("forged"u8).Finish());
        Assert.Equal(notForMe + 1, c[2].Counters.DroppedNotForMe);
        Assert.DoesNotContain(c.Events[2].OfType<StateChunkReceived>(), e => e.Chunk.Length == 6);
        // An acknowledgement of a transfer the maker does not run.
        long atMaker = c[0].Counters.DroppedNotForMe;
        c.Inject(0, c.Id(2).Endpoint, new PacketWriter().Begin(new PacketHeader(PacketKind.StateAck, c.Id(2), TestCluster.G, view.Id, 5)).Finish());
        Assert.Equal(atMaker + 1, c[0].Counters.DroppedNotForMe);
        // A malformed chunk: a flag that is neither 0 nor 1.
        long malformed = c[2].Counters.DroppedMalformed;
        c.Inject(2, c.Id(0).Endpoint, new PacketWriter().Begin(new PacketHeader(PacketKind.StateChunk, c.Id(0), TestCluster.G, view.Id, 1)).U8(7).Finish());
        Assert.Equal(malformed + 1, c[2].Counters.DroppedMalformed);
        c.Send(0, "still works");
        c.RunUntil(() => c.Delivered(2).Count == 1);
    }

    [Fact]
    public void The_mutation_JoinerSkipsState_shows_the_joiners_first_view_before_its_state()
    {
        var c = new TestCluster(3, new ProtocolOptions { Mutations = ProtocolMutations.JoinerSkipsState });
        c.Checkpoint = (_, _) => Chunks(3, 10);
        c.FormGroup(3);
        List<NodeEvent> joiner = c.Events[2];
        Assert.True(joiner.FindIndex(e => e is ViewInstalled) < joiner.FindIndex(e => e is StateReceived));
    }
}
