using Isis.Hosting;

using Microsoft.Extensions.Diagnostics.HealthChecks;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Adds the Isis health check to <c>services.AddHealthChecks()</c>.</summary>
public static class IsisHealthChecksBuilderExtensions
{
    /// <summary>
    /// Adds a check named "isis": Unhealthy if the runtime is not running (not started, shut down,
    /// or stopped by the membership protocol: the reason is in the description), if its transport
    /// is not bound, or if a declared group is in no view; Degraded while the membership service
    /// does not answer (the process holds no lease: it neither sends nor delivers until it does);
    /// Healthy otherwise. The data lists each declared group's view. A Degraded process may serve
    /// stale reads, yet ASP.NET's <c>MapHealthChecks</c> answers Degraded with HTTP 200 by default:
    /// where front-ends or a load balancer choose instances by the check, map Degraded to 503
    /// (<c>HealthCheckOptions.ResultStatusCodes</c>), as the samples do.
    /// </summary>
    /// <param name="builder">The health checks builder.</param>
    /// <param name="name">The check's name.</param>
    /// <param name="tags">Tags, for example "ready".</param>
    public static IHealthChecksBuilder AddIsis(this IHealthChecksBuilder builder, string name = "isis", IEnumerable<string>? tags = null)
    {
        ArgumentNullException.ThrowIfNull(builder);
        return builder.AddCheck<IsisHealthCheck>(name, failureStatus: HealthStatus.Unhealthy, tags: tags ?? []);
    }
}
