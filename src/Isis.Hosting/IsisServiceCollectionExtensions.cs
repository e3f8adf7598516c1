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
    /// host's IMeterFactory), started with the host and shut down
    /// with it (handing over a membership replica it runs, then leaving every group). Settings are
    /// validated when the host starts. Calling it again adds the settings to the same runtime.
    /// </summary>
    /// <param name="services">The application's services.</param>
    /// <param name="configure">Adjusts the settings.</param>
    public static IIsisBuilder AddIsis(this IServiceCollection services, Action<IsisHostOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(configure);
        return AddIsisCore(services, configure);
    }

    /// <summary>Adds the Isis runtime with the zero-configuration defaults (see <see cref="AddIsis(IServiceCollection, Action{IsisHostOptions})"/>).</summary>
    /// <param name="services">The application's services.</param>
    public static IIsisBuilder AddIsis(this IServiceCollection services) => AddIsisCore(services, configure: null);

    private static IIsisBuilder AddIsisCore(IServiceCollection services, Action<IsisHostOptions>? configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        OptionsBuilder<IsisHostOptions> options = services.AddOptions<IsisHostOptions>();
        if (configure != null) options.Configure(configure);
        if (services.Any(d => d.ServiceType == typeof(IsisMarker))) return new IsisBuilder(services);

        services.AddSingleton<IsisMarker>();
        options.ValidateOnStart();
        services.AddSingleton<IValidateOptions<IsisHostOptions>, IsisHostOptionsValidator>();
        services.TryAddSingleton(sp => new IsisRuntime(sp.GetRequiredService<IOptions<IsisHostOptions>>().Value
            .ToIsisOptions(sp.GetService<ILoggerFactory>(), sp.GetService<System.Diagnostics.Metrics.IMeterFactory>())));
        services.AddHostedService<IsisHostedService>();
        return new IsisBuilder(services);
    }

    /// <summary>Adds the Isis runtime with settings bound from <paramref name="configuration"/> (for example the "Isis" section of appsettings.json).</summary>
    /// <param name="services">The application's services.</param>
    /// <param name="configuration">The section whose keys are the properties of <see cref="IsisHostOptions"/>.</param>
    public static IIsisBuilder AddIsis(this IServiceCollection services, IConfiguration configuration)
    {
        ArgumentNullException.ThrowIfNull(configuration);
        services.AddOptions<IsisHostOptions>().Bind(configuration, binder => binder.ErrorOnUnknownConfiguration = true);
        return services.AddIsis();
    }

    private sealed class IsisMarker;
}
