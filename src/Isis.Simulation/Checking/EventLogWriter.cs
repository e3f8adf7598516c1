using Isis.Core.Identity;
using Isis.Core.Node;

namespace Isis.Simulation.Checking;

/// <summary>
/// Writes a real process's core events as JSON lines in <see cref="History"/>'s format, so the
/// <see cref="HistoryChecker"/> can check a real run (the multi-process tests' member host records
/// with it, through the runtime's core-event hook). Times are wall-clock microseconds since
/// the Unix epoch (every process on the machine shares that clock; each loop's Stopwatch does not),
/// made non-decreasing within this process.
/// </summary>
/// <remarks>
/// Events are appended to an in-memory batch on the event loop thread and written to the file by
/// a background thread every 100 ms, so a SIGKILLed process leaves a log that is a prefix of what
/// it did (up to the last flush).
/// </remarks>
internal sealed class EventLogWriter : IDisposable
{
    private readonly object _gate = new();
    private readonly object _fileGate = new();
    private readonly StreamWriter _file;
    private readonly Thread _flusher;
    private readonly ManualResetEventSlim _stop = new(false);
    private History _batch = new();
    private long _lastTime;
    private bool _disposed;

    public EventLogWriter(string path)
    {
        _file = new StreamWriter(new FileStream(path, FileMode.Create, FileAccess.Write, FileShare.Read), new System.Text.UTF8Encoding(false), 1 << 16);
        _flusher = new Thread(FlushLoop) { IsBackground = true, Name = "event-log" };
        _flusher.Start();
    }

    /// <summary>Wall-clock microseconds since the Unix epoch, never going back within this process.</summary>
    private long Now()
    {
        long t = WallMicros();
        if (t < _lastTime) t = _lastTime;
        _lastTime = t;
        return t;
    }

    /// <summary>
    /// The <c>IsisRuntime.CoreEvent</c> hook: runs on the thread that drives the core. An event is
    /// stamped with the time of the step that produced it, not of its recording: a process stopped
    /// (SIGSTOP) between the two would otherwise log, after its expulsion, sends its lease allowed
    /// before it. The loop clock starts at each process's own zero, so it is mapped to the wall
    /// clock by the smallest offset seen (recording never precedes the step).
    /// </summary>
    public void OnCoreEvent(NodeId self, NodeEvent e, long loopClock)
    {
        lock (_gate)
        {
            if (_disposed) return;
            _wallMinusLoop = Math.Min(_wallMinusLoop, WallMicros() - loopClock);
            long t = Math.Max(_lastTime, loopClock + _wallMinusLoop);
            _lastTime = t;
            _batch.RecordCoreEvent(t, self, e);
        }
    }

    private long _wallMinusLoop = long.MaxValue;

    private static long WallMicros() => (DateTime.UtcNow - DateTime.UnixEpoch).Ticks / 10;

    public void RecordJoinRequested(NodeId self, string group)
    {
        lock (_gate)
        {
            if (!_disposed) _batch.RecordJoinRequested(Now(), self, GroupId.FromName(group));
        }
    }

    /// <summary>This process founded the embedded membership service with its replica <paramref name="replica"/> alone.</summary>
    public void RecordFounded(NodeId replica)
    {
        lock (_gate)
        {
            if (!_disposed) _batch.RecordFounded(Now(), replica, [replica]);
        }
    }

    public void RecordQueryIssued(NodeId self, string group)
    {
        lock (_gate)
        {
            if (!_disposed) _batch.RecordQueryIssued(Now(), self, GroupId.FromName(group));
        }
    }

    /// <summary>
    /// Records a founding of the embedded service after the process started (it took the well-known
    /// port over and found no service): the configuration of version 0 that names only the replica
    /// <paramref name="lateFounder"/> says this process founded (null: it did not).
    /// </summary>
    public void WatchFounding(NodeEvent e, Func<NodeId?> lateFounder)
    {
        if (e is ServiceConfigurationChanged { Version: 0, Replicas: [var replica] } && lateFounder() == replica) RecordFounded(replica);
    }

    private void FlushLoop()
    {
        while (!_stop.Wait(TimeSpan.FromMilliseconds(100))) Flush();
    }

    /// <summary>Writes what is pending to the file (the OS holds it even if the process is SIGKILLed right after).</summary>
    public void Flush()
    {
        // The file lock is taken first, so two flushes write their batches in the order they took them.
        lock (_fileGate)
        {
            History batch;
            lock (_gate)
            {
                if (_batch.Count == 0 || _file.BaseStream is not { CanWrite: true }) return;
                batch = _batch;
                _batch = new History();
            }
            batch.WriteJsonLines(_file); // flushes the writer
        }
    }

    public void Dispose()
    {
        lock (_fileGate)
        {
            if (_stop.IsSet) return;
            _stop.Set();
        }
        if (Thread.CurrentThread != _flusher) _flusher.Join(TimeSpan.FromSeconds(5));
        Flush();
        lock (_gate) _disposed = true;
        lock (_fileGate) _file.Dispose();
    }
}
