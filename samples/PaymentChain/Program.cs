using System.Diagnostics;
using System.Net.Http.Json;
using Isis.Perpetual;
using PaymentChain;

// The payment chain of the Perpetual-WS paper: a store calls a payment gateway, which calls a bank;
// each is a Byzantine fault-tolerant service of four replica processes (f = 1), and an ASP.NET front
// end is the store's client. With no arguments it runs the chain on this machine, places orders
// through the front end, kills each service's primary with SIGKILL, places more, and exits 0 if every
// order got the right answer; with --serve it then keeps the front end up for curl.
//   dotnet run --project samples/PaymentChain [-- --serve [--urls http://127.0.0.1:5090]]
//   (a replica process: replica <store|gateway|bank> <index> --key <base64> --ports <p,p,...>)

if (args.Length >= 7 && args[0] == "replica")
{
    Chain.FromArguments(args[4], args[6]).RunReplica(args[1], int.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture));
    return 0;
}

Chain chain = Chain.Create();
var replicas = new Dictionary<string, Process>();
try
{
    foreach (string service in Chain.ServiceNames)
    {
        for (int i = 0; i < Chain.ReplicasPerService; i++) replicas[$"{service}[{i}]"] = chain.StartReplica(service, i);
    }
    Console.WriteLine($"payment chain: store -> gateway -> bank, {Chain.ReplicasPerService} replica processes each (f = 1), {replicas.Count} processes");

    WebApplication app = FrontEnd.Build(args, chain.Deployment);
    await app.StartAsync();
    string url = app.Urls.First();
    Console.WriteLine($"front end: {url} (POST /orders?customer=alice&item=book&quantity=2, GET /stock)");

    using var http = new HttpClient { BaseAddress = new Uri(url), Timeout = TimeSpan.FromSeconds(90) };
    bool ok = true;
    async Task Order(string customer, string item, int quantity, bool expectAccepted)
    {
        HttpResponseMessage response = await http.PostAsync($"/orders?customer={customer}&item={item}&quantity={quantity}", null);
        OrderResult result = (await response.Content.ReadFromJsonAsync<OrderResult>())!;
        bool right = result.Accepted == expectAccepted;
        ok &= right;
        Console.WriteLine($"  {customer} orders {quantity} {item}: {(result.Accepted ? "accepted" : "refused")} ({result.Detail}), {result.OrderId} at {result.PlacedAt}{(right ? "" : "  <-- UNEXPECTED")}");
    }

    await Order("alice", "book", 2, expectAccepted: true);
    await Order("bob", "lamp", 2, expectAccepted: false);   // 70.00 on a 40.00 balance: the bank declines
    await Order("carol", "piano", 1, expectAccepted: false); // over the gateway's card limit
    await Order("carol", "lamp", 1, expectAccepted: true);

    Console.WriteLine("killing store[0], gateway[0] and bank[0] with SIGKILL: each service's primary");
    foreach (string name in (string[])["store[0]", "gateway[0]", "bank[0]"])
    {
        replicas[name].Kill();
        replicas[name].WaitForExit();
    }
    await Order("alice", "lamp", 2, expectAccepted: true);
    await Order("bob", "book", 3, expectAccepted: true);
    await Order("alice", "book", 9, expectAccepted: false); // only 5 left
    Dictionary<string, int> stock = (await http.GetFromJsonAsync<Dictionary<string, int>>("/stock"))!;
    Console.WriteLine("  stock: " + string.Join(", ", stock.Select(kv => $"{kv.Key} {kv.Value}")));
    ok &= stock["book"] == 5 && stock["lamp"] == 0 && stock["piano"] == 1;

    Console.WriteLine(ok ? "PaymentChain: done, every order got the right answer" : "PaymentChain: FAILED, an answer was wrong");
    if (ok && args.Contains("--serve"))
    {
        Console.WriteLine($"serving at {url}; Ctrl+C to stop");
        await app.WaitForShutdownAsync();
    }
    await app.StopAsync();
    return ok ? 0 : 1;
}
finally
{
    foreach (Process p in replicas.Values)
    {
        if (!p.HasExited) p.StandardInput.Close(); // the replica stops when its input closes
        if (!p.WaitForExit(5_000)) p.Kill();
        p.Dispose();
    }
}
