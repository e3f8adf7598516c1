using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;
using Isis.Core.Durability;
using Isis.Core.Identity;

namespace Isis.Runtime;

/// <summary>
/// A group's persistent checkpoint on disk: the parts the application's MakeChkpt handlers made,
/// with where the group's SafeSend history stood (disk durability), the lineage of the group's
/// state (without disk durability), and the group's key.
/// </summary>
/// <remarks>
/// <para>Layout (little-endian): the magic <c>ISISCKPT</c>, a format version (3), the group's name,
/// the history position (a flag, then the lineage's founder and view, the number of entries
/// applied and the <see cref="HistoryDigest"/> of those entries), the state lineage (a flag, then its founder and view), the time it was written, the
/// key (its length, 0 or 32, then the bytes), then each part as its length and bytes, then an end
/// marker (length -1), the number of parts, and the SHA-256 of everything before the hash.</para>
/// <para>Format 1, written before state lineages existed, is the same without the state lineage;
/// it still loads, with its lineage unknown (see <see cref="Checked.Lineage"/>). Format 2, written
/// before history digests, is format 3 without the digest; it still loads, its digest unknown
/// (which the core accepts as matching any history, as before).</para>
/// <para>Written aside (<c>.tmp</c>, created readable by this account only, since it holds the key),
/// fsynced, then renamed over the newest after the newest was renamed to the previous, the
/// directory fsynced after each rename: a crash at any point leaves the newest or the previous
/// checkpoint whole, once <see cref="Writer.Commit"/> returned the new one is the newest, and a file
/// that was cut short or changed fails its hash, so it is reported and never loaded.</para>
/// </remarks>
internal static class CheckpointFile
{
    private static ReadOnlySpan<byte> Magic => "ISISCKPT"u8;
    private const byte Version = 3;

    /// <summary>The format before the history position recorded its digest.</summary>
    private const byte VersionWithoutDigest = 2;

    /// <summary>The format before the state lineage was recorded (it has no such field).</summary>
    private const byte VersionWithoutLineage = 1;

    private const int HashBytes = 32;
    private const int EndMarker = -1;

    /// <summary>The newest checkpoint of <paramref name="group"/> in <paramref name="directory"/>.</summary>
    public static string NewestPath(string directory, string group) => Path.Combine(directory, FileNameOf(group) + ".checkpoint");

    /// <summary>The one before it, kept in case the newest is damaged.</summary>
    public static string PreviousPath(string directory, string group) => NewestPath(directory, group) + ".1";

    private static string FileNameOf(string group) => string.Concat(group.Select(c => char.IsLetterOrDigit(c) || c is '-' or '_' ? c : '_'));

    /// <summary>Where a group's SafeSend history stood when a checkpoint was made: its lineage and the entries applied.</summary>
    internal readonly record struct HistoryPosition(Lineage Lineage, long Index, ulong Digest = HistoryDigest.Unknown)
    {
        /// <summary>
        /// The name the core knows this checkpoint by: its history position, which stays the same
        /// while the file moves from newest to previous (a path would not).
        /// </summary>
        public string MarkName => $"{Lineage}#{Index}";

        public CheckpointMark Mark => new(Lineage, Index, MarkName, Digest);
    }

    /// <summary>Where a checkpoint copied from another member is written until it is whole and checked.</summary>
    public static string CopyPath(string directory, string group) => NewestPath(directory, group) + ".copy";

    /// <summary>What <see cref="AppendCopyChunk"/> made of a chunk of a checkpoint copied from another member.</summary>
    internal enum CopyProgress
    {
        /// <summary>The copy on disk does not end where the chunk starts (a restart cut it short): the core starts it over.</summary>
        Stale,

        /// <summary>Appended; more chunks follow.</summary>
        More,

        /// <summary>Appended, the copy is whole and synced: check it, then install it.</summary>
        Whole,
    }

    /// <summary>
    /// Appends a chunk (at <paramref name="offset"/> of <paramref name="total"/> bytes) of a
    /// checkpoint copied from another member to the copy at <paramref name="path"/>; the first chunk
    /// starts the file anew (readable by this account only: it may hold the group key). The whole
    /// copy is synced before it is reported whole, so <see cref="Install"/> renames only synced bytes.
    /// </summary>
    public static CopyProgress AppendCopyChunk(IDurableFiles files, string path, long offset, ReadOnlySpan<byte> chunk, long total)
    {
        if (offset != 0 && !files.Exists(path)) return CopyProgress.Stale;
        using IDurableFile file = files.OpenAppend(path, truncate: offset == 0, ownerOnly: true);
        if (file.Length != offset) return CopyProgress.Stale;
        file.Write(chunk);
        if (offset + chunk.Length < total) return CopyProgress.More;
        file.Sync();
        return CopyProgress.Whole;
    }

