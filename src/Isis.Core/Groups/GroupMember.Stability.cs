using Isis.Core.Common;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>Acknowledgement digests (to every member, or gossiped in a large group), stability and garbage collection, and NAK repair.</summary>
internal sealed partial class GroupMember
{
    private long[] _ownDigest = [];
    private long[] _digestScratch = [];

    // A large group (at least ProtocolOptions.GossipFromMembers members): digests go to a few random
    // members a round instead of to all (gossip), and stability comes from this tree instead of from
    // every member's digest. Null in a small group.
    private StabilityTree? _tree;
    private DeterministicRandom? _gossipRandom;
    private int[] _gossipTargets = [];
    private long[] _plausible = [];

    // What the other members hold, from their digests (replaced with each view; empty before the first).
    private AcknowledgementTable _acks = new(0, -1, null);

    // Set whenever a stream's NAK timer is armed, so ticks skip the scan over every sender otherwise.
    private bool _naksArmed;

    // Set whenever what stability depends on changes (a delivery, an acknowledgement row); a
    // collection pass is a fixpoint, so passes in between would change nothing and are skipped.
    private bool _stabilityDirty;
    private bool _digestDirty;
    private long _nextDigestAt;
    private long _lastDigestSentAt;
    private int _idleDigestsInARow; // repeats of an unchanged digest since it last changed: each waits twice as long

    private void OnDigest(int from, ref WireReader r, long now)
    {
        // Most digests repeat what their sender said before (idle digests): then there is nothing
        // to check (those values passed when first seen, and our streams only grow within a view),
        // nothing to raise, no tail loss to notice, and nothing to allocate.
        if (_acks.TrySkipUnchanged(from, ref r))
        {
            CollectStableMessages();
            return;
        }
        if (_digestScratch.Length != _streams.Length) _digestScratch = new long[_streams.Length];
        long[] vector = _digestScratch;
        r.LongsInto(vector);
        if (!r.Ok) { r.Fail(); return; }
        for (int i = 0; i < vector.Length; i++)
        {
            if (vector[i] < 0 || vector[i] > _streams[i].Contiguous + MaxAhead) { r.Fail(); return; }
        }
        _acks.Record(from, vector);
        _stabilityDirty = true;
        for (int i = 0; i < vector.Length; i++)
        {
            SenderStream s = _streams[i];
            if (vector[i] > s.KnownMax)
            {
                // Someone holds messages we have never seen: a tail loss. NAK after a short delay.
                s.KnownMax = vector[i];
                if (s.NextNakAt == 0)
                {
                    s.NextNakAt = now + Options.NakInterval;
                    s.ContiguousAtLastNakCheck = s.Contiguous;
                    _naksArmed = true;
                }
            }
        }
        CollectStableMessages();
    }

    /// <summary>
    /// Garbage-collects, per sender, what every member of the view holds (and we delivered): the
    /// prefix up to the least of our own holdings and every other member's acknowledgement (in a
    /// large group, the stable prefix the <see cref="StabilityTree"/> brought down).
    /// </summary>
    /// <remarks>
    /// Called on every digest, so it must not cost members x members: it runs only when a delivery
    /// or an acknowledgement changed since the last pass, reads the per-sender minimum the
    /// <see cref="AcknowledgementTable"/> keeps (recomputing only the columns whose minimum moved),
    /// and skips a stream holding no delivered message above stability.
    /// </remarks>
    private void CollectStableMessages()
    {
        if (!_stabilityDirty) return;
        _stabilityDirty = false;
        long[] stable = _tree?.Stable ?? _acks.MinimumOfOthers();
        for (int r = 0; r < _streams.Length; r++)
        {
            SenderStream s = _streams[r];
            if (s.Stable >= s.Delivered) continue; // CollectGarbage could free nothing
            s.CollectGarbage(Math.Min(s.Contiguous, stable[r]), _node.Outbox);
        }
        TrimSentLog();
    }

