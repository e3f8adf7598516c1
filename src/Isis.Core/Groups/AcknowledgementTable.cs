using Isis.Core.Common;

namespace Isis.Core.Groups;

/// <summary>
/// What a member knows the others of its view hold, from their digests: per member and sender
/// rank, the highest contiguous sequence number held. One table per view.
/// </summary>
/// <remarks>
/// <para>
/// <b>Small group.</b> Every member's digest goes to every other, and a message is stable once
/// every member holds it: the table keeps a row per member (members x members sequence numbers)
/// and, per sender, the least sequence any other member holds, kept up to date as digests arrive
/// so stability never scans a column. When the last member at a column's minimum moves up, the
/// column goes stale and is recomputed, with every other stale column, in one pass over the rows
/// before stability next reads it.
/// </para>
/// <para>
/// <b>Large group</b> (a <see cref="StabilityTree"/> declares stability). Digests are gossip to a
/// few members a round, so over a long run every member hears from every other, and a row per
/// member would grow to members x members (10,000 longs a member at 100 members, a million at
/// 1,000). Nothing needs those rows: the table keeps only what its three readers use, a fixed
/// number of rows whatever the run's length:
/// </para>
/// <list type="bullet">
/// <item>the rows of the tree neighbours (relaying, repairs ask the neighbour that holds the most);</item>
/// <item>per sender, the member known to hold the most of its stream and how much (without
/// relaying, every other repair asks it);</item>
/// <item>per member, how much of this member's own stream it holds (a Flush(k) counts holders).</item>
/// </list>
/// <para>
/// A member whose digest has not arrived yet shares one all-zero row that is never written: a
/// view replaced before digests flow (joins arriving in a burst) costs one row.
/// </para>
/// </remarks>
internal sealed class AcknowledgementTable
{
    private readonly int _self;
    private readonly long[] _noRow;
    private long[] _own;

    // Small group: a row per member (_noRow until its first digest), and the per-sender minimum over the others.
    private readonly long[][]? _rows;
    private readonly long[] _minAck;
    private readonly int[] _atMinAck;
    private readonly bool[] _minStale;
    private readonly List<int> _staleMins = new();

    // Large group: rows of the pinned ranks (the tree neighbours) only, and the summaries.
    private readonly int[] _pinned;
    private readonly long[][] _pinnedRows;
    private readonly long[] _holdsOurs;
    private readonly long[] _mostHeld;
    private readonly int[] _mostHeldBy;

    /// <param name="members">The view's size.</param>
    /// <param name="self">This member's rank.</param>
    /// <param name="neighbours">In a large group, the ranks of this member's stability-tree
    /// neighbours, whose rows are kept; null in a small group, where every row is kept.</param>
    public AcknowledgementTable(int members, int self, int[]? neighbours)
    {
        _self = self;
        _noRow = new long[members];
        _own = _noRow;
        if (neighbours == null)
        {
            _rows = new long[members][];
            Array.Fill(_rows, _noRow);
            _minAck = new long[members];
            _atMinAck = new int[members];
            _minStale = new bool[members];
            int others = members - 1;
            // Alone in the view, our own holdings are stable: the minimum over no one is unbounded.
            Array.Fill(_minAck, others > 0 ? 0 : long.MaxValue);
            Array.Fill(_atMinAck, others);
            _pinned = [];
            _pinnedRows = [];
            _holdsOurs = [];
            _mostHeld = [];
            _mostHeldBy = [];
        }
        else
        {
            _minAck = [];
            _atMinAck = [];
            _minStale = [];
            _pinned = neighbours;
            _pinnedRows = new long[_pinned.Length][];
            Array.Fill(_pinnedRows, _noRow);
            _holdsOurs = new long[members];
            _mostHeld = new long[members];
            _mostHeldBy = new int[members];
            Array.Fill(_mostHeldBy, -1);
        }
    }

    /// <summary>Members of the view.</summary>
    public int Members => _noRow.Length;

    /// <summary>True in a large group: only the neighbours' rows and the summaries are kept.</summary>
    public bool Summarised => _rows == null;

    /// <summary>
    /// Sequence numbers and ranks this table holds (its own row aside, which is the member's digest
    /// buffer): members x members in a small group, a fixed number of rows in a large one.
    /// </summary>
    public long Entries
    {
        get
        {
            long rows = 1; // the shared zero row
            if (_rows != null)
            {
                for (int m = 0; m < _rows.Length; m++)
                {
                    if (m != _self && !ReferenceEquals(_rows[m], _noRow)) rows++;
                }
                return (rows + 2) * Members; // + the minimums and their counts
            }
            foreach (long[] row in _pinnedRows)
            {
                if (!ReferenceEquals(row, _noRow)) rows++;
            }
            return (rows + 3) * Members; // + how much of ours each holds, the most held per sender and by whom
        }
    }

    /// <summary>Our own digest vector: the row the table shows for us (never copied; the caller rewrites it in place).</summary>
    public void SetOwn(long[] vector)
    {
        _own = vector;
        if (_rows != null) _rows[_self] = vector;
    }

