using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>
/// State transfer (DESIGN.md section 3, Isis2's checkpoints): a process that joins a group that has
/// members receives the checkpoint one of them makes at the join's cut, loads it, and only then sees
/// the view and its messages.
/// </summary>
/// <remarks>
/// Rules:
/// <list type="bullet">
/// <item>The cut of view c lies between the last delivery of view c - 1 and the first of c. The
/// members that hold the group's state are those that were in c - 1 and were not themselves still
/// waiting for a checkpoint: each survivor says so in its flush report, and the coordinator's commit
/// tells every survivor who still waits and from whom, so all survivors agree on it. The oldest
/// holder makes the checkpoint; the application is asked by <see cref="StateRequested"/>, published
/// in its delivery order right after the view, so its state then is the state at the cut.</item>
/// <item>One checkpoint serves every member that needs one at that cut: c's joiners (joins batched
/// into one view share a transfer) and the survivors whose transfer cannot finish (its maker left, or
/// had not sent a chunk yet). Those restart at the new cut: what they received and held is dropped,
/// and the application sees the later view as their first.</item>
/// <item>If no holder is left, the group's state is gone: the oldest survivor starts from nothing
/// (<see cref="StateReset"/>) and makes the checkpoint for the others from there.</item>
/// <item>A joiner does not know who holds the state; it takes the maker from the first chunk (a
/// member of its view, at the cut it waits for).</item>
/// <item>Chunks are numbered. The maker sends each receiver up to <see cref="ProtocolOptions.StateWindowBytes"/>
/// beyond what it acknowledged, goes back to the first unacknowledged chunk when acknowledgements stall
/// (go-back-N), and releases chunks every receiver holds: a checkpoint of any size costs it a window.</item>
/// <item>A member waiting for its checkpoint holds back everything of the group for the application
/// (views, deliveries, its own sends) until the last chunk arrives, but takes part in the protocol
/// meanwhile: it holds and acknowledges messages, flushes, and accepts SafeSends, so the group never
/// waits for a transfer.</item>
/// <item>A transfer is point to point and named by its cut, so it goes on across later view changes.</item>
/// <item>Groups with disk durability take their state from the SafeSend history instead (its replay),
/// so they do not transfer checkpoints.</item>
/// </list>
/// </remarks>
internal sealed partial class GroupMember
{
    // Maker: the checkpoints this member streams, by cut.
    private readonly Dictionary<int, OutgoingState> _outgoingStates = new();

    // Waiting: the checkpoint this member waits for; null once loaded (or when none was needed).
    private IncomingState? _incomingState;

    // The last checkpoint this member loaded: a repeated chunk of it (our acknowledgement was lost) is acknowledged again.
    private (int Cut, NodeId Maker, long Chunks) _loadedState = (-1, default, 0);

    // From the last flush's commit: the survivors still waiting for a checkpoint, each with its maker (None: unknown yet).
    private Dictionary<NodeId, NodeId> _waitingAtCut = new();

    /// <summary>This member has the state of the view it joined (always true for a member that needed none).</summary>
    private bool StateLoaded => _incomingState == null || (Options.Mutations & ProtocolMutations.JoinerSkipsState) != 0;

    /// <summary>The application sees this member's deliveries and views: it holds the history (disk durability) and its state.</summary>
    private bool Current => HistoryCurrent && StateLoaded && (_replay == null || LiveBeforeReplayEnds);

    /// <summary>Checkpoint bytes this member, as a maker, holds and has not seen acknowledged by every receiver: the driver waits while it is above the window.</summary>
    public long StateBacklogBytes
    {
        get
        {
            long bytes = 0;
            foreach (OutgoingState s in _outgoingStates.Values) bytes += s.BufferedBytes;
            return bytes;
        }
    }

    /// <summary>True while this member waits for its checkpoint (for tests and diagnostics).</summary>
    public bool AwaitingState => _incomingState != null;

    /// <summary>What this member's flush report says of its state: whether it still waits for a checkpoint, and from whom.</summary>
    private void WriteStateStatus(PacketWriter w)
    {
        if (_incomingState is { } incoming) w.U8(1).Node(incoming.Maker);
        else w.U8(0);
    }

