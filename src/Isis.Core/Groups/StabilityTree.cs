using Isis.Core.Common;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Groups;

/// <summary>
/// Stability in a large group: what every member holds, aggregated up a tree of the view, and the
/// group-wide stable prefix sent back down it. Each member talks to its parent and its children
/// only, so its cost per round stays the same however large the group grows.
/// </summary>
/// <remarks>
/// <para>
/// A message may be garbage-collected once every member of the view holds it (it is stable): the
/// flush of the next view change can then no longer need it. In a small group every member tells
/// every other what it holds (the digests of <c>GroupMember.Stability.cs</c>), which costs each
/// member N - 1 packets a round. Here instead (the large-group acknowledgement scheme of Isis2):
/// </para>
/// <list type="number">
/// <item>The view's ranks form a tree of fan-out k: rank i's parent is (i - 1) / k, its children
/// k·i + 1 ... k·i + k. Rank 0, the oldest member, is the root.</item>
/// <item><b>Up.</b> A member's aggregate is, per sender, the least prefix held anywhere in its
/// subtree: the minimum of its own holdings and the latest aggregate of each child. A child not
/// heard from yet counts as holding nothing (skipping it would make stable what it may lack).
/// Holdings only grow within a view, so a child's aggregates only grow too, and the latest
/// (largest) is kept whatever order they arrive in. A member reports its aggregate to its parent
/// when it changed, at most once a digest period.</item>
/// <item><b>Down.</b> The root's aggregate is what every member holds: the stable vector. The root
/// numbers each new one (its version) and sends it to its children, who apply it (a newer version
/// only) and forward it at once. A stable vector never exceeds what the receiving member reported,
/// so one that does is malformed.</item>
/// <item><b>Loss.</b> A report carries the version its sender holds; a parent that holds a newer
/// one answers with it, which repairs a lost update. A member whose aggregate is not yet known
/// stable repeats its report at the idle digest period, doubling with each repeat (so a member
/// waiting on a slow subtree elsewhere costs little), which repairs a lost report.</item>
/// </list>
/// <para>
/// A member that a flush wedged sends nothing (as it sends no digests): the coordinator's reports
/// must not be overtaken by newer acknowledgements. A crashed member stops its subtree's reports, so
/// stability waits for the view change that removes it, as it waits for a crashed member's digests
/// in a small group.
/// </para>
/// </remarks>
internal sealed class StabilityTree
{
    private const int MaxIdleDoublings = 5;

    private readonly ProcessNode _node;
    private readonly GroupMember _member;
    private readonly GroupView _view;
    private readonly Identity.GroupId _group;
    private readonly int _rank;
    private readonly int _firstChild;
    private readonly int[] _neighbours;
    private readonly long[]?[] _children; // per child: its latest aggregate; null until its first report
    private readonly long[] _aggregate;
    private readonly long[] _reported;
    private readonly long[] _scratch; // a received vector, before it is checked
    private readonly long[] _own;     // this member's own holdings, to check a stable vector against (never the aggregate: a repeated report sends that)
    private readonly bool _ignoreChildren;
    private bool _reportedOnce;
    private bool _dirty = true;
    private long _lastRoundAt;
    private long _lastReportAt;
    private int _idleRepeats;
    private bool _awaitingStability;

    /// <param name="node">The process.</param>
    /// <param name="member">The group member whose holdings this tree aggregates.</param>
    /// <param name="view">The view the tree is made of.</param>
    /// <param name="rank">This member's rank in it.</param>
    /// <param name="fanout">Children per member (at least 2).</param>
    /// <param name="now">The time of the view's install.</param>
    public StabilityTree(ProcessNode node, GroupMember member, GroupView view, int rank, int fanout, long now)
    {
        _node = node;
        _group = member.Id;
        _member = member;
        _view = view;
        _rank = rank;
        int n = view.Members.Length;
        Fanout = Math.Max(2, fanout);
        _firstChild = (int)Math.Min(n, (long)Fanout * rank + 1);
        _children = new long[Math.Min(Fanout, n - _firstChild)][];
        _aggregate = new long[n];
        _reported = new long[n];
        _scratch = new long[n];
        _own = new long[n];
        Stable = new long[n];
        var neighbours = new List<int>(_children.Length + 1);
        if (rank > 0) neighbours.Add((rank - 1) / Fanout);
        for (int c = 0; c < _children.Length; c++) neighbours.Add(_firstChild + c);
        _neighbours = [.. neighbours];
        _lastRoundAt = now - node.Options.DigestInterval;
        _ignoreChildren = (node.Options.Mutations & ProtocolMutations.StabilityIgnoresSubtree) != 0;
    }

