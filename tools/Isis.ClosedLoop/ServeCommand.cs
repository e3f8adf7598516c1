using System.Diagnostics;
using System.Globalization;
using Isis.Collections;
using Microsoft.Extensions.Diagnostics.HealthChecks;

namespace Isis.ClosedLoop;

/// <summary>
/// One instance of the service (<c>dotnet Isis.ClosedLoop.dll serve ...</c>, started by the parent):
/// an ASP.NET minimal API on 127.0.0.1 over one of the stores (<see cref="StoreNames"/>).
/// <list type="table">
/// <item><term>GET /objects/{id}</term><description>the object's value (text), 404 if there is no such object</description></item>
/// <item><term>PUT /objects/{id}?value=V</term><description>sets it; 204 once a read here sees it</description></item>
/// <item><term>GET /objects</term><description>every object, as JSON {id: value}</description></item>
/// <item><term>POST /populate</term><description>creates the objects with their initial values</description></item>
/// <item><term>GET /count</term><description>how many objects this instance holds</description></item>
/// <item><term>GET /health</term><description>"Healthy" once the store can serve (replicated: the group's view holds every instance)</description></item>
/// </list>
/// </summary>
internal static class ServeCommand
{
    public const string GroupName = "closed-loop-objects";

    public static int Run(ServeOptions o)
    {
        StartParentWatchdog(o);
        WebApplicationBuilder builder = WebApplication.CreateBuilder(new WebApplicationOptions { Args = [], ApplicationName = "Isis.ClosedLoop" });
        builder.WebHost.UseUrls(string.Create(CultureInfo.InvariantCulture, $"http://127.0.0.1:{o.Port}"));
        // Warnings and errors only: ASP.NET's per-request information lines would cost more than a local read.
        builder.Logging.ClearProviders();
        builder.Logging.AddSimpleConsole(c => c.SingleLine = true);
        builder.Logging.SetMinimumLevel(LogLevel.Warning);
        // An unhealthy check is logged as an error; the parent polls /health until it is healthy and reports it otherwise.
        builder.Logging.AddFilter("Microsoft.Extensions.Diagnostics.HealthChecks", LogLevel.Critical);

        IObjectStore store;
        IHealthChecksBuilder health = builder.Services.AddHealthChecks();
        if (o.Store == StoreNames.Floor)
        {
            store = new LocalStore();
        }
        else if (o.Store == StoreNames.Postgres)
        {
            var postgres = new PostgresStore(o.Connection!, o.PgPool);
            builder.Services.AddSingleton(postgres); // disposed with the host
            store = postgres;
        }
        else
        {
            var replicated = new ReplicatedStore(o.Instances);
            store = replicated;
            // Zero configuration but for the run's own membership service port (so that a run never meets
            // another run's or a test's processes) and a failure detection that a busy 2-core machine does not trip.
            builder.Configuration.AddInMemoryCollection(new Dictionary<string, string?>
            {
                ["Isis:MembershipServicePort"] = o.IsisPort.ToString(CultureInfo.InvariantCulture),
                ["Isis:SuspicionCount"] = o.Suspicion.ToString(CultureInfo.InvariantCulture),
            });
            builder.Services.AddIsis(builder.Configuration.GetSection("Isis"))
                .AddGroup(GroupName, (_, group) => replicated.Objects = new ReplicatedDictionary<int, double>(group,
                    o.MergeIntervalMs is int ms ? new ReplicatedCollectionOptions { MergeInterval = TimeSpan.FromMilliseconds(ms) } : null));
            health.AddIsis();
        }
        health.AddAsyncCheck("store", cancel => store.CheckAsync(cancel));

        WebApplication app = builder.Build();
        app.MapGet("/objects/{id:int}", async (int id, CancellationToken cancel) =>
            await store.ReadAsync(id, cancel) is double value ? Results.Text(ObjectValues.Format(value)) : Results.NotFound());
        app.MapPut("/objects/{id:int}", async (int id, double value, CancellationToken cancel) =>
        {
            if (id < 0 || id >= o.Objects) return Results.NotFound();
            await store.WriteAsync(id, value, cancel);
            return Results.NoContent();
        });
        app.MapGet("/objects", async (CancellationToken cancel) => Results.Json(await store.ReadAllAsync(cancel)));
        app.MapPost("/populate", async (CancellationToken cancel) =>
        {
            await store.PopulateAsync(o.Objects, cancel);
            return Results.NoContent();
        });
        app.MapGet("/count", async (CancellationToken cancel) => Results.Text((await store.CountAsync(cancel)).ToString(CultureInfo.InvariantCulture)));
        app.MapHealthChecks("/health");
        Console.WriteLine($"instance {o.Index}: {o.Store} store, http://127.0.0.1:{o.Port}");
        app.Run();
        return 0;
    }

    /// <summary>Exits if the parent disappears, so that no instance outlives a run (the parent kills them at its end; this covers its being killed).</summary>
    private static void StartParentWatchdog(ServeOptions o)
    {
        if (o.ParentPid == 0) return;
        new Thread(() =>
        {
            while (true)
            {
                Thread.Sleep(500);
                bool gone;
                try
                {
                    using var parent = Process.GetProcessById(o.ParentPid);
                    gone = parent.HasExited;
                }
                catch (ArgumentException)
                {
                    gone = true;
                }
                if (gone)
                {
                    Console.Error.WriteLine($"instance {o.Index}: the parent exited; exiting");
                    Environment.Exit(4);
                }
            }
        }) { IsBackground = true, Name = "closed-loop-watchdog" }.Start();
    }
}
