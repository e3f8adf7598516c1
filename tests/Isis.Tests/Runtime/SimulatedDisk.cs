using System.Security.Cryptography;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>
/// A disk in memory under the stores' file layer (<see cref="IDurableFiles"/>), in the spirit of
/// ALICE and FoundationDB's simulated disk: it records every operation the store makes, and can
/// produce the disks a crash after any of them could leave.
/// </summary>
/// <remarks>
/// <para>The model (Linux, ext4/xfs): a file's bytes survive a crash as they were at its last
/// fsync, or with some of what was written since (all of it, none, or a prefix: the crash may
/// tear the last write); a name (created, renamed, linked, deleted) survives once its directory
/// was fsynced, and the names changed since the last fsync of their directory survive as a
/// prefix of those changes, in order (a rename is atomic: its two names change together).</para>
/// <para>Files are inodes with names, so a hard link and a rename over a linked name behave as on disk.</para>
/// </remarks>
internal sealed class SimulatedDisk : IDurableFiles
{
    private sealed class Inode(int id)
    {
        public int Id { get; } = id;

        public byte[] Written = [];

        public byte[] Synced = [];
    }

    /// <summary>A change of names, atomic (a rename unbinds one and binds another): each name to an inode, or to none (-1).</summary>
    private sealed record NameChange(string Directory, (string Name, int Inode)[] Bindings);

    /// <summary>What a crash right after an operation sees: immutable, shared between snapshots.</summary>
    private sealed record State(Dictionary<string, int> SyncedNames, List<NameChange> PendingNames, Dictionary<int, (byte[] Written, byte[] Synced)> Inodes);

    private readonly Dictionary<int, Inode> _inodes = new();
    private Dictionary<string, int> _names = new();
    private Dictionary<string, int> _syncedNames = new();
    private List<NameChange> _pendingNames = new();
    private readonly List<State> _afterOperation = new();
    private readonly List<string> _operations = new();
    private int _nextInode = 1;

    public SimulatedDisk()
    {
        _afterOperation.Add(Snapshot());
    }

    /// <summary>Every operation so far, one line each ("write /d/f +24", "fsync-dir /d", ...).</summary>
    public IReadOnlyList<string> Operations
    {
        get
        {
            lock (_operations) return [.. _operations];
        }
    }

    /// <summary>Operations so far: a crash can happen after any of 0..this many.</summary>
    public int OperationCount
    {
        get
        {
            lock (_operations) return _operations.Count;
        }
    }

    /// <summary>Bytes a write may still add before the disk is full (writes past it fail with what fits written); unlimited by default.</summary>
    public long FreeBytes { get; set; } = long.MaxValue;

    /// <summary>When set, every fsync of a file fails (as after an I/O error on the device).</summary>
    public bool FsyncFails { get => Volatile.Read(ref _fsyncFails); set => Volatile.Write(ref _fsyncFails, value); }

    private bool _fsyncFails;

    /// <summary>Makes everything written and every name durable and forgets the operations: the disk a test starts from.</summary>
    public void Settle()
    {
        foreach (Inode i in _inodes.Values) i.Synced = i.Written;
        _syncedNames = new Dictionary<string, int>(_names);
        _pendingNames = new List<NameChange>();
        _operations.Clear();
        _afterOperation.Clear();
        _afterOperation.Add(Snapshot());
    }

    /// <summary>The bytes a name holds now (written, synced or not); null if there is no such file.</summary>
    public byte[]? Contents(string path) => _names.TryGetValue(path, out int id) ? _inodes[id].Written : null;

    /// <summary>Every name now.</summary>
    public IEnumerable<string> Files => _names.Keys.Order(StringComparer.Ordinal);

    // ---------------------------------------------------------------- crashes

    /// <summary>How un-fsynced bytes fare in a crash.</summary>
    public enum Unsynced
    {
        /// <summary>All lost: each file as at its last fsync.</summary>
        Dropped,

        /// <summary>All kept: each file as last written.</summary>
        Kept,

        /// <summary>The last write torn: each file keeps half of what was appended since its last fsync.</summary>
        Torn,
    }

    /// <summary>
    /// The distinct disks a crash right after operation <paramref name="k"/> (0: before any) can
    /// leave: every prefix of the name changes not yet made durable, times each way un-fsynced
    /// bytes fare. Each comes back settled, as a restarted process finds it.
    /// </summary>
    public List<SimulatedDisk> CrashesAfter(int k)
    {
        State s = _afterOperation[k];
        var disks = new List<SimulatedDisk>();
        var seen = new HashSet<string>();
        for (int kept = 0; kept <= s.PendingNames.Count; kept++)
        {
            var names = new Dictionary<string, int>(s.SyncedNames);
            foreach (NameChange change in s.PendingNames.Take(kept))
            {
                foreach ((string name, int inode) in change.Bindings)
                {
                    if (inode < 0) names.Remove(name);
                    else names[name] = inode;
                }
            }
            foreach (Unsynced fate in Enum.GetValues<Unsynced>())
            {
                var disk = new SimulatedDisk();
                foreach ((string name, int inode) in names)
                {
                    (byte[] written, byte[] synced) = s.Inodes[inode];
                    byte[] bytes = fate switch
                    {
                        Unsynced.Dropped => synced,
                        Unsynced.Kept => written,
                        _ => written.Length > synced.Length && written.AsSpan(0, synced.Length).SequenceEqual(synced)
                            ? written[..(synced.Length + (written.Length - synced.Length) / 2)]
                            : synced,
                    };
                    disk.Put(name, bytes, inode);
                }
                disk.Settle();
                if (seen.Add(disk.Fingerprint())) disks.Add(disk);
            }
        }
        return disks;
    }

