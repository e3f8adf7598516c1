using Isis.Core.Common;
using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

internal enum MemberState
{
    /// <summary>Join requested; no view yet.</summary>
    Joining,

    /// <summary>In a view: sending and delivering (unless wedged by a flush).</summary>
    Active,

    /// <summary>Leave requested; still a member until the membership service installs a view without us.</summary>
    Leaving,

    Left,
}

/// <summary>
/// This process's membership in one group: the current view, the FIFO streams of every sender,
/// acknowledgement digests and stability, NAK repair, and this member's part in a view-change flush.
/// </summary>
/// <remarks>
/// One class in four files, by concern: this one (views, Send, the receive path and delivery,
/// timers), <c>GroupMember.Stability.cs</c> (digests, stability and repair),
/// <c>GroupMember.Flush.cs</c> (Flush and the view-change flush) and <c>GroupMember.Query.cs</c>.
/// Rules this class implements (DESIGN.md section 3):
/// <list type="bullet">
/// <item>Send is FIFO per sender and the sender delivers its own message at once.</item>
/// <item>A message is delivered in the view it was sent in, or nowhere: packets carry their view id
/// and anything for another view is dropped.</item>
/// <item>Once wedged by a flush coordinator a member neither sends nor delivers in the old view
/// except what the coordinator's cut tells it to, so every survivor delivers the same set.</item>
/// </list>
/// </remarks>
internal sealed partial class GroupMember
{
    /// <summary>How far ahead of what we hold a sequence number may plausibly be; anything beyond is malformed.</summary>
    private const long MaxAhead = 1 << 22;

    private readonly ProcessNode _node;
    private readonly Queue<StreamMessage> _pendingSends = new();
    private readonly TotalOrder _order;

    // Our own SafeSends of this view not yet delivered here: sent again in the next view if the
    // view ends before their acceptors all held them (then nobody delivered them).
    private readonly Dictionary<long, StreamMessage> _ownSafe = new(); // a SortedDictionary cost a node per SafeSend; sorted when resent
    private readonly QueryTracker _queries;

    private SenderStream[] _streams = [];

    // Flush participant state for the current view.
    private bool _wedged;
    private long _reportedAttempt = -1;
    private long _committedAttempt = -1;

    // Join, leave and terminate requests are retransmitted until the membership service answers.
    private long _nextRequestAt;
    private bool _terminating;

    // The next view's install, received while this member lacked its lease (see OnInstallView).
    private GroupView? _installAwaitingLease;

    // Disk durability: what this member would hand the application before it holds the group's
    // history, in order; handed over, after the history's replay, once it does.
    private readonly List<NodeEvent> _held = new();

    /// <param name="node">The process.</param>
    /// <param name="id">The group.</param>
    /// <param name="name">The group's name.</param>
    /// <param name="log">With disk durability: what this member's SafeSend history log holds (empty for a new log).</param>
    /// <param name="checkpoints">With disk durability: the persistent checkpoints this member kept, newest first.</param>
    public GroupMember(ProcessNode node, GroupId id, string name, HistoryLogImage? log = null, IReadOnlyList<CheckpointMark>? checkpoints = null)
    {
        _node = node;
        Id = id;
        Name = name;
        State = MemberState.Joining;
        _queries = new QueryTracker(id, e => Publish(e), slow => node.Suspect(slow, Membership.ExpelReason.SlowToReply), (node.Options.Mutations & ProtocolMutations.QueryCompletesOnFirstReply) != 0,
            (node.Options.Mutations & ProtocolMutations.LateRepliesDropped) != 0);
        _order = new TotalOrder { OneAcceptorShort = (node.Options.Mutations & ProtocolMutations.SafeDeliversOneAcceptorShort) != 0 };
        if (log != null) History = new DurableHistory(node, this, log, checkpoints ?? []);
    }

    public GroupId Id { get; }

    public string Name { get; }

    public MemberState State { get; private set; }

    public GroupView? View { get; private set; }

    public int MyRank { get; private set; } = -1;

    /// <summary>With disk durability: the group's SafeSend history as this member holds it (null in memory).</summary>
    public DurableHistory? History { get; }

    /// <summary>
    /// The last view of the group's previous incarnation, kept if this member was the oldest member
    /// (rank 0) of the first view of the current incarnation, which carried it (see
    /// <see cref="GroupView.PreviousIncarnation"/>); null otherwise. Survivors keep their order and
    /// joiners come after them, so it has been the oldest member of every view since: with disk
    /// durability it alone decided every plan of the history since the incarnation began, which
    /// <see cref="DurableHistory"/>'s recovery without missing members relies on.
    /// </summary>
    internal LastLiveView? PreviousIncarnation { get; private set; }

    /// <summary>This member takes part: always in memory; with disk durability, once it holds the history.</summary>
    private bool HistoryCurrent => History == null || History.Current;

