using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>
/// Where the replicas of an embedded membership service run. With no configuration the service
/// lives in the member processes: the first process founds it alone, and the leader keeps it at the
/// largest odd number of replicas, up to <see cref="ProtocolOptions.ServiceReplicaTarget"/>, that
/// live processes allow, one configuration change at a time.
/// </summary>
/// <remarks>
/// Every process offers a dormant replica in its heartbeats. The leader, once the configuration in
/// force is committed (<see cref="ReplicatedLog.CanReconfigure"/>), takes one step:
/// <list type="number">
/// <item>a replica whose host was expelled, or is exiting (<see cref="PacketKind.HostRetiring"/>),
/// is removed; if that replica is the leader itself, it first hands leadership to a voter that
/// holds every committed entry, and the successor removes it;</item>
/// <item>above the size wanted, the newest other replica is removed (two replicas tolerate no
/// more failures than one and need both to decide);</item>
/// <item>below it, the replica of the oldest live process that hosts none follows the log as a
/// learner until it holds every committed entry, and is then added.</item>
/// </list>
/// A process that is exiting learns it may go (<see cref="PacketKind.HostRetired"/>) once the
/// committed configuration has no replica on it.
/// </remarks>
internal sealed partial class MembershipReplica
{
    // Committed: the configuration in force once applied (the founding one before the first entry).
    private ServiceReplica[] _configuration;
    private long _configurationVersion;

    // The leader's working state.
    private readonly Dictionary<NodeId, NodeId> _offers = new();
    private readonly HashSet<NodeId> _retiring = new();
    private ServiceReplica? _learner;

    /// <summary>The committed configuration: the replicas and the processes that host them.</summary>
    public IReadOnlyList<ServiceReplica> Configuration => _configuration;

    /// <summary>Log position of the committed configuration (0: the founding one).</summary>
    public long ConfigurationVersion => _configurationVersion;

    /// <summary>True while this replica is a voter of the configuration in force.</summary>
    public bool IsVoter => _log.IsVoter(Self);

    private void OfferedReplica(NodeId host, NodeId replica)
    {
        if (Options.ServiceReplicaTarget > 0 && !replica.IsNone) _offers[host] = replica;
    }

    private void OnHostRetiring(NodeId host)
    {
        _retiring.Add(host);
        PlanConfiguration();
        if (_log.ConfigurationIndex <= _log.CommitIndex && !HostsReplica(host)) SendHostRetired(host);
    }

    private bool HostsReplica(NodeId host) => Array.Exists(_configuration, r => r.Host == host);

    private void SendHostRetired(NodeId host) =>
        Send(host.Endpoint, _writer.Begin(Header(PacketKind.HostRetired, default, 0, _configurationVersion)).Node(host).Finish());

    private void SendConfiguration(ulong endpoint) =>
        Send(endpoint, _writer.Begin(Header(PacketKind.ServiceConfiguration, default, 0, _configurationVersion))
            .Nodes(_configuration.Select(r => r.Replica).ToArray()).Finish());

    private void ApplyConfiguration(long index, ConfigurationDecision c)
    {
        _configuration = c.Replicas;
        _configurationVersion = index;
        Outbox.Events.Add(new ServiceConfigurationChanged(index, c.Voters));
        if (!_leading) return;
        // Every process learns the new replicas now rather than at its next heartbeat, and an
        // exiting process that hosts none any more may go.
        foreach (NodeId p in _processes.Keys) SendConfiguration(p.Endpoint);
        foreach (NodeId host in _retiring)
        {
            if (!HostsReplica(host)) SendHostRetired(host);
        }
    }

    private void ForgetPlacement()
    {
        _offers.Clear();
        _retiring.Clear();
        _learner = null;
    }

    private bool Departing(NodeId host) =>
        !host.IsNone && (_expelled.Contains(host) || _expelProposed.Contains(host) || _retiring.Contains(host));

    /// <summary>Replicas that could be added: offered by live processes that are staying and host none yet, oldest process first.</summary>
    private IEnumerable<ServiceReplica> Candidates(ServiceReplica[] current) =>
        _offers.Where(o => _processes.ContainsKey(o.Key) && !Departing(o.Key) && !Array.Exists(current, x => x.Host == o.Key || x.Replica == o.Value))
            .OrderBy(o => o.Key).Select(o => new ServiceReplica(o.Value, o.Key));

    /// <summary>Takes the next reconfiguration step, if one is due and the log allows one (leader only).</summary>
    private void PlanConfiguration()
    {
        if (!_leading || Options.ServiceReplicaTarget == 0 || !_log.CanReconfigure) return;
        bool several = (Options.Mutations & ProtocolMutations.ReconfigureSeveralAtOnce) != 0;
        ServiceReplica[] current = _configuration;

        // 1. A replica whose host is gone or going leaves the configuration first.
        bool selfDeparting = false;
        foreach (ServiceReplica r in current)
        {
            if (!Departing(r.Host)) continue;
            if (r.Replica == Self)
            {
                ServiceReplica[] successors = current.Where(x => x.Replica != Self && !Departing(x.Host) && _log.HoldsCommitted(x.Replica)).ToArray();
                if (successors.Length > 0)
                {
                    _log.TransferLeadership(successors[0].Replica, _now);
                    return;
                }
                selfDeparting = true;
                continue; // alone (or no voter caught up yet): a replacement is added first, below
            }
            if (several && Candidates(current).FirstOrDefault() is { Replica.IsNone: false } swap)
            {
                Reconfigure([.. current.Where(x => x.Replica != r.Replica), swap]);
                return;
            }
            Reconfigure(current.Where(x => x.Replica != r.Replica).ToArray());
            return;
        }

        // 2. The largest odd size the live processes allow, at most the target.
        int staying = current.Count(x => !Departing(x.Host));
        int desired = Math.Min(Options.ServiceReplicaTarget, staying + Candidates(current).Count());
        if (desired % 2 == 0) desired--;
        desired = Math.Max(desired, 1);
        if (selfDeparting && !Candidates(current).Any() && current.All(x => x.Replica == Self || Departing(x.Host)))
        {
            // Every process is going (the whole system shuts down): there is nobody to hand the
            // last replica to, and its host need not wait for one.
            if (_retiring.Contains(Host)) SendHostRetired(Host);
            return;
        }
        if (selfDeparting) desired = Math.Max(desired, current.Length + 1);
        if (current.Length > desired)
        {
            ServiceReplica drop = current.Last(x => x.Replica != Self);
            Reconfigure(current.Where(x => x.Replica != drop.Replica).ToArray());
            return;
        }
        if (current.Length == desired)
        {
            DropLearner();
            return;
        }
        if (several)
        {
            Reconfigure([.. current, .. Candidates(current).Take(desired - current.Length)]);
            return;
        }

        // 3. Below it: the next replica catches up as a learner, then joins.
        if (_learner is { } l && !Candidates(current).Contains(l)) DropLearner();
        if (_learner is null)
        {
            foreach (ServiceReplica c in Candidates(current))
            {
                _learner = c;
                _log.AddLearner(c.Replica, _now);
                break;
            }
            return;
        }
        if (_log.HoldsCommitted(_learner.Value.Replica))
        {
            ServiceReplica added = _learner.Value;
            _learner = null;
            Reconfigure([.. current, added]);
        }
    }

    private void DropLearner()
    {
        if (_learner is not { } l) return;
        _log.DropLearner(l.Replica);
        _learner = null;
    }

    private void Reconfigure(ServiceReplica[] next) => Propose(new ConfigurationDecision(next));
}
