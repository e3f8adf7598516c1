using Isis;
using Serilog;

// Worker: a Generic Host background service that is a group member, logging through Serilog
// (Serilog.Extensions.Hosting). Start several; they form group "workers" with no configuration and
// each one announces a tick every second, which every member logs:
//
//   dotnet run --project samples/Worker
//   dotnet run --project samples/Worker -- --run-seconds 5     (stops by itself, exit code 0)
//
// Settings come from the "Isis" section of the configuration (appsettings.json, environment
// variables Isis__Key, or --Isis:Key=value).
var builder = Host.CreateApplicationBuilder(args);
builder.Services.AddSerilog(new LoggerConfiguration()
    .MinimumLevel.Information()
    .MinimumLevel.Override("Microsoft", Serilog.Events.LogEventLevel.Warning)
    .WriteTo.Console(outputTemplate: "[{Level:u3}] {SourceContext}: {Message:lj}{NewLine}{Exception}")
    .CreateLogger(), dispose: true);
builder.Services.AddIsis(builder.Configuration.GetSection("Isis"))
    .AddGroup(Ticks.Group, (sp, group) =>
    {
        ILogger<Ticks> log = sp.GetRequiredService<ILogger<Ticks>>();
        group.Handlers[Ticks.Tick] += (Action<string, int>)((from, n) => log.LogInformation("delivered tick {Tick} from {Member}", n, from));
        group.ViewHandlers += (ViewHandler)(v => log.LogInformation("view {ViewId}: {Count} members", v.ViewId, v.Members.Length));
    });
builder.Services.AddHostedService<Ticks>();
if (builder.Configuration.GetValue<int?>("run-seconds") is int seconds)
{
    builder.Services.AddHostedService(sp => new StopAfter(sp.GetRequiredService<IHostApplicationLifetime>(), TimeSpan.FromSeconds(seconds)));
}
builder.Build().Run();

/// <summary>Announces a tick every second in group "workers" (the group joined when the host started).</summary>
internal sealed class Ticks([FromKeyedServices(Ticks.Group)] Group group, IsisRuntime runtime) : BackgroundService
{
    public const string Group = "workers";
    public const int Tick = 1;

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        string me = runtime.Address!.ToString();
        for (int n = 1; !stoppingToken.IsCancellationRequested; n++)
        {
            await group.SendAsync(Tick, [me, n], stoppingToken);
            try { await Task.Delay(TimeSpan.FromSeconds(1), stoppingToken); }
            catch (OperationCanceledException) { return; }
        }
    }
}

/// <summary>Stops the host after a while (--run-seconds N): the sample's own smoke test uses it.</summary>
internal sealed class StopAfter(IHostApplicationLifetime lifetime, TimeSpan after) : BackgroundService
{
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        try { await Task.Delay(after, stoppingToken); }
        catch (OperationCanceledException) { return; }
        lifetime.StopApplication();
    }
}