    /// <summary>The flush this member coordinates, if the membership service chose it.</summary>
    public FlushCoordinator? Coordinator { get; set; }

    /// <summary>This member's own messages not yet known stable: the flow-control window the runtime watches.</summary>
    public long UnstableOwnMessages => MyRank < 0 ? 0 : _streams[MyRank].Contiguous - _streams[MyRank].Stable;

    public int PendingSends => _pendingSends.Count;

    /// <summary>Entries of this view's acknowledgement table (see <see cref="AcknowledgementTable.Entries"/>): what a long run must keep bounded.</summary>
    public long AcknowledgementEntries => _acks.Entries;

    /// <summary>The sequence number through which this member holds <paramref name="rank"/>'s messages of the view without a gap (the simulator's insider attacker guesses from it).</summary>
    internal long HeldThrough(int rank) => rank >= 0 && rank < _streams.Length ? _streams[rank].Contiguous : 0;

    public bool IsWedged => _wedged;

    private NodeId Self => _node.Self;

    private ProtocolOptions Options => _node.Options;

    // ---------------------------------------------------------------- join and leave

    public void RequestJoin(long now)
    {
        _node.SendToOracle(_node.Writer.Begin(new PacketHeader(PacketKind.JoinRequest, Self, Id, 0, 0)).String(Name).Finish());
        _nextRequestAt = now + Options.RetryInterval;
    }

    public void RequestLeave(long now)
    {
        if (State == MemberState.Left) return;
        State = MemberState.Leaving;
        _pendingSends.Clear();
        SendLeaveRequest(now);
    }

    private void SendLeaveRequest(long now)
    {
        _node.SendToOracle(_node.Writer.Begin(new PacketHeader(PacketKind.LeaveRequest, Self, Id, View?.Id ?? 0, 0)).Finish());
        _nextRequestAt = now + Options.RetryInterval;
    }

    /// <summary>Resends a pending join, leave or terminate request at the next tick (the service's leader changed).</summary>
    public void RetryRequestsAt(long now) => _nextRequestAt = Math.Min(_nextRequestAt, now);

    /// <summary>Asks the membership service to delete the group: every member leaves it in one view change.</summary>
    public void RequestTerminate(long now)
    {
        if (State is MemberState.Left or MemberState.Leaving) return;
        _terminating = true;
        _node.SendToOracle(_node.Writer.Begin(new PacketHeader(PacketKind.TerminateRequest, Self, Id, View?.Id ?? 0, 0)).Finish());
        _nextRequestAt = now + Options.RetryInterval;
    }

    /// <summary>The service installed view <paramref name="viewId"/> without this member: our leave completed, or the group was deleted.</summary>
    public void OnLeaveDone(int viewId)
    {
        bool terminated = State != MemberState.Leaving;

        // Unasked, it means the group was terminated: trust it only for a view after ours (an old
        // answer to an earlier leave of this group must not end the current membership).
        if (terminated && (State != MemberState.Active || View == null || viewId <= View.Id)) return;
        if (terminated) Wedge();
        State = MemberState.Left;
        _queries.AbandonAll();
        // Out of the group: nothing of ours is pending in it any more.
        // A member that never came to hold the history hands the application nothing of the group.
        if (!HistoryCurrent) _held.Clear();
        // One that holds it and is still replaying it hands over the rest now, and what waited behind
        // it: the group goes with this step (the node drops a member that left), its GroupLeft last.
        if (_replay != null) ContinueReplay(all: true);
        foreach (var (token, _, _, _, _) in _flushWaiters) Publish(new FlushCompleted(Id, token));
        _flushWaiters.Clear();
        _node.Emit(new GroupLeft(Id, terminated, viewId));
    }

