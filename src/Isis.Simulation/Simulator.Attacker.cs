using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Simulation;

/// <summary>
/// The secured families' attacker (<see cref="Scenario.Forgeries"/>): it sees every packet on the
/// network and keeps some of the members' sealed bundles, then sends them again (replays, naming
/// their original sender), or forges Data packets in a member's name, clear. It cannot read what
/// is sealed, so it is given what an insider would know: the target's current view and who is in
/// it; the sequence number it guesses. With the keys every one must be dropped unread; a forgery
/// that got through would be delivered with a payload no Send had, which the checker's NoCreation
/// property reports.
/// </summary>
internal sealed partial class Simulator
{
    private const int CapturedLimit = 64;
    private readonly List<(ulong From, byte[] Bytes)> _captured = new();
    private long _forgeriesSent;
    private long _replaysSent;

    /// <summary>Packets the attacker sent: forgeries and replays.</summary>
    public (long Forgeries, long Replays) AttackerSent => (_forgeriesSent, _replaysSent);

    private void Capture(ulong from, byte[] packet)
    {
        if (packet.Length < PacketHeader.Size || (PacketKind)packet[3] is not (PacketKind.Bundle or PacketKind.Data) || !_random.Chance(0.2)) return;
        if (_captured.Count == CapturedLimit) _captured.RemoveAt(_random.Next(CapturedLimit));
        _captured.Add((from, packet));
    }

    private long _attacksUntil;

    private void PlanForgeries(long healAt)
    {
        _attacksUntil = healAt;
        for (int i = 0, n = 60 + _random.Next(60); i < n; i++) At(_random.NextInRange(200_000, healAt), Attack);
    }

    private void Attack()
    {
        SimProcess target = _processes[_random.Next(_processes.Length)];
        if (!target.Alive) return;
        if (_random.Chance(0.5))
        {
            if (_captured.Count == 0) return;
            var (from, packet) = _captured[_random.Next(_captured.Count)];
            _replaysSent++;
            _network.Send(from, target.Endpoint, packet, _now);
            return;
        }
        if (target.Node!.FindGroup(_group)?.View is not { } view || view.Members.Length < 2) return;
        int rank = _random.Next(view.Members.Length);
        NodeId sender = view.Members[rank];
        if (sender == target.Node.Self) return;
        var payload = new byte[16];
        for (int i = 0; i < payload.Length; i++) payload[i] = (byte)_random.Next(256);
        // With a leaked old key the attacker is a former member: it guesses the next sequence number well.
        bool oldKey = Scenario.KeyRotations && _keyInUse > 0;
        long seq = oldKey ? target.Node.FindGroup(_group)!.HeldThrough(rank) + 1 + _random.Next(2) : 1 + _random.Next(200);
        byte[] forged = new PacketWriter().Begin(new PacketHeader(PacketKind.Data, sender, _group, view.Id, seq))
            .I32(rank).U8((byte)MessageKind.Send).I32(0).Tail(payload).Finish();
        if (oldKey && ForgeWithOldKey(target.Node.Self, sender, forged) is { } sealedWithOldKey) forged = sealedWithOldKey;
        _forgeriesSent++;
        _network.Send(sender.Endpoint, target.Endpoint, forged, _now);
    }
}