    /// <summary>Reads a flush report's state status (see <see cref="WriteStateStatus"/>): null if the reporter holds the state.</summary>
    internal static NodeId? ReadStateStatus(ref WireReader r)
    {
        byte waiting = r.U8();
        if (waiting > 1) r.Fail();
        return waiting == 1 ? r.Node() : null;
    }

    /// <summary>
    /// At each install, before the view is published: decides which members of the view need a
    /// checkpoint at its cut and who makes it (every survivor decides the same, from the view and the
    /// flush's commit), restarts or resets this member's own wait, and drops receivers that left or
    /// restarted from the transfers it makes. Returns the members this member must make a checkpoint for.
    /// </summary>
    private NodeId[] OnViewForStateTransfer(GroupView view, bool firstView)
    {
        Dictionary<NodeId, NodeId> waiting = _waitingAtCut;
        _waitingAtCut = new Dictionary<NodeId, NodeId>();
        if (History != null) return [];
        if (firstView)
        {
            // A joiner of a group with survivors waits for a checkpoint from whichever of them holds the state.
            if (view.Members.Length > view.Joiners.Length)
            {
                if (Array.IndexOf(view.Joiners, Self) >= 0) _incomingState = new IncomingState(view.Id, NodeId.None);
                return [];
            }
            // The group forms (every member is new): its oldest member founds the state - from its
            // persistent checkpoint if it kept one - and the others load theirs from it, so every
            // member starts from the same state even when each kept a checkpoint of its own.
            if (view.Members[0] != Self)
            {
                _incomingState = new IncomingState(view.Id, view.Members[0]);
                return [];
            }
            _node.Emit(new StateReset(Id, view.Id, StateOrigin.Founded));
            return [.. view.Members.Skip(1)];
        }

        // Survivors still waiting restart at this cut if their transfer cannot finish: its maker left,
        // waits itself, or has not announced itself yet (it may never: only the commit is certain).
        var restart = new List<NodeId>();
        NodeId maker = NodeId.None, oldestSurvivor = NodeId.None;
        foreach (NodeId m in view.Members)
        {
            if (Array.IndexOf(view.Joiners, m) >= 0) continue;
            if (oldestSurvivor.IsNone) oldestSurvivor = m;
            if (!waiting.TryGetValue(m, out NodeId from))
            {
                if (maker.IsNone) maker = m;
                continue;
            }
            if (from.IsNone || !view.Contains(from) || waiting.ContainsKey(from)) restart.Add(m);
        }
        bool reset = maker.IsNone && !oldestSurvivor.IsNone;
        if (reset)
        {
            maker = oldestSurvivor; // no holder is left: the oldest survivor starts from nothing
            restart.Remove(maker);
        }

        foreach (var (cut, s) in _outgoingStates.ToList())
        {
            foreach (NodeId j in s.Receivers.Keys.ToList())
            {
                if (!view.Contains(j) || restart.Contains(j)) s.Receivers.Remove(j);
            }
            if (s.Receivers.Count == 0) _outgoingStates.Remove(cut);
            else s.ReleaseAcknowledged(); // what only the departed lacked is no longer needed
        }

        if (_incomingState != null && (restart.Contains(Self) || (reset && maker == Self)))
        {
            // What arrived and the views and messages that waited belong to a cut this member will never
            // load. Queries among them still wait for our reply: a null one, as from a handler that does
            // not reply. Completions of our own flushes and queries stay: the application waits for them.
            foreach (NodeEvent e in _held)
            {
                if (e is MessageDelivered { Kind: var kind } d && kind.IsQuery() && d.Sender != Self) Reply(d.Sender, MessageKinds.QueryIdOf(d.Payload.Span), ReplyKind.Null, []);
            }
            _held.RemoveAll(e => e is ViewInstalled or MessageDelivered or StateRequested);
            _node.Emit(new StateTransferAborted(Id, _incomingState.Cut, reset
                ? $"every member that held the group's state left before it arrived; the group starts again from an empty state at view {view.Id}"
                : $"the member making it left or never started; a checkpoint made at view {view.Id} replaces it"));
            if (reset && maker == Self)
            {
                _incomingState = null;
                _node.Emit(new StateReset(Id, view.Id, StateOrigin.HoldersLost));
                foreach (NodeEvent e in _held) _node.Emit(e); // what stayed (our own completions) goes out now, before the view
                _held.Clear();
            }
            else
            {
                _incomingState = new IncomingState(view.Id, maker);
            }
        }
        else if (_incomingState is { Complete: true } complete)
        {
            LoadState(complete, resume: false); // it arrived during the flush, and the commit did not restart us
        }
        if (maker != Self) return [];
        return [.. view.Joiners.Where(j => j != Self), .. restart];
    }