    /// <summary>
    /// The membership service installs a view. A survivor of the previous view gets it only after
    /// the flush committed here (the coordinator reports completion only once every survivor acknowledged
    /// the cut), so the old view's deliveries are final by now.
    /// </summary>
    public void OnInstallView(GroupView view, long now)
    {
        if (State == MemberState.Left) return;
        if (View != null && view.Id <= View.Id)
        {
            // A retransmission: our acknowledgement was lost.
            AckInstall(view.Id);
            return;
        }
        int rank = view.RankOf(Self);
        if (rank < 0) return; // not addressed to a member: ignore
        // An install that arrives while we lack our lease may be one the service sent before it
        // expelled us: take it only with the lease. Keep the next one until the lease comes (a
        // joiner's first install often overtakes its first heartbeat's answer); an expelled
        // incarnation never gets the lease back, so it never takes it.
        if (!_node.LeaseHeld)
        {
            if (View == null || view.Id == View.Id + 1) _installAwaitingLease = view;
            return;
        }
        _installAwaitingLease = null;

        if (View != null)
        {
            Invariant.Check(view.Id == View.Id + 1, $"views are installed in order: at {View.Id}, offered {view.Id}");
            Invariant.Check(_committedAttempt >= 0 || (Options.Mutations & ProtocolMutations.SkipFlushExchange) != 0,
                $"a survivor installs view {view.Id} only after committing the flush of view {View.Id}");
        }

        if (View != null)
        {
            DeliverUnorderedAtViewEnd();
            DeliverCausalAtViewEnd();
        }
        bool firstView = View == null;
        if (firstView || View!.Multicast != view.Multicast) _node.Emit(new MulticastAddressChanged(Id, view.Multicast));

        // Our SafeSends that the old view could not deliver go out again, first, in this one.
        var resend = _ownSafe.OrderBy(e => e.Key).Select(e => e.Value).ToList();
        _ownSafe.Clear();

        View = view;
        MyRank = rank;
        // Only a view none of whose members was in the group before carries one: this member's first.
        if (view.PreviousIncarnation != null) PreviousIncarnation = rank == 0 ? view.PreviousIncarnation : null;
        _order.Reset(view.Members.Length);
        ResetCausal(view.Members.Length);
        _sentLog.Clear(); // everything sent in the old view was settled by its flush
        _sentLogStart = 0;
        _streams = new SenderStream[view.Members.Length];
        for (int i = 0; i < _streams.Length; i++) _streams[i] = new SenderStream();
        _stabilityDirty = true;
        _wedged = false;
        _reportedAttempt = -1;
        _committedAttempt = -1;
        Coordinator = null;
        _digestDirty = false;
        _lastDigestSentAt = now;
        _idleDigestsInARow = 0;
        _nextDigestAt = now + Options.DigestInterval;
        _tree = view.Members.Length >= Options.GossipFromMembers ? new StabilityTree(_node, this, view, rank, Options.StabilityTreeFanout, now) : null;
        _acks = new AcknowledgementTable(view.Members.Length, rank, _tree == null ? null : _tree.Neighbours.ToArray());
        NodeId[] stateFor = OnViewForStateTransfer(view, firstView);
        OnViewForSecurity(view);
        OnViewForKeyRotation(view);
        if (State == MemberState.Joining) State = MemberState.Active;
        _node.Counters.ViewsInstalled++;
        Publish(new ViewInstalled(Id, view));
        if (stateFor.Length > 0) StartMakingState(view, stateFor, now);
        _queries.OnViewInstalled(view);
        foreach (var key in _outgoingReplies.Keys.Where(k => !view.Contains(k.Requester)).ToList()) _outgoingReplies.Remove(key);
        AckInstall(view.Id);

        // Sends issued while joining or wedged go out in this view; control messages of the old
        // view refer to its positions and are void now.
        var keep = resend.Concat(_pendingSends.Where(m => !m.Kind.IsProtocol())).ToList();
        _pendingSends.Clear();
        foreach (StreamMessage m in keep) _pendingSends.Enqueue(m);
        AnnounceHeldKey(); // a member that holds a next key says so again in the new view
        SendPending();
        // Last: it may make this member current at once, which hands over what waited.
        History?.OnViewInstalled(view, rank, now);
    }

    private void SendPending()
    {
        while (State == MemberState.Active && !_wedged && _node.LeaseHeld && Current && _pendingSends.Count > 0) SendNow(_pendingSends.Dequeue());
    }

    /// <summary>The membership lease is back: deliver what waited and send what queued.</summary>
    public void OnLeaseRenewed(long now)
    {
        if (_installAwaitingLease is { } waiting && State != MemberState.Left)
        {
            _installAwaitingLease = null;
            OnInstallView(waiting, now);
        }
        if (View == null || State == MemberState.Left) return;
        LoadStateOnLeaseRenewed();
        for (int rank = 0; rank < _streams.Length; rank++) DeliverReady(rank);
        DeliverOrdered();
        DeliverCausal();
        SendPending();
    }

    private void AckInstall(int viewId) =>
        _node.SendToOracle(_node.Writer.Begin(new PacketHeader(PacketKind.InstallAck, Self, Id, viewId, 0)).Finish());

    // ---------------------------------------------------------------- Send

    /// <summary>Sends now if possible, otherwise queues the message for the next view.</summary>
    // pooled: the pool array behind payload; the stream returns it once the message is stable, for the
    // kinds whose last holder it is (StreamIsLastHolder), and leaves it to the GC otherwise.
    // to: the destinations of a subset kind (null for the others).
    public void Send(MessageKind kind, ReadOnlyMemory<byte> payload, int phi = 0, byte[]? pooled = null, NodeId[]? to = null)
    {
        var message = new StreamMessage(kind, payload, phi, StreamIsLastHolder(kind) ? pooled : null, To: kind.IsSubset() ? to ?? [] : null);
        if (State is not (MemberState.Active or MemberState.Joining))
        {
            if (pooled != null) _node.Outbox.Pool?.Return(pooled); // never referenced
            return;
        }
        if (!kind.IsSafe()) _issued++; // SafeSend is durable on delivery; Flush covers the cheap primitives
        if (State == MemberState.Active && !_wedged && _node.LeaseHeld && Current && _pendingSends.Count == 0) SendNow(message);
        else _pendingSends.Enqueue(message);
    }

