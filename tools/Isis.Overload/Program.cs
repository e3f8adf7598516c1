using Isis.Overload;

// The Tempest overload experiment (issue 15, item 5; docs/performance.md, "Overload: a starved replica"):
//   dotnet run -c Release --project tools/Isis.Overload -- --out docs/bench/overload-2cpu.json --html docs/bench/overload-2cpu.html
//   dotnet run -c Release --project tools/Isis.Overload -- --quick --out /tmp/overload.json   (smoke test, about 30 s)
// The parent starts three service instances by re-launching itself, one process each:
//   dotnet Isis.Overload.dll serve --urls http://127.0.0.1:P --gossip-ms N --parent PID --Isis:MembershipServicePort=M ...
// and, during the overload, one process of busy-looping threads pinned to the starved instance's CPU:
//   dotnet Isis.Overload.dll hog --threads N --seconds S
try
{
    if (args.Length > 0 && args[0] == "serve") return ReplicaService.Run(args[1..]);
    if (args.Length > 0 && args[0] == "hog") return Starvation.RunHog(args[1..]);
    if (args.Contains("-h") || args.Contains("--help"))
    {
        Console.WriteLine(OverloadOptions.Usage);
        return 0;
    }
    return Experiment.Run(OverloadOptions.Parse(args));
}
catch (ArgumentException e)
{
    Console.Error.WriteLine("Isis.Overload: " + e.Message);
    Console.Error.WriteLine(OverloadOptions.Usage);
    return 2;
}