    /// <summary>
    /// Makes the checkpoint at <paramref name="checkedPath"/> (written and synced) the newest: the
    /// newest becomes the previous, then it is renamed into place, and the directory is synced.
    /// </summary>
    public static void Install(string directory, string group, string checkedPath, IDurableFiles? files = null) =>
        MakeNewest(files ?? DurableFiles.System, directory, group, checkedPath);

    /// <summary>
    /// Renames the checkpoint at <paramref name="path"/> to <c>{path}.orphan-{UTC time}</c>, durably,
    /// and returns that name: no later save renames over it, and no join loads it, so its data
    /// stays until the operator decides what to do with it.
    /// </summary>
    public static string KeepAside(string path, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        string aside = DurableFiles.AsidePath(files, path, "orphan");
        files.Rename(path, aside);
        files.SyncDirectory(DurableFiles.DirectoryOf(aside));
        return aside;
    }

    /// <summary>Renames a whole, synced checkpoint file into place as the newest; the newest becomes the previous.</summary>
    private static void MakeNewest(IDurableFiles files, string directory, string group, string from)
    {
        string newest = NewestPath(directory, group);
        string folder = DurableFiles.DirectoryOf(newest);
        // Each rename made durable before the next: a crash between them must not undo the
        // first while keeping the second (the previous overwritten, no newest yet on disk).
        if (files.Exists(newest))
        {
            files.Rename(newest, PreviousPath(directory, group));
            files.SyncDirectory(folder);
        }
        files.Rename(from, newest);
        files.SyncDirectory(folder);
    }

    /// <summary>A history position as the header of a file of <paramref name="version"/> holds it (before format 3: its digest unknown).</summary>
    private static HistoryPosition ReadHistoryPosition(BinaryReader reader, byte version)
    {
        Lineage lineage = ReadLineage(reader);
        long index = reader.ReadInt64();
        ulong digest = version >= Version ? reader.ReadUInt64() : HistoryDigest.Unknown;
        return new HistoryPosition(lineage, index, digest);
    }

    /// <summary>The history position a checkpoint's header names (null: none, or the header does not parse); the file is not checked whole.</summary>
    public static HistoryPosition? ReadPosition(FileStream file, string group)
    {
        try
        {
            file.Position = 0;
            var reader = new BinaryReader(file, Encoding.UTF8, leaveOpen: true);
            byte version = 0;
            // The history position comes before the state lineage in every format.
            if (!reader.ReadBytes(Magic.Length).AsSpan().SequenceEqual(Magic) || (version = reader.ReadByte()) is not (Version or VersionWithoutDigest or VersionWithoutLineage) || reader.ReadString() != group) return null;
            if (!reader.ReadBoolean()) return null;
            return ReadHistoryPosition(reader, version);
        }
        catch (Exception e) when (e is IOException or EndOfStreamException)
        {
            return null;
        }
    }

    private static void WriteLineage(BinaryWriter w, Lineage lineage)
    {
        w.Write(lineage.Founder.Endpoint);
        w.Write(lineage.Founder.Incarnation);
        w.Write(lineage.ViewId);
    }

    private static Lineage ReadLineage(BinaryReader reader)
    {
        var founder = new NodeId(reader.ReadUInt64(), reader.ReadUInt32());
        return new Lineage(founder, reader.ReadInt32());
    }

    /// <summary>Starts writing a new checkpoint aside; <see cref="Writer.Commit"/> makes it the newest.</summary>
    /// <param name="directory">The member's checkpoint directory.</param>
    /// <param name="group">The group's name.</param>
    /// <param name="position">Where the SafeSend history stood (disk durability), or null.</param>
    /// <param name="stateLineage">The lineage of the state the parts hold, or null when unknown (or named by <paramref name="position"/>).</param>
    /// <param name="key">The group key, or null.</param>
    /// <param name="writtenUtc">When it was made.</param>
    /// <param name="files">The file layer (a simulated disk in tests).</param>
    public static Writer Create(string directory, string group, HistoryPosition? position, Lineage? stateLineage, byte[]? key, DateTime writtenUtc, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        files.CreateDirectory(directory);
        return new Writer(directory, group, position, stateLineage, key, writtenUtc, files);
    }

    /// <summary>A checkpoint being written: parts are appended, then <see cref="Commit"/> renames it into place (or Dispose discards it).</summary>
    internal sealed class Writer : IDisposable
    {
        private readonly string _directory;
        private readonly string _group;
        private readonly string _temporary;
        private readonly IDurableFiles _files;
        private readonly IDurableFile _file;
        private readonly IncrementalHash _hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        private bool _committed;