    private void SendNow(StreamMessage message)
    {
        message = StampCausal(message);
        message = AddressToView(message);
        GroupView view = View!;
        SenderStream own = _streams[MyRank];
        long seq = own.Contiguous + 1;
        own.Add(seq, message);
        long delivered = own.DeliverNext();
        Invariant.Check(delivered == seq, "a member delivers its own message as it sends it");
        _stabilityDirty = true;
        if (message.Kind.IsSafe()) _ownSafe[seq] = message;
        if (message.IsApplication)
        {
            if (!message.Kind.IsSafe()) _sentLog.Add((++_sentCount, view.Id, seq));
            _node.Outbox.Sent(Id, view.Id, seq, message.Kind, message.Payload, message.Phi, message.To);
        }
        OnStreamDelivered(MyRank, seq, message);
        ReadOnlyMemory<byte> packet = DataPacket(MyRank, seq, message);
        if (view.Multicast != 0)
        {
            // One datagram reaches every member (each joined the view's address); a member that
            // misses it learns of the gap from the next message or digest and NAKs it, and the
            // repair comes by unicast.
            _node.SendTo(view.Multicast, packet);
        }
        else if (Relaying)
        {
            // A large group over a connection-based transport: to our tree neighbours, who pass it on.
            foreach (int neighbour in _tree!.Neighbours) _node.SendTo(view.Members[neighbour].Endpoint, packet);
        }
        else
        {
            foreach (NodeId member in view.Members)
            {
                if (member != Self) _node.SendTo(member.Endpoint, packet);
            }
        }
        HoldingsChanged();
    }

    /// <summary>
    /// Data goes along the stability tree instead of to every member (<see cref="ProtocolOptions.RelayThroughTree"/>,
    /// in a large group whose data goes by unicast): the same at every member of a view.
    /// </summary>
    internal bool Relaying => _tree != null && Options.RelayThroughTree && View!.Multicast == 0;

    /// <summary>
    /// A message this member stored for the first time goes on to its tree neighbours other than the
    /// one it came from and its original sender. The tree has no cycles, so without loss every member
    /// receives each message once; what a link loses, the NAKs repair hop by hop, and a repair is passed
    /// on the same way.
    /// </summary>
    private void Relay(int from, int origin, long seq, StreamMessage message)
    {
        int label = (Options.Mutations & ProtocolMutations.RelayForwardsAsOwn) != 0 ? MyRank : origin; // the mutation: a deliberate bug
        ReadOnlyMemory<byte> packet = DataPacket(label, seq, message);
        foreach (int neighbour in _tree!.Neighbours)
        {
            if (neighbour != from && neighbour != origin) _node.SendTo(View!.Members[neighbour].Endpoint, packet);
        }
    }

    private ReadOnlyMemory<byte> DataPacket(int originRank, long seq, StreamMessage message) =>
        _node.Writer.Begin(new PacketHeader(PacketKind.Data, Self, Id, View!.Id, seq))
            .I32(originRank).U8((byte)message.Kind).I32(message.Phi).KindFields(message).Tail(message.Payload.Span).Finish(_node.Outbox);

    // ---------------------------------------------------------------- receive path

