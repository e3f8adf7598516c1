using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Wire;

namespace Isis.Core.Membership;

/// <summary>
/// The committed state as a snapshot, for the replicated log's compaction (see
/// <see cref="ReplicatedLog"/>, Snapshots): everything this replica derives from the decisions it
/// applied, so that a replica that restores it and applies the decisions after it holds what one
/// that applied every decision from the first holds.
/// </summary>
/// <remarks>
/// The leader's working state (who is alive, flushes, pending joins) is not in it: a leader rebuilds
/// it from the committed state and the processes whenever it starts leading, and only followers
/// install a snapshot. The bounded sets (expelled incarnations, deleted groups) are what keep a
/// snapshot small after months of churn.
/// </remarks>
internal sealed partial class MembershipReplica
{
    // V2 adds the last live view of each group's previous incarnation, to groups and to deleted
    // groups (see LastLiveView); a V1 snapshot, written before, restores with none known.
    private enum SnapshotFormat : byte { V1 = 1, V2 = 2 }

    /// <summary>
    /// What the service keeps of a deleted group: its last view (the empty one that ended it), so a
    /// group created again under its name continues the numbering, and its last view with members,
    /// if every member of it was gone without passing into a later view (so the group's next
    /// incarnation learns how this one ended; null if unknown).
    /// </summary>
    private readonly record struct DeletedGroup(int LastViewId, LastLiveView? LastLive);

    /// <summary>
    /// The last view of a deleted group, so a group created again under its name continues the
    /// view numbering. For a group no longer remembered (see <see cref="RememberDeletedGroup"/>) it
    /// is the highest last view of every forgotten group, which is at least that group's: a view
    /// number of the old group is never reused either way.
    /// </summary>
    private int DeletedGroupLastView(GroupId id) => _deletedGroupViews.TryGetValue(id, out DeletedGroup d) ? d.LastViewId : _forgottenDeletedViews;

    /// <summary>
    /// Remembers a deleted group's last view and last live view; beyond
    /// <see cref="Node.ProtocolOptions.RememberedDeletedGroups"/> deletions the oldest is forgotten
    /// into one number, the highest forgotten last view (applied in log order, so every replica
    /// forgets the same groups). A forgotten group's last live view is simply not known any more:
    /// its next incarnation is told none, which costs only the recovery without an operator.
    /// </summary>
    private void RememberDeletedGroup(GroupId id, int lastViewId, LastLiveView? lastLive)
    {
        _deletedGroupViews[id] = new DeletedGroup(lastViewId, lastLive);
        _deletionOrder.Enqueue(id);
        while (_deletionOrder.Count > Math.Max(0, Options.RememberedDeletedGroups))
        {
            // A group deleted again (or created again) since has a later entry or none: raising the
            // floor is safe either way (and its last live view, forgotten early, is only not known).
            if (_deletedGroupViews.Remove(_deletionOrder.Dequeue(), out DeletedGroup forgotten)) _forgottenDeletedViews = Math.Max(_forgottenDeletedViews, forgotten.LastViewId);
        }
    }

    /// <summary>Deleted groups whose last view is remembered one by one (tests and monitoring).</summary>
    internal int RememberedDeletedGroupCount => _deletedGroupViews.Count;

    /// <summary>The last live view this replica remembers of a deleted group (tests and monitoring).</summary>
    internal LastLiveView? RememberedLastLiveView(GroupId id) => _deletedGroupViews.TryGetValue(id, out DeletedGroup d) ? d.LastLive : null;

    /// <summary>The previous incarnation's last live view the group's committed view carries, if it is the first of an incarnation (tests and monitoring).</summary>
    internal LastLiveView? CommittedPreviousIncarnation(GroupId id) => _groups.TryGetValue(id, out GroupRecord? g) ? g.PreviousIncarnation : null;

    /// <summary>Endpoints whose highest expelled incarnation this replica keeps (tests and monitoring).</summary>
    internal int ExpelledEndpointCount => _expelled.Count;

    /// <summary>Entries in the replicated log's memory: those after its snapshot.</summary>
    internal long LogEntriesInMemory => _log.LastIndex - _log.SnapshotIndex;

    /// <summary>Position of the replicated log's snapshot (0: none yet).</summary>
    internal long SnapshotIndex => _log.SnapshotIndex;

