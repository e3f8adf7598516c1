using Isis.Core.Groups;
using Isis.Core.Identity;

namespace Isis.Core.Node;

/// <summary>Something a node asks its driver to hand to the application (or to a history).</summary>
internal abstract record NodeEvent;

/// <summary>
/// An event about one group: a driver hands it to that group, whatever its kind, with one lookup
/// (the runtime to its <c>Group</c> object, which has its own switch over the kinds).
/// </summary>
/// <param name="Group">The group it is about.</param>
internal abstract record GroupEvent(GroupId Group) : NodeEvent
{
    /// <summary>The group it is about (set again when a recycling outbox reuses the event).</summary>
    public GroupId Group { get; private protected set; } = Group;
}

/// <summary>This member sent a message: it got sequence number <see cref="Seq"/> in view <see cref="ViewId"/>.</summary>
/// <remarks>One event per message, so a recycling <see cref="Outbox"/> reuses the object (and the payload memory) after <see cref="Outbox.Clear"/>.</remarks>
internal sealed record MessageSent() : GroupEvent(default(GroupId))
{
    public int ViewId { get; private set; }
    public long Seq { get; private set; }
    public MessageKind Kind { get; private set; }
    public ReadOnlyMemory<byte> Payload { get; private set; }
    public int Phi { get; private set; }

    /// <summary>A subset message's destinations (null for the other kinds).</summary>
    public NodeId[]? To { get; private set; }

    internal void Set(GroupId group, int viewId, long seq, MessageKind kind, ReadOnlyMemory<byte> payload, int phi, NodeId[]? to = null)
    {
        Group = group;
        ViewId = viewId;
        Seq = seq;
        Kind = kind;
        Payload = payload;
        Phi = phi;
        To = to;
    }
}

/// <summary>Deliver this message to the group's handlers, in the order of the event list.</summary>
/// <remarks>
/// <see cref="AtViewEnd"/>: delivered by the view change's flush rather than on the normal path.
/// One event per message, so a recycling <see cref="Outbox"/> reuses the object (and the payload memory) after <see cref="Outbox.Clear"/>.
/// </remarks>
internal sealed record MessageDelivered() : GroupEvent(default(GroupId))
{
    public int ViewId { get; private set; }
    public NodeId Sender { get; private set; }
    public long Seq { get; private set; }
    public MessageKind Kind { get; private set; }
    public ReadOnlyMemory<byte> Payload { get; private set; }
    public bool AtViewEnd { get; private set; }

    internal void Set(GroupId group, int viewId, NodeId sender, long seq, MessageKind kind, ReadOnlyMemory<byte> payload, bool atViewEnd)
    {
        Group = group;
        ViewId = viewId;
        Sender = sender;
        Seq = seq;
        Kind = kind;
        Payload = payload;
        AtViewEnd = atViewEnd;
    }
}

/// <summary>
/// Disk durability: an entry of the group's SafeSend history, handed to the application before
/// anything else when this member comes to hold the history (after a restart, or when it joins).
/// </summary>
internal sealed record HistoryReplayed(GroupId Group, Durability.HistoryEntry Entry) : GroupEvent(Group);

/// <summary>
/// Disk durability: this member holds the group's history (<paramref name="Entries"/> SafeSends, all
/// replayed or restored) and takes part from now on. <paramref name="Lineage"/> names that history:
/// a persistent checkpoint made from here on records it, with the number of SafeSends the
/// application has applied, so a later restart knows which entries the checkpoint already holds.
/// </summary>
internal sealed record HistoryReady(GroupId Group, long Entries, Durability.HistoryPlanMode How, Durability.Lineage Lineage, ulong Digest = Durability.HistoryDigest.Unknown) : GroupEvent(Group);

/// <summary>
/// Disk durability, before the history's replay: the application loads this member's persistent
/// checkpoint <paramref name="Checkpoint"/> (one of those the driver named at join), which holds the
/// history's first <c>Checkpoint.Index</c> entries; only the entries after them are replayed.
/// </summary>
internal sealed record CheckpointRestored(GroupId Group, Durability.CheckpointMark Checkpoint) : GroupEvent(Group);