    private void OnNak(int from, ref WireReader r)
    {
        int origin = r.I32();
        long first = r.I64();
        long last = r.I64();
        if (!r.Ok || origin < 0 || origin >= _streams.Length || first <= 0 || last < first) { r.Fail(); return; }
        SenderStream s = _streams[origin];
        // Only what we can hold is worth looking up; this also keeps the loop bound far from overflow.
        last = Math.Min(last, Math.Max(s.Contiguous, s.KnownMax));
        if (first > last) return;
        last = Math.Min(last, first + Options.MaxNakRange - 1);
        for (long seq = first; seq <= last; seq++)
        {
            if (s.Held.TryGetValue(seq, out StreamMessage message))
            {
                _node.SendTo(View!.Members[from].Endpoint, DataPacket(origin, seq, message));
            }
        }
    }


    /// <summary>
    /// An unchanged digest is sent again only to repair a lost one, and every member sends one to
    /// every other: the period is stretched with the group's size (one period per 8 members) and
    /// doubles with each repeat, up to 32 periods, so a quiet group goes nearly silent (a group of
    /// 100 idle members: each receives about 3 digests a second, not 80) while a lost digest is
    /// still repaired within one period, two, four, and so on. Any change starts over at one. A
    /// large group's gossip goes to a few members a round whatever the group's size: not stretched.
    /// </summary>
    private long IdleDigestInterval =>
        (Options.IdleDigestInterval * (_tree != null ? 1 : Math.Max(1, (View?.Members.Length ?? 0) / 8))) << Math.Min(_idleDigestsInARow, MaxIdleDigestDoublings);

    private const int MaxIdleDigestDoublings = 5;

    private void SendIdleDigest(long now)
    {
        int repeats = _idleDigestsInARow;
        SendDigest(now);
        _idleDigestsInARow = repeats + 1;
    }

    /// <param name="now">The current time.</param>
    /// <param name="askForReplies">A Flush is waiting: every member answers at once with its own digest
    /// (instead of at its next digest round), so Flush costs a round trip, not a digest period.</param>
    /// <param name="only">Send to this member only (an answer to such a request).</param>
    private void SendDigest(long now, bool askForReplies = false, NodeId? only = null)
    {
        _digestDirty = false;
        _lastDigestSentAt = now;
        _idleDigestsInARow = 0;
        // Our own row is rewritten in place: a digest per step must not cost an allocation.
        if (_ownDigest.Length != _streams.Length) _ownDigest = new long[_streams.Length];
        long[] vector = _ownDigest;
        for (int i = 0; i < vector.Length; i++) vector[i] = _streams[i].Contiguous;
        _acks.SetOwn(vector);
        ReadOnlyMemory<byte> packet = _node.Writer.Begin(new PacketHeader(PacketKind.Digest, Self, Id, View!.Id, askForReplies ? 1 : 0)).Longs(vector).Finish(_node.Outbox);
        if (_tree != null && only == null && !askForReplies)
        {
            // Gossip: a round's digest goes to a few members chosen at random.
            foreach (int target in ChooseGossipTargets()) _node.SendTo(View.Members[target].Endpoint, packet);
        }
        else
        {
            foreach (NodeId member in View.Members)
            {
                if (member != Self && (only == null || member == only)) _node.SendTo(member.Endpoint, packet);
            }
        }
        CollectStableMessages();
    }

