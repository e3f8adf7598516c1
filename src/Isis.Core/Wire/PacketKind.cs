namespace Isis.Core.Wire;

/// <summary>
/// Every packet kind on the wire. The numbering is part of the wire format: never reuse a number.
/// </summary>
internal enum PacketKind : byte
{
    // Process <-> membership service ("oracle").
    Heartbeat = 1,          // process -> oracle; Number = membership epoch the process knows
    HeartbeatAck = 2,       // oracle -> process; Number = current epoch
    MembershipUpdate = 3,   // oracle -> process; Number = epoch; body: expelled incarnations
    Expelled = 4,           // oracle or member -> expelled incarnation: "you are out, shut down"
    JoinRequest = 5,        // process -> oracle; body: group name
    LeaveRequest = 6,       // process -> oracle
    LeaveDone = 7,          // oracle -> leaver; View = the first view without it
    StartFlush = 8,         // oracle -> coordinator; View = current view; Number = attempt
    FlushDone = 9,          // coordinator -> oracle; View = current view; Number = attempt
    InstallView = 10,       // oracle -> member; View = the new view id
    InstallAck = 11,        // member -> oracle
    Suspect = 12,           // member -> oracle: expel this incarnation (a query timed out on it)
    LeaderHint = 13,        // replica -> process; Number = term; body: the leading replica, NodeId.None if unknown

    // Membership replica <-> replica: the replicated decision log (Raft-style), Number = term.
    ReplicaVote = 14,       // candidate -> replica; body: pre-vote flag, last log index and term, send time
    ReplicaVoteReply = 15,  // replica -> candidate; body: pre-vote flag, granted, the request's send time
    ReplicaAppend = 16,     // leader -> follower; body: previous index and term, commit index, send time, entries
    ReplicaAppendReply = 17, // follower -> leader; body: success, match index (or where to resume), the append's send time

    TerminateRequest = 18,  // member -> oracle: delete the group (every member leaves in one view change)
    ViewChangeRequest = 19, // member -> oracle; View = its current view: install a new view even with the same members (a key rotation takes effect at one)

    // Member <-> member, within one view of one group.
    Data = 20,              // Number = sequence number of the message in its sender's stream
    Digest = 21,            // acknowledgement digest: what this member holds, per sender
    Nak = 22,               // retransmission request for a range of one sender's stream
    Wedge = 23,             // coordinator -> survivor; Number = attempt
    FlushReport = 24,       // survivor -> coordinator: what I hold, with my unstable messages
    FlushCommit = 25,       // coordinator -> survivor: the cut, with the messages you lack
    CommitAck = 26,         // survivor -> coordinator
    Reply = 27,             // replier -> requester; Number = query id; may cross a view change
    ReplyAck = 28,          // requester -> replier; Number = query id

    // Member <-> member, within one view of a group with disk durability: its SafeSend history.
    HistoryStatus = 29,     // member -> the view's oldest member: the history it holds or the log it brings
    HistoryPlan = 30,       // oldest member -> member: where to get the history, how long it is
    HistoryPull = 31,       // member -> source; Number = first index wanted; body: target
    HistoryChunk = 32,      // source -> member; Number = index of the first entry; body: entries

    // The membership service's own configuration.
    ReplicaTimeoutNow = 33, // leader -> successor replica: start an election now (leadership transfer); Number = term
    ServiceConfiguration = 34, // replica or process -> process; Number = configuration version; body: the replicas
    Discover = 35,          // new process -> well-known port, seed or replica: which replicas run the service?
    HostRetiring = 36,      // process -> leading replica: this process is about to exit; move its replica first
    HostRetired = 37,       // leading replica -> process: no replica is hosted there any more; it may exit

    // Member <-> member, within one view of a large group: its stability tree (see StabilityTree).
    StabilityReport = 38,   // child -> parent; Number = stable version the child holds; body: its subtree's holdings per sender
    StabilityUpdate = 39,   // parent -> child; Number = stable version; body: the stable prefix per sender

    // Member <-> joiner, across views: the state transfer of the checkpoint made at a join's cut (see GroupMember.StateTransfer).
    StateChunk = 40,        // maker -> joiner; View = the cut (the view the joiner joined in); Number = chunk number (1, 2, ...); body: last flag, the chunk
    StateAck = 41,          // joiner -> maker; View = the cut; Number = chunks received in order

    // Sealed traffic (see Security.PacketSealer): the packets of one step to one destination under one key, sealed together.
    Bundle = 42,            // Group = the group whose key sealed it (0: the system key); body, once opened: whole packets back to back

    // Member <-> member, per view: the durable history's trimmed part travels as a checkpoint (see Durability.DurableHistory).
    HistoryCheckpointPull = 43,  // member -> source or provider; Number = entries the checkpoint holds; body: lineage, offset wanted
    HistoryCheckpointChunk = 44, // source or provider -> member; Number = entries the checkpoint holds; body: lineage, offset, file length, bytes
    HistoryAllCurrent = 45,      // oldest member -> member: every member of this view holds the history (no copy needs the view's start any more)

    // Replica <-> replica, after the others above: the membership log's compaction.
    ReplicaSnapshot = 46,   // leader -> follower; Number = term; body: snapshot index and term, send time, total length, offset, a chunk of the snapshot

    // Member <-> member, relaying (a large group over TCP): another member's packet on its way along a tree.
    Routed = 47,            // hop -> next hop; Number = the position in the path of the member it is sent to; body: the path (first: the packet's sender, last: its destination), then the whole packet

    // A client that is not a member <-> the group (see Clients.GroupClientNode): where the members are, and requests they relay.
    ClientLookup = 48,      // client -> replica or member; Group = the group; body: its name
    ClientMembers = 49,     // replica or member -> client; Group; View = the view id; body: the view's members
    ClientRequest = 50,     // client -> relay member; Group; Number = the request's number; body: see Clients.ClientWire
    ClientAnswer = 51,      // relay member -> client; Group; Number = the request's number; body: see Clients.ClientWire
}

/// <summary>What a packet kind is for, where the numbering alone does not say.</summary>
internal static class PacketKinds
{
    /// <summary>
    /// True for traffic between the members of one view of one group (a group's key seals it, and a
    /// step's such packets to one destination travel in one sealed bundle). False for the packets
    /// to, from and between the membership service's replicas, the service's directory, and the
    /// bundle itself: kinds 33-37 came after the member kinds in the numbering, and a replica, which
    /// opens no bundles, must receive them one by one.
    /// </summary>
    public static bool IsMemberTraffic(PacketKind kind) =>
        kind is >= PacketKind.Data and <= PacketKind.HistoryChunk or >= PacketKind.StabilityReport and <= PacketKind.StateAck
            or >= PacketKind.HistoryCheckpointPull and <= PacketKind.HistoryAllCurrent or PacketKind.Routed;

    /// <summary>Member traffic or a bundle of it: what a group's key seals, where the group has one (<see cref="PacketHeader.Group"/> names the group).</summary>
    public static bool IsGroupTraffic(PacketKind kind) => IsMemberTraffic(kind) || kind == PacketKind.Bundle;

    /// <summary>A non-member client's requests and their answers: sealed one by one with the group's key, where it has one (a client without it is refused unread).</summary>
    public static bool IsClientTraffic(PacketKind kind) => kind is PacketKind.ClientRequest or PacketKind.ClientAnswer;

    /// <summary>What a group's key seals: its member traffic, bundles of it, and its clients' requests and answers.</summary>
    public static bool IsGroupKeyed(PacketKind kind) => IsGroupTraffic(kind) || IsClientTraffic(kind);
}