    byte[] IReplicatedLogHost.TakeSnapshot()
    {
        var w = new PacketWriter().BeginRecord();
        w.U8((byte)SnapshotFormat.V2).I64(_epoch);
        NodeId[] expelled = _expelled.Highest().ToArray();
        w.Nodes(expelled).Nodes(System.Runtime.InteropServices.CollectionsMarshal.AsSpan(_recentlyExpelled));
        var groups = _groups.Where(e => e.Value.HasView).OrderBy(e => e.Key.Value).ToArray();
        w.I32(groups.Length);
        foreach (var (id, g) in groups)
        {
            w.I64((long)id.Value).String(g.Name).I32(g.ViewId).Nodes(g.Members).Nodes(g.Joiners).Nodes(g.Leavers).I64((long)g.Multicast);
            LastLiveView.WriteOptional(w, g.PreviousIncarnation);
        }
        w.I32(_forgottenDeletedViews).I32(_deletionOrder.Count);
        foreach (GroupId id in _deletionOrder) w.I64((long)id.Value);
        w.I32(_deletedGroupViews.Count);
        foreach (var (id, deleted) in _deletedGroupViews.OrderBy(e => e.Key.Value)) LastLiveView.WriteOptional(w.I64((long)id.Value).I32(deleted.LastViewId), deleted.LastLive);
        w.I64(_configurationVersion).I32(_configuration.Length);
        foreach (ServiceReplica r in _configuration) w.Node(r.Replica).Node(r.Host);
        return w.FinishRecord();
    }

    /// <summary>A last live view in a snapshot, as an install carries it: before <paramref name="viewId"/>, none of <paramref name="members"/> in it.</summary>
    private static LastLiveView? ReadLastLive(ref WireReader r, SnapshotFormat format, int viewId, NodeId[] members) =>
        format == SnapshotFormat.V1 ? null : LastLiveView.ReadOptional(ref r, viewId, members);

    bool IReplicatedLogHost.RestoreSnapshot(long index, byte[] state)
    {
        var r = new WireReader(state);
        var format = (SnapshotFormat)r.U8();
        if (format is not (SnapshotFormat.V1 or SnapshotFormat.V2)) return false;
        long epoch = r.I64();
        NodeId[] expelled = r.Nodes(), recentlyExpelled = r.Nodes();
        int groupCount = r.Count(28);
        var groups = new List<(GroupId Id, GroupRecord Record)>(groupCount);
        for (int i = 0; i < groupCount && r.Ok; i++)
        {
            var id = new GroupId((ulong)r.I64());
            var g = new GroupRecord(r.String(Options.MaxGroupNameBytes), 0);
            g.ViewId = r.I32();
            g.Members = r.Nodes();
            g.Joiners = r.Nodes();
            g.Leavers = r.Nodes();
            g.Multicast = (ulong)r.I64();
            g.PreviousIncarnation = ReadLastLive(ref r, format, g.ViewId, g.Members);
            g.HasView = true;
            groups.Add((id, g));
        }
        int forgotten = r.I32();
        int orderCount = r.Count(8);
        var order = new GroupId[orderCount];
        for (int i = 0; i < orderCount; i++) order[i] = new GroupId((ulong)r.I64());
        int deletedCount = r.Count(12);
        var deleted = new (GroupId Id, DeletedGroup Group)[deletedCount];
        for (int i = 0; i < deletedCount; i++)
        {
            var id = new GroupId((ulong)r.I64());
            int last = r.I32();
            deleted[i] = (id, new DeletedGroup(last, ReadLastLive(ref r, format, last, [])));
        }
        long configurationVersion = r.I64();
        int replicaCount = r.Count(24);
        var configuration = new ServiceReplica[replicaCount];
        for (int i = 0; i < replicaCount; i++) configuration[i] = new ServiceReplica(r.Node(), r.Node());
        if (!r.Complete) return false;

        // Only a follower installs (a leader's log holds every committed entry): no leader state to keep.
        _epoch = epoch;
        _expelled.Clear();
        foreach (NodeId n in expelled) _expelled.Add(n);
        _recentlyExpelled.Clear();
        _expelReasons.Clear(); // not in a snapshot: the restored ones are told as missed heartbeats
        _recentlyExpelled.AddRange(recentlyExpelled);
        _groups.Clear();
        foreach (var (id, g) in groups) _groups[id] = g;
        _forgottenDeletedViews = forgotten;
        _deletionOrder.Clear();
        foreach (GroupId id in order) _deletionOrder.Enqueue(id);
        _deletedGroupViews.Clear();
        foreach (var (id, group) in deleted) _deletedGroupViews[id] = group;
        bool reconfigured = configurationVersion != _configurationVersion;
        _configuration = configuration;
        _configurationVersion = configurationVersion;
        if (reconfigured) Outbox.Add(new Node.ServiceConfigurationChanged(configurationVersion, configuration.Select(x => x.Replica).ToArray()));
        return true;
    }

    void IReplicatedLogHost.SnapshotMade(long index, ulong digest, bool installed) =>
        Outbox.Add(new Node.ReplicaSnapshotMade(index, digest, installed));
}
