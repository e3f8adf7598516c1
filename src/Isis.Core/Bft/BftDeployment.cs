namespace Isis.Core.Bft;

/// <summary>
/// The static shape of a Byzantine fault-tolerant deployment, as Perpetual-WS has it: every
/// principal (a replica of a service, or an unreplicated client) with its number and endpoint,
/// and every service with its replicas. Membership is static, from configuration: a BFT service
/// does not add or remove replicas while it runs (a replica that fails is repaired and restarted
/// under the same identity), because agreeing on a new membership would itself need the
/// agreement the replicas provide.
/// </summary>
internal sealed class BftDeployment
{
    private readonly Dictionary<string, BftService> _services = new(StringComparer.Ordinal);
    private readonly Dictionary<ulong, int> _byEndpoint = new();
    private readonly List<ulong> _endpoints = new();

    /// <summary>Adds a service of 3f+1 replicas at <paramref name="endpoints"/> (replica i at endpoints[i]).</summary>
    public BftService AddService(string name, IReadOnlyList<ulong> endpoints)
    {
        if (endpoints.Count < 1 || (endpoints.Count - 1) % 3 != 0)
            throw new ArgumentException($"service {name}: a BFT service has 3f+1 replicas (1, 4, 7, 10, ...); {endpoints.Count} given");
        if (_services.ContainsKey(name)) throw new ArgumentException($"service {name} is declared twice");
        int[] principals = endpoints.Select(Add).ToArray();
        var service = new BftService(name, principals, (endpoints.Count - 1) / 3);
        _services.Add(name, service);
        return service;
    }

    /// <summary>Adds an unreplicated client at <paramref name="endpoint"/>: its principal number.</summary>
    public int AddClient(ulong endpoint) => Add(endpoint);

    private int Add(ulong endpoint)
    {
        if (!_byEndpoint.TryAdd(endpoint, _endpoints.Count)) throw new ArgumentException($"endpoint {endpoint} is declared twice");
        _endpoints.Add(endpoint);
        return _endpoints.Count - 1;
    }

    /// <summary>How many principals there are (numbered 0 to Count - 1).</summary>
    public int Count => _endpoints.Count;

    public BftService Service(string name) => _services[name];

    public IEnumerable<BftService> Services => _services.Values;

    public ulong EndpointOf(int principal) => _endpoints[principal];

    /// <summary>True if <paramref name="principal"/> is a replica of some service.</summary>
    public bool IsReplica(int principal) => ServiceOf(principal) != null;

    /// <summary>The service <paramref name="principal"/> is a replica of, or null (a client).</summary>
    public BftService? ServiceOf(int principal) => _services.Values.FirstOrDefault(s => s.IndexOf(principal) >= 0);

    /// <summary>A service's identity in calls: negative, so it never collides with a client principal.</summary>
    public int ServiceId(BftService service) => -1 - _services.Values.ToList().IndexOf(service);

    /// <summary>The service with identity <paramref name="id"/>, or null.</summary>
    public BftService? ServiceById(int id) => id < 0 && -1 - id < _services.Count ? _services.Values.ElementAt(-1 - id) : null;

    /// <summary>The principal at <paramref name="endpoint"/>, or -1.</summary>
    public int PrincipalAt(ulong endpoint) => _byEndpoint.TryGetValue(endpoint, out int p) ? p : -1;
}

/// <summary>A service of n = 3f+1 replicas: <see cref="Replicas"/>[i] is replica i's principal number.</summary>
internal sealed record BftService(string Name, int[] Replicas, int F)
{
    public int N => Replicas.Length;

    /// <summary>Matching votes that decide: 2f+1 (a quorum: any two share a correct replica).</summary>
    public int Quorum => 2 * F + 1;

    /// <summary>The replica index of <paramref name="principal"/> in this service, or -1.</summary>
    public int IndexOf(int principal) => Array.IndexOf(Replicas, principal);
}
