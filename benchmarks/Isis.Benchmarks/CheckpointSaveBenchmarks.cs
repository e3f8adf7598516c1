using BenchmarkDotNet.Attributes;

namespace Isis.Benchmarks;

/// <summary>
/// Persistent checkpoints (issue 14, item 2): a joined member saves a state of <see cref="StateMiB"/>
/// MiB with <see cref="Group.SaveCheckpoint"/> (MakeChkpt parts of <see cref="PartKiB"/> KiB to a file
/// written aside, hashed with SHA-256, fsynced and renamed into place). The baseline writes the same
/// bytes in the same parts to a file in the same directory and fsyncs it: the floor of any durable
/// save on this disk, measured in the same run.
/// </summary>
public class CheckpointSaveBenchmarks
{
    private IsisRuntime[] _runtimes = [];
    private Group? _group;
    private byte[] _state = [];
    private string _directory = "";

    /// <summary>Size of the state.</summary>
    [Params(16, 64)]
    public int StateMiB { get; set; }

    /// <summary>Size of one SendChkpt part.</summary>
    [Params(64, 1024)]
    public int PartKiB { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _state = new byte[StateMiB << 20];
        new Random(1).NextBytes(_state);
        _directory = Directory.CreateTempSubdirectory("isis-bench-checkpoint-").FullName;
        _runtimes = Loopback.StartRuntimes(1);
        _group = new Group(_runtimes[0], "bench-checkpoint");
        int part = PartKiB << 10;
        _group.MakeChkpt += (ChkptMaker)(_ =>
        {
            for (int offset = 0; offset < _state.Length; offset += part) _group.SendChkpt(_state.AsMemory(offset, Math.Min(part, _state.Length - offset)).ToArray());
        });
        _group.PersistCheckpoints(_directory, Timeout.InfiniteTimeSpan);
        _group.Join();
    }

    /// <summary>The member saves its whole state.</summary>
    [Benchmark]
    public void SaveCheckpoint() => _group!.SaveCheckpoint();

    /// <summary>The same bytes, in parts of the same size (each a fresh array, as SendChkpt's encoding makes), to a file, fsynced.</summary>
    [Benchmark(Baseline = true)]
    public void PlainFileWriteAndFsync()
    {
        int part = PartKiB << 10;
        using (var file = new FileStream(Path.Combine(_directory, "plain.bin"), FileMode.Create, FileAccess.Write, FileShare.None, 1 << 16))
        {
            for (int offset = 0; offset < _state.Length; offset += part) file.Write(_state.AsSpan(offset, Math.Min(part, _state.Length - offset)).ToArray());
            file.Flush(flushToDisk: true);
        }
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        Loopback.StopRuntimes(_runtimes);
        Directory.Delete(_directory, recursive: true);
    }
}
