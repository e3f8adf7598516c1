using System.Diagnostics;
using System.Globalization;
using System.Net;
using Isis.Collections;

namespace Isis.Overload;

/// <summary>
/// One instance of the measured service, as the parent launches it:
/// <c>dotnet Isis.Overload.dll serve --urls http://127.0.0.1:P --gossip-ms N --parent PID --Isis:...</c>.
/// An ASP.NET minimal API over a <see cref="ReplicatedDictionary{TKey, TValue}"/> on one group, set up
/// as samples/StockTrader sets up its quotes (zero configuration: the first instances host the
/// membership service themselves). It exits on its own if the parent is gone.
/// </summary>
internal static class ReplicaService
{
    public const string GroupName = "overload-values";

    public static int Run(string[] args)
    {
        int gossipMs = 1000, parent = 0;
        var hostArgs = new List<string>();
        for (int i = 0; i < args.Length; i++)
        {
            if (args[i] == "--gossip-ms" && i + 1 < args.Length) gossipMs = int.Parse(args[++i], CultureInfo.InvariantCulture);
            else if (args[i] == "--parent" && i + 1 < args.Length) parent = int.Parse(args[++i], CultureInfo.InvariantCulture);
            else hostArgs.Add(args[i]);
        }

        var builder = WebApplication.CreateBuilder([.. hostArgs]);
        // A request log line per read would cost the starved replica the CPU the experiment measures.
        builder.Logging.SetMinimumLevel(LogLevel.Warning);
        var state = new ReplicaState();
        builder.Services.AddIsis(builder.Configuration.GetSection("Isis"))
            .AddGroup(GroupName, (_, group) =>
            {
                state.Values = new ReplicatedDictionary<int, long>(group, new ReplicatedCollectionOptions { GossipInterval = TimeSpan.FromMilliseconds(gossipMs) });
                group.ViewHandlers += (ViewHandler)state.OnView;
            });
        builder.Services.AddHealthChecks().AddIsis();

        WebApplication app = builder.Build();
        // A write returns once its update is in this instance's history (read-your-writes here), as in StockTrader.
        app.MapPut("/values/{key:int}", async (int key, long value, CancellationToken cancel) =>
        {
            OperationId id = await state.Values.SetAsync(key, value);
            await state.Values.WaitForAsync(id, cancel);
            return Results.NoContent();
        });
        // The pessimistic (merged) value; 0 before the key's first update.
        app.MapGet("/values/{key:int}", (int key) => state.Values.TryGetValue(key, out long value) ? value : 0L);
        app.MapGet("/stats", (IsisRuntime runtime, HttpContext http) => state.Stats(runtime, http.Request.Host.ToString()));
        app.MapHealthChecks("/health");

        if (parent > 0) _ = WatchParent(parent, app.Lifetime);
        app.Run();
        return 0;
    }

    /// <summary>Stops this instance once the parent process is gone (a killed parent leaves no service behind).</summary>
    private static async Task WatchParent(int pid, IHostApplicationLifetime lifetime)
    {
        while (!lifetime.ApplicationStopping.IsCancellationRequested)
        {
            try
            {
                using Process p = Process.GetProcessById(pid);
                if (p.HasExited) break;
            }
            catch (ArgumentException)
            {
                break; // no such process
            }
            await Task.Delay(1000).ConfigureAwait(false);
        }
        lifetime.StopApplication();
    }
}

/// <summary>The instance's collection and the views it installed.</summary>
internal sealed class ReplicaState
{
    private readonly Lock _gate = new();
    private readonly List<ViewRecord> _views = new();

    public ReplicatedDictionary<int, long> Values { get; set; } = null!;

    /// <summary>Group delivery thread: one more view.</summary>
    public void OnView(View view)
    {
        var record = new ViewRecord(view.ViewId, [.. view.Members.Select(m => m.ToString())], [.. view.Leavers.Select(m => m.ToString())], DateTimeOffset.UtcNow.ToUnixTimeMilliseconds());
        lock (_gate) _views.Add(record);
    }

    public InstanceStats Stats(IsisRuntime runtime, string host)
    {
        View? view = Values.Group.GetView();
        ViewRecord[] views;
        lock (_gate) views = [.. _views];
        return new InstanceStats
        {
            ProcessId = Environment.ProcessId,
            Http = host,
            IsisAddress = runtime.Address?.ToString() ?? "",
            DataPort = runtime.Address is { } a ? IPEndPoint.Parse(a.Endpoint).Port : 0,
            MembershipReplicaPort = runtime.HostedMembershipReplica?.Port,
            Running = runtime.IsRunning,
            ShutdownReason = runtime.ShutdownReason,
            ViewId = view?.ViewId ?? -1,
            Members = view == null ? [] : [.. view.Members.Select(m => m.ToString())],
            Rank = view?.GetMyRank() ?? -1,
            Views = views,
            Value = Values.TryGetValue(0, out long value) ? value : 0,
            Collection = Values.Statistics,
            Runtime = runtime.IsRunning ? runtime.GetStatistics() : null,
        };
    }
}

/// <summary>One view an instance installed: its id, members (oldest first), leavers, and when (Unix ms).</summary>
internal sealed record ViewRecord(int ViewId, string[] Members, string[] Leavers, long AtUnixMs);

/// <summary>What <c>GET /stats</c> returns.</summary>
internal sealed record InstanceStats
{
    public int ProcessId { get; init; }

    /// <summary>The HTTP host:port the request reached.</summary>
    public string Http { get; init; } = "";

    /// <summary>The Isis runtime's address, "endpoint#incarnation" (IsisRuntime.Address).</summary>
    public string IsisAddress { get; init; } = "";

    /// <summary>The UDP port of the runtime's data socket (IsisRuntime.Address.Endpoint): the flood's target.</summary>
    public int DataPort { get; init; }

    /// <summary>The UDP port of the membership replica this process hosts (IsisRuntime.HostedMembershipReplica), if any.</summary>
    public int? MembershipReplicaPort { get; init; }

    public bool Running { get; init; }

    public string? ShutdownReason { get; init; }

    public int ViewId { get; init; }

    public string[] Members { get; init; } = [];

    public int Rank { get; init; }

    public ViewRecord[] Views { get; init; } = [];

    /// <summary>The pessimistic value of the written key (0 before its first update).</summary>
    public long Value { get; init; }

    public ReplicatedCollectionStatistics Collection { get; init; } = new();

    public IsisStatistics? Runtime { get; init; }
}
