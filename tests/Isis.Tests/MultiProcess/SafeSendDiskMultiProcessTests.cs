using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>SafeSend with disk durability across a SIGKILL of every member process.</summary>
[Collection(MultiProcessCollection.Name)]
public sealed class SafeSendDiskMultiProcessTests(ITestOutputHelper output)
{
    [Fact]
    public void Acknowledged_SafeSends_survive_SIGKILL_of_every_member_and_are_delivered_after_restart()
    {
        const int Members = 3, Sends = 50;
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-safelog-mp-");
        try
        {
            using var cluster = new MultiProcessCluster(output, "ledger", suspicionCount: 20);
            string Log(int i) => Path.Combine(dir.FullName, $"log{i}");
            string Order(int i, string round) => Path.Combine(dir.FullName, $"member{i}.{round}.order");

            // Round 1: every SafeSend is awaited by its sender, i.e. acknowledged by every acceptor (phi = all).
            MemberProcess[] first = cluster.StartMany(Members, i =>
                ["--primitive", "safe", "--sends", $"{Sends}", "--expect-members", $"{Members}", "--expect-deliveries", $"{Members * Sends}",
                 "--safelog", Log(i), "--order-file", Order(i, "before"), "--replay-after-ms", "3000"]);
            foreach (MemberProcess m in first) m.WaitFor("done", TimeSpan.FromSeconds(90));
            foreach (MemberProcess m in first) m.Command("dump");
            foreach (MemberProcess m in first) m.WaitFor("dumped", TimeSpan.FromSeconds(30));
            string[] before = File.ReadAllLines(Order(0, "before"));
            Assert.Equal(Members * Sends, before.Length);

            // The whole group dies at once: SIGKILL, no goodbyes.
            foreach (MemberProcess m in first) m.Kill();
            foreach (MemberProcess m in first) Assert.True(m.WaitForExit(TimeSpan.FromSeconds(10)));
            // Wait until the membership service has expelled them all: the group is gone (deleted once empty).
            var group = Isis.Core.Identity.GroupId.FromName("ledger");
            TestRuntimes.WaitUntil(() => cluster.Service.Loop?.Service is { } s && s.CommittedView(group) is null or { Members.Length: 0 }, "the service expels every killed member", 60);

            // Round 2: restart every member on its own log; the founder replays it to those that joined.
            MemberProcess[] second = cluster.StartMany(Members, i =>
                ["--primitive", "safe", "--sends", "0", "--expect-members", $"{Members}", "--expect-deliveries", $"{Members * Sends}",
                 "--safelog", Log(i), "--order-file", Order(i, "after"), "--replay-after-ms", "3000"]);
            foreach (MemberProcess m in second) m.WaitFor("done", TimeSpan.FromSeconds(90));
            foreach (MemberProcess m in second) m.Command("dump");
            foreach (MemberProcess m in second) m.WaitFor("dumped", TimeSpan.FromSeconds(30));
            for (int i = 0; i < Members; i++) Assert.Equal(before, File.ReadAllLines(Order(i, "after")));
        }
        finally
        {
            try { dir.Delete(recursive: true); } catch (IOException) { }
        }
    }
}
