using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Isis.Hosting;

/// <summary>Binds the runtime's settings from a configuration section, failing the host's start with a message that names the setting.</summary>
internal sealed class ConfigureIsisFromConfiguration(IConfiguration section) : IConfigureOptions<IsisOptions>
{
    public void Configure(IsisOptions options)
    {
        try
        {
            IsisConfigurationBinder.Bind(section, options);
        }
        catch (ArgumentException e)
        {
            throw new OptionsValidationException(Options.DefaultName, typeof(IsisOptions), ["Isis settings: " + e.Message]);
        }
    }
}

/// <summary>Logs and meters through the host's factories, unless the application set its own.</summary>
internal sealed class UseHostLoggingAndMetrics(IServiceProvider services) : IPostConfigureOptions<IsisOptions>
{
    public void PostConfigure(string? name, IsisOptions options)
    {
        options.LoggerFactory ??= services.GetService<ILoggerFactory>();
        options.MeterFactory ??= services.GetService<System.Diagnostics.Metrics.IMeterFactory>();
    }
}

/// <summary>Validates the settings when the host starts, with the runtime's own rules and messages that say what to fix.</summary>
internal sealed class IsisOptionsValidator : IValidateOptions<IsisOptions>
{
    public ValidateOptionsResult Validate(string? name, IsisOptions options)
    {
        try
        {
            options.Validate();
            return ValidateOptionsResult.Success;
        }
        catch (ArgumentException e)
        {
            return ValidateOptionsResult.Fail("Isis settings: " + e.Message);
        }
    }
}

/// <summary>The host's own settings, beside the runtime's.</summary>
internal sealed class IsisHostSettings
{
    /// <summary>Stop the application when the membership protocol shuts the runtime down (see <see cref="IIsisBuilder.KeepRunningOnShutdown"/>).</summary>
    public bool StopApplicationOnShutdown { get; set; } = true;
}