    /// <summary>Gives <paramref name="name"/> the bytes (hard links keep sharing one inode).</summary>
    private void Put(string name, byte[] bytes, int originalInode)
    {
        // Names that shared an inode before the crash share one after it.
        if (!_inodes.TryGetValue(originalInode, out Inode? inode))
        {
            inode = new Inode(originalInode) { Written = bytes };
            _inodes.Add(originalInode, inode);
            _nextInode = Math.Max(_nextInode, originalInode + 1);
        }
        _names[name] = inode.Id;
    }

    private string Fingerprint() => string.Join(";", _names.OrderBy(n => n.Key, StringComparer.Ordinal)
        .Select(n => $"{n.Key}={n.Value}:{Convert.ToHexString(SHA256.HashData(_inodes[n.Value].Written))}"));

    private State Snapshot() => new(
        new Dictionary<string, int>(_syncedNames), [.. _pendingNames], _inodes.Values.ToDictionary(i => i.Id, i => (i.Written, i.Synced)));

    private void Record(string operation)
    {
        // A runtime's event loop may drive the disk while the test thread reads the operations.
        lock (_operations)
        {
            _operations.Add(operation);
            _afterOperation.Add(Snapshot());
        }
    }

    private void ChangeNames(string operation, params (string Name, int Inode)[] bindings)
    {
        foreach ((string name, int inode) in bindings)
        {
            if (inode < 0) _names.Remove(name);
            else _names[name] = inode;
        }
        _pendingNames.Add(new NameChange(DurableFiles.DirectoryOf(bindings[0].Name), bindings));
        Record(operation);
    }

    // ---------------------------------------------------------------- IDurableFiles

    public bool Exists(string path) => _names.ContainsKey(path);

    public Stream OpenRead(string path) =>
        _names.TryGetValue(path, out int id) ? new MemoryStream(_inodes[id].Written, writable: false) : throw new FileNotFoundException($"simulated: no file {path}", path);

    public IDurableFile OpenAppend(string path, bool truncate = false, bool ownerOnly = false, long reserveBytes = 0)
    {
        if (!_names.TryGetValue(path, out int id))
        {
            id = _nextInode++;
            _inodes.Add(id, new Inode(id));
            ChangeNames($"create {path}", (path, id));
        }
        var file = new AppendFile(this, path, _inodes[id]);
        if (truncate) file.Truncate(0);
        return file;
    }

    public void Rename(string from, string to)
    {
        if (!_names.TryGetValue(from, out int id)) throw new FileNotFoundException($"simulated: no file {from}", from);
        ChangeNames($"rename {from} {to}", (from, -1), (to, id));
    }

    public void LinkOrCopy(string existing, string newPath)
    {
        if (!_names.TryGetValue(existing, out int id)) throw new FileNotFoundException($"simulated: no file {existing}", existing);
        if (_names.ContainsKey(newPath)) throw new IOException($"simulated: {newPath} exists");
        ChangeNames($"link {existing} {newPath}", (newPath, id));
    }

    public void Delete(string path)
    {
        if (_names.ContainsKey(path)) ChangeNames($"delete {path}", (path, -1));
    }

    public IEnumerable<string> FilesIn(string directory, string prefix) =>
        _names.Keys.Where(n => DurableFiles.DirectoryOf(n) == directory && Path.GetFileName(n).StartsWith(prefix, StringComparison.Ordinal)).Order(StringComparer.Ordinal).ToList();

    public void CreateDirectory(string directory)
    {
        // Directories are implicit here: every name is in one, and its fsync is what matters.
    }

    public void SyncDirectory(string directory)
    {
        foreach (NameChange change in _pendingNames.Where(c => c.Directory == directory))
        {
            foreach ((string name, int inode) in change.Bindings)
            {
                if (inode < 0) _syncedNames.Remove(name);
                else _syncedNames[name] = inode;
            }
        }
        _pendingNames = _pendingNames.Where(c => c.Directory != directory).ToList();
        Record($"fsync-dir {directory}");
    }

    private sealed class AppendFile(SimulatedDisk disk, string path, Inode inode) : IDurableFile
    {
        private bool _disposed;

        public long Length => inode.Written.Length;

        public void Write(ReadOnlySpan<byte> bytes)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            int fits = (int)Math.Min(bytes.Length, disk.FreeBytes);
            byte[] grown = new byte[inode.Written.Length + fits];
            inode.Written.CopyTo(grown, 0);
            bytes[..fits].CopyTo(grown.AsSpan(inode.Written.Length));
            inode.Written = grown;
            if (disk.FreeBytes != long.MaxValue) disk.FreeBytes -= fits;
            disk.Record($"write {path} +{fits}");
            if (fits < bytes.Length) throw new IOException($"simulated: no space left on device writing {path}");
        }

        public void Truncate(long length)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            inode.Written = inode.Written[..(int)Math.Min(length, inode.Written.Length)];
            disk.Record($"truncate {path} {length}");
        }

        public void Sync()
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            if (disk.FsyncFails)
            {
                disk.Record($"fsync {path} FAILED");
                throw new IOException($"simulated: fsync of {path} failed (EIO)");
            }
            inode.Synced = inode.Written;
            disk.Record($"fsync {path}");
        }

        public void Dispose() => _disposed = true;
    }
}