    /// <summary>Children per member.</summary>
    public int Fanout { get; }

    /// <summary>This member's neighbours in the tree, by rank: its parent (unless it is the root), then its children.</summary>
    public ReadOnlySpan<int> Neighbours => _neighbours;

    /// <summary>
    /// The neighbour on the tree's path from this member to <paramref name="rank"/>: the child whose
    /// subtree holds it, or else the parent; -1 for this member's own rank.
    /// </summary>
    public int NextHopTowards(int rank)
    {
        if (rank == _rank) return -1;
        // Descendants have larger ranks: climb from the rank until the next step up would be us.
        for (int x = rank; x > _rank; x = (x - 1) / Fanout)
        {
            if ((x - 1) / Fanout == _rank) return x;
        }
        return Parent;
    }

    /// <summary>
    /// The path between two positions of a tree of fan-out <paramref name="fanout"/> laid out as this
    /// one is (position i's parent is (i - 1) / fanout): up from <paramref name="from"/> to the lowest
    /// common ancestor, then down to <paramref name="to"/>, both ends included.
    /// </summary>
    public static int[] Path(int from, int to, int fanout)
    {
        var up = new List<int> { from };
        var down = new List<int> { to };
        // A position's ancestors all have smaller positions, so the larger of the two is never an
        // ancestor of the other: it climbs until they meet.
        for (int a = from, b = to; a != b;)
        {
            if (a > b) up.Add(a = (a - 1) / fanout);
            else down.Add(b = (b - 1) / fanout);
        }
        for (int i = down.Count - 2; i >= 0; i--) up.Add(down[i]);
        return [.. up];
    }

    /// <summary>Per sender rank, the prefix every member of the view is known to hold.</summary>
    public long[] Stable { get; }

    /// <summary>The root's number for <see cref="Stable"/>: it grows with every new stable vector.</summary>
    public long Version { get; private set; }

    private bool IsRoot => _rank == 0;

    private int Parent => (_rank - 1) / Fanout;

    /// <summary>This member's holdings grew: its aggregate may have changed.</summary>
    public void HoldingsChanged() => _dirty = true;

    /// <summary>
    /// The earliest time <see cref="Tick"/> has something to do: the next round while the aggregate
    /// may have changed, and the next repeat while it is not yet known stable.
    /// </summary>
    public long NextDeadline
    {
        get
        {
            long d = _dirty ? _lastRoundAt + _node.Options.DigestInterval : long.MaxValue;
            if (_awaitingStability) d = Math.Min(d, _lastReportAt + IdleInterval);
            return d;
        }
    }

    private long IdleInterval => _node.Options.IdleDigestInterval << Math.Min(_idleRepeats, MaxIdleDoublings);

    /// <summary>Runs a round if one is due. The caller skips this while a flush wedges the member.</summary>
    /// <returns>True if <see cref="Stable"/> grew (at the root).</returns>
    public bool Tick(long now)
    {
        bool grew = _dirty && now >= _lastRoundAt + _node.Options.DigestInterval && Round(now);
        // A round that found nothing new leaves the repeat timer as it was: it may be due as well.
        if (_awaitingStability && now >= _lastReportAt + IdleInterval)
        {
            _idleRepeats++;
            Report(now);
        }
        return grew;
    }

    private bool Round(long now)
    {
        _dirty = false;
        _lastRoundAt = now;
        ComputeAggregate();
        if (IsRoot)
        {
            bool grew = false;
            for (int i = 0; i < _aggregate.Length; i++)
            {
                if (_aggregate[i] > Stable[i]) { Stable[i] = _aggregate[i]; grew = true; }
            }
            if (!grew) return false;
            _member.OwnHoldings(_own);
            for (int i = 0; i < _own.Length; i++)
            {
                Invariant.Check(Stable[i] <= _own[i], $"what is stable is held by the root too: rank {i}, stable {Stable[i]}, held {_own[i]}");
            }
            Version++;
            for (int c = 0; c < _children.Length; c++) SendUpdate(_firstChild + c);
            return true;
        }
        bool changed = !_reportedOnce || !_aggregate.AsSpan().SequenceEqual(_reported);
        if (changed)
        {
            _idleRepeats = 0;
            Report(now);
        }
        else
        {
            _awaitingStability = !_aggregate.AsSpan().SequenceEqual(Stable);
        }
        return false;
    }

