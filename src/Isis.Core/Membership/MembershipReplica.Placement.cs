using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>
/// Where the replicas of an embedded membership service run. With no configuration the service
/// lives in the member processes: the first process founds it alone, and the leader keeps it at the
/// largest odd number of replicas, up to <see cref="ProtocolOptions.ServiceReplicaTarget"/>, that
/// live processes allow, one configuration change at a time (one replica each, but for the growth
/// from one replica to three).
/// </summary>
/// <remarks>
/// Every process offers a dormant replica in its heartbeats. The leader, once the configuration in
/// force is committed (<see cref="ReplicatedLog.CanReconfigure"/>), takes one step:
/// <list type="number">
/// <item>a replica whose host was expelled, or is exiting (<see cref="PacketKind.HostRetiring"/>),
/// is removed; if that replica is the leader itself, it first hands leadership to a reachable voter
/// that holds every committed entry, and the successor removes it;</item>
/// <item>above the size wanted, the newest other replica is removed (two replicas tolerate no
/// more failures than one and need both to decide);</item>
/// <item>below it, the replicas still wanted (of the live processes hosting none whose offers the
/// leader heard first) follow the log as learners, together, and each is added once it holds
/// every committed entry; from a single replica the first two are added in one step, once both
/// hold it, so the service never runs on two replicas while it grows.</item>
/// </list>
/// No step is proposed unless a majority of the configuration it creates answers the leader now
/// (the strict reconfiguration check). A process that is exiting learns it may go
/// (<see cref="PacketKind.HostRetired"/>) once the committed configuration has no replica on it.
/// </remarks>
internal sealed partial class MembershipReplica
{
    // Committed: the configuration in force once applied (the founding one before the first entry).
    private ServiceReplica[] _configuration;
    private long _configurationVersion;

    // The leader's working state.
    // Offered replicas by host, with when this leader first heard the offer: the processes that
    // started first host the replicas (the leader hears them first), as the documentation says.
    private readonly Dictionary<NodeId, (NodeId Replica, long FirstHeardAt)> _offers = new();
    private readonly HashSet<NodeId> _retiring = new();
    private readonly List<ServiceReplica> _learners = new();

    /// <summary>The committed configuration: the replicas and the processes that host them.</summary>
    public IReadOnlyList<ServiceReplica> Configuration => _configuration;

    /// <summary>Log position of the committed configuration (0: the founding one).</summary>
    public long ConfigurationVersion => _configurationVersion;

    /// <summary>True while this replica is a voter of the configuration in force.</summary>
    public bool IsVoter => _log.IsVoter(Self);

    /// <summary>True if <paramref name="replica"/> votes in the configuration in force here (appended, perhaps not yet committed).</summary>
    public bool CountsAsVoter(NodeId replica) => _log.IsVoter(replica);

    /// <summary>True while a configuration change is appended but not yet committed.</summary>
    public bool ReconfigurationPending => _log.ConfigurationIndex > _log.CommitIndex;

    private void OfferedReplica(NodeId host, NodeId replica)
    {
        if (Options.ServiceReplicaTarget == 0 || replica.IsNone) return;
        _offers[host] = (replica, _offers.TryGetValue(host, out var known) && known.Replica == replica ? known.FirstHeardAt : _now);
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
        Outbox.Add(new ServiceConfigurationChanged(index, c.Voters));
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
        _learners.Clear();
        // What processes offer is learned from their heartbeats: a new leader that has not heard
        // them yet would see no candidates and shrink the service for nothing.
        _offersHeardFrom = _now + 2 * Options.HeartbeatInterval;
    }

    private long _offersHeardFrom;

    private bool Departing(NodeId host) =>
        !host.IsNone && (_expelled.Contains(host) || _expelProposed.Contains(host) || _retiring.Contains(host));

    /// <summary>Replicas that could be added: offered by live processes that are staying and host none yet, the one heard first first.</summary>
    private IEnumerable<ServiceReplica> Candidates(ServiceReplica[] current) =>
        _offers.Where(o => _processes.ContainsKey(o.Key) && !Departing(o.Key) && !Array.Exists(current, x => x.Host == o.Key || x.Replica == o.Value.Replica))
            .OrderBy(o => o.Value.FirstHeardAt).ThenBy(o => o.Key).Select(o => new ServiceReplica(o.Value.Replica, o.Key));

