using System.Diagnostics;
using System.Globalization;

namespace Isis.Bench;

/// <summary>
/// One member process of failover mode (<see cref="FailoverCoordinator"/>): the zero-configuration
/// default (the membership service embedded in the members), on a private well-known port. It
/// reports on stdout, one "@fo kind key=value ..." line per event, with
/// <see cref="Stopwatch.GetTimestamp"/> values (CLOCK_MONOTONIC, comparable with the parent's):
/// <list type="bullet">
/// <item><c>runtime at=T founded=true|false</c> once the runtime started; <c>joined at=T</c> when Join returned;</item>
/// <item><c>view id=V members=N at=T</c> for every view, from the view handler;</item>
/// <item><c>role host=true|false leader=true|false</c> on the command <c>role</c>;</item>
/// <item><c>shutdown reason=...</c> if the protocol stopped it.</item>
/// </list>
/// The command <c>quit</c> shuts the runtime down (handing its replica over) and exits 0.
/// </summary>
internal static class FailoverMember
{
    public const string GroupName = "isis-bench-failover";
    private static readonly Lock OutputLock = new();

    public static int Run(string[] args)
    {
        int port = 0, heartbeatMs = 100, suspicion = 5;
        for (int i = 0; i + 1 < args.Length; i += 2)
        {
            int value = int.Parse(args[i + 1], CultureInfo.InvariantCulture);
            switch (args[i])
            {
                case "--service-port": port = value; break;
                case "--heartbeat-ms": heartbeatMs = value; break;
                case "--suspicion": suspicion = value; break;
                default: throw new ArgumentException($"failover-member: unknown option {args[i]}");
            }
        }
        var runtime = new IsisRuntime(new IsisOptions
        {
            MembershipServicePort = port,
            HeartbeatInterval = TimeSpan.FromMilliseconds(heartbeatMs),
            SuspicionCount = suspicion,
        });
        runtime.ShutDown += (_, e) =>
        {
            Line($"shutdown reason={e.Reason.Replace(' ', '_')}");
            Environment.Exit(5);
        };
        runtime.Start();
        Line($"runtime at={Stopwatch.GetTimestamp()} founded={(runtime.HostsMembershipService ? "true" : "false")}");
        var g = new Group(runtime, GroupName);
        g.ViewHandlers += (ViewHandler)(v => Line($"view id={v.ViewId} members={v.Members.Length} at={Stopwatch.GetTimestamp()}"));
        g.Join();
        Line($"joined at={Stopwatch.GetTimestamp()}");

        string? line;
        while ((line = Console.In.ReadLine()) != null)
        {
            switch (line.Trim())
            {
                case "role":
                    IsisStatistics s = runtime.GetStatistics();
                    Line($"role host={(runtime.HostsMembershipService ? "true" : "false")} leader={(s.MembershipReplicaIsLeader ? "true" : "false")}");
                    break;
                case "quit":
                    runtime.Shutdown();
                    return 0;
            }
        }
        return 4; // the parent is gone
    }

    private static void Line(string s)
    {
        lock (OutputLock) Console.Out.WriteLine("@fo " + s);
    }
}
