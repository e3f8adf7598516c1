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
        Assert.Contains("Isis:MembershipSeeds:0 must be an IPv4 address with a port", e.Message);
        Assert.Contains("not-an-address", e.Message);

        await using App typo = Build(port, new Dictionary<string, string?> { ["Isis:HeartbeatIntervall"] = "00:00:01" });
        e = await Assert.ThrowsAsync<OptionsValidationException>(() => typo.Host.StartAsync());
        Assert.Contains("Isis:HeartbeatIntervall is not an Isis setting", e.Message);
    }

    /// <summary>The runtime's settings as a host bound them from an "Isis" section holding <paramref name="settings"/>.</summary>
    private static IsisOptions Bound(params (string Key, string? Value)[] settings)
    {
        var config = new ConfigurationBuilder().AddInMemoryCollection(settings.Select(s => KeyValuePair.Create("Isis:" + s.Key, s.Value))).Build();
        using ServiceProvider provider = new ServiceCollection().AddLogging().AddIsis(config.GetSection("Isis")).Services.BuildServiceProvider();
        return provider.GetRequiredService<IOptions<IsisOptions>>().Value;
    }

    /// <summary>The message a host's start gives for an "Isis" section holding <paramref name="settings"/>.</summary>
    private static string Refused(params (string Key, string? Value)[] settings) =>
        Assert.Throws<OptionsValidationException>(() => Bound(settings)).Message;

    [Fact]
    public async Task A_front_end_gets_a_GroupClient_that_finds_the_members_with_their_own_Isis_section()
    {
        using var members = new TestRuntimes();
        var seen = new ConcurrentQueue<string>();
        var g = new Group(members.Start(), "orders");
        g.Handlers[Update] += (Action<string>)seen.Enqueue;
        g.Join();
        var config = new ConfigurationBuilder().AddInMemoryCollection([KeyValuePair.Create<string, string?>("Isis:MembershipServicePort", members.ServicePort.ToString(System.Globalization.CultureInfo.InvariantCulture))]).Build();
        await using (ServiceProvider provider = new ServiceCollection().AddLogging()
            .AddIsisClient("orders", config.GetSection("Isis"), o => o.Timeout = TimeSpan.FromSeconds(20)).BuildServiceProvider())
        {
            GroupClient client = provider.GetRequiredKeyedService<GroupClient>("orders");
            Assert.Same(client, provider.GetRequiredKeyedService<GroupClient>("orders"));
            await client.OrderedSendAsync(Update, "from the front end").WaitAsync(TimeSpan.FromSeconds(30));
            TestRuntimes.WaitUntil(() => seen.Contains("from the front end"), "the member runs the front end's request");
        }
        // A misspelt setting names itself when the client is made.
        var typo = new ConfigurationBuilder().AddInMemoryCollection([KeyValuePair.Create<string, string?>("Isis:MembershipServicePorts", "7345")]).Build();
        using ServiceProvider bad = new ServiceCollection().AddIsisClient("orders", typo.GetSection("Isis")).BuildServiceProvider();
        var e = Assert.Throws<OptionsValidationException>(() => bad.GetRequiredKeyedService<GroupClient>("orders"));
        Assert.Contains("Isis:MembershipServicePorts is not an Isis setting", e.Message);
    }

    [Fact]
    public void Configuration_binds_onto_the_runtimes_own_options_addresses_endpoints_durations_and_enums_included()
    {
        IsisOptions options = Bound(
            ("BindAddress", "10.0.1.17"), ("MembershipServiceAddress", "10.0.1.17"), ("Port", "7400"),
            ("MembershipSeeds:0", "10.0.0.1:7345"), ("MembershipSeeds:1", "10.0.0.2:7345"),
            ("HeartbeatInterval", "00:00:00.250"), ("IsolationTimeout", "00:00:05"), ("Transport", "Udp"),
            ("MembershipService", "Auto"), ("MaxUnstableMessages", "500"), ("StopApplicationOnShutdown", "false"));
        Assert.Equal(System.Net.IPAddress.Parse("10.0.1.17"), options.BindAddress);
        Assert.Equal(System.Net.IPAddress.Parse("10.0.1.17"), options.MembershipServiceAddress);
        Assert.Equal(7400, options.Port);
        Assert.Equal([System.Net.IPEndPoint.Parse("10.0.0.1:7345"), System.Net.IPEndPoint.Parse("10.0.0.2:7345")], options.MembershipSeeds);
        Assert.Equal(TimeSpan.FromMilliseconds(250), options.HeartbeatInterval);
        Assert.Equal(TimeSpan.FromSeconds(5), options.IsolationTimeout);
        Assert.Equal(500, options.MaxUnstableMessages);
        // The host's factories, since the application set none.
        Assert.NotNull(options.LoggerFactory);

        // A fixed service's replicas, by mode name.
        IsisOptions client = Bound(("MembershipService", "Client"), ("MembershipReplicas:0", "10.0.0.1:7345"), ("MembershipReplicas:1", "10.0.0.2:7345"), ("MembershipReplicas:2", "10.0.0.3:7345"));
        Assert.Equal(MembershipServiceMode.Client, client.MembershipService);
        Assert.Equal(3, client.MembershipReplicas.Count);

        // Nothing configured: the zero-configuration defaults.
        IsisOptions defaults = Bound();
        Assert.Equal(System.Net.IPAddress.Loopback, defaults.BindAddress);
        Assert.Empty(defaults.MembershipSeeds);
        Assert.Null(defaults.Multicast);
        Assert.Equal(TimeSpan.FromSeconds(10), defaults.DiscoveryTimeout);
    }

    [Fact]
    public void A_value_that_cannot_be_read_or_a_key_that_is_not_a_setting_names_itself_and_says_what_fits()
    {
        Assert.Contains("Isis:BindAddress must be an IPv4 address", Refused(("BindAddress", "localhost")));
        Assert.Contains("Isis:MembershipSeeds:1 must be an IPv4 address with a port", Refused(("MembershipSeeds:0", "10.0.0.1:7345"), ("MembershipSeeds:1", "10.0.0.2")));
        Assert.Contains("Isis:Port must be a whole number; it is 'seven'", Refused(("Port", "seven")));
        Assert.Contains("Isis:HeartbeatInterval must be a duration such as 00:00:00.100", Refused(("HeartbeatInterval", "fast")));
        Assert.Contains("Isis:Transport must be one of Udp, Tcp", Refused(("Transport", "Quic")));
        Assert.Contains("Isis:StopApplicationOnShutdown must be true or false", Refused(("StopApplicationOnShutdown", "maybe")));
        string typo = Refused(("HeartbeatIntervall", "00:00:01"));
        Assert.Contains("Isis:HeartbeatIntervall is not an Isis setting", typo);
        Assert.Contains("HeartbeatInterval,", typo);
        // The factories are the host's to give, not configuration's.
        Assert.Contains("Isis:LoggerFactory is not an Isis setting", Refused(("LoggerFactory", "x")));
        // Read, but not workable: the runtime's own rule.
        Assert.Contains("SuspicionCount must be at least 3", Refused(("SuspicionCount", "2")));
    }

    [Fact]
    public void The_multicast_section_binds_to_the_runtimes_multicast_options_and_a_bad_value_names_the_setting()
    {
        IsisOptions options = Bound(("Multicast:AddressRange", "239.192.90.0/28"), ("Multicast:Port", "7400"), ("Multicast:Interface", "127.0.0.1"), ("Multicast:MinMembers", "4"));
        Assert.NotNull(options.Multicast);
        Assert.Equal("239.192.90.0/28", options.Multicast.AddressRange);
        Assert.Equal(7400, options.Multicast.Port);
        Assert.Equal(System.Net.IPAddress.Loopback, options.Multicast.Interface);
        Assert.Equal(4, options.Multicast.MinMembers);
        Assert.Equal(20, options.Multicast.MaxAddressesPerHost); // left out: the default

        Assert.Contains("Isis:Multicast:Interface must be an IPv4 address", Refused(("Multicast:Interface", "eth0")));
        Assert.Contains("224.0.0.0/4", Refused(("Multicast:AddressRange", "10.1.0.0/16")));
        Assert.Contains("Isis:Multicast:Hops is not an Isis setting", Refused(("Multicast:Hops", "2")));
    }

    [Fact]
    public void The_discovery_timeout_binds_from_configuration_into_the_protocol()
    {
        IsisOptions options = Bound(("DiscoveryTimeout", "00:00:30"));
        Assert.Equal(TimeSpan.FromSeconds(30), options.DiscoveryTimeout);
        Assert.Equal(30_000_000, options.ToProtocolOptions().DiscoveryTimeout);
    }

    [Fact]
    public void The_system_key_binds_from_base64_and_a_bad_value_names_the_setting()
    {
        byte[] key = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
        Assert.Equal(key, Bound(("SystemKey", Convert.ToBase64String(key))).SystemKey);
        Assert.Null(Bound().SystemKey);
        Assert.Contains("Isis:SystemKey must be the base64 of 32 random bytes", Refused(("SystemKey", "not base64!")));
        Assert.Contains("decodes to 16", Refused(("SystemKey", Convert.ToBase64String(new byte[16]))));

        // During a rotation: the other key, accepted but never sealed with.
        byte[] next = System.Security.Cryptography.RandomNumberGenerator.GetBytes(32);
        IsisOptions rotating = Bound(("SystemKey", Convert.ToBase64String(key)), ("AcceptedSystemKeys:0", Convert.ToBase64String(next)));
        Assert.Equal(next, Assert.Single(rotating.AcceptedSystemKeys));
        Assert.Contains("Isis:AcceptedSystemKeys:0", Refused(("SystemKey", Convert.ToBase64String(key)), ("AcceptedSystemKeys:0", "not base64!")));
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
        Assert.Equal(7, provider.GetRequiredService<IOptions<IsisOptions>>().Value.SuspicionCount);
        Assert.Throws<ArgumentException>(() => services.AddIsis().AddGroup("g").AddGroup("g"));
    }

    [Fact]
    public void The_application_stops_on_a_protocol_shutdown_unless_configuration_or_the_builder_says_keep_running()
    {
        static bool Stops(Action<IServiceCollection> add)
        {
            var services = new ServiceCollection();
            add(services);
            using ServiceProvider provider = services.AddLogging().BuildServiceProvider();
            return provider.GetRequiredService<IOptions<IsisHostSettings>>().Value.StopApplicationOnShutdown;
        }
        IConfiguration Section(string value) => new ConfigurationBuilder()
            .AddInMemoryCollection([KeyValuePair.Create<string, string?>("Isis:StopApplicationOnShutdown", value)]).Build().GetSection("Isis");

        Assert.True(Stops(s => s.AddIsis()));
        Assert.True(Stops(s => s.AddIsis(Section("true"))));
        Assert.False(Stops(s => s.AddIsis(Section("false"))));
        Assert.False(Stops(s => s.AddIsis().KeepRunningOnShutdown()));
        Assert.False(Stops(s => s.AddIsis(Section("true")).KeepRunningOnShutdown()));
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
        await using App stays = Build(port, client, more: services => services.AddIsis().KeepRunningOnShutdown());
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
