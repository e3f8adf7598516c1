using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Isis.Hosting;

/// <summary>
/// The runtime's life in the host: started (and every declared group joined) when the host starts;
/// every group flushed and left, then the runtime shut down, when it stops, within the host's
/// shutdown timeout; and, by default, the application stopped if the membership protocol shuts the
/// runtime down.
/// </summary>
internal sealed partial class IsisHostedService(
    IServiceProvider services,
    IsisRuntime runtime,
    IEnumerable<DeclaredGroup> declared,
    IOptions<IsisHostSettings> settings,
    IHostApplicationLifetime lifetime,
    ILogger<IsisHostedService> logger) : IHostedService
{
    private readonly List<Group> _groups = new();

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        if (settings.Value.StopApplicationOnShutdown) runtime.ShutDown += OnShutDownByProtocol;
        runtime.Start();
        foreach (DeclaredGroup d in declared)
        {
            Group group = services.GetRequiredKeyedService<Group>(d.Name);
            await group.JoinAsync(cancellationToken).ConfigureAwait(false);
            _groups.Add(group);
            LogJoined(logger, d.Name, group.GetView()?.ToString() ?? "?");
        }
    }

    public async Task StopAsync(CancellationToken cancellationToken)
    {
        runtime.ShutDown -= OnShutDownByProtocol;
        if (runtime.IsRunning)
        {
            // Flush first: what this member sent is then held by every member before it goes.
            foreach (Group g in _groups)
            {
                try
                {
                    await g.FlushAsync(cancellationToken).ConfigureAwait(false);
                    await g.LeaveAsync(cancellationToken).ConfigureAwait(false);
                }
                catch (Exception e) when (e is IsisException or OperationCanceledException)
                {
                    LogLeaveFailed(logger, g.Name, e.Message);
                }
            }
        }
        // Hands over a membership replica this process runs; bounded by the runtime itself.
        await Task.Run(runtime.Shutdown, CancellationToken.None).WaitAsync(cancellationToken).ConfigureAwait(false);
    }

    private void OnShutDownByProtocol(object? sender, IsisShutdownEventArgs e)
    {
        LogStopping(logger, e.Reason);
        lifetime.StopApplication();
    }

    [LoggerMessage(EventId = 100, Level = LogLevel.Information, Message = "Joined group {Group}: {View}")]
    private static partial void LogJoined(ILogger logger, string group, string view);

    [LoggerMessage(EventId = 101, Level = LogLevel.Warning, Message = "Group {Group} did not flush and leave cleanly while the host stopped: {Reason}")]
    private static partial void LogLeaveFailed(ILogger logger, string group, string reason);

    [LoggerMessage(EventId = 102, Level = LogLevel.Critical, Message = "Stopping the application: the Isis runtime was shut down by the membership protocol ({Reason}); this process can only come back as a new member. Set Isis:StopApplicationOnShutdown to false to keep it running.")]
    private static partial void LogStopping(ILogger logger, string reason);
}