/// <summary>
/// Disk durability, at a member that keeps checkpoint <paramref name="Mark"/>: another member copies
/// the history from it and needs that checkpoint (the log no longer holds what it covers). The
/// driver reads up to <paramref name="MaxBytes"/> bytes of the checkpoint's file from
/// <paramref name="Offset"/> and answers with <see cref="ProcessNode.AnswerCheckpointRead"/>.
/// </summary>
internal sealed record CheckpointReadRequested(GroupId Group, NodeId Requester, Durability.CheckpointMark Mark, long Offset, int MaxBytes) : GroupEvent(Group);

/// <summary>
/// Disk durability, at a member copying the history: the next bytes of a checkpoint of
/// <paramref name="Lineage"/> holding its first <paramref name="Index"/> entries, which it copies
/// from another member. A chunk at offset 0 starts a new file (any partial one is dropped); once
/// <paramref name="Total"/> bytes arrived the driver checks the file, makes it this member's newest
/// checkpoint, and says so with <see cref="ProcessNode.CheckpointDurable"/>.
/// </summary>
internal sealed record CheckpointChunkReceived(GroupId Group, Durability.Lineage Lineage, long Index, long Offset, long Total, byte[] Bytes) : GroupEvent(Group);

/// <summary>Disk durability: this member's log now starts after entry <paramref name="Through"/>, which its persistent checkpoints hold; <paramref name="Remaining"/> entries stay in the log.</summary>
internal sealed record HistoryTrimmed(GroupId Group, long Through, long Remaining) : GroupEvent(Group);

/// <summary>What a <see cref="HistoryNotice"/> reports.</summary>
internal enum HistoryNoticeKind
{
    /// <summary>A restarted group waits for members of its last view before it may deliver.</summary>
    Waiting,

    /// <summary>This member's log had damaged or misplaced records; they were ignored.</summary>
    DamagedLog,

    /// <summary>This member's log belongs to another history than the group's; it is kept aside.</summary>
    ForeignLog,

    /// <summary>This member's log was written by an incarnation a forced recovery of the group gave up: it is kept aside, and the history copied.</summary>
    GivenUpLog,

    /// <summary>This member's persistent checkpoints belong to another history, or run past it: none was loaded, the whole history is replayed.</summary>
    CheckpointNotUsed,

    /// <summary>A member asked for one of this member's checkpoints to copy the history, and the driver could not read it.</summary>
    CheckpointNotServed,
}

/// <summary>
/// Disk durability: this member came to hold the history through a recovery that went ahead
/// without members of the group's last view (<paramref name="Missing"/>; none when a new history
/// was founded because no log came back), with <paramref name="Entries"/> entries. What
/// <paramref name="Text"/> says may be lost is for the operator (the driver logs it as an error).
/// With <paramref name="Reason"/> ProvedComplete nothing was lost: the recovery went ahead on its
/// own, and <paramref name="Text"/> says why that was safe (the driver logs it as a warning).
/// </summary>
internal sealed record HistoryRecoveredWithout(GroupId Group, Durability.HistoryRecovery Reason, NodeId[] Missing, long Entries, Durability.HistoryViewKey LastView, string Text) : GroupEvent(Group);

/// <summary>Disk durability: something the operator should know about the SafeSend history (the driver logs it).</summary>
internal sealed record HistoryNotice(GroupId Group, HistoryNoticeKind Kind, string Text) : GroupEvent(Group);

/// <summary>A new view of a group is installed here (the first one completes a join).</summary>
internal sealed record ViewInstalled(GroupId Group, GroupView View) : GroupEvent(Group);

/// <summary>
/// The view's IP multicast address for this member's group changed (0: unicast): the driver joins
/// it at once. Never held back, unlike <see cref="ViewInstalled"/>, which a joiner's application sees
/// only once it has its state: the member receives the view's traffic meanwhile.
/// </summary>
internal sealed record MulticastAddressChanged(GroupId Group, ulong Address) : GroupEvent(Group);

/// <summary>
/// State transfer, at the member that makes the checkpoint: the application's state now is the
/// state at the cut <paramref name="CutViewId"/> (every message of earlier views delivered, none of
/// this one). The driver asks the application for its checkpoint now, before anything after this
/// event, and hands it to <see cref="ProcessNode.SendStateChunk"/> in chunks, the last one marked.
/// </summary>
internal sealed record StateRequested(GroupId Group, int CutViewId, NodeId[] Joiners) : GroupEvent(Group);