    /// <summary>
    /// Routes a member-to-member packet. The caller has already checked the checksum and the
    /// firewall; here we check that the packet belongs to our current view and its sender is a member.
    /// </summary>
    /// <param name="h">The packet's header.</param>
    /// <param name="body">Its body.</param>
    /// <param name="now">The current time.</param>
    /// <param name="arrivedAlong">The path it came along in an envelope (GroupMember.Routing), or null if it came directly.</param>
    public void OnGroupPacket(in PacketHeader h, ReadOnlySpan<byte> body, long now, NodeId[]? arrivedAlong = null)
    {
        if (h.Kind == PacketKind.Routed)
        {
            OnRouted(h, body, now);
            return;
        }
        // Replies may cross a view change (the replier installed the next view first), so they are
        // matched by query id and the requester's delivery view, not by the packet's view.
        if (h.Kind is PacketKind.Reply or PacketKind.ReplyAck)
        {
            OnReplyTraffic(h, body, arrivedAlong);
            return;
        }
        if (h.Kind is PacketKind.StateChunk or PacketKind.StateAck)
        {
            OnStatePacket(h, body, now);
            return;
        }
        if (State is MemberState.Joining or MemberState.Left || View == null || h.View != View.Id)
        {
            _node.Counters.DroppedWrongView++;
            return;
        }
        int from = View.RankOf(h.Sender);
        if (from < 0)
        {
            _node.Counters.DroppedNotMember++;
            return;
        }
        var r = new WireReader(body);
        switch (h.Kind)
        {
            case PacketKind.Data: OnData(from, h.Number, ref r, now); break;
            case PacketKind.Digest:
                OnDigest(from, ref r, now);
                if (r.Ok && h.Number == 1 && !_wedged) SendDigest(now, only: h.Sender); // a Flush is waiting on us
                break;
            case PacketKind.Nak: OnNak(from, ref r); break;
            case PacketKind.StabilityReport or PacketKind.StabilityUpdate: OnTreePacket(h, from, ref r); break;
            case PacketKind.Wedge:
                if (r.Complete) OnWedge(from, h.Number, arrivedAlong); else r.Fail();
                break;
            case PacketKind.FlushReport:
                if (Coordinator != null) Coordinator.OnReport(h.Sender, h.Number, ref r);
                else _node.Counters.DroppedWrongView++; // no flush of ours is running: a late or stray report
                break;
            case PacketKind.FlushCommit: OnCommit(from, h.Number, ref r, arrivedAlong); break;
            case PacketKind.HistoryStatus or PacketKind.HistoryPlan or PacketKind.HistoryPull or PacketKind.HistoryChunk
                or PacketKind.HistoryCheckpointPull or PacketKind.HistoryCheckpointChunk or PacketKind.HistoryAllCurrent:
                if (History != null) History.OnPacket(h, from, ref r, now);
                else _node.Counters.DroppedNotForMe++; // a member with disk durability in a group whose other members keep SafeSends in memory
                break;
            case PacketKind.CommitAck:
                if (!r.Complete) r.Fail();
                else if (Coordinator != null) Coordinator.OnCommitAck(h.Sender, h.Number);
                else _node.Counters.DroppedWrongView++;
                break;
            default:
                r.Fail();
                break;
        }
        if (!r.Ok) _node.Counters.DroppedMalformed++;
    }

    private void OnData(int from, long seq, ref WireReader r, long now)
    {
        int origin = r.I32();
        var kind = (MessageKind)r.U8();
        int phi = r.I32();
        long[]? stamp = kind.IsCausal() ? r.VarLongs() : null;
        NodeId[]? to = kind.IsSubset() ? r.Nodes() : null;
        ReadOnlySpan<byte> payload = r.TailSpan();
        if (!r.Ok || origin < 0 || origin >= _streams.Length || seq <= 0 || !Enum.IsDefined(kind) || phi < 0) { r.Fail(); return; }
        if (kind.IsCausal() && !_causal.Fits(stamp)) { r.Fail(); return; }
        if (origin == MyRank) { _node.Counters.Duplicates++; return; }
        // Flow control keeps every sender far closer than this to what receivers hold.
        if (seq > _streams[origin].Contiguous + MaxAhead) { r.Fail(); return; }
        if (from != origin) _node.Counters.Retransmissions++;
        SenderStream s = _streams[origin];
        if (seq <= s.Contiguous || s.Held.ContainsKey(seq)) { _node.Counters.Duplicates++; return; }
        StreamMessage message = Keep(kind, payload, phi, stamp, to);
        s.Add(seq, message);
        HoldingsChanged();
        if (Relaying) Relay(from, origin, seq, message);
        if ((Options.Mutations & ProtocolMutations.DeliverOutOfOrder) != 0 && !_wedged && seq > s.Delivered + 1 && kind == MessageKind.Send)
        {
            // Deliberate bug: deliver whatever arrives.
            _node.Outbox.Delivered(Id, View!.Id, View.Members[origin], seq, kind, message.Payload, atViewEnd: false);
            return;
        }
        if (s.HasGap && s.NextNakAt == 0)
        {
            s.NextNakAt = now + Options.NakInterval;
            s.ContiguousAtLastNakCheck = s.Contiguous;
            _naksArmed = true;
        }
        DeliverReady(origin);
    }

    /// <summary>
    /// A received message's own copy of its payload. Sends and the protocol's own control messages
    /// (announcements, acceptances: read once on delivery) live in pooled arrays, because their
    /// stream is their last holder and returns them once stable; the other kinds may be held
    /// elsewhere too (total order, SafeSend resends), so they get an array of their own.
    /// </summary>
    private StreamMessage Keep(MessageKind kind, ReadOnlySpan<byte> payload, int phi, long[]? causal, NodeId[]? to)
    {
        if (!StreamIsLastHolder(kind) || _node.Outbox.Pool is not { } pool) return new StreamMessage(kind, payload.ToArray(), phi, Causal: causal, To: to);
        byte[] array = pool.Rent(payload.Length);
        payload.CopyTo(array);
        return new StreamMessage(kind, array.AsMemory(0, payload.Length), phi, array, causal, to);
    }