    /// <summary>Per sender, the least prefix held in this member's subtree (children not heard from count as nothing).</summary>
    private void ComputeAggregate()
    {
        _member.OwnHoldings(_aggregate);
        if (_ignoreChildren) return; // deliberate bug: the subtree below is left out
        foreach (long[]? child in _children)
        {
            if (child == null)
            {
                Array.Clear(_aggregate);
                return;
            }
            for (int i = 0; i < _aggregate.Length; i++)
            {
                if (child[i] < _aggregate[i]) _aggregate[i] = child[i];
            }
        }
    }

    private void Report(long now)
    {
        _aggregate.CopyTo(_reported, 0);
        _reportedOnce = true;
        _lastReportAt = now;
        _awaitingStability = !_reported.AsSpan().SequenceEqual(Stable);
        ReadOnlyMemory<byte> packet = _node.Writer.Begin(new PacketHeader(PacketKind.StabilityReport, _node.Self, _group, _view.Id, Version))
            .Longs(_reported).Finish(_node.Outbox);
        _node.SendTo(_view.Members[Parent].Endpoint, packet);
    }

    private void SendUpdate(int childRank)
    {
        ReadOnlyMemory<byte> packet = _node.Writer.Begin(new PacketHeader(PacketKind.StabilityUpdate, _node.Self, _group, _view.Id, Version))
            .Longs(Stable).Finish(_node.Outbox);
        _node.SendTo(_view.Members[childRank].Endpoint, packet);
    }

    /// <summary>A child's report. False if the packet is malformed or not from a child of this member.</summary>
    /// <param name="from">The sender's rank.</param>
    /// <param name="knownVersion">The stable vector's version the child holds.</param>
    /// <param name="r">The body: the child's aggregate.</param>
    /// <param name="plausible">Per sender rank, the highest sequence number a member may plausibly hold.</param>
    public bool OnReport(int from, long knownVersion, ref WireReader r, ReadOnlySpan<long> plausible)
    {
        int c = from - _firstChild;
        if (c < 0 || c >= _children.Length) return false;
        long[] values = _scratch;
        r.LongsInto(values);
        if (!r.Ok || !r.Complete) return false;
        for (int i = 0; i < values.Length; i++)
        {
            if (values[i] < 0 || values[i] > plausible[i]) return false;
        }
        // A first report (even of zeros) or a larger one may change our aggregate; a repeat cannot.
        if (_children[c] == null) _dirty = true;
        long[] row = _children[c] ??= new long[values.Length];
        for (int i = 0; i < values.Length; i++)
        {
            if (values[i] > row[i]) { row[i] = values[i]; _dirty = true; }
        }
        // The child has not heard of the latest stable vector: its update was lost (or is on its way).
        if (knownVersion < Version) SendUpdate(from);
        return true;
    }

    /// <summary>The parent's stable vector. False if malformed or not from this member's parent.</summary>
    /// <param name="from">The sender's rank.</param>
    /// <param name="version">Its version.</param>
    /// <param name="r">The body: the stable vector.</param>
    /// <param name="stable">True if it is new and was applied (the caller collects garbage).</param>
    public bool OnUpdate(int from, long version, ref WireReader r, out bool stable)
    {
        stable = false;
        if (IsRoot || from != Parent) return false;
        long[] values = _scratch;
        r.LongsInto(values);
        if (!r.Ok || !r.Complete || version <= 0) return false;
        // Every member's holdings are part of the minimum, so a stable prefix beyond our own is corrupt.
        _member.OwnHoldings(_own);
        for (int i = 0; i < values.Length; i++)
        {
            if (values[i] < 0 || values[i] > _own[i]) return false;
        }
        if (version <= Version)
        {
            _node.Counters.Duplicates++;
            return true;
        }
        Version = version;
        for (int i = 0; i < values.Length; i++)
        {
            if (values[i] > Stable[i]) Stable[i] = values[i];
        }
        for (int c = 0; c < _children.Length; c++) SendUpdate(_firstChild + c);
        _awaitingStability = _reportedOnce && !_reported.AsSpan().SequenceEqual(Stable);
        stable = true;
        return true;
    }

    /// <summary>A one-line summary, for replay diagnostics.</summary>
    public string Describe() =>
        $"tree k={Fanout} v{Version} heard {_children.Count(c => c != null)}/{_children.Length} children, stable [{string.Join(",", Stable)}]";
}
