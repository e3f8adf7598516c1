using System.Globalization;
using System.Text.Json.Nodes;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// State transfer between real processes (issue 14, item 4): members keep a replicated state
/// (tests/Isis.MemberHost/ReplicatedState.cs: the messages they applied plus a blob grown by Sends),
/// and a process that joins under load gets it by checkpoint. Waits are liveness bounds, never timings.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class StateTransferMultiProcessTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Long = TimeSpan.FromSeconds(120);

    private static string S(long n) => n.ToString(CultureInfo.InvariantCulture);

    [Fact]
    public void A_five_member_group_under_load_adds_a_member_with_a_50_MB_state_and_all_six_agree_afterwards()
    {
        const int Members = 5, Sends = 20_000, StateMiB = 50;
        using var cluster = new MultiProcessCluster(output, "state-transfer");
        try
        {
            MemberProcess[] members = cluster.StartMany(Members, _ => ["--state", "--expect-members", S(Members)]);
            cluster.WaitForView(members, members, 0, Long, "five members formed");

            // The state: 50 MiB written by Sends, applied at every member.
            int from = members[0].LineCount;
            members[0].Command($"fill {StateMiB}");
            members[0].WaitFor("filled", Long, from: from);
            foreach (MemberProcess m in members) WaitForState(m, blobBytes: (long)StateMiB << 20);
            cluster.Log($"every member holds the {StateMiB} MiB state");

            // Load: every member sends while the sixth joins.
            foreach (MemberProcess m in members) m.Command($"send {Sends}");
            MemberProcess joiner = cluster.Start(Members, "--state", "--joins-late", "--expect-members", S(Members + 1));
            JsonObject joined = joiner.WaitFor("joined", Long);
            JsonObject loaded = joiner.WaitFor("stateLoaded", TimeSpan.FromSeconds(5));
            double ms = (double)joined["ms"]!;
            cluster.Log($"the joiner loaded {(long)loaded["bytes"]!} bytes; Join took {ms:0} ms ({((long)StateMiB << 20) / 1e6 / (ms / 1000):0.0} MB/s including the view change)");
            Assert.Equal((long)StateMiB << 20, (long)loaded["bytes"]!);
            // The members' traffic went on while the state streamed: each member's sends complete.
            foreach (MemberProcess m in members) m.WaitFor("sent", Long, s => (int)s["sent"]! == Sends);

            // Afterwards all six hold the same state: every message applied once, the same blob.
            MemberProcess[] all = [.. members, joiner];
            string? agreed = null;
            DateTime deadline = DateTime.UtcNow + Long;
            while (true)
            {
                JsonObject[] states = all.Select(m => Describe(m)).ToArray();
                bool complete = states.All(s => (int)s["pairs"]! == Members * Sends && (long)s["blobBytes"]! == (long)StateMiB << 20);
                if (complete)
                {
                    string[] digests = states.Select(s => (string)s["sha256"]!).ToArray();
                    Assert.All(digests, d => Assert.Equal(digests[0], d));
                    agreed = digests[0];
                    break;
                }
                if (DateTime.UtcNow > deadline) Assert.Fail("the replicas never held every message: " + string.Join(", ", states.Select(s => s.ToJsonString())));
                Thread.Sleep(200);
            }
            cluster.Log($"all six replicas agree: {agreed}");
            JsonObject made = members.Select(m => m.Last("stateMade")).Last(x => x != null)!;
            Assert.Equal((long)StateMiB << 20, (long)made["bytes"]!);
        }
        catch
        {
            output.WriteLine(cluster.Describe());
            throw;
        }
    }

    private static JsonObject Describe(MemberProcess m)
    {
        int from = m.LineCount;
        m.Command("state");
        return m.WaitFor("state", TimeSpan.FromSeconds(30), from: from);
    }

    private static void WaitForState(MemberProcess m, long blobBytes)
    {
        DateTime deadline = DateTime.UtcNow + Long;
        while ((long)Describe(m)["blobBytes"]! < blobBytes)
        {
            if (DateTime.UtcNow > deadline) throw new TimeoutException($"{m.Name} never held {blobBytes} bytes of state");
            Thread.Sleep(100);
        }
    }
}
