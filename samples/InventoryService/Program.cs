using System.Collections.Concurrent;
using Isis;
using Microsoft.AspNetCore.Diagnostics.HealthChecks;
using Microsoft.Extensions.Diagnostics.HealthChecks;

// InventoryService: an ASP.NET minimal API whose instances on one machine share a replicated
// inventory. Start several (each on its own HTTP port); no other configuration is needed:
//
//   dotnet run --project samples/InventoryService -- --urls http://127.0.0.1:5001
//   dotnet run --project samples/InventoryService -- --urls http://127.0.0.1:5002
//
//   curl -X PUT 'http://127.0.0.1:5001/items/apples?count=12'    # a durable update (SafeSend)
//   curl http://127.0.0.1:5002/items/apples                      # read from local state: 12
//   curl http://127.0.0.1:5002/health                            # the "isis" health check
//   dotnet-counters monitor -n InventoryService --counters Isis  # the meter "Isis" (or OpenTelemetry's AddMeter("Isis"))
//
// Writes go to every instance in one total order (SafeSend: every member holds it before anyone
// delivers it, so the answer to the PUT never reports an update a crash could undo); reads are
// served from the instance's own copy, in microseconds. Settings come from the "Isis" section of
// the configuration (appsettings.json, or --Isis:Key=value on the command line). A new instance
// starts from the others' inventory: when it joins, the oldest instance sends it its copy (state
// transfer), which it loads before it serves anything.
//
// With --Inventory:DataDirectory=DIR (a directory of the instance's own), the instance also keeps
// its copy on disk (every 10 s and when it stops): after every instance stopped, the first to start
// again serves the inventory from its checkpoint, and the next ones receive it from that one.
//
// With --Inventory:FrontEnd=true the process is a front end instead, not a member: it forwards each
// HTTP request to the instances through a GroupClient, which relays it through one instance and
// moves to another if that one fails. A delivery (POST .../add) then counts exactly once even when
// the instance relaying it is killed mid-request:
//
//   dotnet run --project samples/InventoryService -- --urls http://127.0.0.1:5000 --Inventory:FrontEnd=true
//   curl -X POST 'http://127.0.0.1:5000/items/apples/add?count=5'  # a delivery of 5 (SafeSend, run once)
//   curl http://127.0.0.1:5000/items/apples                        # a query answered by one instance
const int SetCount = 1, AddCount = 2, GetCount = 3;

var builder = WebApplication.CreateBuilder(args);
if (builder.Configuration.GetValue<bool>("Inventory:FrontEnd"))
{
    // The front end finds the instances with the same "Isis" settings they use.
    builder.Services.AddIsisClient("inventory", builder.Configuration.GetSection("Isis"));
    var front = builder.Build();
    front.MapPut("/items/{item}", async (string item, int count, [FromKeyedServices("inventory")] GroupClient inventory) =>
    {
        await inventory.SafeSendAsync(SetCount, item, count);
        return Results.NoContent();
    });
    front.MapPost("/items/{item}/add", async (string item, int count, [FromKeyedServices("inventory")] GroupClient inventory) =>
    {
        await inventory.SafeSendAsync(AddCount, item, count);
        return Results.NoContent();
    });
    front.MapGet("/items/{item}", async (string item, [FromKeyedServices("inventory")] GroupClient inventory) =>
        await inventory.QueryAsync<int>(1, GetCount, item) is [>= 0 and var count] ? Results.Ok(count) : Results.NotFound());
    front.MapGet("/health", ([FromKeyedServices("inventory")] GroupClient inventory) =>
        inventory.Members.Count > 0 ? Results.Text("Healthy") : Results.Text("Unhealthy: no instance of the inventory found yet", statusCode: StatusCodes.Status503ServiceUnavailable));
    front.Run();
    return;
}

var stock = new ConcurrentDictionary<string, int>();
builder.Services.AddIsis(builder.Configuration.GetSection("Isis"))
    .AddGroup("inventory", (_, group) =>
    {
        group.Handlers[SetCount] += (Action<string, int>)((item, count) => stock[item] = count);
        group.Handlers[AddCount] += (Action<string, int>)((item, count) => stock.AddOrUpdate(item, count, (_, held) => held + count));
        group.Handlers[GetCount] += (Action<string>)(item => group.Reply(stock.TryGetValue(item, out int count) ? count : -1));
        group.MakeChkpt += (ChkptMaker)(_ => { foreach (var (item, count) in stock) group.SendChkpt(item, count); });
        group.LoadChkpt += (Action<string, int>)((item, count) => stock[item] = count);
        if (builder.Configuration["Inventory:DataDirectory"] is { Length: > 0 } data) group.PersistCheckpoints(data, TimeSpan.FromSeconds(10));
    });
builder.Services.AddHealthChecks().AddIsis();

var app = builder.Build();
app.MapPut("/items/{item}", async (string item, int count, [FromKeyedServices("inventory")] Group inventory, CancellationToken cancel) =>
{
    await inventory.SafeSendAsync(SetCount, [item, count], cancel);
    return Results.NoContent();
});
app.MapPost("/items/{item}/add", async (string item, int count, [FromKeyedServices("inventory")] Group inventory, CancellationToken cancel) =>
{
    await inventory.SafeSendAsync(AddCount, [item, count], cancel);
    return Results.NoContent();
});
app.MapGet("/items/{item}", (string item) => stock.TryGetValue(item, out int count) ? Results.Ok(count) : Results.NotFound());
app.MapGet("/items", () => new SortedDictionary<string, int>(stock));
// An instance whose membership lease ran out (the service does not answer it: it is cut off, or
// starved of CPU) may serve stale reads. The "isis" check says Degraded then, which ASP.NET answers
// with 200 unless told otherwise: answer 503, so load balancers leave it out until it is back.
app.MapHealthChecks("/health", new HealthCheckOptions { ResultStatusCodes = { [HealthStatus.Degraded] = StatusCodes.Status503ServiceUnavailable } });
app.Run();
