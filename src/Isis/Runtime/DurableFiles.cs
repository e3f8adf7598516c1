using System.Runtime.InteropServices;

namespace Isis.Runtime;

/// <summary>
/// The few file operations the on-disk stores (the SafeSend history log, persistent checkpoints,
/// the membership replica log) make, and nothing else: so a test can put a simulated disk under
/// the real store code and crash it after any operation (tests/Isis.Tests/Runtime/SimulatedDisk.cs).
/// </summary>
/// <remarks>
/// <para>What survives a crash, on the disks the stores are written for (Linux, ext4/xfs): bytes
/// written to a file only once the file is fsynced (<see cref="IDurableFile.Sync"/>); a name
/// created, renamed, linked or deleted only once its directory is fsynced
/// (<see cref="SyncDirectory"/>). Every store therefore syncs a file before it renames it into
/// place, and syncs the directory after every new name, before it relies on that name.</para>
/// <para>A rename replaces its target atomically: a reader sees the old file or the new one.</para>
/// </remarks>
internal interface IDurableFiles
{
    bool Exists(string path);

    /// <summary>Opens a file for reading from its start (seekable); a rename over it meanwhile does not change what is read.</summary>
    Stream OpenRead(string path);

    /// <summary>
    /// Opens a file for appending at its end, creating it if missing (then its directory must be
    /// synced before the file is relied on); <paramref name="truncate"/> empties it first,
    /// <paramref name="ownerOnly"/> creates it readable by this account only (it holds a key).
    /// With <paramref name="truncate"/>, <paramref name="reserveBytes"/> allocates that much disk
    /// for the file ahead of its writes (its length stays what is written): a file that is filled
    /// to a known size then neither grows its footprint write by write nor fails for space midway.
    /// </summary>
    IDurableFile OpenAppend(string path, bool truncate = false, bool ownerOnly = false, long reserveBytes = 0);

    /// <summary>Renames <paramref name="from"/> to <paramref name="to"/>, atomically replacing <paramref name="to"/> if it exists.</summary>
    void Rename(string from, string to);

    /// <summary>
    /// Gives the file at <paramref name="existing"/> a second name (a hard link; a synced copy
    /// where the system has none). <paramref name="newPath"/> must not exist.
    /// </summary>
    void LinkOrCopy(string existing, string newPath);

    void Delete(string path);

    /// <summary>The paths of the files in <paramref name="directory"/> whose names start with <paramref name="prefix"/> (none if it does not exist).</summary>
    IEnumerable<string> FilesIn(string directory, string prefix);

    void CreateDirectory(string directory);

    /// <summary>Makes the names in <paramref name="directory"/> durable: creations, renames, links and deletions before it.</summary>
    void SyncDirectory(string directory);
}

/// <summary>A file open for appending (see <see cref="IDurableFiles.OpenAppend"/>).</summary>
internal interface IDurableFile : IDisposable
{
    /// <summary>The file's length with everything written.</summary>
    long Length { get; }

    void Write(ReadOnlySpan<byte> bytes);

    /// <summary>Cuts the file to <paramref name="length"/> bytes (durable with the next <see cref="Sync"/>).</summary>
    void Truncate(long length);

    /// <summary>Makes everything written durable (flush and fsync).</summary>
    void Sync();
}

/// <summary>The stores' file layer over the real file system.</summary>
internal sealed class DurableFiles : IDurableFiles
{
    /// <summary>The real file system.</summary>
    public static readonly IDurableFiles System = new DurableFiles(); // stateless: one instance serves every runtime

    private DurableFiles()
    {
    }

    /// <summary>The directory that holds <paramref name="path"/>, for <see cref="IDurableFiles.SyncDirectory"/>.</summary>
    public static string DirectoryOf(string path) =>
        Path.GetDirectoryName(Path.GetFullPath(path)) ?? throw new ArgumentException($"{path} names no file in a directory", nameof(path));

    /// <summary>
    /// A name beside <paramref name="path"/> that is not taken yet, for a file kept aside rather
    /// than lost: <c>{path}.{what}-{UTC time}</c>, with a counter if that name is taken.
    /// </summary>
    public static string AsidePath(IDurableFiles files, string path, string what)
    {
        string stamp = DateTime.UtcNow.ToString("yyyyMMdd'T'HHmmss", global::System.Globalization.CultureInfo.InvariantCulture);
        string candidate = $"{path}.{what}-{stamp}";
        for (int n = 2; files.Exists(candidate); n++) candidate = $"{path}.{what}-{stamp}-{n}";
        return candidate;
    }

