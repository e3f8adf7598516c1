using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.HealthChecks;

namespace Isis.Hosting;

/// <summary>The "isis" health check (see <see cref="IsisHealthChecksBuilderExtensions.AddIsis"/>).</summary>
internal sealed class IsisHealthCheck(IsisRuntime runtime, IEnumerable<DeclaredGroup> declared, IServiceProvider services) : IHealthCheck
{
    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        var data = new Dictionary<string, object>();
        if (!runtime.IsRunning)
        {
            string why = runtime.ShutdownReason ?? (runtime.Address == null ? "not started" : "shut down");
            return Task.FromResult(HealthCheckResult.Unhealthy("The Isis runtime is not running: " + why, data: data));
        }
        data["address"] = runtime.Address!.ToString();
        if (!runtime.TransportBound) return Task.FromResult(HealthCheckResult.Unhealthy("The Isis runtime's socket is closed.", data: data));
        var notInView = new List<string>();
        foreach (DeclaredGroup d in declared)
        {
            View? view = services.GetRequiredKeyedService<Group>(d.Name).GetView();
            data["group:" + d.Name] = view?.ToString() ?? "no view";
            if (view == null) notInView.Add(d.Name);
        }
        if (notInView.Count > 0)
            return Task.FromResult(HealthCheckResult.Unhealthy($"Not in a view of group(s) {string.Join(", ", notInView)} (joining, or left).", data: data));
        data["membershipServiceReachable"] = runtime.MembershipServiceReachable;
        if (!runtime.MembershipServiceReachable)
            return Task.FromResult(HealthCheckResult.Degraded("The membership service does not answer: this process holds no lease (it neither sends nor delivers until it does).", data: data));
        return Task.FromResult(HealthCheckResult.Healthy("In a view of every declared group; the membership service answers.", data: data));
    }
}