    /// <summary>
    /// <see cref="ProtocolOptions.GossipFanout"/> distinct ranks other than ours, drawn uniformly
    /// (all of them when the view has no more): over a few rounds every member hears from many,
    /// so a member that lacks a message learns of it and pulls it (bimodal multicast's gossip).
    /// </summary>
    private ReadOnlySpan<int> ChooseGossipTargets()
    {
        // Relaying, gossip stays between tree neighbours, as the data does.
        bool relaying = Relaying;
        ReadOnlySpan<int> neighbours = relaying ? _tree!.Neighbours : default;
        int others = relaying ? neighbours.Length : View!.Members.Length - 1;
        int k = Math.Min(Math.Max(1, Options.GossipFanout), others);
        if (_gossipTargets.Length < k) _gossipTargets = new int[k];
        // Seeded by this incarnation and group, as the membership replicas seed their elections.
        _gossipRandom ??= new DeterministicRandom(Self.Endpoint * 1_000_003UL ^ Self.Incarnation ^ Id.Value);
        int chosen = 0;
        while (chosen < k)
        {
            // Draw among the others (skipping our own rank) until k distinct ones: k is far below the
            // group's size here, so repeats are rare.
            int rank = _gossipRandom.Next(others);
            if (relaying) rank = neighbours[rank];
            else if (rank >= MyRank) rank++;
            if (Array.IndexOf(_gossipTargets, rank, 0, chosen) < 0) _gossipTargets[chosen++] = rank;
        }
        return _gossipTargets.AsSpan(0, k);
    }

    /// <summary>Per sender rank, the longest prefix this member holds.</summary>
    internal void OwnHoldings(Span<long> into)
    {
        for (int i = 0; i < into.Length; i++) into[i] = _streams[i].Contiguous;
    }

    /// <summary>Our holdings grew: the next digest round has news, and so has the stability tree.</summary>
    private void HoldingsChanged()
    {
        _digestDirty = true;
        _tree?.HoldingsChanged();
    }

    /// <summary>A stability tree packet: a child's report or the parent's stable vector.</summary>
    private void OnTreePacket(in PacketHeader h, int from, ref WireReader r)
    {
        if (_tree == null)
        {
            // Only a member of a large group sends these; one that counts the view differently
            // (other options) gets its packets counted here, not taken as hostile.
            _node.Counters.DroppedNotForMe++;
            return;
        }
        if (h.Kind == PacketKind.StabilityReport)
        {
            if (!_tree.OnReport(from, h.Number, ref r, PlausibleHoldings())) r.Fail();
            return;
        }
        if (!_tree.OnUpdate(from, h.Number, ref r, out bool stable)) { r.Fail(); return; }
        if (stable)
        {
            _stabilityDirty = true;
            CollectStableMessages();
        }
    }

    /// <summary>Per sender rank, the highest sequence number any member may plausibly hold (flow control keeps senders far closer).</summary>
    private ReadOnlySpan<long> PlausibleHoldings()
    {
        if (_plausible.Length != _streams.Length) _plausible = new long[_streams.Length];
        for (int i = 0; i < _streams.Length; i++) _plausible[i] = _streams[i].Contiguous + MaxAhead;
        return _plausible;
    }

    /// <summary>
    /// Asks for a missing range: alternately from the original sender and from the member whose
    /// digest says it holds the most of that stream, so a slow or dying sender does not stall repair.
    /// Relaying along the tree, from neighbours only: the next hop towards the sender, and the
    /// neighbour known to hold the most.
    /// </summary>
    private void SendNak(int rank, SenderStream s)
    {
        int target = rank;
        if (Relaying)
        {
            // Alternately from the next hop towards the sender and from the neighbour known to hold the most.
            target = _tree!.NextHopTowards(rank);
            if (s.NakRound++ % 2 == 1) target = _acks.MostHoldingAmong(rank, target, _tree.Neighbours);
        }
        else if (s.NakRound++ % 2 == 1)
        {
            target = _acks.MostHolding(rank);
        }
        long first = s.Contiguous + 1;
        long last = Math.Min(s.KnownMax, s.Contiguous + Options.MaxNakRange);
        _node.Counters.NaksSent++;
        _node.SendTo(View!.Members[target].Endpoint,
            _node.Writer.Begin(new PacketHeader(PacketKind.Nak, Self, Id, View.Id, 0)).I32(rank).I64(first).I64(last).Finish());
    }
}