    // A Send or a subset send is delivered as it reaches the stream's head (nothing else keeps it); the
    // causal, ordered and safe kinds may wait elsewhere after the stream drops them.
    private static bool StreamIsLastHolder(MessageKind kind) => kind is MessageKind.Send or MessageKind.Subset || kind.IsControl();

    /// <summary>A control message of ours with a <paramref name="length"/>-byte body to fill, in a pooled array when the node recycles.</summary>
    private StreamMessage Control(MessageKind kind, int length, out Span<byte> body)
    {
        byte[] array = _node.Outbox.Pool?.Rent(length) ?? new byte[length];
        body = array.AsSpan(0, length);
        return new StreamMessage(kind, array.AsMemory(0, length), 0, _node.Outbox.Pool != null ? array : null);
    }

    /// <summary>Delivers the contiguous prefix of one sender's stream, unless a flush wedged us.</summary>
    private void DeliverReady(int origin)
    {
        if (_wedged || !_node.LeaseHeld) return;
        SenderStream s = _streams[origin];
        while (s.Delivered < s.Contiguous)
        {
            long seq = s.DeliverNext();
            _stabilityDirty = true;
            OnStreamDelivered(origin, seq, s.Held[seq]);
        }
        if (!s.HasGap) { s.NextNakAt = 0; s.NakRound = 0; }
    }

    /// <summary>
    /// A message reached the head of its sender's FIFO stream (at the sender itself, at once). A
    /// Send is delivered now; an OrderedSend waits for its place in the total order, which the
    /// view's sequencer (rank 0, the oldest member) announces in its own stream.
    /// </summary>
    private void OnStreamDelivered(int rank, long seq, StreamMessage message)
    {
        switch (message.Kind)
        {
            case MessageKind.Send or MessageKind.QuerySend:
                Deliver(rank, seq, message);
                break;
            case MessageKind.CausalSend or MessageKind.QueryCausal:
                OnCausalArrived(rank, seq, message);
                break;
            case MessageKind.Subset or MessageKind.QuerySubset:
                OnSubsetArrived(rank, seq, message);
                break;
            case MessageKind.Ordered or MessageKind.QueryOrdered when (Options.Mutations & ProtocolMutations.DeliverOrderedOnArrival) != 0:
                Deliver(rank, seq, message); // deliberate bug
                break;
            case MessageKind.Ordered or MessageKind.QueryOrdered or MessageKind.Safe or MessageKind.QuerySafe or MessageKind.KeyRotation:
                _order.Add(rank, seq, message, announce: MyRank == TotalOrder.SequencerRank);
                DeliverOrdered();
                break;
            case MessageKind.SafeAccept:
                if (!_order.TryAddAcceptance(rank, message.Payload.Span))
                {
                    _node.Counters.DroppedMalformed++;
                    break;
                }
                DeliverOrdered();
                break;
            case MessageKind.OrderAnnouncement:
                if (rank != TotalOrder.SequencerRank || !_order.TryAddPositions(message.Payload.Span, _streams.Length))
                {
                    _node.Counters.DroppedMalformed++;
                    break;
                }
                DeliverOrdered();
                break;
        }
    }

    private void DeliverOrdered()
    {
        // With disk durability a member that does not hold the history yet accepts nothing: its log
        // must hold the history before this view's SafeSends, in order.
        if (!HistoryCurrent) return;
        foreach (var (rank, seq, message) in _order.AdvanceMyAcceptance())
        {
            // Every member logs each SafeSend it holds in order (the driver makes it durable before
            // any packet of this step leaves, so before an acceptor's acknowledgement), so every
            // member's log is a prefix of the group's history.
            if (Logged(message.Kind)) History?.Log(View!.Members[rank], View.Id, seq, message.Phi, message.Kind, message.Payload);
            if (MyRank >= _order.Acceptors(message.Phi)) continue;
            _node.Outbox.Accepted(Id, View!.Id, View.Members[rank], seq);
        }
        if (_wedged || !_node.LeaseHeld) return; // the flush (or the lease's return) delivers them
        while (_order.TryTakeNext(out int rank, out long seq, out StreamMessage message))
        {
            Invariant.Check(_streams[rank].Delivered >= seq, $"a message takes its place in the total order only after its sender's stream delivered it: rank {rank}, seq {seq}, delivered {_streams[rank].Delivered}");
            Deliver(rank, seq, message);
        }
    }

    /// <summary>
    /// What joins the durable history: SafeSends and SafeQueries, both of Paxos-grade durability
    /// (a SafeQuery's handlers may change state as a SafeSend's do, so a replay without it would
    /// differ from the live order).
    /// </summary>
    private bool Logged(MessageKind kind) =>
        kind == MessageKind.Safe || (kind == MessageKind.QuerySafe && (Options.Mutations & ProtocolMutations.SafeQueryNotLogged) == 0);

