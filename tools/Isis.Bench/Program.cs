using Isis.Bench;

// Multi-process latency and throughput per primitive (send, ordered, safe1/3/all, query) on this machine, 127.0.0.1 only (docs/performance.md).
//   dotnet run -c Release --project tools/Isis.Bench -- --members 5 --primitive safe3 --out bench.json
//   dotnet run -c Release --project tools/Isis.Bench -- --matrix --payload 100,1024 --out bench/report.html
//       (every primitive at 3, 5, 10, 20 and 50 members and both payloads, response delay; counts scaled down with the group size)
//   dotnet run -c Release --project tools/Isis.Bench -- --quick --out /tmp/bench.json   (CI smoke, < 20 s)
//   dotnet run -c Release --project tools/Isis.Bench -- --scale --members 100 --out scale.json   (100 member processes, one group)
//   dotnet run -c Release --project tools/Isis.Bench -- --failover --rounds 5   (the default membership service losing its hosts)
//   dotnet run -c Release --project tools/Isis.Bench -- --handoff   (what one thread hand-off costs here, beside the C ping-pong)
//   dotnet run -c Release --project tools/Isis.Bench -- --side-by-side --out bench/side-by-side.html   (ours, JGroups, C floor interleaved)
//   dotnet run -c Release --project tools/Isis.Bench -- --perpetual --out perpetual.json   (the Perpetual-WS paper's figures 7-9, PBFT round against SafeSend)
// The parent hosts the membership service and starts the members of each group size by re-launching itself:
//   dotnet Isis.Bench.dll member --index I --service-port P --result FILE ...
// and, in scale mode, N members that report on stdout and take commands on stdin:
//   dotnet Isis.Bench.dll scale-member --scale --index I --service-port P --members N ...
try
{
    if (args.Length > 0 && args[0] == "member") return RunMember(BenchOptions.Parse(args.AsSpan(1)));
    if (args.Length > 0 && args[0] == "scale-member") return ScaleMember.Run(BenchOptions.Parse(args.AsSpan(1)));
    if (args.Length > 0 && args[0] == "failover-member") return FailoverMember.Run(args[1..]);
    if (args.Length > 0 && args[0] == "handoff-echo") return HandoffExperiment.Echo();
    if (args.Length > 0 && args[0] == "perpetual-replica") return PerpetualExperiment.RunReplica(args[1..]);
    if (args.Contains("-h") || args.Contains("--help"))
    {
        Console.WriteLine(BenchOptions.Usage);
        Console.WriteLine();
        Console.WriteLine(FailoverCoordinator.Usage);
        Console.WriteLine();
        Console.WriteLine(HandoffExperiment.Usage);
        Console.WriteLine();
        Console.WriteLine(SideBySide.Usage);
        Console.WriteLine();
        Console.WriteLine(PerpetualExperiment.Usage);
        return 0;
    }
    if (args.Contains("--failover")) return FailoverCoordinator.Run(args);
    if (args.Contains("--handoff")) return HandoffExperiment.Run(args);
    if (args.Contains("--side-by-side")) return SideBySide.Run(args);
    if (args.Contains("--perpetual")) return PerpetualExperiment.Run(args);
    BenchOptions options = BenchOptions.Parse(args);
    return options.Scale ? ScaleCoordinator.Run(options) : Coordinator.Run(options);
}
catch (ArgumentException e)
{
    Console.Error.WriteLine("Isis.Bench: " + e.Message);
    Console.Error.WriteLine(BenchOptions.Usage);
    return 2;
}

// A member that times out or sees the protocol misbehave says why in one line (the parent reports it) and exits
// with 3, instead of an unhandled exception's abort (exit code 134 and a stack trace in the middle of 50 members' output).
static int RunMember(BenchOptions o)
{
    try
    {
        return Member.Run(o);
    }
    catch (Exception e) when (e is TimeoutException or InvalidOperationException or AggregateException or IOException or Isis.IsisException)
    {
        Console.Error.WriteLine($"member {o.Index}: {e.GetType().Name}: {e.Message}");
        Console.Error.WriteLine(e.StackTrace);
        return 3;
    }
}
