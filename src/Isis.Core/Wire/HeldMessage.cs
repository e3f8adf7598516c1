using Isis.Core.Groups;

namespace Isis.Core.Wire;

/// <summary>A message carried inside a flush packet: the sender's rank in the view, its sequence number, its kind, phi, causal timestamp and payload.</summary>
internal readonly record struct HeldMessage(int Rank, long Seq, StreamMessage Message)
{
    public static void WriteList(PacketWriter w, List<HeldMessage> messages)
    {
        w.I32(messages.Count);
        foreach (HeldMessage m in messages)
        {
            w.I32(m.Rank).I64(m.Seq).U8((byte)m.Message.Kind).I32(m.Message.Phi).KindFields(m.Message).Bytes(m.Message.Payload.Span);
        }
    }

    /// <summary>Reads a list written by <see cref="WriteList"/>; ranks are checked against <paramref name="rankCount"/>.</summary>
    public static List<HeldMessage> ReadList(ref WireReader r, int rankCount)
    {
        int n = r.Count(21);
        var list = new List<HeldMessage>(n);
        for (int i = 0; i < n && r.Ok; i++)
        {
            int rank = r.I32();
            long seq = r.I64();
            var kind = (MessageKind)r.U8();
            int phi = r.I32();
            long[]? stamp = kind.IsCausal() ? r.VarLongs() : null;
            Identity.NodeId[]? to = kind.IsSubset() ? r.Nodes() : null;
            byte[] payload = r.Bytes();
            if (rank < 0 || rank >= rankCount || seq <= 0 || !Enum.IsDefined(kind) || phi < 0) { r.Fail(); break; }
            if (stamp != null && (stamp.Length != rankCount || Array.Exists(stamp, c => c < 0))) { r.Fail(); break; }
            list.Add(new HeldMessage(rank, seq, new StreamMessage(kind, payload, phi, Causal: stamp, To: to)));
        }
        return list;
    }
}