    /// <summary>Hands an application message to the application; our own query requests start the wait for replies.</summary>
    private void Deliver(int rank, long seq, StreamMessage message, bool atViewEnd = false)
    {
        if (message.Kind == MessageKind.KeyRotation)
        {
            OnKeyHeld(rank, message.Payload.Span); // the protocol's own, at its place in the total order
            return;
        }
        if (Current)
        {
            _node.Outbox.Delivered(Id, View!.Id, View.Members[rank], seq, message.Kind, message.Payload, atViewEnd);
        }
        else
        {
            // Held until this member holds the history and its state; the stream may recycle its payload meanwhile.
            var held = new MessageDelivered();
            held.Set(Id, View!.Id, View.Members[rank], seq, message.Kind, message.Payload.ToArray(), atViewEnd);
            _held.Add(held);
        }
        if (rank == MyRank) _ownSafe.Remove(seq);
        if (rank == MyRank && message.Kind.IsQuery()) _queries.OnRequestDelivered(MessageKinds.QueryIdOf(message.Payload.Span), View!, message.To);
    }

    /// <summary>
    /// The view ends (its flush committed): every survivor now holds the same messages and the same
    /// announcements, so the ordered messages still waiting are placed the same way everywhere:
    /// announced ones in announced order (skipping announcements whose message no survivor holds),
    /// then the rest by (sender rank, sequence number).
    /// </summary>
    private void DeliverUnorderedAtViewEnd()
    {
        foreach (var (rank, seq, message, accepted) in _order.DrainAtViewEnd())
        {
            // A SafeSend delivered here but not yet held in order (a position before it was lost
            // with every member that held it) joins the durable history now, in delivery order.
            if (Logged(message.Kind) && !accepted && HistoryCurrent) History?.Log(View!.Members[rank], View.Id, seq, message.Phi, message.Kind, message.Payload);
            Deliver(rank, seq, message, atViewEnd: true);
        }
    }

    /// <summary>
    /// After each input: the sequencer announces the positions it assigned during the step, in one
    /// message of its own stream (so announcements get FIFO, repair and the flush for free).
    /// </summary>
    public void EndOfStep()
    {
        AcknowledgeState();
        CompleteFlushes();
        if (State != MemberState.Active || _wedged || !_node.LeaseHeld) return;
        SendPending();
        if (MyRank == TotalOrder.SequencerRank && _order.AnnouncementLength > 0)
        {
            StreamMessage announcement = Control(MessageKind.OrderAnnouncement, _order.AnnouncementLength, out Span<byte> body);
            _order.TakeAnnouncement(body);
            SendNow(announcement);
        }
        // Acceptors acknowledge what they now hold, once per step.
        if (_order.TryTakeAcceptance(MyRank, out long acceptedThrough))
        {
            StreamMessage acceptance = Control(MessageKind.SafeAccept, 8, out Span<byte> body);
            System.Buffers.Binary.BinaryPrimitives.WriteInt64LittleEndian(body, acceptedThrough);
            SendNow(acceptance);
        }
    }

    // ---------------------------------------------------------------- timers

    public void Tick(long now)
    {
        if (State == MemberState.Joining && now >= _nextRequestAt) RequestJoin(now);
        if (State == MemberState.Leaving && now >= _nextRequestAt) SendLeaveRequest(now);
        if (_terminating && State == MemberState.Active && now >= _nextRequestAt) RequestTerminate(now);
        if (View == null || State == MemberState.Left) return;

        if (_replay != null && now >= _replay.NextAt) ContinueReplay(all: false);
        Coordinator?.Tick(now);
        History?.Tick(now);
        TickKeyRotation(now);
        if (_outgoingStates.Count > 0) TickStateTransfers(now);
        _queries.Tick(now);
        // While a Flush waits, ask the members that decide it for their digests each NAK interval.
        if (now >= _nextFlushPokeAt) PokeForFlush(now);
        if (_outgoingReplies.Count > 0 && now >= _nextReplyRetryAt)
        {
            _nextReplyRetryAt = now + Options.RetryInterval;
            foreach (var ((requester, _), packet) in _outgoingReplies) SendToMember(requester, packet); // over the tree of the view it is now
        }

        // A wedged member advertises nothing beyond its flush report: otherwise others could
        // garbage-collect messages that the coordinator, holding older reports, still needs.
        if (now >= _nextDigestAt && !_wedged)
        {
            _nextDigestAt = now + Options.DigestInterval;
            if (_digestDirty) SendDigest(now);
            else if (now - _lastDigestSentAt >= IdleDigestInterval) SendIdleDigest(now);
        }
        if (!_wedged && _tree != null && _tree.Tick(now))
        {
            _stabilityDirty = true;
            CollectStableMessages();
        }

        if (!_naksArmed) return;
        bool armed = false;
        for (int rank = 0; rank < _streams.Length; rank++)
        {
            SenderStream s = _streams[rank];
            if (rank == MyRank || s.NextNakAt == 0) continue;
            armed = true;
            if (now < s.NextNakAt) continue;
            if (!s.HasGap) { s.NextNakAt = 0; continue; }
            if (s.Contiguous > s.ContiguousAtLastNakCheck)
            {
                // The stream advanced since the last check: the gap is data still on its way (a
                // receiver behind on its socket), not a loss. Asking again would only add duplicates.
                s.ContiguousAtLastNakCheck = s.Contiguous;
                s.NextNakAt = now + Options.NakInterval;
                continue;
            }
            SendNak(rank, s);
            // No progress since the last NAK either: back off (up to 8 intervals) so a starved
            // receiver does not flood its peers with the same requests.
            s.NextNakAt = now + Options.NakInterval * Math.Min(8, 1 << Math.Min(3, s.NakRound / 2));
        }
        _naksArmed = armed;
    }

