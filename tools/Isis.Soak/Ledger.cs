using System.Buffers.Binary;
using System.Security.Cryptography;

namespace Isis.Soak;

/// <summary>
/// The soak group's replicated state: what the SafeSends and SafeQueries did, in delivery order,
/// kept in a size that does not grow with the history, so that a run of hours measures the
/// library's disk and memory and not the application's. A list of every operation (what the
/// soak kept before) makes every checkpoint, and so the disk, grow with the run.
/// <list type="bullet">
/// <item>The history's length and a hash chain over it (SHA-256 of the previous hash, the member
/// and the sequence number): two members hold the same history exactly when both agree.</item>
/// <item>A mark (position, hash) every <see cref="MarkEvery"/> operations: the history of an
/// earlier check is a prefix of a later one when the earlier marks are all among the later ones
/// (the operations after the last mark are covered by the acknowledgement check).</item>
/// <item>Per member, the runs of consecutive sequence numbers delivered: a member's durable
/// operations are numbered 1, 2, 3... per incarnation, so runs break only where an operation was
/// never delivered (a kill, a failed call) or a new incarnation starts, and any acknowledged
/// operation can be looked up.</item>
/// <item>The problems seen while appending (an operation twice, or out of its sender's order),
/// the first <see cref="ProblemsKept"/> in words and all of them counted.</item>
/// </list>
/// It grows by one mark per 4,096 operations (40 bytes) and one run per break: some tens of
/// kilobytes after an hour at 1,000 operations a second.
/// </summary>
internal sealed class Ledger
{
    public const int MarkEvery = 4_096;
    public const int ProblemsKept = 20;
    private const int Version = 1;

    private readonly SortedDictionary<int, List<(long First, long Last)>> _runs = new();
    private readonly List<(long Position, byte[] Hash)> _marks = new();
    private readonly List<string> _problems = new();
    private byte[] _hash = new byte[32];

    /// <summary>Operations in the history.</summary>
    public long Count { get; private set; }

    /// <summary>All problems seen (only the first <see cref="ProblemsKept"/> are in <see cref="Problems"/>).</summary>
    public long ProblemCount { get; private set; }

    public IReadOnlyList<string> Problems => _problems;
    public string HashHex => Convert.ToHexStringLower(_hash);

    /// <summary>The next operation of the history; a duplicate or an operation out of its sender's order is recorded as a problem, and still counted.</summary>
    public void Append(int member, long seq)
    {
        if (!_runs.TryGetValue(member, out List<(long First, long Last)>? runs)) _runs[member] = runs = new();
        if (runs.Count > 0 && seq <= runs[^1].Last)
        {
            Problem(Contains(member, seq)
                ? $"{Op(member, seq)} is in the history twice, again at position {Count}"
                : $"member {member}'s operations out of its order at position {Count}: seq {seq} after {runs[^1].Last}");
        }
        else if (runs.Count > 0 && seq == runs[^1].Last + 1)
        {
            runs[^1] = (runs[^1].First, seq);
        }
        else
        {
            runs.Add((seq, seq));
        }
        Span<byte> input = stackalloc byte[32 + 12];
        _hash.CopyTo(input);
        BinaryPrimitives.WriteInt32LittleEndian(input[32..], member);
        BinaryPrimitives.WriteInt64LittleEndian(input[36..], seq);
        _hash = SHA256.HashData(input);
        Count++;
        if (Count % MarkEvery == 0) _marks.Add((Count, _hash));
    }

    /// <summary>Whether (member, seq) is in the history.</summary>
    public bool Contains(int member, long seq)
    {
        if (!_runs.TryGetValue(member, out List<(long First, long Last)>? runs)) return false;
        int lo = 0, hi = runs.Count - 1;
        while (lo <= hi)
        {
            int mid = (lo + hi) / 2;
            if (seq < runs[mid].First) hi = mid - 1;
            else if (seq > runs[mid].Last) lo = mid + 1;
            else return true;
        }
        return false;
    }

