using System.Net;
using Isis.Core.Bft;
using Isis.Transport;

namespace Isis.Perpetual;

/// <summary>
/// Where every replica of every service and every unreplicated client of a Perpetual deployment
/// listens, and the deployment's key. Every process of the deployment builds the same one (the
/// same services, replicas, clients and key; the order of the calls does not matter).
/// </summary>
/// <remarks>
/// <para>Membership is static, from configuration, as in Perpetual-WS: a service does not add or
/// remove replicas while it runs. A replica that fails is repaired and started again under the
/// same identity (service and index). Agreeing on a new membership would itself need the agreement
/// the replicas provide.</para>
/// <para>A service of n = 3f+1 replicas stays safe and live with at most f of them faulty in any way
/// (crashed, slow, lying, equivocating). One replica (f = 0) is allowed; it tolerates nothing, which
/// is the unreplicated baseline.</para>
/// <para>Every message between two principals carries a MAC under a key of their own. Those pair
/// keys are derived from the 32-byte deployment key given here; the view change's signing keys too.
/// Whoever holds the deployment key can speak for any principal, so give it only to hosts you
/// trust as a whole (one machine, one operator). Generate it with <c>RandomNumberGenerator.GetBytes(32)</c>.</para>
/// </remarks>
public sealed class PerpetualDeployment
{
    private readonly byte[] _key;
    private readonly SortedDictionary<string, IPEndPoint[]> _services = new(StringComparer.Ordinal);
    private readonly SortedDictionary<string, IPEndPoint> _clients = new(StringComparer.Ordinal);
    private Built? _built;

    /// <summary>A deployment with no services yet, whose pair keys derive from <paramref name="key"/> (32 bytes).</summary>
    /// <exception cref="ArgumentException">The key is not 32 bytes.</exception>
    public PerpetualDeployment(byte[] key)
    {
        ArgumentNullException.ThrowIfNull(key);
        if (key.Length != 32) throw new ArgumentException($"a Perpetual deployment's key is 32 bytes; {key.Length} given. Generate one with RandomNumberGenerator.GetBytes(32) and give every process the same.", nameof(key));
        _key = (byte[])key.Clone();
    }

    /// <summary>
    /// Declares service <paramref name="name"/> with its replicas, replica i at <paramref name="replicas"/>[i]:
    /// 3f+1 of them (1, 4, 7, 10...). Returns this deployment.
    /// </summary>
    /// <exception cref="ArgumentException">The count is not 3f+1, the name is taken, or an endpoint is declared twice.</exception>
    /// <exception cref="InvalidOperationException">A replica or client of this deployment has started already.</exception>
    public PerpetualDeployment AddService(string name, params IPEndPoint[] replicas)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        ArgumentNullException.ThrowIfNull(replicas);
        ThrowIfBuilt();
        if (replicas.Length < 1 || (replicas.Length - 1) % 3 != 0)
            throw new ArgumentException($"service {name}: a Perpetual service has 3f+1 replicas (1, 4, 7, 10...) to tolerate f faulty ones; {replicas.Length} given", nameof(replicas));
        if (_services.ContainsKey(name) || _clients.ContainsKey(name)) throw new ArgumentException($"the name {name} is declared twice in this deployment", nameof(name));
        CheckEndpoints(replicas);
        _services.Add(name, [.. replicas]);
        return this;
    }

    /// <summary>Declares an unreplicated client <paramref name="name"/> (an ASP.NET front end, a console) listening at <paramref name="endpoint"/>. Returns this deployment.</summary>
    /// <exception cref="ArgumentException">The name is taken or the endpoint is declared twice.</exception>
    /// <exception cref="InvalidOperationException">A replica or client of this deployment has started already.</exception>
    public PerpetualDeployment AddClient(string name, IPEndPoint endpoint)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        ArgumentNullException.ThrowIfNull(endpoint);
        ThrowIfBuilt();
        if (_services.ContainsKey(name) || _clients.ContainsKey(name)) throw new ArgumentException($"the name {name} is declared twice in this deployment", nameof(name));
        CheckEndpoints([endpoint]);
        _clients.Add(name, endpoint);
        return this;
    }

    /// <summary>The endpoints of service <paramref name="service"/>'s replicas, replica i at [i].</summary>
    /// <exception cref="ArgumentException">No such service.</exception>
    public IReadOnlyList<IPEndPoint> ReplicasOf(string service) =>
        _services.TryGetValue(service, out IPEndPoint[]? replicas) ? replicas : throw new ArgumentException($"service {service} is not declared in this deployment (AddService)", nameof(service));

    /// <summary>How many faulty replicas service <paramref name="service"/> tolerates: f, with 3f+1 replicas.</summary>
    /// <exception cref="ArgumentException">No such service.</exception>
    public int FaultsTolerated(string service) => (ReplicasOf(service).Count - 1) / 3;

    private void ThrowIfBuilt()
    {
        if (_built != null) throw new InvalidOperationException("a replica or client of this deployment started already: declare every service and client first, then start them");
    }

    /// <summary>Refuses <paramref name="added"/> if one is not IPv4 or is declared already (before anything is added).</summary>
    private void CheckEndpoints(IPEndPoint[] added)
    {
        var seen = new HashSet<IPEndPoint>();
        foreach (IPEndPoint e in _services.Values.SelectMany(r => r).Concat(_clients.Values).Concat(added))
        {
            if (e.AddressFamily != System.Net.Sockets.AddressFamily.InterNetwork) throw new ArgumentException($"endpoint {e}: Perpetual runs over IPv4 UDP");
            if (!seen.Add(e)) throw new ArgumentException($"endpoint {e} is declared twice in this deployment: every replica and client needs its own");
        }
    }

    /// <summary>The protocol's view of this deployment, fixed at the first start: principals numbered in name order, so every process numbers them alike.</summary>
    internal Built Build()
    {
        if (_built != null) return _built;
        var deployment = new BftDeployment();
        var names = new Dictionary<int, string>();
        foreach (var (name, replicas) in _services)
        {
            BftService service = deployment.AddService(name, [.. replicas.Select(EndpointConversions.FromIPEndPoint)]);
            names[deployment.ServiceId(service)] = name;
        }
        var clients = new Dictionary<string, int>(StringComparer.Ordinal);
        foreach (var (name, endpoint) in _clients)
        {
            int principal = deployment.AddClient(EndpointConversions.FromIPEndPoint(endpoint));
            clients[name] = principal;
            names[principal] = name;
        }
        return _built = new Built(deployment, _key, clients, names);
    }

    /// <summary>The protocol's deployment, the key, and the names of principals (clients) and services (by their negative ids).</summary>
    internal sealed record Built(BftDeployment Deployment, byte[] Key, Dictionary<string, int> Clients, Dictionary<int, string> Names)
    {
        public BftKeys KeysOf(int principal) => BftKeys.Derive(Key, Deployment, principal);

        public int ClientPrincipal(string name) =>
            Clients.TryGetValue(name, out int p) ? p : throw new ArgumentException($"client {name} is not declared in this deployment (AddClient)", nameof(name));

        public BftService Service(string name) =>
            Deployment.Services.FirstOrDefault(s => s.Name == name) ?? throw new ArgumentException($"service {name} is not declared in this deployment (AddService)", nameof(name));
    }
}
