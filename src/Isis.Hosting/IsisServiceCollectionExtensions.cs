using Isis;
using Isis.Hosting;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Adds the Isis runtime to a .NET host: <c>builder.Services.AddIsis(builder.Configuration.GetSection("Isis")).AddGroup("inventory", ...)</c>.</summary>
public static class IsisServiceCollectionExtensions
{
    /// <summary>
    /// Adds the Isis runtime: one <see cref="IsisRuntime"/> for the application (a singleton that
    /// logs through the host's <see cref="ILoggerFactory"/> and creates its meter "Isis" with the
    /// host's IMeterFactory, unless <paramref name="configure"/> sets its own), started with the host
    /// and shut down with it (handing over a membership replica it runs, then leaving every group).
    /// Settings are validated when the host starts. Calling it again adds the settings to the same runtime.
    /// </summary>
    /// <param name="services">The application's services.</param>
    /// <param name="configure">Adjusts the runtime's settings.</param>
    public static IIsisBuilder AddIsis(this IServiceCollection services, Action<IsisOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(configure);
        IIsisBuilder builder = services.AddIsis();
        services.Configure(configure);
        return builder;
    }

    /// <summary>Adds the Isis runtime with the zero-configuration defaults (see <see cref="AddIsis(IServiceCollection, Action{IsisOptions})"/>).</summary>
    /// <param name="services">The application's services.</param>
    public static IIsisBuilder AddIsis(this IServiceCollection services)
    {
        ArgumentNullException.ThrowIfNull(services);
        if (services.Any(d => d.ServiceType == typeof(IsisMarker))) return new IsisBuilder(services);

        services.AddSingleton<IsisMarker>();
        services.AddOptions<IsisOptions>().ValidateOnStart();
        services.AddOptions<IsisHostSettings>();
        services.AddSingleton<IPostConfigureOptions<IsisOptions>, UseHostLoggingAndMetrics>();
        services.AddSingleton<IValidateOptions<IsisOptions>, IsisOptionsValidator>();
        services.TryAddSingleton(sp => new IsisRuntime(sp.GetRequiredService<IOptions<IsisOptions>>().Value));
        services.AddHostedService<IsisHostedService>();
        return new IsisBuilder(services);
    }

    /// <summary>
    /// Adds the Isis runtime with settings bound from <paramref name="configuration"/>, for example the
    /// "Isis" section of appsettings.json:
    /// <code>
    /// "Isis": { "MembershipSeeds": [ "10.0.0.1:7345", "10.0.0.2:7345" ], "BindAddress": "10.0.1.17", "MembershipServiceAddress": "10.0.1.17" }
    /// </code>
    /// Its keys are the properties of <see cref="IsisOptions"/> (addresses as "10.0.1.17", endpoints as
    /// "10.0.0.1:7345", keys as base64, durations as "00:00:00.100", a "Multicast" section for
    /// <see cref="MulticastOptions"/>), plus "StopApplicationOnShutdown" (see
    /// <see cref="IIsisBuilder.KeepRunningOnShutdown"/>). A key that is not a setting, or a value
    /// that cannot be read, fails the host's start with a message that names it.
    /// </summary>
    /// <param name="services">The application's services.</param>
    /// <param name="configuration">The section to bind.</param>
    public static IIsisBuilder AddIsis(this IServiceCollection services, IConfiguration configuration)
    {
        ArgumentNullException.ThrowIfNull(configuration);
        IIsisBuilder builder = services.AddIsis();
        services.AddSingleton<IConfigureOptions<IsisOptions>>(new ConfigureIsisFromConfiguration(configuration));
        services.Configure<IsisHostSettings>(s => s.StopApplicationOnShutdown &= IsisConfigurationBinder.ReadStopApplicationOnShutdown(configuration));
        return builder;
    }

    private sealed class IsisMarker;
}
