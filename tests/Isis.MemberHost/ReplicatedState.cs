using System.Diagnostics;
using System.Security.Cryptography;
using System.Text.Json.Nodes;
using Isis;

namespace Isis.MemberHost;

/// <summary>
/// With --state: the member keeps an application state and transfers it to joiners, as a replicated
/// service would. The state is the set of (sender, seq) messages of request code 1 it applied, plus a
/// blob written by request code 3 (offset, bytes), which "fill N" grows by N MiB of Sends. Joiners get
/// both by checkpoint: a header (pairs, blob length), the pairs in batches, then the blob in parts.
/// "state" prints a digest of both, so a test can check that every replica holds the same state.
/// </summary>
internal sealed class ReplicatedState
{
    public const int BlobCode = 3;
    private const int PairsPerPart = 8_192;
    private const int BlobPart = 256 * 1024;

    private readonly Lock _lock = new();
    private readonly HashSet<(int Sender, int Seq)> _applied = new();
    private byte[] _blob = [];
    private long _blobLength;
    private readonly Group _group;
    private readonly JsonLines _output;
    private readonly Stopwatch _loadClock = new();
    private long _loadedBytes;

    public ReplicatedState(Group group, JsonLines output)
    {
        _group = group;
        _output = output;
        group.Handlers[BlobCode] += (Action<long, byte[]>)Write;
        group.MakeChkpt += (ChkptMaker)Make;
        group.LoadChkpt += (Action<int, long>)((pairs, blobLength) =>
        {
            _loadClock.Restart();
            lock (_lock)
            {
                _applied.EnsureCapacity(pairs);
                _blob = new byte[blobLength];
                _blobLength = blobLength;
            }
        });
        group.LoadChkpt += (Action<int[], int[]>)((senders, seqs) =>
        {
            lock (_lock)
            {
                for (int i = 0; i < senders.Length; i++) _applied.Add((senders[i], seqs[i]));
            }
        });
        group.LoadChkpt += (Action<long, byte[]>)((offset, data) =>
        {
            Write(offset, data);
            _loadedBytes += data.Length;
            if (offset + data.Length == _blobLength)
            {
                _output.Write(new JsonObject { ["event"] = "stateLoaded", ["bytes"] = _loadedBytes, ["ms"] = _loadClock.Elapsed.TotalMilliseconds });
            }
        });
    }

    /// <summary>A message of request code 1 was applied.</summary>
    public void Apply(int sender, int seq)
    {
        lock (_lock) _applied.Add((sender, seq));
    }

    private void Write(long offset, byte[] data)
    {
        lock (_lock)
        {
            long end = offset + data.Length;
            if (end > _blob.Length) Array.Resize(ref _blob, (int)Math.Max(end, Math.Min(int.MaxValue / 2, _blob.Length * 2L)));
            data.CopyTo(_blob, offset);
            _blobLength = Math.Max(_blobLength, end);
        }
    }

    /// <summary>Grows the blob by <paramref name="mebibytes"/> MiB of Sends (deterministic bytes), from the current end.</summary>
    public void Fill(int mebibytes)
    {
        long start;
        lock (_lock) start = _blobLength;
        var random = new Random(unchecked((int)start));
        for (long offset = start; offset < start + ((long)mebibytes << 20); offset += BlobPart)
        {
            var data = new byte[BlobPart];
            random.NextBytes(data);
            _group.Send(BlobCode, offset, data);
        }
        _output.Write(new JsonObject { ["event"] = "filled", ["bytes"] = (long)mebibytes << 20 });
    }

    private void Make(View view)
    {
        var clock = Stopwatch.StartNew();
        (int Sender, int Seq)[] pairs;
        long length;
        lock (_lock)
        {
            // The application's snapshot: the pairs now, and the blob (written only by this thread, which is busy here).
            pairs = [.. _applied];
            length = _blobLength;
        }
        _group.SendChkpt(pairs.Length, length);
        for (int i = 0; i < pairs.Length; i += PairsPerPart)
        {
            int n = Math.Min(PairsPerPart, pairs.Length - i);
            var senders = new int[n];
            var seqs = new int[n];
            for (int j = 0; j < n; j++) (senders[j], seqs[j]) = pairs[i + j];
            _group.SendChkpt(senders, seqs);
        }
        for (long offset = 0; offset < length; offset += BlobPart)
        {
            _group.SendChkpt(offset, _blob.AsSpan((int)offset, (int)Math.Min(BlobPart, length - offset)).ToArray());
        }
        _group.EndOfChkpt();
        _output.Write(new JsonObject { ["event"] = "stateMade", ["view"] = view.ViewId, ["pairs"] = pairs.Length, ["bytes"] = length, ["ms"] = clock.Elapsed.TotalMilliseconds });
    }

    /// <summary>The state's digest: the sorted pairs, then the blob.</summary>
    public JsonObject Describe()
    {
        lock (_lock)
        {
            using var sha = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
            Span<byte> pair = stackalloc byte[8];
            foreach ((int sender, int seq) in _applied.Order())
            {
                BitConverter.TryWriteBytes(pair, sender);
                BitConverter.TryWriteBytes(pair[4..], seq);
                sha.AppendData(pair);
            }
            sha.AppendData(_blob.AsSpan(0, (int)_blobLength));
            return new JsonObject
            {
                ["event"] = "state",
                ["pairs"] = _applied.Count,
                ["blobBytes"] = _blobLength,
                ["sha256"] = Convert.ToHexString(sha.GetHashAndReset()),
            };
        }
    }
}
