using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>
/// One entry of the membership service's replicated log. Every replica applies the committed
/// entries in log order, so all of them hold the same membership state; only the leader acts on it
/// (tells processes, runs flushes).
/// </summary>
internal abstract record MembershipDecision
{
    private enum Tag : byte
    {
        LeaderTerm = 1,
        Expel = 2,
        View = 3,
        DeleteGroup = 4,
        Configuration = 5,
        ExpelFor = 6, // an expulsion with its reason (one without is written as Expel, as before reasons travelled)
    }

    public byte[] Encode(PacketWriter writer)
    {
        writer.BeginRecord();
        switch (this)
        {
            case LeaderTermDecision t:
                writer.U8((byte)Tag.LeaderTerm).I64(t.Term);
                break;
            case ExpelDecision { Reason: ExpelReason.Unheard } x:
                writer.U8((byte)Tag.Expel).Node(x.Node);
                break;
            case ExpelDecision x:
                writer.U8((byte)Tag.ExpelFor).Node(x.Node).U8((byte)x.Reason);
                break;
            case ViewDecision v:
                writer.U8((byte)Tag.View).I64((long)v.Group.Value).String(v.Name).I32(v.ViewId)
                    .Nodes(v.Members).Nodes(v.Joiners).Nodes(v.Leavers).I64((long)v.Multicast);
                break;
            case DeleteGroupDecision d:
                writer.U8((byte)Tag.DeleteGroup).I64((long)d.Group.Value).I32(d.LastViewId);
                break;
            case ConfigurationDecision c:
                writer.U8((byte)Tag.Configuration).I32(c.Replicas.Length);
                foreach (ServiceReplica r in c.Replicas) writer.Node(r.Replica).Node(r.Host);
                break;
        }
        return writer.FinishRecord();
    }

    /// <summary>Decodes an entry; null if the bytes are not a well-formed decision.</summary>
    public static MembershipDecision? Decode(ReadOnlySpan<byte> bytes, int maxGroupNameBytes)
    {
        var r = new WireReader(bytes);
        MembershipDecision? d = (Tag)r.U8() switch
        {
            Tag.LeaderTerm => new LeaderTermDecision(r.I64()),
            Tag.Expel => new ExpelDecision(r.Node()),
            Tag.ExpelFor => new ExpelDecision(r.Node(), ExpelReasons.Read(r.U8())),
            Tag.View => new ViewDecision(new GroupId((ulong)r.I64()), r.String(maxGroupNameBytes), r.I32(), r.Nodes(), r.Nodes(), r.Nodes(), (ulong)r.I64()),
            Tag.DeleteGroup => new DeleteGroupDecision(new GroupId((ulong)r.I64()), r.I32()),
            Tag.Configuration => ConfigurationDecision.Read(ref r),
            _ => null,
        };
        return r.Complete ? d : null;
    }

    /// <summary>The replicas of a configuration entry, or null if <paramref name="entry"/> is another kind of decision.</summary>
    public static NodeId[]? VotersOf(ReadOnlySpan<byte> entry)
    {
        if (entry.IsEmpty || entry[0] != (byte)Tag.Configuration) return null;
        var r = new WireReader(entry[1..]);
        return ConfigurationDecision.Read(ref r) is { } c && r.Complete ? c.Voters : null;
    }
}

/// <summary>A new leader's first entry: committing it commits everything before it (Raft's rule).</summary>
internal sealed record LeaderTermDecision(long Term) : MembershipDecision;

/// <summary>The incarnation is out of the system: every process firewalls it, every group drops it.</summary>
internal sealed record ExpelDecision(NodeId Node, ExpelReason Reason = ExpelReason.Unheard) : MembershipDecision;

/// <summary>The next view of a group, after its flush (or the first view), with the multicast endpoint the leader allocated it (0: unicast).</summary>
internal sealed record ViewDecision(GroupId Group, string Name, int ViewId, NodeId[] Members, NodeId[] Joiners, NodeId[] Leavers, ulong Multicast = 0) : MembershipDecision;

/// <summary>The group is gone (its last members asked for deletion); a later group of the same name starts after <paramref name="LastViewId"/>.</summary>
internal sealed record DeleteGroupDecision(GroupId Group, int LastViewId) : MembershipDecision;

/// <summary>A membership replica and the process that hosts it (<see cref="NodeId.None"/> for a replica configured on its own).</summary>
internal readonly record struct ServiceReplica(NodeId Replica, NodeId Host);

/// <summary>
/// The replicas that run the service from this log position on (Raft's single-server membership
/// change): in force as soon as a replica appends it, and it differs from the configuration before
/// it by one replica added or removed, so a majority of either always intersects a majority of the other.
/// </summary>
internal sealed record ConfigurationDecision(ServiceReplica[] Replicas) : MembershipDecision
{
    public NodeId[] Voters => Replicas.Select(r => r.Replica).ToArray();

    internal static ConfigurationDecision? Read(ref WireReader r)
    {
        int n = r.Count(24);
        if (n < 1) { r.Fail(); return null; }
        var replicas = new ServiceReplica[n];
        for (int i = 0; i < n; i++) replicas[i] = new ServiceReplica(r.Node(), r.Node());
        if (replicas.Select(x => x.Replica).Distinct().Count() != n) { r.Fail(); return null; }
        return new ConfigurationDecision(replicas);
    }

    public bool Equals(ConfigurationDecision? other) => other is not null && Replicas.AsSpan().SequenceEqual(other.Replicas);

    public override int GetHashCode() => Replicas.Length;
}