    /// <summary>
    /// Skips, in <paramref name="r"/>, a digest of <paramref name="from"/> that repeats its last one
    /// (an idle digest): true if it did, and nothing changed. In a large group only a neighbour's
    /// last digest is known; any other is read in full.
    /// </summary>
    public bool TrySkipUnchanged(int from, ref Wire.WireReader r)
    {
        if (_rows != null) return r.TrySkipLongsEqualTo(_rows[from]);
        int p = Array.IndexOf(_pinned, from);
        return p >= 0 && r.TrySkipLongsEqualTo(_pinnedRows[p]);
    }

    /// <summary>
    /// Takes <paramref name="from"/>'s digest (already checked: every entry plausible, never
    /// negative). The vector is a scratch buffer: the table copies what it keeps.
    /// </summary>
    public void Record(int from, long[] vector)
    {
        if (_rows != null)
        {
            long[] row = _rows[from];
            // The first digest of this member in this view: its vector (fresh, never negative)
            // becomes the row, and the shared zero row stands for the old values below.
            bool first = ReferenceEquals(row, _noRow);
            if (first) _rows[from] = (long[])vector.Clone();
            for (int i = 0; i < vector.Length; i++)
            {
                if (vector[i] <= row[i]) continue;
                if (from != _self && row[i] == _minAck[i] && --_atMinAck[i] == 0 && !_minStale[i])
                {
                    _minStale[i] = true;
                    _staleMins.Add(i);
                }
                if (!first) row[i] = vector[i];
            }
            return;
        }

        int p = Array.IndexOf(_pinned, from);
        if (p >= 0)
        {
            long[] row = _pinnedRows[p];
            if (ReferenceEquals(row, _noRow)) _pinnedRows[p] = (long[])vector.Clone();
            else for (int i = 0; i < vector.Length; i++) row[i] = Math.Max(row[i], vector[i]);
        }
        if (_self >= 0) _holdsOurs[from] = Math.Max(_holdsOurs[from], vector[_self]);
        for (int i = 0; i < vector.Length; i++)
        {
            if (vector[i] > _mostHeld[i])
            {
                _mostHeld[i] = vector[i];
                _mostHeldBy[i] = from;
            }
        }
    }

    /// <summary>
    /// Small group: per sender, the least sequence number every other member holds (their digests'
    /// minimum), stale columns recomputed first.
    /// </summary>
    public long[] MinimumOfOthers()
    {
        Invariant.Check(_rows != null, "a large group's stability comes from its tree, not the acknowledgement table");
        if (_staleMins.Count == 0) return _minAck;
        foreach (int c in _staleMins)
        {
            _minAck[c] = long.MaxValue;
            _atMinAck[c] = 0;
        }
        for (int m = 0; m < _rows!.Length; m++)
        {
            if (m == _self) continue;
            long[] row = _rows[m];
            foreach (int c in _staleMins)
            {
                long v = row[c];
                if (v < _minAck[c]) { _minAck[c] = v; _atMinAck[c] = 1; }
                else if (v == _minAck[c]) _atMinAck[c]++;
            }
        }
        foreach (int c in _staleMins) _minStale[c] = false;
        _staleMins.Clear();
        return _minAck;
    }

    /// <summary>How many members other than us are known to hold our own stream up to <paramref name="seq"/>.</summary>
    public int OthersHoldingOurs(long seq)
    {
        int holders = 0;
        for (int m = 0; m < Members; m++)
        {
            if (m != _self && (_rows != null ? _rows[m][_self] : _holdsOurs[m]) >= seq) holders++;
        }
        return holders;
    }

    /// <summary>
    /// The member known to hold the most of <paramref name="sender"/>'s stream (other than us), or
    /// the sender itself when no other is known to hold more than it.
    /// </summary>
    public int MostHolding(int sender)
    {
        if (_rows == null) return _mostHeldBy[sender] >= 0 ? _mostHeldBy[sender] : sender; // never us: our own row is not recorded
        int target = sender;
        for (int m = 0; m < _rows.Length; m++)
        {
            if (m != _self && _rows[m][sender] > _rows[target][sender]) target = m;
        }
        return target;
    }

    /// <summary>
    /// Of <paramref name="first"/> and the <paramref name="candidates"/> (tree neighbours, whose
    /// rows a large group keeps), the one known to hold the most of <paramref name="sender"/>'s stream.
    /// </summary>
    public int MostHoldingAmong(int sender, int first, ReadOnlySpan<int> candidates)
    {
        int target = first;
        foreach (int n in candidates)
        {
            if (Row(n)[sender] > Row(target)[sender]) target = n;
        }
        return target;
    }

    private long[] Row(int member)
    {
        if (_rows != null) return _rows[member];
        if (member == _self) return _own;
        int p = Array.IndexOf(_pinned, member);
        Invariant.Check(p >= 0, $"a large group keeps the rows of its tree neighbours only, not rank {member}'s");
        return _pinnedRows[p];
    }

    /// <summary>The rows, for a diagnostic dump (a large group's: ours and the neighbours').</summary>
    public string Describe() =>
        _rows != null
            ? string.Join(" ", _rows.Select(row => "[" + string.Join(",", row) + "]"))
            : "[" + string.Join(",", _own) + "] " + string.Join(" ", _pinned.Select((rank, p) => $"r{rank}[{string.Join(",", _pinnedRows[p])}]")) +
              " most " + string.Join(",", _mostHeld.Select((v, i) => $"{v}@{_mostHeldBy[i]}"));
}
