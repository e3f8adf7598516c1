using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Security;

namespace Isis.Simulation;

/// <summary>
/// Key rotations in the secured families (<see cref="Scenario.KeyRotations"/>): now and then the
/// application publishes the group's next key, and each live process is handed it a little later
/// (as each would read it from a secret store); the group moves to it once every member of a view
/// holds it. A process that starts is given the key the group uses and, if a newer one is
/// published, that one too; one whose key the group left behind is refused, and its supervisor
/// restarts it with the current key. Each key leaks to the attacker once the group moved past it, and
/// the attacker forges with it at processes where it retired (they reported the retirement, or never
/// held it): those forgeries must be dropped, or the checker's NoCreation property reports the forged
/// payload.
/// </summary>
internal sealed partial class Simulator
{
    private readonly List<byte[]> _keySchedule = new(); // the group's keys in order; [0] is the scenario's
    private int _keyPublished;                         // the newest key handed to the applications
    private int _keyInUse;                             // the newest key the group moved to
    private readonly Dictionary<NodeId, int> _processKey = new();      // per incarnation: the key it uses
    private readonly Dictionary<NodeId, int> _retiredBelow = new();    // per incarnation: keys before this one open nothing there
    private readonly Dictionary<ulong, long> _lastStagingAt = new(); // per process endpoint: keys reach a process in the order they were published

    /// <summary>Rotations the group completed (a process reported the move).</summary>
    public int KeyRotationsCompleted => _keyInUse;

    /// <summary>Forgeries the attacker sealed with a key the group left behind.</summary>
    public long OldKeyForgeriesSent { get; private set; }

    /// <summary>The key a process starting now is given (null without a group key).</summary>
    private byte[]? KeyForStart()
    {
        if (Scenario.GroupKey is not { } first) return null;
        if (_keySchedule.Count == 0) _keySchedule.Add(first);
        return _keySchedule[_keyInUse];
    }

    /// <summary>A process starts (or joins again) with the key the group uses now.</summary>
    private void NoteStartingKey(SimProcess p) => _processKey[p.Node!.Self] = _retiredBelow[p.Node!.Self] = _keyInUse;

    /// <summary>After a process asked to join: it also holds every published key the group has not moved to yet.</summary>
    private void StageNewestKey(SimProcess p)
    {
        for (int i = _keyInUse + 1; i <= _keyPublished; i++) p.Node!.StageGroupKey(GroupName, _keySchedule[i], _now);
    }

    private void PlanKeyRotations(long healAt)
    {
        for (int i = 0, n = 2 + _random.Next(3); i < n; i++) At(_random.NextInRange(300_000, Math.Max(400_000, healAt - 500_000)), PublishNextKey);
    }

    private void PublishNextKey()
    {
        KeyForStart();
        var key = new byte[PacketSealer.KeySize];
        for (int i = 0; i < key.Length; i++) key[i] = (byte)_random.Next(256);
        _keySchedule.Add(key);
        _keyPublished = _keySchedule.Count - 1;
        int index = _keyPublished;
        // The key it replaces leaks once the group moved on: the attacker tries it in the views after.
        if (Scenario.Forgeries && _now + 300_000 < _attacksUntil)
        {
            for (int i = 0; i < 30; i++) At(_random.NextInRange(_now + 300_000, _attacksUntil), Attack);
        }
        foreach (SimProcess p in _processes)
        {
            if (!p.Alive) continue;
            ProcessNode node = p.Node!;
            long at = Math.Max(_now + _random.NextInRange(0, 150_000), _lastStagingAt.GetValueOrDefault(p.Endpoint) + 1);
            _lastStagingAt[p.Endpoint] = at;
            At(at, () =>
            {
                if (p.Node != node || node.IsShutDown) return;
                node.StageGroupKey(GroupName, _keySchedule[index], _now);
                Flush(p);
            });
        }
    }

    private void OnKeyEvent(SimProcess p, NodeEvent e)
    {
        switch (e)
        {
            case GroupKeyRotated r when r.Group == _group:
                for (int i = 0; i < _keySchedule.Count; i++)
                {
                    if (PacketSealer.Fingerprint(_keySchedule[i]).AsSpan().SequenceEqual(r.Fingerprint)) _processKey[p.Node!.Self] = i;
                }
                for (int i = _keyInUse + 1; i < _keySchedule.Count; i++)
                {
                    if (!PacketSealer.Fingerprint(_keySchedule[i]).AsSpan().SequenceEqual(r.Fingerprint)) continue;
                    _keyInUse = i;
                }
                break;
            case GroupKeyRetired k when k.Group == _group:
                _retiredBelow[p.Node!.Self] = _processKey.GetValueOrDefault(p.Node.Self);
                break;
            case GroupKeyRejected k when k.Group == _group:
                // The group moved on without this process: its operator restarts it with the key in use.
                At(_now + 20_000, () => CrashAndRestart(p));
                break;
        }
    }

    /// <summary>
    /// The attacker's forgery sealed with a key the group used before (a leaked old key) that retired
    /// at the target (it reported the retirement, or never held it). Null if there is none.
    /// </summary>
    private byte[]? ForgeWithOldKey(NodeId target, NodeId sender, byte[] clear)
    {
        if (!_retiredBelow.TryGetValue(target, out int below) || below == 0) return null;
        int old = _random.Next(below);
        var sealer = new PacketSealer(sender, (uint)_random.Next(int.MaxValue), null);
        sealer.SetGroupKey(_group, _keySchedule[old]);
        // A counter past any the sender used, so only the key can refuse it.
        for (int i = 0; i < 1 + _random.Next(3); i++) sealer.Seal(clear, new Outbox());
        OldKeyForgeriesSent++;
        return sealer.Seal(clear, new Outbox()).ToArray();
    }
}
