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
        // Suspicion 20 (2 s): ten processes' load on two cores stalls event loops for half a second at times, and this test is about the transfer.
        using var cluster = new MultiProcessCluster(output, "state-transfer", suspicionCount: 20);
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

    [Fact]
    public void After_SIGKILL_of_every_member_the_group_restarts_from_a_persistent_checkpoint_and_a_damaged_newest_one_falls_back_to_the_previous()
    {
        const int Members = 3, StateMiB = 4;
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-checkpoints-mp-");
        using var cluster = new MultiProcessCluster(output, "checkpointed", suspicionCount: 20);
        try
        {
            string[] Args(int i) => ["--state", "--checkpoints", Path.Combine(dir.FullName, $"member{i}"), "--expect-members", S(Members), "--joins-late"];
            MemberProcess[] members = cluster.StartMany(Members, Args);
            cluster.WaitForView(members, members, 0, Long, "three members formed");
            int from = members[0].LineCount;
            members[0].Command($"fill {StateMiB}");
            members[0].WaitFor("filled", Long, from: from);

            // Two saves at every member, with updates between and after them.
            string Save(int pairs, MemberProcess sender, int sends)
            {
                int at = sender.LineCount;
                sender.Command($"send {sends}");
                sender.WaitFor("sent", Long, s => (int)s["sent"]! == sends, from: at);
                string digest = Agreed(members, pairs, (long)StateMiB << 20);
                int[] marks = members.Select(m => m.LineCount).ToArray();
                foreach (MemberProcess m in members) m.Command("save");
                for (int i = 0; i < Members; i++) members[i].WaitFor("saved", Long, from: marks[i]);
                return digest;
            }
            string first = Save(100, members[1], 100);
            string second = Save(150, members[2], 50);
            Assert.NotEqual(first, second);
            string unsaved = Agreed(members, 150, (long)StateMiB << 20);
            int last = members[0].LineCount;
            members[0].Command("send 25");
            members[0].WaitFor("sent", Long, s => (int)s["sent"]! == 25, from: last);
            Assert.NotEqual(unsaved, Agreed(members, 175, (long)StateMiB << 20));

            // The whole group dies at once, and every newest checkpoint is damaged on disk.
            foreach (MemberProcess m in members) m.Kill();
            foreach (MemberProcess m in members) Assert.True(m.WaitForExit(TimeSpan.FromSeconds(10)));
            var group = Isis.Core.Identity.GroupId.FromName("checkpointed");
            Runtime.TestRuntimes.WaitUntil(() => cluster.Service.Loop?.Service is { } s && s.CommittedView(group) is null or { Members.Length: 0 }, "the service expels every killed member", 60);
            for (int i = 0; i < Members; i++)
            {
                string newest = Isis.Runtime.CheckpointFile.NewestPath(Path.Combine(dir.FullName, $"member{i}"), "checkpointed");
                byte[] bytes = File.ReadAllBytes(newest);
                bytes[bytes.Length / 3] ^= 0x01;
                File.WriteAllBytes(newest, bytes);
            }

            // Restarted: whoever founds the group restores its previous checkpoint, and the others receive that state.
            MemberProcess[] restarted = cluster.StartMany(Members, Args);
            cluster.WaitForView(restarted, restarted, 0, Long, "three restarted members formed");
            Assert.Equal(first, Agreed(restarted, 100, (long)StateMiB << 20));
            Assert.All(restarted, m => Assert.NotNull(m.Last("stateLoaded"))); // the founder from its disk, the others by transfer
            Assert.All(restarted, m => Assert.Contains("SHA-256 does not match", m.StandardError));
            cluster.Log($"after SIGKILL of all {Members} members, the group restarted from the previous checkpoint ({first}); the damaged newest ones were reported");
        }
        catch
        {
            output.WriteLine(cluster.Describe());
            throw;
        }
        finally
        {
            try { dir.Delete(recursive: true); } catch (IOException) { }
        }
    }

    /// <summary>Waits until every member holds <paramref name="pairs"/> messages and the blob, and returns the digest they agree on.</summary>
    private static string Agreed(MemberProcess[] members, int pairs, long blobBytes)
    {
        DateTime deadline = DateTime.UtcNow + Long;
        while (true)
        {
            JsonObject[] states = members.Select(Describe).ToArray();
            if (states.All(s => (int)s["pairs"]! == pairs && (long)s["blobBytes"]! == blobBytes))
            {
                string[] digests = states.Select(s => (string)s["sha256"]!).ToArray();
                Assert.All(digests, d => Assert.Equal(digests[0], d));
                return digests[0];
            }
            if (DateTime.UtcNow > deadline) Assert.Fail($"the replicas never held {pairs} messages: " + string.Join(", ", states.Select(s => s.ToJsonString())));
            Thread.Sleep(100);
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