    /// <summary>
    /// The earliest time at which <see cref="Tick"/> may have something to do: a driver that ticks
    /// only then (and after every input) misses nothing. Never later than a timer that is due;
    /// earlier is harmless (the tick finds nothing to do).
    /// </summary>
    public long NextDeadline
    {
        get
        {
            long d = long.MaxValue;
            if (State is MemberState.Joining or MemberState.Leaving || (_terminating && State == MemberState.Active)) d = _nextRequestAt;
            if (View == null || State == MemberState.Left) return d;
            if (_replay != null) d = Math.Min(d, _replay.NextAt);
            if (Coordinator != null) d = Math.Min(d, Coordinator.NextDeadline);
            if (History != null) d = Math.Min(d, History.NextDeadline);
            d = Math.Min(d, KeyRotationDeadline);
            if (_outgoingStates.Count > 0) d = Math.Min(d, StateTransferDeadline());
            d = Math.Min(d, _queries.NextDeadline);
            if (PokesForFlush) d = Math.Min(d, _nextFlushPokeAt);
            if (_outgoingReplies.Count > 0) d = Math.Min(d, _nextReplyRetryAt);
            if (!_wedged) d = Math.Min(d, _digestDirty ? _nextDigestAt : Math.Max(_nextDigestAt, _lastDigestSentAt + IdleDigestInterval));
            if (!_wedged && _tree != null) d = Math.Min(d, _tree.NextDeadline);
            if ((Options.Mutations & ProtocolMutations.DeadlineOmitsNaks) != 0) return d;
            if (!_naksArmed) return d;
            for (int rank = 0; rank < _streams.Length; rank++)
            {
                long at = _streams[rank].NextNakAt;
                if (rank != MyRank && at != 0) d = Math.Min(d, at);
            }
            return d;
        }
    }

    // ---------------------------------------------------------------- disk durability: the history

    /// <summary>
    /// Hands an event to the application, or, while this member does not hold the group's history
    /// yet (disk durability) or its state (a joiner waiting for its checkpoint), holds it back in
    /// order (unless <paramref name="immediately"/>).
    /// </summary>
    internal void Publish(NodeEvent e, bool immediately = false)
    {
        if (immediately || Current) _node.Emit(e);
        else _held.Add(e);
    }

    /// <summary>A one-line dump of this member's streams, for replay diagnostics.</summary>
    public string Describe() =>
        $"{Self} {State} {View} rank {MyRank} wedged={_wedged} reported={_reportedAttempt} committed={_committedAttempt} {History?.Describe()}" +
        (_replay is { } replay ? $" replaying {replay.Next}/{replay.Entries.Count} ({_held.Count} held)" : "") + " streams " +
        string.Join(" ", _streams.Select((s, r) => $"r{r}:c{s.Contiguous}/d{s.Delivered}/s{s.Stable}/h{s.Held.Count}")) +
        (_tree != null ? " " + _tree.Describe() : "") +
        (_incomingState is { } st ? $" awaiting state of v{st.Cut} from {(st.Maker.IsNone ? "its maker" : st.Maker)} ({st.Received} chunks)" : "") +
        (_outgoingStates.Count > 0 ? " making state for " + string.Join(",", _outgoingStates.Values.Select(o => $"v{o.Cut}:{o.Count}{(o.Ended ? "/end" : "")}[{string.Join(" ", o.Receivers.Select(r => $"{r.Key}:{r.Value.Acked}/{r.Value.SentThrough}"))}]")) : "") +
        (_keyHolders.Count > 0 ? $" next key held by ranks {string.Join(",", _keyHolders.Keys.Order())}" : "") +
        (_moveToKey != null ? $" moving to key {Convert.ToHexString(_moveToKey)}" : "") + _node.Sealer.DescribeGroupKeys(Id) +
        " acks " + _acks.Describe();

    /// <summary>This process is going down: stop everything (no more deliveries).</summary>
    public void Wedge() => _wedged = true;
}
