using Isis;
using Isis.Collections;

// StockTrader: the Tempest papers' trader service as an ASP.NET minimal API. Its instances on one
// machine hold the quotes (a ReplicatedDictionary) and the trade log (a ReplicatedList), each on a
// group of its own; every instance reads its own copy. Start several, each on its own HTTP port:
//
//   dotnet run --project samples/StockTrader -- --urls http://127.0.0.1:6001
//   dotnet run --project samples/StockTrader -- --urls http://127.0.0.1:6002
//
//   curl -X PUT 'http://127.0.0.1:6001/quotes/ACME?price=12.5'        # merged everywhere, then answered
//   curl 'http://127.0.0.1:6002/quotes/ACME'                          # the merged history (pessimistic)
//   curl 'http://127.0.0.1:6002/quotes/ACME?read=optimistic'          # with the pending updates too
//   curl -X POST 'http://127.0.0.1:6002/trades?symbol=ACME&quantity=10'
//   curl 'http://127.0.0.1:6001/trades'
//
// A write returns once its update is merged into the history of the instance that took it, so the
// client reads its own write there. A front-end that is not an instance reads with
// RedundantQueryClient (the k fastest instances, the first answer). With
// --Trader:DataDirectory=DIR (a directory per instance) the state also survives a stop of every instance.
var builder = WebApplication.CreateBuilder(args);
var state = new TraderState();
string? data = builder.Configuration["Trader:DataDirectory"];
builder.Services.AddIsis(builder.Configuration.GetSection("Isis"))
    .AddGroup("trader-quotes", (_, group) =>
    {
        state.Quotes = new ReplicatedDictionary<string, double>(group);
        if (data is { Length: > 0 }) group.PersistCheckpoints(Path.Combine(data, "quotes"), TimeSpan.FromSeconds(10));
    })
    .AddGroup("trader-trades", (_, group) =>
    {
        state.Trades = new ReplicatedList<string>(group);
        if (data is { Length: > 0 }) group.PersistCheckpoints(Path.Combine(data, "trades"), TimeSpan.FromSeconds(10));
    });
builder.Services.AddHealthChecks().AddIsis();

var app = builder.Build();
app.MapPut("/quotes/{symbol}", async (string symbol, double price, CancellationToken cancel) =>
{
    OperationId id = await state.Quotes.SetAsync(symbol, price);
    await state.Quotes.WaitForAsync(id, cancel);
    return Results.NoContent();
});
app.MapGet("/quotes/{symbol}", (string symbol, string? read) =>
{
    IReadOnlyDictionary<string, double> view = read == "optimistic" ? state.Quotes.Optimistic : state.Quotes;
    return view.TryGetValue(symbol, out double price) ? Results.Ok(price) : Results.NotFound();
});
app.MapGet("/quotes", () => new SortedDictionary<string, double>(state.Quotes.ToDictionary()));
app.MapPost("/trades", async (string symbol, int quantity, CancellationToken cancel) =>
{
    if (!state.Quotes.Optimistic.TryGetValue(symbol, out double price)) return Results.NotFound($"no quote for {symbol}");
    OperationId id = await state.Trades.AddAsync($"{symbol} x{quantity} @ {price}");
    await state.Trades.WaitForAsync(id, cancel);
    return Results.Created("/trades", id.ToString());
});
app.MapGet("/trades", () => state.Trades.ToArray());
app.MapHealthChecks("/health");
app.Run();

/// <summary>The instance's replicated collections, created when their groups are configured (before they join).</summary>
internal sealed class TraderState
{
    public ReplicatedDictionary<string, double> Quotes { get; set; } = null!;

    public ReplicatedList<string> Trades { get; set; } = null!;
}
