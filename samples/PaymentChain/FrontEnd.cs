using Isis.Perpetual;

namespace PaymentChain;

/// <summary>The ASP.NET front end: an unreplicated client of the store, which accepts an answer once f+1 store replicas sent the same.</summary>
public static class FrontEnd
{
    public static WebApplication Build(string[] args, PerpetualDeployment deployment)
    {
        WebApplicationBuilder builder = WebApplication.CreateBuilder(args.Where(a => a != "--serve").ToArray());
        builder.Logging.SetMinimumLevel(LogLevel.Warning);
        if (builder.Configuration["urls"] == null) builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Services.AddSingleton(_ => new PerpetualClient(deployment, "front-end", Services.Store));
        WebApplication app = builder.Build();

        app.MapPost("/orders", async (string customer, string item, int quantity, PerpetualClient store, CancellationToken cancel) =>
            await store.InvokeAsync<StoreRequest, OrderResult>(new StoreRequest("order", customer, item, quantity), cancel));
        app.MapGet("/stock", async (PerpetualClient store, CancellationToken cancel) =>
            await store.InvokeAsync<StoreRequest, Dictionary<string, int>>(new StoreRequest("stock", "", "", 0), cancel));
        return app;
    }
}