    public bool Exists(string path) => File.Exists(path);

    public Stream OpenRead(string path) =>
        new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.ReadWrite | FileShare.Delete, 1 << 16);

    public IDurableFile OpenAppend(string path, bool truncate = false, bool ownerOnly = false, long reserveBytes = 0)
    {
        var options = new FileStreamOptions
        {
            Mode = truncate ? FileMode.Create : FileMode.OpenOrCreate, Access = FileAccess.Write, Share = FileShare.Read, BufferSize = 1 << 16,
            // Effective when the file is created or overwritten (FileMode.Create): on Linux it is
            // fallocate(FALLOC_FL_KEEP_SIZE), so the blocks are the file's and its length stays 0.
            PreallocationSize = truncate ? reserveBytes : 0,
        };
        if (ownerOnly && !OperatingSystem.IsWindows()) options.UnixCreateMode = UnixFileMode.UserRead | UnixFileMode.UserWrite;
        var file = new FileStream(path, options);
        file.Seek(0, SeekOrigin.End);
        return new AppendFile(file);
    }

    public void Rename(string from, string to) => File.Move(from, to, overwrite: true);

    public void LinkOrCopy(string existing, string newPath)
    {
        if (OperatingSystem.IsLinux())
        {
            if (NativeFiles.link(existing, newPath) == 0) return;
            int errno = Marshal.GetLastPInvokeError();
            // EXDEV, EPERM, EMLINK, ENOTSUP: the file system has no hard links here; copy instead.
            if (errno is not (NativeFiles.EXDEV or NativeFiles.EPERM or NativeFiles.EMLINK or NativeFiles.ENOTSUP))
                throw new IOException($"cannot link {existing} to {newPath} (errno {errno})");
        }
        File.Copy(existing, newPath, overwrite: false);
        using var copy = new FileStream(newPath, FileMode.Open, FileAccess.ReadWrite, FileShare.Read);
        copy.Flush(flushToDisk: true);
    }

    public void Delete(string path) => File.Delete(path);

    public IEnumerable<string> FilesIn(string directory, string prefix) =>
        Directory.Exists(directory) ? Directory.EnumerateFiles(directory, prefix + "*").ToList() : [];

    public void CreateDirectory(string directory)
    {
        string full = Path.TrimEndingDirectorySeparator(Path.GetFullPath(directory));
        if (Directory.Exists(full)) return;
        // Each new level's name is made durable in its parent, as a new file's is.
        string? parent = Path.GetDirectoryName(full);
        if (parent != null) CreateDirectory(parent);
        Directory.CreateDirectory(full);
        if (parent != null) SyncDirectory(parent);
    }

    public void SyncDirectory(string directory)
    {
        // Windows and macOS make no directory handles fsync-able this way (NTFS journals renames;
        // macOS would need F_FULLFSYNC); the stores are written for Linux, where it matters.
        if (!OperatingSystem.IsLinux()) return;
        // .NET opens no directory handles, so this goes to libc: open(O_RDONLY | O_DIRECTORY), fsync, close.
        int fd = NativeFiles.open(directory, NativeFiles.O_RDONLY | NativeFiles.O_DIRECTORY);
        if (fd < 0) throw new IOException($"cannot open directory {directory} to make its new names durable (errno {Marshal.GetLastPInvokeError()})");
        try
        {
            if (NativeFiles.fsync(fd) != 0) throw new IOException($"fsync of directory {directory} failed (errno {Marshal.GetLastPInvokeError()})");
        }
        finally
        {
            _ = NativeFiles.close(fd);
        }
    }

    private sealed class AppendFile(FileStream file) : IDurableFile
    {
        public long Length => file.Length;

        public void Write(ReadOnlySpan<byte> bytes) => file.Write(bytes);

        public void Truncate(long length)
        {
            file.Flush();
            file.SetLength(length);
            file.Seek(0, SeekOrigin.End);
        }

        public void Sync() => file.Flush(flushToDisk: true);

        public void Dispose() => file.Dispose();
    }
}

/// <summary>The libc calls that sync a directory and link a file (Linux).</summary>
internal static partial class NativeFiles
{
    public const int O_RDONLY = 0, O_DIRECTORY = 0x10000;
    public const int EPERM = 1, EXDEV = 18, EMLINK = 31, ENOTSUP = 95;

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int open(string path, int flags);

    [LibraryImport("libc", SetLastError = true)]
    public static partial int fsync(int fd);

    [LibraryImport("libc", SetLastError = true)]
    public static partial int close(int fd);

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    public static partial int link(string existing, string newPath);
}