        internal Writer(string directory, string group, HistoryPosition? position, Lineage? stateLineage, byte[]? key, DateTime writtenUtc, IDurableFiles files)
        {
            _directory = directory;
            _group = group;
            _files = files;
            _temporary = NewestPath(directory, group) + ".tmp";
            _file = files.OpenAppend(_temporary, truncate: true, ownerOnly: true);
            var header = new MemoryStream();
            using (var w = new BinaryWriter(header, Encoding.UTF8, leaveOpen: true)) // little-endian, as the reader expects
            {
                w.Write(Magic);
                w.Write(Version);
                w.Write(group);
                w.Write(position.HasValue);
                if (position is { } p)
                {
                    WriteLineage(w, p.Lineage);
                    w.Write(p.Index);
                    w.Write(p.Digest);
                }
                w.Write(stateLineage.HasValue);
                if (stateLineage is { } l) WriteLineage(w, l);
                w.Write(writtenUtc.Ticks);
                w.Write((byte)(key?.Length ?? 0));
                if (key != null) w.Write(key);
            }
            Write(header.GetBuffer().AsSpan(0, (int)header.Length));
        }

        /// <summary>Parts written so far.</summary>
        public long Parts { get; private set; }

        /// <summary>Bytes written so far (the whole file once committed).</summary>
        public long Bytes { get; private set; }

        public void Add(ReadOnlySpan<byte> part)
        {
            Span<byte> length = stackalloc byte[4];
            BinaryPrimitives.WriteInt32LittleEndian(length, part.Length);
            Write(length);
            Write(part);
            Parts++;
        }

        private void Write(ReadOnlySpan<byte> bytes)
        {
            _hash.AppendData(bytes);
            _file.Write(bytes);
            Bytes += bytes.Length;
        }

        /// <summary>Ends the file with its part count and hash, makes it durable, and renames it into place (the newest becomes the previous).</summary>
        public void Commit()
        {
            Span<byte> end = stackalloc byte[12];
            BinaryPrimitives.WriteInt32LittleEndian(end, EndMarker);
            BinaryPrimitives.WriteInt64LittleEndian(end[4..], Parts);
            Write(end);
            _file.Write(_hash.GetHashAndReset());
            Bytes += HashBytes;
            _file.Sync(); // before its rename: a name that survives a crash must name whole contents
            _file.Dispose();
            MakeNewest(_files, _directory, _group, _temporary);
            _committed = true;
        }

        public void Dispose()
        {
            _hash.Dispose();
            if (_committed) return;
            try
            {
                _file.Dispose();
                _files.Delete(_temporary);
            }
            catch (IOException)
            {
                // Best effort: the next checkpoint overwrites it.
            }
        }
    }

    /// <summary>
    /// A checkpoint read in full and found whole (its hash matches, its structure parses). The file
    /// stays open until disposed, so a checkpoint written meanwhile (it is renamed over this one)
    /// does not change what loads.
    /// </summary>
    internal sealed class Checked : IDisposable
    {
        private readonly Stream _file;
        private readonly long _partsAt;

        internal Checked(string path, Stream file, long partsAt, HistoryPosition? position, Lineage? stateLineage, byte[]? key, DateTime writtenUtc, long parts, long length)
        {
            Path = path;
            _file = file;
            _partsAt = partsAt;
            Position = position;
            StateLineage = stateLineage;
            Key = key;
            WrittenUtc = writtenUtc;
            Parts = parts;
            Length = length;
        }

        public string Path { get; }

        public HistoryPosition? Position { get; }

        /// <summary>The state lineage the header records (format 2, without disk durability); null if it records none.</summary>
        public Lineage? StateLineage { get; }

        /// <summary>
        /// The lineage of the state this checkpoint holds: the one recorded, or else its SafeSend
        /// history's (with disk durability the state is founded with the history). Null means
        /// unknown: a format 1 file without a history position. Unknown is accepted wherever a
        /// lineage is compared (it predates lineages, so nothing can tell it apart), and the next
        /// save writes the group's lineage in its place.
        /// </summary>
        public Lineage? Lineage => StateLineage ?? Position?.Lineage;

        public byte[]? Key { get; }

        public DateTime WrittenUtc { get; }

        public long Parts { get; }

        public long Length { get; }

