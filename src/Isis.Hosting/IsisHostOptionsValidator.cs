using Microsoft.Extensions.Options;

namespace Isis.Hosting;

/// <summary>Validates the settings when the host starts, with the runtime's own rules and messages that say what to fix.</summary>
internal sealed class IsisHostOptionsValidator : IValidateOptions<IsisHostOptions>
{
    public ValidateOptionsResult Validate(string? name, IsisHostOptions options)
    {
        try
        {
            options.ToIsisOptions(loggerFactory: null);
            return ValidateOptionsResult.Success;
        }
        catch (ArgumentException e)
        {
            return ValidateOptionsResult.Fail("Isis settings: " + e.Message);
        }
    }
}