    /// <summary>The highest sequence number of <paramref name="member"/> in the history, if any.</summary>
    public long? Last(int member) => _runs.TryGetValue(member, out var runs) && runs.Count > 0 ? runs[^1].Last : null;

    /// <summary>Whether both hold the same history (length and hash chain).</summary>
    public bool SameHistory(Ledger other) => Count == other.Count && _hash.AsSpan().SequenceEqual(other._hash);

    /// <summary>
    /// Where <paramref name="earlier"/> stops being a prefix of this history, judged by its marks and,
    /// at equal length, by the hash: null when it is a prefix as far as they show.
    /// </summary>
    public string? WhereNotPrefix(Ledger earlier)
    {
        if (earlier.Count > Count) return $"the history shrank from {earlier.Count} to {Count} operations";
        for (int i = 0; i < earlier._marks.Count; i++)
        {
            if (i >= _marks.Count || _marks[i].Position != earlier._marks[i].Position || !_marks[i].Hash.AsSpan().SequenceEqual(earlier._marks[i].Hash))
                return $"it differs within the first {earlier._marks[i].Position} operations";
        }
        if (earlier.Count == Count && !SameHistory(earlier)) return $"both hold {Count} operations, with different hashes";
        return null;
    }

    /// <summary>The position of the first mark where the two differ (or of the shorter one's end), for a report.</summary>
    public long FirstMarkDifference(Ledger other)
    {
        int n = Math.Min(_marks.Count, other._marks.Count);
        for (int i = 0; i < n; i++)
        {
            if (!_marks[i].Hash.AsSpan().SequenceEqual(other._marks[i].Hash)) return _marks[i].Position;
        }
        return Math.Min(Count, other.Count);
    }

    private void Problem(string text)
    {
        ProblemCount++;
        if (_problems.Count < ProblemsKept) _problems.Add(text);
    }

    internal static string Op(int member, long seq) => $"(member {member}, seq {seq} = incarnation {seq / Protocol.SeqBase} #{seq % Protocol.SeqBase})";

    public byte[] Serialize()
    {
        using var stream = new MemoryStream();
        using (var w = new BinaryWriter(stream))
        {
            w.Write(Version);
            w.Write(Count);
            w.Write(_hash);
            w.Write(_runs.Count);
            foreach ((int member, List<(long First, long Last)> runs) in _runs)
            {
                w.Write(member);
                w.Write(runs.Count);
                foreach ((long first, long last) in runs)
                {
                    w.Write(first);
                    w.Write(last);
                }
            }
            w.Write(_marks.Count);
            foreach ((long position, byte[] hash) in _marks)
            {
                w.Write(position);
                w.Write(hash);
            }
            w.Write(ProblemCount);
            w.Write(_problems.Count);
            foreach (string p in _problems) w.Write(p);
        }
        return stream.ToArray();
    }

    public static Ledger Deserialize(byte[] bytes)
    {
        using var r = new BinaryReader(new MemoryStream(bytes));
        int version = r.ReadInt32();
        if (version != Version) throw new InvalidDataException($"a soak ledger of version {version}; this build reads version {Version}");
        var ledger = new Ledger { Count = r.ReadInt64(), _hash = r.ReadBytes(32) };
        int members = r.ReadInt32();
        for (int m = 0; m < members; m++)
        {
            int member = r.ReadInt32();
            int n = r.ReadInt32();
            var runs = new List<(long First, long Last)>(n);
            for (int i = 0; i < n; i++) runs.Add((r.ReadInt64(), r.ReadInt64()));
            ledger._runs[member] = runs;
        }
        int marks = r.ReadInt32();
        for (int i = 0; i < marks; i++) ledger._marks.Add((r.ReadInt64(), r.ReadBytes(32)));
        ledger.ProblemCount = r.ReadInt64();
        int problems = r.ReadInt32();
        for (int i = 0; i < problems; i++) ledger._problems.Add(r.ReadString());
        return ledger;
    }
}
