using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

/// <summary>
/// An exact set of sequence numbers stored as "1..Prefix" plus the few numbers beyond it. In a
/// correct run deliveries are FIFO with no gap, so a stream of a million messages costs one long.
/// Normalized (Prefix + 1 is never in Extras), so two sets are equal iff their fields are.
/// </summary>
internal sealed class SeqSet
{
    private HashSet<long>? _extras;

    public long Prefix { get; private set; }

    public long Count => Prefix + (_extras?.Count ?? 0);

    /// <summary>Adds <paramref name="seq"/>; false if it was already present.</summary>
    public bool Add(long seq)
    {
        if (seq >= 1 && seq <= Prefix) return false;
        if (seq == Prefix + 1)
        {
            Prefix++;
            while (_extras is { Count: > 0 } && _extras.Remove(Prefix + 1)) Prefix++;
            return true;
        }
        return (_extras ??= []).Add(seq);
    }

    public bool Contains(long seq) => (seq >= 1 && seq <= Prefix) || (_extras?.Contains(seq) ?? false);

    public bool SetEquals(SeqSet other) =>
        Prefix == other.Prefix
        && (_extras?.Count ?? 0) == (other._extras?.Count ?? 0)
        && ((_extras?.Count ?? 0) == 0 || _extras!.SetEquals(other._extras!));

    /// <summary>All members, ascending prefix first then the extras in no particular order.</summary>
    public IEnumerable<long> Items()
    {
        for (long s = 1; s <= Prefix; s++) yield return s;
        if (_extras is not null)
        {
            foreach (long s in _extras) yield return s;
        }
    }
}

/// <summary>A set of messages of one group, grouped by (sender, sending view) into <see cref="SeqSet"/>s.</summary>
internal sealed class MessageSet
{
    private readonly Dictionary<(NodeId Sender, int View), SeqSet> _streams = [];

    public GroupId Group { get; }

    public MessageSet(GroupId group) => Group = group;

    public long Count
    {
        get
        {
            long n = 0;
            foreach (SeqSet s in _streams.Values) n += s.Count;
            return n;
        }
    }

    public bool Add(in MessageId m)
    {
        ref SeqSet? set = ref System.Runtime.InteropServices.CollectionsMarshal.GetValueRefOrAddDefault(
            _streams, (m.Sender, m.ViewId), out _);
        set ??= new SeqSet();
        return set.Add(m.Seq);
    }

    public bool Contains(in MessageId m) =>
        m.Group == Group && _streams.TryGetValue((m.Sender, m.ViewId), out SeqSet? s) && s.Contains(m.Seq);

    public bool SetEquals(MessageSet other)
    {
        if (_streams.Count != other._streams.Count) return false;
        foreach (((NodeId, int) key, SeqSet s) in _streams)
        {
            if (!other._streams.TryGetValue(key, out SeqSet? o) || !s.SetEquals(o)) return false;
        }
        return true;
    }

    /// <summary>How many messages of this set <paramref name="other"/> lacks, and the first few of them.</summary>
    public (long Count, List<MessageId> Examples) Except(MessageSet other, int maxExamples = 5)
    {
        long count = 0;
        var examples = new List<MessageId>();
        foreach (((NodeId sender, int view), SeqSet s) in _streams)
        {
            other._streams.TryGetValue((sender, view), out SeqSet? o);
            if (o is not null && o.SetEquals(s)) continue;
            foreach (long seq in s.Items())
            {
                if (o is not null && o.Contains(seq)) continue;
                count++;
                if (examples.Count < maxExamples) examples.Add(new MessageId(sender, Group, view, seq));
            }
        }
        return (count, examples);
    }
}
