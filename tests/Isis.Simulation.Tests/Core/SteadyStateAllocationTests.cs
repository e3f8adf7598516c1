using Isis.Simulation;

namespace Isis.Simulation.Tests.Core;

/// <summary>
/// DESIGN.md section 5: the steady-state Send path allocates nothing per message. Here the whole
/// path through the protocol core of a 3-member group (the sender's Send into a pooled buffer, its
/// packets, both receivers' Receive and delivery, digests, stability and the return of every held
/// buffer) runs on this thread, so the thread's allocation counter measures it exactly.
/// </summary>
public sealed class SteadyStateAllocationTests
{
    [Fact]
    public void Sends_through_the_core_allocate_nothing_per_message_once_warm()
    {
        var cluster = new CoreCluster(3);
        cluster.FormGroup();
        var payload = new byte[100];
        // Warm-up: pools, free lists, collections and the JIT reach their working size.
        Assert.Equal(0, SendMany(cluster, payload, 50_000));

        const int Messages = 100_000;
        long before = GC.GetAllocatedBytesForCurrentThread();
        int missing = SendMany(cluster, payload, Messages);
        long allocated = GC.GetAllocatedBytesForCurrentThread() - before;

        Assert.Equal(0, missing);
        // What remains runs on the protocol's timers, not per message: heartbeats and the
        // membership service's answers, about 5 KB in the 1 s of virtual time these Sends take
        // (10 us each). A tenth of a byte per message allows for that; any per-message object
        // would cost 24 B or more per message.
        Assert.True(allocated <= Messages / 10, $"{allocated:N0} B for {Messages:N0} Sends ({allocated / (double)Messages:N2} B per message)");
    }

    /// <summary>Sends <paramref name="count"/> messages; returns how many were not delivered at all three members. Asserts nothing inside: assertions allocate.</summary>
    private static int SendMany(CoreCluster cluster, byte[] payload, int count)
    {
        int missing = 0;
        for (int i = 0; i < count; i++)
        {
            if (cluster.SendAndRoute(payload) != 3) missing++;
        }
        return missing;
    }
}
