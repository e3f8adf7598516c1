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
// RedundantQueryClient (the k fastest instances, the first answer at least as fresh as what it saw:
// every read answers with its position in the history, header Isis-History-Position). With
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
// Reads are served from this instance's copy: past Trader:MaxStalenessSeconds (default 5) without
// confirming that it holds what a peer merged, it cannot vouch for them, and says Degraded.
TimeSpan maxStaleness = TimeSpan.FromSeconds(builder.Configuration.GetValue("Trader:MaxStalenessSeconds", 5.0));
builder.Services.AddHealthChecks().AddIsis().AddCheck("trader-staleness", () =>
{
    TimeSpan worst = new[] { state.Quotes.Staleness, state.Trades.Staleness, state.Carts.Staleness }.Max();
    return worst <= maxStaleness
        ? HealthCheckResult.Healthy($"reads at most {worst.TotalSeconds:0.0} s stale")
        : HealthCheckResult.Degraded($"reads may be {worst.TotalSeconds:0.0} s stale (bound {maxStaleness.TotalSeconds:0.0} s): this instance has not confirmed it holds what its peers merged");
});

var app = builder.Build();
app.MapPut("/quotes/{symbol}", async (string symbol, double price, HttpContext http, CancellationToken cancel) =>
{
    OperationId id = await state.Quotes.SetAsync(symbol, price);
    await state.Quotes.WaitForAsync(id, cancel);
    Positioned(http, state.Quotes.Position); // at or past the write: a front-end that notes it reads its write anywhere
    return Results.NoContent();
});
app.MapGet("/quotes/{symbol}", (string symbol, string? read, HttpContext http) =>
{
    Positioned(http, state.Quotes.Position);
    IReadOnlyDictionary<string, double> view = read == "optimistic" ? state.Quotes.Optimistic : state.Quotes;
    return view.TryGetValue(symbol, out double price) ? Results.Ok(price) : Results.NotFound();
});
app.MapGet("/quotes", (HttpContext http) =>
{
    Positioned(http, state.Quotes.Position);
    return new SortedDictionary<string, double>(state.Quotes.ToDictionary());
});
app.MapPost("/trades", async (string symbol, int quantity, CancellationToken cancel) =>
{
    if (!state.Quotes.Optimistic.TryGetValue(symbol, out double price)) return Results.NotFound($"no quote for {symbol}");
    OperationId id = await state.Trades.AddAsync($"{symbol} x{quantity} @ {price}");
    await state.Trades.WaitForAsync(id, cancel);
    return Results.Created("/trades", id.ToString());
});
app.MapGet("/trades", (HttpContext http) =>
{
    Positioned(http, state.Trades.Position);
    return state.Trades.ToArray();
});

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
app.MapGet("/carts/{cart}", (string cart, HttpContext http) =>
{
    Positioned(http, state.Carts.Position, state.Quotes.Position);
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
// starved of CPU), or whose collections are staler than the bound, may serve stale reads. The
// "isis" and "trader-staleness" checks say Degraded then, which ASP.NET answers
// with 200 unless told otherwise: answer 503, so front-ends (RedundantQueryClient probes /health) leave it out until it is back.
app.MapHealthChecks("/health", new HealthCheckOptions { ResultStatusCodes = { [HealthStatus.Degraded] = StatusCodes.Status503ServiceUnavailable } });
app.Run();

// Where each collection an answer reads stood, taken before the read: a front-end's
// RedundantQueryClient then never takes a lagging instance's answer (a 404 included) over what it saw.
static void Positioned(HttpContext http, params HistoryPosition[] positions) =>
    http.Response.Headers[HistoryPosition.HeaderName] = HistoryPosition.Format(positions);

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