/// <summary>
/// State transfer, at a joiner: the next chunk of the checkpoint made at cut <paramref name="CutViewId"/>,
/// in the maker's order. The driver keeps the chunks until <see cref="StateReceived"/> (a transfer may
/// still be abandoned, <see cref="StateTransferAborted"/>), then loads them before anything after it.
/// </summary>
internal sealed record StateChunkReceived(GroupId Group, int CutViewId, byte[] Chunk) : GroupEvent(Group);

/// <summary>
/// State transfer, at a joiner: the whole checkpoint has arrived. The application loads it now;
/// the view it joined and that view's messages follow.
/// </summary>
internal sealed record StateReceived(GroupId Group, int CutViewId, long Chunks) : GroupEvent(Group);

/// <summary>
/// State transfer, at a member waiting for its checkpoint: the transfer of cut <paramref name="CutViewId"/>
/// cannot finish (its maker left, or never started before a view change). The chunks received so far
/// are void; a checkpoint made at a later view's cut replaces it (or <see cref="StateReset"/> follows).
/// </summary>
internal sealed record StateTransferAborted(GroupId Group, int CutViewId, string Reason) : GroupEvent(Group);

/// <summary>Why a member starts the group's state itself (<see cref="StateReset"/>).</summary>
internal enum StateOrigin : byte
{
    /// <summary>The group forms: no member of its view held a state before (its first view ever, or every member restarted).</summary>
    Founded = 1,

    /// <summary>Every member that held the group's state left before this member's checkpoint arrived: that state is gone.</summary>
    HoldersLost = 2,
}

/// <summary>
/// State transfer: nobody can give this member the group's state, so it starts it at view
/// <paramref name="CutViewId"/>, before that view, and makes the checkpoint for the others of the view
/// that wait. It starts from what it kept itself (a persistent checkpoint), or else from an empty state.
/// </summary>
internal sealed record StateReset(GroupId Group, int CutViewId, StateOrigin Origin) : GroupEvent(Group);

/// <summary>
/// The group's members seal their packets with a key this process does not hold (or it has one they
/// do not use): it leaves the group. <paramref name="Reason"/> says what to do.
/// </summary>
internal sealed record GroupKeyRejected(GroupId Group, string Reason) : GroupEvent(Group);

/// <summary>
/// The group moved to its next key (named by <paramref name="Fingerprint"/>) at the install of view
/// <paramref name="ViewId"/>: every member of the view before held it, and everything of this view on
/// is sealed with it. The previous key opens packets until the next view change.
/// </summary>
internal sealed record GroupKeyRotated(GroupId Group, int ViewId, byte[] Fingerprint) : GroupEvent(Group);

/// <summary>The group's previous key opens nothing here any more, from the install of view <paramref name="ViewId"/> on (the view change after the move).</summary>
internal sealed record GroupKeyRetired(GroupId Group, int ViewId) : GroupEvent(Group);

/// <summary>A Flush this member asked for (<paramref name="Token"/>) has completed.</summary>
internal sealed record FlushCompleted(GroupId Group, long Token) : GroupEvent(Group);

/// <summary>
/// A query this member issued ended: enough replies, a timeout, or an abort reply. Replies come
/// from distinct members of <paramref name="DeliveryViewId"/>; <paramref name="Missing"/> lists the
/// members of that view still in the group that did not answer; <paramref name="Only"/>, for a
/// P2PQuery, the members it was addressed to (null: every member).
/// </summary>
internal sealed record QueryCompleted(GroupId Group, long QueryId, QueryOutcome Outcome, int DeliveryViewId, IReadOnlyList<QueryReply> Replies, NodeId[] Missing, NodeId[]? Only = null) : GroupEvent(Group);

/// <summary>This member, an acceptor of the SafeSend (<see cref="Sender"/>, <see cref="Seq"/>), now holds it and every earlier position.</summary>
/// <remarks>One event per SafeSend at each acceptor, so a recycling <see cref="Outbox"/> reuses the object after <see cref="Outbox.Clear"/>.</remarks>
internal sealed record SafeAccepted() : GroupEvent(default(GroupId))
{
    public int ViewId { get; private set; }
    public NodeId Sender { get; private set; }
    public long Seq { get; private set; }

