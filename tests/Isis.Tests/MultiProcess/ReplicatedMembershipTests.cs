using System.Globalization;
using System.Reflection;
using System.Text.Json.Nodes;
using Isis.Simulation;
using Isis.Simulation.Checking;
using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// Three membership replicas, each a process of its own (tools/Isis.Oracle), serve a group of
/// member processes. The leading replica is SIGKILLed while members join.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class ReplicatedMembershipTests(ITestOutputHelper output)
{
    private const int Sends = 40;
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(60);

    private static string OraclePath =>
        typeof(ReplicatedMembershipTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "IsisOracleDll").Value!;

    /// <summary>A replica's term, vote and log must survive reboots: a dedicated replica has no default folder for them (a temporary one would not).</summary>
    [Fact]
    public async Task A_dedicated_replica_refuses_to_start_without_a_data_directory()
    {
        (int code, string log) = await Tools.DotnetTool.RunToExit([OraclePath, "--replicas", $"127.0.0.1:{TestRuntimes.FreeUdpPort()}"], Deadline);
        Assert.Equal(2, code);
        Assert.Contains("--data is required", log);
    }

    [Fact]
    public async Task A_dedicated_replica_given_the_system_key_in_a_file_serves_processes_with_the_key_and_no_others()
    {
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-oracle-key-");
        byte[] key = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
        string keyFile = Path.Combine(dir.FullName, "system.key");
        File.WriteAllText(keyFile, Convert.ToBase64String(key) + "\n");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(keyFile, UnixFileMode.UserRead | UnixFileMode.UserWrite); // as an operator would keep it
        string replica = $"127.0.0.1:{TestRuntimes.FreeUdpPort()}";
        MemberProcess? service = null;
        try
        {
            // A key file that is not a key: the replica does not start, and says why.
            string bad = Path.Combine(dir.FullName, "bad.key");
            File.WriteAllText(bad, "not a key");
            (int code, string log) = await Tools.DotnetTool.RunToExit([OraclePath, "--replicas", replica, "--data", dir.FullName, "--system-key-file", bad], Deadline);
            Assert.Equal(2, code);
            Assert.Contains("not base64", log);

            service = MemberProcess.StartProgram("replica", OraclePath, [], ["--replicas", replica, "--data", dir.FullName, "--status-ms", "100", "--system-key-file", keyFile]);
            service.WaitFor("ready", Deadline);
            using var runtimes = new TestRuntimes();
            IsisRuntime Client(byte[]? systemKey) => runtimes.Start(o =>
            {
                o.MembershipService = MembershipServiceMode.Client;
                o.MembershipReplicas.Add(System.Net.IPEndPoint.Parse(replica));
                o.SystemKey = systemKey;
            });
            var keyed = new Group(Client(key), "sealed-by-file");
            keyed.Join();
            Assert.Single(keyed.GetView()!.Members);
            // Without the key the replica answers nothing: the process gives up on the service.
            var outsider = new Group(Client(null), "sealed-by-file");
            IsisException e = Assert.ThrowsAny<IsisException>(outsider.Join);
            Assert.Contains("no membership replica answered", e.Message); // it never heard from the service: not "isolated"
            Assert.Contains("SystemKey", e.Message);
            Assert.Single(keyed.GetView()!.Members);
        }
        finally
        {
            service?.Dispose();
            dir.Delete(recursive: true);
        }
    }

    [Fact]
    public void Killing_the_leading_replica_while_members_join_loses_no_decision_and_the_restarted_replica_catches_up()
    {
        DirectoryInfo dir = Directory.CreateTempSubdirectory("isis-replicas-");
        var processes = new List<MemberProcess>();
        var log = new ElapsedLog(output);
        void Log(string text) => log.Write(text);
        try
        {
            string replicas = string.Join(",", Enumerable.Range(0, 3).Select(_ => $"127.0.0.1:{TestRuntimes.FreeUdpPort()}"));
            string[] timing = ["--heartbeat-ms", "100", "--suspicion", "20"];
            MemberProcess StartReplica(int i)
            {
                // Started one at a time: each hosts the first replica address still free, so replica i gets address i.
                MemberProcess r = MemberProcess.StartProgram($"replica{i}", OraclePath, [],
                    ["--replicas", replicas, "--data", dir.FullName, "--status-ms", "100", .. timing]);
                lock (processes) processes.Add(r);
                Log($"replica{i}: pid {r.Pid} at {r.Address}");
                return r;
            }
            MemberProcess StartMember(int i)
            {
                MemberProcess m = MemberProcess.Start($"member{i}",
                    "--replicas", replicas, "--group", "ledger", "--index", i.ToString(CultureInfo.InvariantCulture),
                    "--expect-members", "5", "--sends", Sends.ToString(CultureInfo.InvariantCulture),
                    "--expect-deliveries", (5 * Sends).ToString(CultureInfo.InvariantCulture),
                    "--event-log", Path.Combine(dir.FullName, $"member{i}.jsonl"), "--opcode-check", timing[0], timing[1], timing[2], timing[3]);
                lock (processes) processes.Add(m);
                Log($"member{i}: pid {m.Pid} at {m.Address}");
                return m;
            }
            MemberProcess Leader(IEnumerable<MemberProcess> among)
            {
                MemberProcess? found = null;
                TestRuntimes.WaitUntil(() => (found = among.FirstOrDefault(r => r.Last("status") is { } s && (bool)s["leader"]!)) != null,
                    "a replica leads", (int)Deadline.TotalSeconds);
                return found!;
            }

            MemberProcess[] service = Enumerable.Range(0, 3).Select(StartReplica).ToArray();
            MemberProcess first = Leader(service);
            long firstTerm = (long)first.Last("status")!["term"]!;
            Log($"{first.Name} leads in term {firstTerm}");

            MemberProcess[] members = Enumerable.Range(0, 3).Select(StartMember).ToArray();
            foreach (MemberProcess m in members) m.WaitFor("view", Deadline, v => ((JsonArray)v["members"]!).Count == 3);
            Log("three members in one view");

            // Two more join, and the leader dies while their joins are under way.
            MemberProcess[] joiners = [StartMember(3), StartMember(4)];
            first.Kill();
            Assert.True(first.WaitForExit(TimeSpan.FromSeconds(10)));
            Log($"SIGKILLed the leading {first.Name}");

            MemberProcess[] all = [.. members, .. joiners];
            foreach (MemberProcess m in all) m.WaitFor("done", TimeSpan.FromSeconds(90));
            Log($"every member saw 5 members and delivered all {5 * Sends} messages");

            MemberProcess[] survivors = service.Where(r => r != first).ToArray();
            MemberProcess second = Leader(survivors);
            JsonObject leaderStatus = second.Last("status")!;
            long secondTerm = (long)leaderStatus["term"]!;
            long committed = (long)leaderStatus["committed"]!;
            Assert.True(secondTerm > firstTerm, $"a new leader was elected (term {secondTerm} after {firstTerm})");
            Log($"{second.Name} leads in term {secondTerm} with {committed} decisions committed");

            // The killed replica restarts on its log and catches up with everything decided without it.
            MemberProcess restarted = StartReplica(Array.IndexOf(service, first));
            restarted.WaitFor("status", Deadline, s => (long)s["committed"]! >= committed && (long)s["term"]! >= secondTerm);
            Log($"{restarted.Name} restarted and caught up to {committed} decisions");

            // Every member's history, merged: one view sequence, virtual synchrony, FIFO, no decision lost.
            foreach (MemberProcess m in all) m.Command("quit");
            foreach (MemberProcess m in all) m.WaitForExit(TimeSpan.FromSeconds(15));
            var logs = Enumerable.Range(0, 5).Select(i => EventLogMerge.Read(Path.Combine(dir.FullName, $"member{i}.jsonl"))).ToList();
            History history = EventLogMerge.Merge(logs).History;
            CheckResult result = HistoryChecker.Check(history);
            Log(result.ToString());
            Assert.True(result.Passed, result.ToString());
            int[] views = history.Events.Where(e => e.Kind == HistoryEventKind.ViewInstall).Select(e => e.ViewId).Distinct().Order().ToArray();
            Assert.Equal(Enumerable.Range(views[0], views.Length), views); // no view id skipped or decided twice
        }
        catch
        {
            lock (processes) foreach (MemberProcess p in processes) output.WriteLine(p.Describe());
            throw;
        }
        finally
        {
            lock (processes) foreach (MemberProcess p in processes) p.Dispose();
            try { dir.Delete(recursive: true); } catch (IOException) { /* best effort */ }
        }
    }
}