    /// <summary>After the view is published: this member makes the checkpoint at the view's cut; the application is asked at this point of its order.</summary>
    private void StartMakingState(GroupView view, NodeId[] receivers, long now)
    {
        var transfer = new OutgoingState(view.Id, receivers);
        foreach (OutgoingState.Receiver r in transfer.Receivers.Values) r.LastProgressAt = now;
        _outgoingStates[view.Id] = transfer;
        Publish(new StateRequested(Id, view.Id, receivers));
    }

    /// <summary>The application's next chunk of the checkpoint for cut <paramref name="cut"/> (kept, not copied); ignored once that transfer is over (its joiners left).</summary>
    public void AddStateChunk(int cut, byte[] chunk, bool last, long now)
    {
        if (!_outgoingStates.TryGetValue(cut, out OutgoingState? s) || s.Ended) return;
        s.Add(chunk, last);
        foreach (var (joiner, r) in s.Receivers) PumpState(s, joiner, r, now);
    }

    /// <summary>Sends a joiner the chunks its window allows (at least one when nothing is outstanding).</summary>
    private void PumpState(OutgoingState s, NodeId joiner, OutgoingState.Receiver r, long now)
    {
        while (r.SentThrough < s.Count && (r.SentThrough == r.Acked || s.EndOf(r.SentThrough) - s.EndOf(r.Acked) < Options.StateWindowBytes))
        {
            if (r.SentThrough == r.Acked) r.LastProgressAt = now;
            long number = ++r.SentThrough;
            bool last = s.Ended && number == s.Count;
            // Relaying, over the tree: otherwise the maker (the oldest member) would connect to every joiner.
            SendToMember(joiner, _node.Writer.Begin(new PacketHeader(PacketKind.StateChunk, Self, Id, s.Cut, number))
                .U8(last ? (byte)1 : (byte)0).Tail(s.Chunk(number)).Finish(_node.Outbox));
        }
    }

    /// <summary>State transfer packets: matched by their cut, not by the current view (a transfer outlives view changes).</summary>
    private void OnStatePacket(in PacketHeader h, ReadOnlySpan<byte> body, long now)
    {
        var r = new WireReader(body);
        if (h.Kind == PacketKind.StateAck)
        {
            if (!r.Complete) { _node.Counters.DroppedMalformed++; return; }
            if (!_outgoingStates.TryGetValue(h.View, out OutgoingState? s) || !s.Receivers.TryGetValue(h.Sender, out OutgoingState.Receiver? receiver))
            {
                _node.Counters.DroppedNotForMe++; // a late acknowledgement of a transfer that ended
                return;
            }
            if (h.Number < receiver.Acked || h.Number > receiver.SentThrough) { _node.Counters.DroppedMalformed++; return; }
            if (h.Number > receiver.Acked)
            {
                receiver.Acked = h.Number;
                receiver.LastProgressAt = now;
            }
            if (s.Ended && receiver.Acked == s.Count) s.Receivers.Remove(h.Sender); // this joiner has it all
            s.ReleaseAcknowledged();
            if (s.Receivers.Count == 0 && s.Ended) _outgoingStates.Remove(h.View);
            else PumpState(s, h.Sender, receiver, now);
            return;
        }

        // A chunk.
        byte flags = r.U8();
        ReadOnlySpan<byte> chunk = r.TailSpan();
        if (!r.Ok || flags > 1 || h.Number < 1) { _node.Counters.DroppedMalformed++; return; }
        if (_incomingState is { Complete: true } done && done.Cut == h.View && done.Maker == h.Sender)
        {
            SendStateAck(h.Sender, h.View, done.Received); // a repeat while the load waits for the install
            return;
        }
        if (_incomingState is not { Complete: false } incoming || incoming.Cut != h.View || (incoming.Maker.IsNone ? View?.Contains(h.Sender) != true : incoming.Maker != h.Sender))
        {
            if (_loadedState.Cut == h.View && _loadedState.Maker == h.Sender)
            {
                SendStateAck(h.Sender, h.View, _loadedState.Chunks); // a repeat: our last acknowledgement was lost
                return;
            }
            _node.Counters.DroppedNotForMe++; // not a transfer we wait for (yet, or any more)
            return;
        }
        incoming.Maker = h.Sender;
        incoming.AckDue = true;
        if (h.Number != incoming.Received + 1)
        {
            _node.Counters.Duplicates++; // a repeat, or past a lost chunk: go-back-N resends from the gap
            return;
        }
        incoming.Received = h.Number;
        _node.Emit(new StateChunkReceived(Id, incoming.Cut, chunk.ToArray()));
        if (flags == 1) OnStateComplete(incoming);
    }

