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

    /// <summary>
    /// Adds a <see cref="GroupClient"/> of group <paramref name="group"/>, for a front end that is not a
    /// member (it needs no <c>AddIsis</c>): a keyed singleton, <c>[FromKeyedServices("inventory")] GroupClient inventory</c>,
    /// made at its first use, logging through the host's <see cref="ILoggerFactory"/>, disposed with the host.
    /// </summary>
    /// <param name="services">The application's services.</param>
    /// <param name="group">The group's name; also the service's key.</param>
    /// <param name="membership">
    /// The members' "Isis" section (null: the defaults), bound onto <see cref="GroupClientOptions.Membership"/>
    /// with the keys and formats <see cref="AddIsis(IServiceCollection, IConfiguration)"/> reads: the
    /// client finds the membership service as the members do. A bad key fails the client's creation
    /// with a message that names it.
    /// </param>
    /// <param name="configure">Adjusts the client's own settings (its seeds, the group's key, timeouts).</param>
    public static IServiceCollection AddIsisClient(this IServiceCollection services, string group, IConfiguration? membership = null, Action<GroupClientOptions>? configure = null)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentException.ThrowIfNullOrWhiteSpace(group);
        services.AddKeyedSingleton(group, (sp, _) =>
        {
            var options = new GroupClientOptions { LoggerFactory = sp.GetService<ILoggerFactory>() };
            if (membership != null)
            {
                try
                {
                    IsisConfigurationBinder.Bind(membership, options.Membership);
                }
                catch (ArgumentException e)
                {
                    throw new OptionsValidationException(group, typeof(GroupClientOptions), [$"Isis settings of the client of group '{group}': {e.Message}"]);
                }
            }
            configure?.Invoke(options);
            return new GroupClient(group, options);
        });
        return services;
    }

    private sealed class IsisMarker;
}
