using Isis.ClosedLoop;

// The Tempest papers' closed-loop experiment (docs/performance.md, "Closed loop against PostgreSQL"):
// a service of 1,024 objects served over HTTP by three instances on this machine, as a three-tier
// baseline on PostgreSQL and on a ReplicatedDictionary, under closed-loop clients; and the floor, a
// plain dictionary in each instance (not shared, not a correct service), for what the HTTP hop costs.
//   dotnet run -c Release --project tools/Isis.ClosedLoop -- --out docs/bench/closed-loop-2cpu.json --html docs/bench/closed-loop-2cpu.html
//   dotnet run -c Release --project tools/Isis.ClosedLoop -- --quick --store replicated --out /tmp/q.json   (smoke test)
// The parent runs the clients and starts each instance by re-launching itself:
//   dotnet Isis.ClosedLoop.dll serve --store postgres|replicated|floor --port P --index I ...
try
{
    if (args.Length > 0 && args[0] == "serve") return ServeCommand.Run(ServeOptions.Parse(args.AsSpan(1)));
    if (args.Contains("-h") || args.Contains("--help"))
    {
        Console.WriteLine(ClosedLoopOptions.Usage);
        return 0;
    }
    return await Experiment.RunAsync(ClosedLoopOptions.Parse(args), args);
}
catch (ArgumentException e)
{
    Console.Error.WriteLine("Isis.ClosedLoop: " + e.Message);
    Console.Error.WriteLine(ClosedLoopOptions.Usage);
    return 2;
}
