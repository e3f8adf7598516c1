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
/// keys are derived from the 32-byte deployment key; the view change's signing keys too. Whoever
/// holds the deployment key can speak for any principal. Two ways to deploy:</para>
/// <list type="bullet">
/// <item>Every process is given the deployment key (<see cref="PerpetualDeployment(byte[])"/>): for
/// hosts you trust as a whole (one machine, one operator, development and tests).</item>
/// <item>An explicit key set: the provisioner declares the deployment with its key and issues each
/// process its own <see cref="PerpetualKeys"/> (<see cref="IssueKeys(string, int)"/>,
/// <see cref="IssueKeys(string)"/>); each process declares the same deployment with its own keys
/// instead of the key (<see cref="PerpetualDeployment(PerpetualKeys)"/>) and starts the replica or
/// client they belong to. A compromised host then holds its own keys only, and the f it may hold
/// per service are what the protocols tolerate.</item>
/// </list>
/// <para>Generate the deployment key with <c>RandomNumberGenerator.GetBytes(32)</c>.</para>
/// </remarks>
public sealed class PerpetualDeployment
{
    private readonly byte[]? _key;
    private readonly PerpetualKeys? _own;
    private readonly SortedDictionary<string, IPEndPoint[]> _services = new(StringComparer.Ordinal);
    private readonly SortedDictionary<string, IPEndPoint> _clients = new(StringComparer.Ordinal);
    private Built? _built;

    /// <summary>
    /// A deployment with no services yet, as one process of an explicit key set sees it: it holds
    /// <paramref name="keys"/>, that process's own (issued by the provisioner with <see cref="IssueKeys(string, int)"/>
    /// or <see cref="IssueKeys(string)"/>), and not the deployment's key. Only the replica or client the
    /// keys belong to starts from it. Declare the services and clients as the provisioner did.
    /// </summary>
    public PerpetualDeployment(PerpetualKeys keys)
    {
        ArgumentNullException.ThrowIfNull(keys);
        _own = keys;
    }

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
        if (_built != null) throw new InvalidOperationException("a replica or client of this deployment started already, or keys were issued for it: declare every service and client first");
    }

    /// <summary>
    /// The keys of replica <paramref name="index"/> of <paramref name="service"/>, for its host alone
    /// (an explicit key set). Declare every service and client first: the keys belong to this
    /// deployment as declared, which can no longer change.
    /// </summary>
    /// <exception cref="InvalidOperationException">This deployment has no key to issue keys from.</exception>
    /// <exception cref="ArgumentException">No such service.</exception>
    /// <exception cref="ArgumentOutOfRangeException">No such replica index.</exception>
    public PerpetualKeys IssueKeys(string service, int index)
    {
        Built built = Issuing();
        BftService bft = built.Service(service);
        if (index < 0 || index >= bft.N) throw new ArgumentOutOfRangeException(nameof(index), index, $"service {service} has replicas 0 to {bft.N - 1}");
        return new PerpetualKeys(service, index, built.Fingerprint, BftKeys.Derive(_key!, built.Deployment, bft.Replicas[index]).Export());
    }

    /// <summary>The keys of unreplicated client <paramref name="client"/>, for its host alone (an explicit key set).</summary>
    /// <exception cref="InvalidOperationException">This deployment has no key to issue keys from.</exception>
    /// <exception cref="ArgumentException">No such client.</exception>
    public PerpetualKeys IssueKeys(string client)
    {
        Built built = Issuing();
        return new PerpetualKeys(client, -1, built.Fingerprint, BftKeys.Derive(_key!, built.Deployment, built.ClientPrincipal(client)).Export());
    }

    private Built Issuing() =>
        _key != null ? Build() : throw new InvalidOperationException("this deployment holds one process's keys, not the deployment key, so it cannot issue keys: the provisioner declares it with the deployment key (new PerpetualDeployment(key)) and issues each process its keys");

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
        return _built = new Built(deployment, _key, _own, clients, names, Fingerprint());
    }

    /// <summary>What issued keys belong to: every service with its replicas' endpoints, and every client with its endpoint.</summary>
    private byte[] Fingerprint()
    {
        var w = new Isis.Core.Wire.PacketWriter().BeginRecord().String("isis-perpetual-deployment-v1");
        foreach (var (name, replicas) in _services)
        {
            w.String(name).I32(replicas.Length);
            foreach (IPEndPoint e in replicas) w.String(e.ToString());
        }
        foreach (var (name, endpoint) in _clients) w.String(name).String(endpoint.ToString());
        return System.Security.Cryptography.SHA256.HashData(w.FinishRecord());
    }

    /// <summary>The protocol's deployment, the key or this process's own keys (an explicit key set), the names of principals (clients) and services (by their negative ids), and the fingerprint issued keys carry.</summary>
    internal sealed record Built(BftDeployment Deployment, byte[]? Key, PerpetualKeys? Own, Dictionary<string, int> Clients, Dictionary<int, string> Names, byte[] Fingerprint)
    {
        /// <summary>The keys principal <paramref name="principal"/> runs with: derived from the deployment key, or this process's own.</summary>
        public BftKeys KeysOf(int principal)
        {
            if (Key != null) return BftKeys.Derive(Key, Deployment, principal);
            if (!Own!.DeploymentFingerprint.AsSpan().SequenceEqual(Fingerprint))
                throw new ArgumentException($"this process's {Own} were issued for another deployment (other services, replicas, endpoints or clients): declare the deployment as the provisioner did, or issue the keys again");
            BftKeys keys = BftKeys.Import(Own.Secret)!;
            return keys.Self == principal ? keys
                : throw new ArgumentException($"this process holds the {Own}, not those of {Names.GetValueOrDefault(principal) ?? PrincipalName(principal)}: start the replica or client its keys belong to");
        }

        private string PrincipalName(int principal) =>
            Deployment.ServiceOf(principal) is { } s ? $"{s.Name}[{s.IndexOf(principal)}]" : $"principal {principal}";

        public int ClientPrincipal(string name) =>
            Clients.TryGetValue(name, out int p) ? p : throw new ArgumentException($"client {name} is not declared in this deployment (AddClient)", nameof(name));

        public BftService Service(string name) =>
            Deployment.Services.FirstOrDefault(s => s.Name == name) ?? throw new ArgumentException($"service {name} is not declared in this deployment (AddService)", nameof(name));
    }
}
