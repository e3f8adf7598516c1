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

        // The least of several windows is measured: the runtime itself allocates on this thread
        // now and then (tiered JIT installing optimized code, type loads), and on a loaded
        // machine that can land in any one window. A per-message object would show in every one.
        const int Messages = 100_000;
        const int Windows = 8; // stops at the first quiet one; under a loaded machine the JIT may land in several in a row
        long least = long.MaxValue;
        int missing = 0;
        for (int w = 0; w < Windows && least > Messages / 10; w++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            missing += SendMany(cluster, payload, Messages);
            least = Math.Min(least, GC.GetAllocatedBytesForCurrentThread() - before);
        }

        Assert.Equal(0, missing);
        // What remains runs on the protocol's timers, not per message: heartbeats and the
        // membership service's answers, about 5 KB in the 1 s of virtual time these Sends take
        // (10 us each). A tenth of a byte per message allows for that; any per-message object
        // would cost 24 B or more per message.
        Assert.True(least <= Messages / 10, $"{least:N0} B for {Messages:N0} Sends ({least / (double)Messages:N2} B per message) in the best of {Windows} windows");
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
