using Isis.Soak;

// The soak harness (issue 25, item 7; docs/operations.md, "Soak: a durable group under faults"):
//   dotnet run -c Release --project tools/Isis.Soak -- --duration 120s --members 3 --out artifacts/soak
// The parent starts each member by re-launching itself, one process per member:
//   dotnet Isis.Soak.dll member --index I --port P --data DIR --rate R --payload B --checkpoint-ms C --inflight N --seed S
// A joiner's cost with and without a persistent checkpoint, in-process runtimes (issue 25, Targets):
//   dotnet run -c Release --project tools/Isis.Soak -- joiner-cost --entries 1000000 --rounds 3
try
{
    if (args.Length > 0 && args[0] == "member") return Member.Run(args[1..]);
    if (args.Length > 0 && args[0] == "joiner-cost")
    {
        if (args.Contains("-h") || args.Contains("--help"))
        {
            Console.WriteLine(JoinerCost.Usage);
            return 0;
        }
        return JoinerCost.Run(args[1..]);
    }
    if (args.Contains("-h") || args.Contains("--help"))
    {
        Console.WriteLine(SoakOptions.Usage);
        Console.WriteLine();
        Console.WriteLine(JoinerCost.Usage);
        return 0;
    }
    SoakOptions options = SoakOptions.Parse(args) with { Command = "Isis.Soak " + string.Join(' ', args) };
    return Soak.Run(options);
}
catch (ArgumentException e)
{
    Console.Error.WriteLine("Isis.Soak: " + e.Message);
    Console.Error.WriteLine(args.Length > 0 && args[0] == "joiner-cost" ? JoinerCost.Usage : SoakOptions.Usage);
    return 2;
}