    /// <summary>
    /// Takes the next reconfiguration steps that are due and that the log allows (leader only). A
    /// step whose configuration commits at once (this replica alone decides it) allows the next one
    /// at once: it is taken in the same step, because no packet or timer would wake a sleeping
    /// driver for it (the simulator's TimersWithinDeadline caught a 45 ms wait on host-chaos seed 135).
    /// </summary>
    private void PlanConfiguration()
    {
        for (int steps = 0; steps < 4; steps++)
        {
            long before = _log.ConfigurationIndex;
            PlanConfigurationStep();
            if (_log.ConfigurationIndex == before || !_log.CanReconfigure) return;
        }
    }

    /// <summary>One reconfiguration step, if one is due and the log allows one.</summary>
    private void PlanConfigurationStep()
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
                // The successor must be reachable now: a handover to a cut-off voter would only
                // stall the service for an election timeout, and then be tried again.
                ServiceReplica[] successors = current.Where(x => x.Replica != Self && !Departing(x.Host)
                    && _log.HoldsCommitted(x.Replica) && _log.IsResponsive(x.Replica, _now)).ToArray();
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
            // Removing it must leave a majority this leader reaches; if not (another voter is cut
            // off too), try the next departing replica: that one may be the unreachable one.
            if (Reconfigure(current.Where(x => x.Replica != r.Replica).ToArray())) return;
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
        if (current.Length > desired && _now >= _offersHeardFrom)
        {
            ServiceReplica drop = current.Last(x => x.Replica != Self);
            Reconfigure(current.Where(x => x.Replica != drop.Replica).ToArray());
            return;
        }
        if (current.Length >= desired)
        {
            DropLearners(keep: []);
            return;
        }
        if (several)
        {
            Reconfigure([.. current, .. Candidates(current).Take(desired - current.Length)]);
            return;
        }

        // 3. Below it: every replica still to be added follows the log as a learner, all at once,
        // and each is added once it holds every committed entry. From a single replica (the
        // founder, or the survivor of a shrink), the first two are added together, in one step
        // (ReplicatedLog.SafeStep), once both hold every committed entry: a configuration of two
        // needs both replicas to decide, so losing the second one in it leaves nobody able to
        // decide: every process isolates itself and the service is founded anew, its state lost.
        // Any further replica comes one step at a time.
        ServiceReplica[] wanted = Candidates(current).Take(desired - current.Length).ToArray();
        DropLearners(keep: wanted);
        foreach (ServiceReplica c in wanted)
        {
            if (_learners.Contains(c)) continue;
            _learners.Add(c);
            _log.AddLearner(c.Replica, _now);
        }
        bool onePerStep = (Options.Mutations & ProtocolMutations.GrowOneReplicaAtATime) != 0;
        if (!onePerStep && current.Length == 1 && wanted.Length >= 2)
        {
            ServiceReplica[] pair = _learners.Where(l => _log.HoldsCommitted(l.Replica)).Take(2).ToArray();
            if (pair.Length == 2 && Reconfigure([.. current, .. pair]))
            {
                foreach (ServiceReplica l in pair) _learners.Remove(l);
            }
            return;
        }
        foreach (ServiceReplica l in _learners)
        {
            if (!_log.HoldsCommitted(l.Replica)) continue;
            if (Reconfigure([.. current, l])) _learners.Remove(l);
            return;
        }
    }

    private void DropLearners(ServiceReplica[] keep)
    {
        foreach (ServiceReplica l in _learners.Where(l => !keep.Contains(l)).ToArray())
        {
            _log.DropLearner(l.Replica);
            _learners.Remove(l);
        }
    }

    /// <summary>
    /// Proposes the next configuration, unless a majority of it is out of reach now (the strict
    /// reconfiguration check): a configuration is in force as soon as it is appended, so one whose
    /// majority cannot answer would leave nobody able to decide, not even to undo it.
    /// </summary>
    private bool Reconfigure(ServiceReplica[] next)
    {
        bool strict = (Options.Mutations & ProtocolMutations.ReconfigureSeveralAtOnce) == 0;
        if (strict && !_log.QuorumResponsive(next.Select(r => r.Replica).ToArray(), _now)) return false;
        Propose(new ConfigurationDecision(next));
        return true;
    }
}
