using Isis;
using Isis.Collections;
using Microsoft.AspNetCore.Diagnostics.HealthChecks;
using Microsoft.Extensions.Diagnostics.HealthChecks;

// StockTrader: the Tempest papers' trader service and shopping cart as an ASP.NET minimal API. Its
// instances on one machine hold the quotes (a ReplicatedDictionary), the trade log (a ReplicatedList)
// and the shopping carts (a ReplicatedDictionary of cart lines), each on a group of its own; every
// instance reads its own copy. Start several, each on its own HTTP port:
//
//   dotnet run --project samples/StockTrader -- --urls http://127.0.0.1:6001
//   dotnet run --project samples/StockTrader -- --urls http://127.0.0.1:6002
//
//   curl -X PUT 'http://127.0.0.1:6001/quotes/ACME?price=12.5'        # merged everywhere, then answered
//   curl 'http://127.0.0.1:6002/quotes/ACME'                          # the merged history (pessimistic)
//   curl 'http://127.0.0.1:6002/quotes/ACME?read=optimistic'          # with the pending updates too
//   curl -X POST 'http://127.0.0.1:6002/trades?symbol=ACME&quantity=10'
//   curl 'http://127.0.0.1:6001/trades'
//   curl -X PUT 'http://127.0.0.1:6001/carts/alice/ACME?quantity=3'     # a cart line, at any instance
//   curl 'http://127.0.0.1:6002/carts/alice'                          # the lines, priced at the quotes
//   curl -X POST 'http://127.0.0.1:6002/carts/alice/checkout'         # every line becomes a trade
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
    })
    .AddGroup("trader-carts", (_, group) =>
    {
        state.Carts = new ReplicatedDictionary<string, int>(group);
        if (data is { Length: > 0 }) group.PersistCheckpoints(Path.Combine(data, "carts"), TimeSpan.FromSeconds(10));
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

// The shopping cart: one entry per line ("cart/symbol" -> quantity), so two instances adding
// different lines to one cart at once both win, and the merge orders two changes of one line.
app.MapPut("/carts/{cart}/{symbol}", async (string cart, string symbol, int quantity, CancellationToken cancel) =>
{
    if (quantity <= 0) return Results.BadRequest("quantity must be positive; DELETE removes a line");
    if (!state.Quotes.Optimistic.ContainsKey(symbol)) return Results.NotFound($"no quote for {symbol}");
    await state.Carts.WaitForAsync(await state.Carts.SetAsync(CartLine(cart, symbol), quantity), cancel);
    return Results.NoContent();
});
app.MapDelete("/carts/{cart}/{symbol}", async (string cart, string symbol, CancellationToken cancel) =>
{
    await state.Carts.WaitForAsync(await state.Carts.RemoveAsync(CartLine(cart, symbol)), cancel);
    return Results.NoContent();
});
app.MapGet("/carts/{cart}", (string cart) =>
{
    var lines = LinesOf(state, cart).Select(l => new { l.Symbol, l.Quantity, Price = state.Quotes.GetValueOrDefault(l.Symbol) }).ToList();
    return new { Cart = cart, Lines = lines, Total = lines.Sum(l => l.Quantity * l.Price) };
});
app.MapPost("/carts/{cart}/checkout", async (string cart, CancellationToken cancel) =>
{
    var lines = LinesOf(state, cart).ToList();
    if (lines.Count == 0) return Results.NotFound($"cart {cart} is empty");
    // Each line becomes a trade at the merged quote, then leaves the cart; the instance answers once
    // both are in its history, so the client reads its checkout there.
    var done = new List<(Task Trade, Task Removed)>();
    foreach (var (symbol, quantity) in lines)
    {
        OperationId trade = await state.Trades.AddAsync($"{cart}: {symbol} x{quantity} @ {state.Quotes.GetValueOrDefault(symbol)}");
        OperationId removed = await state.Carts.RemoveAsync(CartLine(cart, symbol));
        done.Add((state.Trades.WaitForAsync(trade, cancel), state.Carts.WaitForAsync(removed, cancel)));
    }
    await Task.WhenAll(done.SelectMany(d => new[] { d.Trade, d.Removed }));
    return Results.Ok(new { Cart = cart, Trades = lines.Count });
});
// An instance whose membership lease ran out (the service does not answer it: it is cut off, or
// starved of CPU) may serve stale reads. The "isis" check says Degraded then, which ASP.NET answers
// with 200 unless told otherwise: answer 503, so front-ends (RedundantQueryClient probes /health) leave it out until it is back.
app.MapHealthChecks("/health", new HealthCheckOptions { ResultStatusCodes = { [HealthStatus.Degraded] = StatusCodes.Status503ServiceUnavailable } });
app.Run();

static string CartLine(string cart, string symbol) => $"{cart}/{symbol}";

static IEnumerable<(string Symbol, int Quantity)> LinesOf(TraderState state, string cart) =>
    state.Carts.Where(l => l.Key.StartsWith(cart + "/", StringComparison.Ordinal))
        .OrderBy(l => l.Key, StringComparer.Ordinal)
        .Select(l => (l.Key[(cart.Length + 1)..], l.Value));

/// <summary>The instance's replicated collections, created when their groups are configured (before they join).</summary>
internal sealed class TraderState
{
    public ReplicatedDictionary<string, double> Quotes { get; set; } = null!;

    public ReplicatedList<string> Trades { get; set; } = null!;

    public ReplicatedDictionary<string, int> Carts { get; set; } = null!;
}
