using Isis.Bench;

// Multi-process latency and throughput per primitive (send, ordered, safe1/3/all, query) on this machine, 127.0.0.1 only (docs/performance.md).
//   dotnet run -c Release --project tools/Isis.Bench -- --members 5 --primitive safe3 --out bench.json
//   dotnet run -c Release --project tools/Isis.Bench -- --matrix --out matrix.csv     (every primitive, 3 and 5 members, response delay)
//   dotnet run -c Release --project tools/Isis.Bench -- --quick --out /tmp/bench.json   (CI smoke, < 20 s)
//   dotnet run -c Release --project tools/Isis.Bench -- --scale --members 100 --out scale.json   (100 member processes, one group)
// The parent hosts the membership service and starts 3 or 5 members by re-launching itself:
//   dotnet Isis.Bench.dll member --index I --service-port P --result FILE ...
// and, in scale mode, N members that report on stdout and take commands on stdin:
//   dotnet Isis.Bench.dll scale-member --scale --index I --service-port P --members N ...
try
{
    if (args.Length > 0 && args[0] == "member") return Member.Run(BenchOptions.Parse(args.AsSpan(1)));
    if (args.Length > 0 && args[0] == "scale-member") return ScaleMember.Run(BenchOptions.Parse(args.AsSpan(1)));
    if (args.Contains("-h") || args.Contains("--help"))
    {
        Console.WriteLine(BenchOptions.Usage);
        return 0;
    }
    BenchOptions options = BenchOptions.Parse(args);
    return options.Scale ? ScaleCoordinator.Run(options) : Coordinator.Run(options);
}
catch (ArgumentException e)
{
    Console.Error.WriteLine("Isis.Bench: " + e.Message);
    Console.Error.WriteLine(BenchOptions.Usage);
    return 2;
}
