using System.Collections.Concurrent;
using Isis.Hosting;
using Isis.Tests.Runtime;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Isis.Tests.Hosting;

/// <summary>
/// The runtime in a .NET Generic Host, as an ASP.NET service or worker uses it: settings bound from
/// configuration and validated at start, groups declared in DI joined at start and left at stop,
/// the host's logging, a protocol shutdown stopping the application, and the health check.
/// </summary>
public sealed class HostingTests
{
    private const int Update = 1;

    /// <summary>Collects every log line of a host, by category.</summary>
    private sealed class CapturingProvider : ILoggerProvider
    {
        public ConcurrentQueue<(string Category, LogLevel Level, string Text)> Lines { get; } = new();

        public ILogger CreateLogger(string categoryName) => new Logger(categoryName, Lines);

        public void Dispose()
        {
        }

        private sealed class Logger(string category, ConcurrentQueue<(string, LogLevel, string)> lines) : ILogger
        {
            public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

            public bool IsEnabled(LogLevel logLevel) => true;

            public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter) =>
                lines.Enqueue((category, logLevel, formatter(state, exception)));
        }
    }

    private sealed class App : IAsyncDisposable
    {
        public required IHost Host { get; init; }
        public required CapturingProvider Log { get; init; }
        public readonly ConcurrentQueue<(string Item, int Count)> Delivered = new();

        public Group Group(string name = "inventory") => Host.Services.GetRequiredKeyedService<Group>(name);

        public IsisRuntime Runtime => Host.Services.GetRequiredService<IsisRuntime>();

        public async ValueTask DisposeAsync()
        {
            try { await Host.StopAsync(TimeSpan.FromSeconds(10)); }
            // A host whose start failed throws ArgumentNullException from StopAsync (it never built its list of hosted services).
            catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException or ArgumentNullException) { }
            Host.Dispose();
        }
    }

    /// <summary>A host whose "Isis" section is <paramref name="settings"/> (on top of a private membership port and a fast detector).</summary>
    private static App Build(int servicePort, IDictionary<string, string?>? settings = null, Action<IServiceCollection>? more = null)
    {
        HostApplicationBuilder builder = Microsoft.Extensions.Hosting.Host.CreateEmptyApplicationBuilder(new HostApplicationBuilderSettings());
        var config = new Dictionary<string, string?>
        {
            ["Isis:MembershipServicePort"] = servicePort.ToString(System.Globalization.CultureInfo.InvariantCulture),
            ["Isis:HeartbeatInterval"] = "00:00:00.050",
            ["Isis:SuspicionCount"] = "4",
        };
        foreach (var (k, v) in settings ?? new Dictionary<string, string?>()) config[k] = v;
        builder.Configuration.AddInMemoryCollection(config);
        var log = new CapturingProvider();
        builder.Logging.AddProvider(log);
        builder.Logging.SetMinimumLevel(LogLevel.Information);
        App? app = null;
        builder.Services.AddIsis(builder.Configuration.GetSection("Isis"))
            .AddGroup("inventory", (sp, g) => g.Handlers[Update] += (Action<string, int>)((item, n) => app!.Delivered.Enqueue((item, n))));
        builder.Services.AddHealthChecks().AddIsis();
        more?.Invoke(builder.Services);
        app = new App { Host = builder.Build(), Log = log };
        return app;
    }

    [Fact]
    public async Task Two_hosts_bound_from_configuration_join_their_declared_group_deliver_and_leave_cleanly_when_stopped()
    {
        int port = TestRuntimes.FreeUdpPort();
        await using App a = Build(port), b = Build(port);
        await a.Host.StartAsync();
        await b.Host.StartAsync();
        // The host's start waits for the join: each is in a view already; the second start saw both.
        Assert.NotNull(a.Group().GetView());
        Assert.Equal(2, b.Group().GetView()!.Members.Length);

        a.Group().Send(Update, "apples", 12);
        TestRuntimes.WaitUntil(() => b.Delivered.Contains(("apples", 12)), "the other host delivers");
        // The runtime logs through the host's logging.
        Assert.Contains(a.Log.Lines, l => l.Category == "Isis" && l.Text.Contains("Isis runtime started"));
        Assert.Contains(a.Log.Lines, l => l.Text.Contains("Joined group inventory"));

        Address leaver = a.Runtime.Address!;
        await a.Host.StopAsync();
        Assert.False(a.Runtime.IsRunning);
        TestRuntimes.WaitUntil(() => b.Group().GetView()?.Members.Length == 1, "the other host sees it leave");
        Assert.Contains(leaver, b.Group().GetView()!.Leavers);
        Assert.Null(b.Runtime.ShutdownReason);
    }

    [Fact]
    public async Task Settings_that_cannot_work_fail_the_start_with_a_message_that_says_what_to_fix()
    {
        int port = TestRuntimes.FreeUdpPort();
        await using App low = Build(port, new Dictionary<string, string?> { ["Isis:SuspicionCount"] = "2" });
        var e = await Assert.ThrowsAsync<OptionsValidationException>(() => low.Host.StartAsync());
        Assert.Contains("SuspicionCount must be at least 3", e.Message);

        await using App address = Build(port, new Dictionary<string, string?> { ["Isis:MembershipSeeds:0"] = "not-an-address" });
        e = await Assert.ThrowsAsync<OptionsValidationException>(() => address.Host.StartAsync());
        Assert.Contains("Isis:MembershipSeeds must list IPv4 addresses with ports", e.Message);
        Assert.Contains("not-an-address", e.Message);

        await using App typo = Build(port, new Dictionary<string, string?> { ["Isis:HeartbeatIntervall"] = "00:00:01" });
        var t = await Assert.ThrowsAsync<InvalidOperationException>(() => typo.Host.StartAsync());
        Assert.Contains("HeartbeatIntervall", t.Message);
    }

    [Fact]
    public void The_multicast_section_binds_to_the_runtimes_multicast_options_and_a_bad_value_names_the_setting()
    {
        var host = new IsisHostOptions { Multicast = new IsisHostMulticastOptions { AddressRange = "239.192.90.0/28", Port = 7400, Interface = "127.0.0.1", MinMembers = 4 } };
        IsisOptions options = host.ToIsisOptions(null);
        Assert.NotNull(options.Multicast);
        Assert.Equal("239.192.90.0/28", options.Multicast.AddressRange);
        Assert.Equal(7400, options.Multicast.Port);
        Assert.Equal(System.Net.IPAddress.Loopback, options.Multicast.Interface);
        Assert.Equal(4, options.Multicast.MinMembers);
        Assert.Null(new IsisHostOptions().ToIsisOptions(null).Multicast);

        var config = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["Isis:Multicast:AddressRange"] = "239.192.91.0/24",
            ["Isis:Multicast:Port"] = "7401",
        }).Build();
        var bound = config.GetSection("Isis").Get<IsisHostOptions>()!;
        Assert.Equal(7401, bound.ToIsisOptions(null).Multicast!.Port);

        host.Multicast.Interface = "eth0";
        Assert.Contains("Isis:Multicast:Interface", Assert.Throws<ArgumentException>(() => host.ToIsisOptions(null)).Message);
        host.Multicast.Interface = null;
        host.Multicast.AddressRange = "10.1.0.0/16";
        Assert.Contains("224.0.0.0/4", Assert.Throws<ArgumentException>(() => host.ToIsisOptions(null)).Message);
    }

    [Fact]
    public void The_discovery_timeout_binds_from_configuration_into_the_protocol()
    {
        var config = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?> { ["Isis:DiscoveryTimeout"] = "00:00:30" }).Build();
        IsisOptions options = config.GetSection("Isis").Get<IsisHostOptions>()!.ToIsisOptions(null);
        Assert.Equal(TimeSpan.FromSeconds(30), options.DiscoveryTimeout);
        Assert.Equal(30_000_000, options.ToProtocolOptions().DiscoveryTimeout);
        Assert.Equal(TimeSpan.FromSeconds(10), new IsisHostOptions().ToIsisOptions(null).DiscoveryTimeout);
    }

    [Fact]
    public void The_system_key_binds_from_base64_and_a_bad_value_names_the_setting()
    {
        byte[] key = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
        var config = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?> { ["Isis:SystemKey"] = Convert.ToBase64String(key) }).Build();
        IsisOptions options = config.GetSection("Isis").Get<IsisHostOptions>()!.ToIsisOptions(null);
        Assert.Equal(key, options.SystemKey);
        Assert.Null(new IsisHostOptions().ToIsisOptions(null).SystemKey);
        Assert.Contains("Isis:SystemKey", Assert.Throws<ArgumentException>(() => new IsisHostOptions { SystemKey = "not base64!" }.ToIsisOptions(null)).Message);
        Assert.Contains("decodes to 16", Assert.Throws<ArgumentException>(() => new IsisHostOptions { SystemKey = Convert.ToBase64String(new byte[16]) }.ToIsisOptions(null)).Message);

        // During a rotation: the other key, accepted but never sealed with.
        byte[] next = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
        var rotating = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["Isis:SystemKey"] = Convert.ToBase64String(key),
            ["Isis:AcceptedSystemKeys:0"] = Convert.ToBase64String(next),
        }).Build();
        Assert.Equal(next, Assert.Single(rotating.GetSection("Isis").Get<IsisHostOptions>()!.ToIsisOptions(null).AcceptedSystemKeys));
        Assert.Contains("Isis:AcceptedSystemKeys:0", Assert.Throws<ArgumentException>(() => new IsisHostOptions { AcceptedSystemKeys = { "not base64!" } }.ToIsisOptions(null)).Message);
    }

    [Fact]
    public void AddIsis_twice_adds_one_runtime_and_one_hosted_lifetime()
    {
        var services = new ServiceCollection();
        services.AddIsis();
        services.AddIsis(o => o.SuspicionCount = 7);
        Assert.Single(services, d => d.ServiceType == typeof(IsisRuntime));
        Assert.Single(services, d => d.ServiceType == typeof(IHostedService));
        using ServiceProvider provider = services.AddLogging().BuildServiceProvider();
        Assert.Equal(7, provider.GetRequiredService<IOptions<IsisHostOptions>>().Value.SuspicionCount);
        Assert.Throws<ArgumentException>(() => services.AddIsis().AddGroup("g").AddGroup("g"));
    }

    [Fact]
    public async Task A_protocol_shutdown_stops_the_application_unless_told_to_keep_running_and_the_health_check_says_why()
    {
        int servicePort = TestRuntimes.FreeUdpPort();
        using var forgetReplicaLog = new Disposer(() => TestRuntimes.ForgetSingleReplicaLog(servicePort)); // disposed after the service
        using var service = new IsisRuntime(new IsisOptions
        {
            MembershipServicePort = servicePort, MembershipService = MembershipServiceMode.Host,
            HeartbeatInterval = TimeSpan.FromMilliseconds(50), SuspicionCount = 4,
        });
        service.Start();
        var client = new Dictionary<string, string?> { ["Isis:MembershipService"] = "Client", ["Isis:IsolationTimeout"] = "00:00:00.600" };
        int port = service.Options.MembershipServicePort;
        await using App stops = Build(port, client);
        await using App stays = Build(port, new Dictionary<string, string?>(client) { ["Isis:StopApplicationOnShutdown"] = "false" });
        await stops.Host.StartAsync();
        await stays.Host.StartAsync();
        HealthReport healthy = await stays.Host.Services.GetRequiredService<HealthCheckService>().CheckHealthAsync();
        Assert.Equal(HealthStatus.Healthy, healthy.Status);
        Assert.Contains("group:inventory", healthy.Entries["isis"].Data.Keys);

        var stopping = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        stops.Host.Services.GetRequiredService<IHostApplicationLifetime>().ApplicationStopping.Register(() => stopping.TrySetResult());
        service.Crash(); // the whole (single, fixed) service is gone: both processes isolate themselves

        await stopping.Task.WaitAsync(TimeSpan.FromSeconds(20));
        Assert.Contains(stops.Log.Lines, l => l.Level == LogLevel.Critical && l.Text.Contains("Stopping the application") && l.Text.Contains("isolated"));
        TestRuntimes.WaitUntil(() => stays.Runtime.ShutdownReason != null, "the other one isolates itself too");
        Assert.False(stays.Host.Services.GetRequiredService<IHostApplicationLifetime>().ApplicationStopping.IsCancellationRequested);
        HealthReport unhealthy = await stays.Host.Services.GetRequiredService<HealthCheckService>().CheckHealthAsync();
        Assert.Equal(HealthStatus.Unhealthy, unhealthy.Status);
        Assert.Contains("isolated", unhealthy.Entries["isis"].Description);
    }

    /// <summary>Runs an action when disposed (cleanup that must follow a <c>using</c> declared after it).</summary>
    private sealed class Disposer(Action action) : IDisposable
    {
        public void Dispose() => action();
    }
}