    internal void Set(GroupId group, int viewId, NodeId sender, long seq)
    {
        Group = group;
        ViewId = viewId;
        Sender = sender;
        Seq = seq;
    }
}

/// <summary>
/// This process is out of the group: its leave request completed, or (<paramref name="Terminated"/>)
/// a member deleted the group, which every member left in view <paramref name="FinalViewId"/>.
/// </summary>
internal sealed record GroupLeft(GroupId Group, bool Terminated = false, int FinalViewId = 0) : GroupEvent(Group);

/// <summary>The process stops: it was expelled or lost the membership service. Everything is wedged.</summary>
internal sealed record NodeShutDown(string Reason) : NodeEvent;

/// <summary>
/// A newcomer has asked <paramref name="AddressesAsked"/> addresses for the membership service for
/// <paramref name="Waited"/> microseconds (the isolation timeout) without an answer, and goes on
/// asking until the discovery timeout: said once, so that a wait that may end in a shutdown is visible.
/// </summary>
internal sealed record ServiceNotFoundYet(long Waited, int AddressesAsked) : NodeEvent;

/// <summary>
/// The firewall dropped traffic from an expelled incarnation (at most once per heartbeat period per
/// incarnation; <paramref name="DroppedSoFar"/> counts every drop of this node so far).
/// </summary>
internal sealed record TrafficFirewalled(NodeId From, long DroppedSoFar) : NodeEvent;

/// <summary>A query with QueryTimeoutAction.ExpelSlowMembers timed out: the members that had not replied were reported to the membership service to be expelled.</summary>
internal sealed record SlowRepliersReported(GroupId Group, long QueryId, NodeId[] Members) : GroupEvent(Group);

/// <summary>
/// The membership service expelled an incarnation (emitted by the membership service).
/// <paramref name="AfterExit"/>: the leader knew it was exiting (it had asked to hand its replica
/// over), so this is the end of a graceful exit, not a failure. <paramref name="Reason"/>: why.
/// </summary>
internal sealed record IncarnationExpelled(NodeId Node, bool AfterExit = false, Membership.ExpelReason Reason = Membership.ExpelReason.Unheard) : NodeEvent;

/// <summary>
/// A membership replica applied the committed decision at <paramref name="Index"/> of its log (every
/// replica applies the same one there); <paramref name="Digest"/> chains every decision applied up to
/// it (see <see cref="Membership.ReplicatedLog.ChainDigest"/>), so a snapshot can be checked against it.
/// </summary>
internal sealed record DecisionApplied(long Index, byte[] Entry, ulong Digest = 0) : NodeEvent;

/// <summary>
/// A membership replica's state now comes from a snapshot of its log up to <paramref name="Index"/>
/// whose decisions chain to <paramref name="Digest"/>: it took one and compacted its log
/// (<paramref name="Installed"/> false), or installed one from the leader or restored one at a
/// restart (true).
/// </summary>
internal sealed record ReplicaSnapshotMade(long Index, ulong Digest, bool Installed) : NodeEvent;

/// <summary>
/// The leading membership replica committed its log up to <paramref name="Index"/>:
/// <paramref name="Holders"/> hold it, counted against <paramref name="Voters"/>, the configuration in
/// force (appended at <paramref name="ConfigurationIndex"/>, 0 for the founding one).
/// </summary>
internal sealed record DecisionCommitted(long Index, NodeId[] Holders, NodeId[] Voters, long ConfigurationIndex) : NodeEvent;

/// <summary>
/// The membership service's committed configuration changed (emitted by a replica that applies it,
/// and by a process that learns it): <paramref name="Replicas"/> run the service from log position
/// <paramref name="Version"/> on. The runtime keeps it so that a later process finds the service.
/// </summary>
internal sealed record ServiceConfigurationChanged(long Version, NodeId[] Replicas) : NodeEvent;

/// <summary>The membership service moved this process's replica elsewhere (or it hosted none): it may exit without the service losing a replica.</summary>
internal sealed record HostRetired : NodeEvent;