    /// <summary>The lease is back: a checkpoint that completed without it loads now (unless a flush is on: the install decides then).</summary>
    private void LoadStateOnLeaseRenewed()
    {
        if (_incomingState is { Complete: true } complete && !_wedged) LoadState(complete, resume: false);
    }

    /// <summary>
    /// The last chunk arrived. During a flush this member may already have reported that it waits,
    /// and the commit built on that report decides at the next install whether it restarts: it then
    /// loads only if not restarted. Otherwise the application loads the checkpoint now, then gets
    /// what waited (the view it joined first).
    /// </summary>
    private void OnStateComplete(IncomingState incoming)
    {
        SendStateAck(incoming.Maker, incoming.Cut, incoming.Received);
        // Without the lease the service may have expelled us: what waited must not reach the
        // application then. An expelled incarnation never gets the lease back, so never loads.
        if (_wedged || !_node.LeaseHeld)
        {
            incoming.Complete = true;
            return;
        }
        LoadState(incoming);
    }

    /// <param name="incoming">The transfer that completed.</param>
    /// <param name="resume">Deliver and send what the wait held up (false while a view is being installed: the install does it after publishing the view).</param>
    private void LoadState(IncomingState incoming, bool resume = true)
    {
        _incomingState = null;
        _loadedState = (incoming.Cut, incoming.Maker, incoming.Received);
        _node.Emit(new StateReceived(Id, incoming.Cut, incoming.Received));
        if (!Current) return; // disk durability has its own wait (never both today: see the remarks)
        foreach (NodeEvent e in _held) _node.Emit(e);
        _held.Clear();
        if (!resume || State == MemberState.Left || View == null) return;
        for (int rank = 0; rank < _streams.Length; rank++) DeliverReady(rank);
        DeliverOrdered();
        SendPending();
    }

    private void SendStateAck(NodeId maker, int cut, long chunks) =>
        SendToMember(maker, _node.Writer.Begin(new PacketHeader(PacketKind.StateAck, Self, Id, cut, chunks)).Finish(_node.Outbox));

    /// <summary>Once per step: the joiner acknowledges the chunks it received in order.</summary>
    private void AcknowledgeState()
    {
        if (_incomingState is not { AckDue: true } incoming) return;
        incoming.AckDue = false;
        SendStateAck(incoming.Maker, incoming.Cut, incoming.Received);
    }

    /// <summary>Timers: a joiner whose acknowledgements stalled gets its window again from the first unacknowledged chunk.</summary>
    private void TickStateTransfers(long now)
    {
        foreach (OutgoingState s in _outgoingStates.Values)
        {
            foreach (var (joiner, r) in s.Receivers)
            {
                if (r.Acked >= r.SentThrough || now < r.LastProgressAt + Options.RetryInterval) continue;
                r.SentThrough = r.Acked;
                PumpState(s, joiner, r, now);
            }
        }
    }

    private long StateTransferDeadline()
    {
        long d = long.MaxValue;
        foreach (OutgoingState s in _outgoingStates.Values)
        {
            foreach (OutgoingState.Receiver r in s.Receivers.Values)
            {
                if (r.Acked < r.SentThrough) d = Math.Min(d, r.LastProgressAt + Options.RetryInterval);
            }
        }
        return d;
    }
}
