using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Reflection;
using System.Security.Cryptography;
using Isis.Core.Node;
using Isis.Perpetual;
using Isis.Perpetual.Runtime;
using Isis.Tests.Runtime;
using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// A two-tier Perpetual deployment of real processes on loopback: four "caller" replicas (a store)
/// that serve each client request by calling four "target" replicas (a bank), each replica a
/// process of tests/Isis.PerpetualHost. Replicas are killed with SIGKILL, and one target replica is
/// a Byzantine build (wrong replies, equivocating pre-prepares as primary); every call still
/// completes with the right result. At most f = 1 replica of each service is faulty at a time.
/// Every replica records what it did, and the simulator's checker reads the records afterwards.
/// </summary>
public sealed class PerpetualMultiProcessTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    private static string HostDll =>
        typeof(PerpetualMultiProcessTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "IsisPerpetualHostDll").Value!;

    private sealed class Deployment : IDisposable
    {
        private readonly ITestOutputHelper _output;
        public readonly Process[] Callers = new Process[4];
        public readonly Process[] Targets = new Process[4];
        public readonly PerpetualClient Client;
        private readonly List<string> _stderr = new();
        private readonly string _records = Directory.CreateTempSubdirectory("isis-perpetual-").FullName;
        private readonly ConcurrentQueue<NodeEvent> _clientEvents = new();
        private readonly PerpetualDeployment _deployment;
        private readonly int _byzantineTarget;

        public Deployment(ITestOutputHelper output, int byzantineTarget = -1)
        {
            _output = output;
            byte[] key = RandomNumberGenerator.GetBytes(32);
            int[] callers = [.. Enumerable.Range(0, 4).Select(_ => TestRuntimes.FreeUdpPort())];
            int[] targets = [.. Enumerable.Range(0, 4).Select(_ => TestRuntimes.FreeUdpPort())];
            int client = TestRuntimes.FreeUdpPort();
            string[] common = [Convert.ToBase64String(key), string.Join(',', callers), string.Join(',', targets), client.ToString(System.Globalization.CultureInfo.InvariantCulture)];
            for (int i = 0; i < 4; i++)
            {
                Targets[i] = Launch("target", i, common, byzantine: i == byzantineTarget);
                Callers[i] = Launch("caller", i, common, byzantine: false);
            }
            foreach (Process p in Targets.Concat(Callers))
                Assert.Equal("ready", p.StandardOutput.ReadLineAsync().WaitAsync(Patience).GetAwaiter().GetResult());
            _byzantineTarget = byzantineTarget;
            _deployment = new PerpetualDeployment(key)
                .AddService("caller", [.. callers.Select(p => new IPEndPoint(IPAddress.Loopback, p))])
                .AddService("target", [.. targets.Select(p => new IPEndPoint(IPAddress.Loopback, p))])
                .AddClient("test", new IPEndPoint(IPAddress.Loopback, client));
            Client = new PerpetualClient(_deployment, "test", "caller", new PerpetualOptions { ViewChangeTimeout = TimeSpan.FromMilliseconds(300) }, _clientEvents.Enqueue);
        }

        private Process Launch(string role, int index, string[] common, bool byzantine)
        {
            var psi = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true, RedirectStandardInput = true, UseShellExecute = false };
            psi.ArgumentList.Add(HostDll);
            psi.ArgumentList.Add(role);
            psi.ArgumentList.Add(index.ToString(System.Globalization.CultureInfo.InvariantCulture));
            foreach (string a in common) psi.ArgumentList.Add(a);
            if (byzantine) psi.ArgumentList.Add("byzantine");
            psi.ArgumentList.Add("--record");
            psi.ArgumentList.Add(RecordOf(role, index));
            Process p = Process.Start(psi)!;
            string name = $"{role}[{index}]{(byzantine ? " byzantine" : "")}";
            p.ErrorDataReceived += (_, e) =>
            {
                if (e.Data == null) return;
                lock (_stderr) _stderr.Add($"{name}: {e.Data}");
            };
            p.BeginErrorReadLine();
            return p;
        }

        private string RecordOf(string role, int index) => Path.Combine(_records, $"{role}-{index}.log");

        /// <summary>The simulator's checker over what every replica and the client recorded: no violation.</summary>
        public void AssertCheckerFindsNothing()
        {
            IReadOnlyList<string> violations = PerpetualRecords.Check(_deployment, [.. Enumerable.Range(0, 4).Select(i => RecordOf("caller", i))],
                [.. Enumerable.Range(0, 4).Select(i => RecordOf("target", i))], [.. _clientEvents], _byzantineTarget);
            Assert.True(violations.Count == 0, "the checker found: " + string.Join("; ", violations));
            Assert.True(File.ReadAllLines(RecordOf("caller", 1)).Count(l => l.StartsWith("ordered", StringComparison.Ordinal)) >= 30, "the records hold the run");
        }

        /// <summary>Sends <paramref name="amount"/> through the caller to the target: [requests the caller served, the target's total].</summary>
        public long[] Pay(long amount) => Client.InvokeAsync<long, long[]>(amount).WaitAsync(Patience).GetAwaiter().GetResult();

        /// <summary>Closes a correct replica's stdin and reads what it says as it stops: its view, executed count, divergent messages and dropped packets.</summary>
        public Dictionary<string, long> Stats(Process p)
        {
            p.StandardInput.Close();
            string? line;
            while ((line = p.StandardOutput.ReadLineAsync().WaitAsync(Patience).GetAwaiter().GetResult()) != null && !line.StartsWith("stats ", StringComparison.Ordinal))
            {
            }
            Assert.NotNull(line);
            _output.WriteLine(line);
            return line["stats ".Length..].Split(' ').Select(kv => kv.Split('=')).ToDictionary(kv => kv[0], kv => long.Parse(kv[1], System.Globalization.CultureInfo.InvariantCulture));
        }

        public static void Kill(Process p)
        {
            p.Kill(); // SIGKILL
            Assert.True(p.WaitForExit(10_000));
        }

        public void Dispose()
        {
            Client.Dispose();
            foreach (Process p in Targets.Concat(Callers))
            {
                if (!p.HasExited) p.Kill();
                p.WaitForExit(10_000);
                p.Dispose();
            }
            lock (_stderr)
            {
                foreach (string line in _stderr) _output.WriteLine(line);
            }
            Directory.Delete(_records, recursive: true);
        }
    }

    [Fact]
    public async Task Every_call_completes_with_the_right_result_when_one_replica_of_each_tier_is_killed()
    {
        using var d = new Deployment(output);
        long total = 0;
        for (int i = 1; i <= 30; i++)
        {
            if (i == 11) Deployment.Kill(d.Targets[0]); // the target's primary: a view change in the bank
            if (i == 21) Deployment.Kill(d.Callers[0]); // the caller's primary: a view change in the store
            total += i;
            Assert.Equal([i, total], d.Pay(i));
        }
        // Asynchronous: many requests outstanding at once, each served by its own call.
        long[][] answers = await Task.WhenAll(Enumerable.Range(31, 20).Select(i => d.Client.InvokeAsync<long, long[]>(i))).WaitAsync(Patience);
        total += Enumerable.Range(31, 20).Sum();
        Assert.Equal(Enumerable.Range(31, 20).Select(i => (long)i), answers.Select(a => a[0]).Order());
        Assert.Equal(total, answers.Max(a => a[1]));
        Assert.Equal(0, d.Client.DivergentReplies);
        Assert.All(d.Callers.Skip(1), c => Assert.Equal(0, d.Stats(c)["divergent"]));
        d.AssertCheckerFindsNothing();
    }

    [Fact]
    public void The_checker_over_the_records_finds_replicas_that_disagree_and_a_result_nobody_computed()
    {
        string dir = Directory.CreateTempSubdirectory("isis-perpetual-check-").FullName;
        try
        {
            var deployment = new PerpetualDeployment(new byte[32])
                .AddService("caller", [.. Enumerable.Range(0, 4).Select(i => new IPEndPoint(IPAddress.Loopback, 7000 + i))])
                .AddService("target", [.. Enumerable.Range(0, 4).Select(i => new IPEndPoint(IPAddress.Loopback, 7100 + i))])
                .AddClient("test", new IPEndPoint(IPAddress.Loopback, 7200));
            string[] callers = [.. Enumerable.Range(0, 4).Select(i => Path.Combine(dir, $"caller-{i}.log"))];
            string[] targets = [.. Enumerable.Range(0, 4).Select(i => Path.Combine(dir, $"target-{i}.log"))];
            int client = deployment.Build().ClientPrincipal("test");
            for (int i = 0; i < 4; i++)
            {
                // Replica 3 orders seq 1 at another agreed time (agreement broken); replica 2 an operation the
                // client never sent (validity broken). Nothing is written for the target.
                File.WriteAllText(callers[i], $"ordered 1 {client} 1 {(i == 2 ? "02" : "01")} {(i == 3 ? 200 : 100)} 7\nanswered {client} 1 0A\n");
                File.WriteAllText(targets[i], "");
            }
            NodeEvent[] clientEvents = [new PerpetualIssued(client, 1, [1]), new Isis.Core.Bft.BftReplyAccepted("caller", 1, [0x0B])];
            IReadOnlyList<string> violations = PerpetualRecords.Check(deployment, callers, targets, clientEvents, byzantineTarget: -1);
            Assert.Contains(violations, v => v.Contains("agreement: at position 1"));
            Assert.Contains(violations, v => v.Contains("validity"));
            Assert.Contains(violations, v => v.Contains("replies: client"));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void A_byzantine_target_replica_that_lies_and_equivocates_as_primary_changes_no_result()
    {
        using var d = new Deployment(output, byzantineTarget: 0); // the target's first primary
        long total = 0;
        for (int i = 1; i <= 30; i++)
        {
            if (i == 16) Deployment.Kill(d.Callers[2]); // and a caller replica dies on top
            total += i;
            Assert.Equal([i, total], d.Pay(i));
        }
        Assert.Equal(0, d.Client.DivergentReplies); // the caller's replicas all answered alike

        // The lies were seen and left no mark: the target's correct replicas replaced their equivocating
        // primary, and the responder that followed it (its primary, which gathers the replies) saw the
        // wrong replies and reported them; the callers got only replies that f+1 agreed on.
        List<Dictionary<string, long>> targets = [.. d.Targets.Skip(1).Select(d.Stats)];
        Assert.All(targets, t => Assert.True(t["view"] >= 1, "the target's correct replicas moved past the byzantine primary's view"));
        Assert.True(targets.Sum(t => t["divergent"]) > 0, "the target's responder saw the byzantine replica's wrong replies");
        d.AssertCheckerFindsNothing();
    }
}
