using Microsoft.Extensions.DependencyInjection;

namespace Isis.Hosting;

/// <summary>What <c>AddIsis</c> returns: declares the groups this application joins.</summary>
public interface IIsisBuilder
{
    /// <summary>The application's services.</summary>
    IServiceCollection Services { get; }

    /// <summary>
    /// Declares a group the application is a member of: it joins when the host starts (the host's
    /// start waits until the first view is installed) and flushes and leaves when the host stops.
    /// Get it with <c>GetRequiredKeyedService&lt;Group&gt;(name)</c> or <c>[FromKeyedServices(name)] Group</c>.
    /// </summary>
    /// <param name="name">The group's name.</param>
    /// <param name="configure">Registers handlers (and view handlers) before the group joins; it may resolve services.</param>
    /// <exception cref="ArgumentException">The name is empty, or this group was declared already.</exception>
    IIsisBuilder AddGroup(string name, Action<IServiceProvider, Group>? configure = null);

    /// <summary>
    /// Keeps the application running when the membership protocol shuts the runtime down (this
    /// process was expelled, or cut off from the service). By default the application stops then:
    /// its groups are wedged and it can only come back as a new process, which a supervisor or
    /// orchestrator starts. Kept running, its health check reports Unhealthy. The configuration key
    /// "Isis:StopApplicationOnShutdown": false does the same.
    /// </summary>
    IIsisBuilder KeepRunningOnShutdown();
}

internal sealed class IsisBuilder(IServiceCollection services) : IIsisBuilder
{
    public IServiceCollection Services { get; } = services;

    public IIsisBuilder AddGroup(string name, Action<IServiceProvider, Group>? configure = null)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        if (Services.Any(d => d.ServiceType == typeof(DeclaredGroup) && d.ImplementationInstance is DeclaredGroup g && g.Name == name))
            throw new ArgumentException($"The group '{name}' is declared twice; declare each group once, with all its handlers.", nameof(name));
        Services.AddSingleton(new DeclaredGroup(name));
        Services.AddKeyedSingleton(name, (sp, _) =>
        {
            var group = new Group(sp.GetRequiredService<IsisRuntime>(), name);
            configure?.Invoke(sp, group);
            return group;
        });
        return this;
    }

    public IIsisBuilder KeepRunningOnShutdown()
    {
        Services.Configure<IsisHostSettings>(s => s.StopApplicationOnShutdown = false);
        return this;
    }
}

/// <summary>A group declared with <see cref="IIsisBuilder.AddGroup"/>: the hosted lifetime joins it.</summary>
internal sealed record DeclaredGroup(string Name);