        /// <summary>The parts in order (the file was checked whole when it was opened).</summary>
        public IEnumerable<byte[]> ReadParts()
        {
            _file.Position = _partsAt;
            byte[] length = new byte[4];
            for (long i = 0; i < Parts; i++)
            {
                _file.ReadExactly(length);
                byte[] part = new byte[BinaryPrimitives.ReadInt32LittleEndian(length)];
                _file.ReadExactly(part);
                yield return part;
            }
        }

        public override string ToString() => $"{Path} (written {WrittenUtc:u}, {Parts} parts, {Length} bytes" +
                                             (Position is { } p ? $", {p.Index} SafeSends of history {p.Lineage})" :
                                                 StateLineage is { } l ? $", state lineage {l})" : ")");

        public void Dispose() => _file.Dispose();
    }

    /// <summary>
    /// Opens and checks a checkpoint: null and no problem if there is none; null and the problem
    /// if it is damaged (cut short, changed, or of another group), never a partial load.
    /// </summary>
    public static Checked? Open(string path, string group, out string? problem, IDurableFiles? files = null)
    {
        files ??= DurableFiles.System;
        problem = null;
        if (!files.Exists(path)) return null;
        Stream file;
        try
        {
            file = files.OpenRead(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            problem = $"checkpoint {path} cannot be read: {e.Message}";
            return null;
        }
        try
        {
            Checked? c = Check(path, file, group, out problem);
            if (c == null) file.Dispose();
            return c;
        }
        catch (Exception e) when (e is IOException or EndOfStreamException)
        {
            file.Dispose();
            problem = $"checkpoint {path} cannot be read: {e.Message}";
            return null;
        }
    }

    private static Checked? Check(string path, Stream file, string group, out string? problem)
    {
        long length = file.Length;
        if (length < Magic.Length + 1 + HashBytes)
        {
            problem = $"checkpoint {path} is damaged: it is {length} bytes long, shorter than any checkpoint (cut short by a crash or a full disk?)";
            return null;
        }
        // The hash first, over the whole file: nothing is believed before it matches.
        using (var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256))
        {
            byte[] buffer = new byte[1 << 16];
            long left = length - HashBytes;
            while (left > 0)
            {
                int n = file.Read(buffer, 0, (int)Math.Min(buffer.Length, left));
                if (n <= 0) throw new EndOfStreamException("the file shrank while it was read");
                hash.AppendData(buffer, 0, n);
                left -= n;
            }
            byte[] stored = new byte[HashBytes];
            file.ReadExactly(stored);
            if (!CryptographicOperations.FixedTimeEquals(stored, hash.GetHashAndReset()))
            {
                problem = $"checkpoint {path} is damaged: its SHA-256 does not match its contents (cut short, or changed after it was written)";
                return null;
            }
        }
        file.Position = 0;
        var reader = new BinaryReader(file, Encoding.UTF8, leaveOpen: true);
        byte version = 0;
        if (!reader.ReadBytes(Magic.Length).AsSpan().SequenceEqual(Magic) || (version = reader.ReadByte()) is not (Version or VersionWithoutDigest or VersionWithoutLineage))
        {
            problem = $"checkpoint {path} is not an Isis checkpoint of format {VersionWithoutLineage} to {Version}";
            return null;
        }
        string name = reader.ReadString();
        if (name != group)
        {
            problem = $"checkpoint {path} holds group '{name}', not '{group}'";
            return null;
        }
        HistoryPosition? position = null;
        if (reader.ReadBoolean()) position = ReadHistoryPosition(reader, version);
        Lineage? stateLineage = null;
        if (version != VersionWithoutLineage && reader.ReadBoolean()) stateLineage = ReadLineage(reader);
        var written = new DateTime(reader.ReadInt64(), DateTimeKind.Utc);
        int keyLength = reader.ReadByte();
        byte[]? key = keyLength == 0 ? null : reader.ReadBytes(keyLength);
        if (keyLength is not (0 or 32) || position is { Index: < 0 })
        {
            problem = $"checkpoint {path} is damaged: its header does not parse";
            return null;
        }
        long partsAt = file.Position;
        long parts = 0;
        long end = length - HashBytes;
        while (true)
        {
            int n = reader.ReadInt32();
            if (n == EndMarker) break;
            if (n < 0 || file.Position + n > end)
            {
                problem = $"checkpoint {path} is damaged: part {parts + 1} runs past the end";
                return null;
            }
            file.Position += n;
            parts++;
        }
        if (reader.ReadInt64() != parts || file.Position != end)
        {
            problem = $"checkpoint {path} is damaged: its part count does not match its parts";
            return null;
        }
        problem = null;
        return new Checked(path, file, partsAt, position, stateLineage, key, written, parts, length);
    }
}
