using Isis.Core.Groups;
using Isis.Core.Node;

namespace Isis.Simulation;

/// <summary>
/// The rolling rotation of the system key (<see cref="Scenario.SystemKeyRotation"/>), as an
/// operator runs it with <c>IsisOptions.AcceptedSystemKeys</c>: step 1 restarts every process
/// accepting the next key, step 2 sealing with it and accepting the old, step 3 with the next key
/// alone. One process at a time exits gracefully and restarts with the step's keys; a step begins
/// only once every live process runs the previous one, and a process that restarts for another
/// reason (a crash) takes the current step's keys, as it would take the current deployment's.
/// </summary>
internal sealed partial class Simulator
{
    private int _systemKeyStep;      // 0: not begun; 1-3: the step being rolled out (3 and done: rotated)
    private SimProcess? _rolling;    // restarted for the current step, until it is back in the group
    private long _nextRollAt = 500_000;

    // An operator's script restarts the next process once the last one is back: no need to wait a
    // failover's time, as host faults do. Its restarts come back quickly too (see Exit).
    private const long RollSpacing = 100_000;

    /// <summary>When a process that exited comes back: at once if the rotation restarted it, else after a while.</summary>
    private long RestartDelay(SimProcess p) => p == _rolling ? _random.NextInRange(20_000, 100_000) : _random.NextInRange(200_000, 1_000_000);

    /// <summary>How far the rotation got: 3 once every live process seals with the next key alone.</summary>
    internal int SystemKeyStep => _systemKeyStep == 3 && _processes.All(p => !p.Alive || p.KeyStep == 3) ? 3 : Math.Max(0, _systemKeyStep - 1);

    /// <summary>Processes the rotation restarted.</summary>
    internal int SystemKeyRestarts { get; private set; }

    /// <summary>The protocol options of a process started in <paramref name="step"/> of the rotation: that step's system keys.</summary>
    private ProtocolOptions KeysOfStep(int step)
    {
        if (!Scenario.SystemKeyRotation || step == 0) return _protocol;
        byte[] old = _protocol.SystemKey!, next = Scenario.SimulatedNextSystemKey;
        return step switch
        {
            1 => _protocol with { AcceptedSystemKeys = [next] },
            2 => _protocol with { SystemKey = next, AcceptedSystemKeys = [old] },
            _ => _protocol with { SystemKey = next, AcceptedSystemKeys = [] },
        };
    }

    /// <summary>The operator's next move, once the last restarted process is back and the service is whole.</summary>
    private void MaybeRollSystemKey()
    {
        // Leave the calm phase room to converge after the last restart.
        if (_now < _nextRollAt || _now > Scenario.FaultPhase + 1_000_000) return;
        if (_rolling != null)
        {
            if (!(_rolling.Alive && _rolling.KeyStep == _systemKeyStep && _rolling.Node!.FindGroup(_group)?.State == MemberState.Active)) return;
            _rolling = null;
        }
        if (_processes.Any(p => p.Exiting || (p.Alive && p.Node!.FindGroup(_group)?.State != MemberState.Active))) return;
        SimProcess? next = _processes.FirstOrDefault(p => p.Alive && p.KeyStep < _systemKeyStep);
        if (next == null)
        {
            // Every live process runs this step (the dead ones will start in it or a later one): the next step.
            if (_systemKeyStep < 3) _systemKeyStep++;
            else _nextRollAt = long.MaxValue;
            return;
        }
        // A graceful exit hands a replica over, which needs a whole service (three replicas, none on
        // the way out, no change pending); host faults wait their turn after it.
        if (_now - _lastHostFault < RollSpacing) return;
        if (Leader is not { Configuration.Count: >= 3, ReconfigurationPending: false } leader
            || leader.Configuration.Any(r => ProcessOf(r.Host) is not { Alive: true, Exiting: false })) return;
        _lastHostFault = _now;
        _rolling = next;
        SystemKeyRestarts++;
        StartExit(next);
    }
}
