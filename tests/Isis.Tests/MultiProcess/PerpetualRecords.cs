using System.Globalization;
using Isis.Core.Bft;
using Isis.Core.Node;
using Isis.Perpetual;
using Isis.Perpetual.Runtime;
using Isis.Simulation.Bft;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// Reads what the replica processes of a two-tier Perpetual deployment recorded (Isis.PerpetualHost's
/// --record lines) and what the test's client recorded, and runs the simulator's checker
/// (<see cref="BftChecker"/>) over them: order, agreement, validity, the agreed clock and seed,
/// replies, and call outcomes, the same properties the simulator checks, on a real run.
/// </summary>
internal static class PerpetualRecords
{
    /// <summary>The violations found (none when the run kept every guarantee). A killed replica's record stops where it died.</summary>
    public static IReadOnlyList<string> Check(PerpetualDeployment deployment, string[] callerFiles, string[] targetFiles, IEnumerable<NodeEvent> clientEvents, int byzantineTarget)
    {
        PerpetualDeployment.Built built = deployment.Build();
        int callerId = built.Deployment.ServiceId(built.Service("caller"));
        int client = built.ClientPrincipal("test");
        var callers = new BftChecker(callerFiles.Length, []);
        var targets = new BftChecker(targetFiles.Length, byzantineTarget >= 0 ? [byzantineTarget] : []);

        foreach (NodeEvent e in clientEvents)
        {
            if (e is PerpetualIssued issued) callers.Issued(client, issued.Number, issued.Operation);
        }
        // What the correct callers called is what the target may execute.
        for (int i = 0; i < callerFiles.Length; i++)
        {
            foreach (string[] f in Lines(callerFiles[i]).Where(f => f[0] == "called"))
                targets.Issued(callerId, Long(f[2]), Convert.FromHexString(f[3]));
        }
        for (int i = 0; i < targetFiles.Length; i++) Feed(targets, i, Lines(targetFiles[i]), "target");
        for (int i = 0; i < callerFiles.Length; i++) Feed(callers, i, Lines(callerFiles[i]), "caller");
        foreach (NodeEvent e in clientEvents)
        {
            if (e is BftReplyAccepted accepted) callers.ReplyAccepted(client, accepted.Number, accepted.Result);
        }
        callers.CheckCallResults("target", targets, callerId);
        return [.. callers.Violations.Select(v => "caller: " + v), .. targets.Violations.Select(v => "target: " + v)];
    }

    private static void Feed(BftChecker checker, int replica, IEnumerable<string[]> lines, string service)
    {
        foreach (string[] f in lines)
        {
            switch (f[0])
            {
                case "ordered":
                    checker.Executed(replica, new BftRequestOrdered(service, Long(f[1]), (int)Long(f[2]), Long(f[3]), Convert.FromHexString(f[4]), Long(f[5]), ulong.Parse(f[6], CultureInfo.InvariantCulture)), null);
                    break;
                case "completed":
                    checker.CallCompleted(replica, new BftCallCompleted(service, Long(f[1]), f[2], Long(f[3]), f[4] == "-" ? null : Convert.FromHexString(f[4]), Long(f[5]), ulong.Parse(f[6], CultureInfo.InvariantCulture)));
                    break;
                case "answered":
                    checker.Answered(replica, (int)Long(f[1]), Long(f[2]), Convert.FromHexString(f[3]));
                    break;
            }
        }
    }

    /// <summary>The file's complete lines, split (a killed process may leave its last line half written).</summary>
    private static IEnumerable<string[]> Lines(string path)
    {
        if (!File.Exists(path)) yield break;
        string text = File.ReadAllText(path);
        string[] lines = text.Split('\n');
        // The last element is what follows the last newline: empty, or a line the process did not finish.
        foreach (string line in lines.Take(lines.Length - 1))
        {
            string[] f = line.Split(' ');
            bool complete = f[0] switch { "ordered" or "completed" => f.Length == 7, "answered" or "called" => f.Length == 4, _ => false };
            if (complete) yield return f;
        }
    }

    private static long Long(string s) => long.Parse(s, CultureInfo.InvariantCulture);
}
