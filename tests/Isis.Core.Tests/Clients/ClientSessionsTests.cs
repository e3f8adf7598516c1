using Isis.Core.Clients;
using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Core.Tests.Clients;

/// <summary>The members' client sessions: each request runs once, the floor forgets what lies below it, and a snapshot carries the table to a joiner.</summary>
public sealed class ClientSessionsTests
{
    private static readonly NodeId Alice = new(900, 1), Bob = new(901, 7);

    [Fact]
    public void A_request_runs_once_however_many_copies_arrive()
    {
        var s = new ClientSessions();
        Assert.True(s.TryBegin(Alice, 1, floor: 1));
        Assert.False(s.TryBegin(Alice, 1, floor: 1));
        Assert.True(s.TryBegin(Alice, 3, floor: 1)); // out of order: 2 is still outstanding at the client
        Assert.True(s.TryBegin(Alice, 2, floor: 1));
        Assert.False(s.TryBegin(Alice, 3, floor: 2));
        Assert.True(s.TryBegin(Bob, 1, floor: 1)); // sessions are per client incarnation
        Assert.True(s.TryBegin(new NodeId(900, 2), 1, floor: 1)); // a restarted client is a new session
        Assert.Equal(3, s.Count);
    }

    [Fact]
    public void Requests_below_the_clients_floor_never_run_again()
    {
        var s = new ClientSessions();
        Assert.True(s.TryBegin(Alice, 4, floor: 4));
        // The client had every answer below 6: a late copy of 5 (which never reached this member) is not run.
        Assert.False(s.TryBegin(Alice, 5, floor: 6));
        Assert.True(s.Ran(Alice, 5));
        Assert.False(s.TryBegin(Alice, 2, floor: 1)); // a copy carrying an older floor changes nothing
        Assert.True(s.TryBegin(Alice, 6, floor: 6));
    }

    [Fact]
    public void A_snapshot_carries_the_sessions_to_a_joiner_and_a_damaged_one_is_refused()
    {
        var maker = new ClientSessions();
        maker.TryBegin(Alice, 1, 1);
        maker.TryBegin(Alice, 3, 1);
        maker.TryBegin(Bob, 9, 9);
        byte[] snapshot = maker.Snapshot();
        var joiner = new ClientSessions();
        Assert.True(joiner.Load(snapshot));
        Assert.Equal(snapshot, joiner.Snapshot());
        Assert.False(joiner.TryBegin(Alice, 3, 1));
        Assert.True(joiner.TryBegin(Alice, 2, 1));
        Assert.False(joiner.TryBegin(Bob, 9, 9));

        var untouched = new ClientSessions();
        untouched.TryBegin(Alice, 1, 1);
        Assert.False(untouched.Load(snapshot.AsSpan(0, snapshot.Length - 3)));
        Assert.False(untouched.TryBegin(Alice, 1, 1)); // unchanged by the refused load
    }

    [Fact]
    public void A_client_that_holds_more_than_its_window_open_loses_its_oldest_entries()
    {
        var s = new ClientSessions();
        for (long n = 2; n <= ClientSessions.MaxAboveFloor + 2; n++) Assert.True(s.TryBegin(Alice, n, floor: 1));
        // Request 1 never came, so nothing was acknowledged: the window overflowed and the oldest went below the floor.
        Assert.True(s.Ran(Alice, 2));
        Assert.False(s.TryBegin(Alice, 1, floor: 1));
    }

    [Fact]
    public void The_mutation_runs_every_copy()
    {
        var s = new ClientSessions(ProtocolMutations.ClientRetriesRunTwice);
        Assert.True(s.TryBegin(Alice, 1, 1));
        Assert.True(s.TryBegin(Alice, 1, 1));
    }
}
