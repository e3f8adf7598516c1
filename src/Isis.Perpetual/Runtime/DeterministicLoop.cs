using System.Collections.Concurrent;

namespace Isis.Perpetual.Runtime;

/// <summary>
/// The thread a replica's application loop runs on, and the synchronization context its awaits
/// resume on: the scheduler that makes an async loop deterministic.
/// </summary>
/// <remarks>
/// <para>The loop advances only between inputs, the agreed events of its replica (a request
/// ordered, a call completed), taken one at a time in the agreed order. Each input is applied
/// (queued, or handed to the await that waits for it) and then every continuation it made ready
/// runs, and every continuation those made ready, until the loop waits again on something that has
/// not arrived. Only then is the next input taken. So what the loop sees at each await is a function
/// of the inputs before it, the same at every correct replica, whatever the threads' timing.</para>
/// <para>A continuation posted from another thread means the loop awaited something outside the
/// agreed order (a timer, I/O, a task of the thread pool): its replicas can no longer be trusted to
/// agree. It still runs, at the next input boundary, and is reported (<c>onForeignResumption</c>).</para>
/// </remarks>
internal sealed class DeterministicLoop : SynchronizationContext, IDisposable
{
    private readonly BlockingCollection<Action> _inputs = new();
    private readonly Queue<(SendOrPostCallback Callback, object? State)> _ready = new();
    private readonly Lock _gate = new();
    private readonly Thread _thread;
    private readonly Action<long> _onForeignResumption;
    private readonly Action<Exception> _onFault;
    private bool _stopped;

    public DeterministicLoop(string name, Action<long> onForeignResumption, Action<Exception> onFault)
    {
        _onForeignResumption = onForeignResumption;
        _onFault = onFault;
        _thread = new Thread(Run) { IsBackground = true, Name = "perpetual-loop " + name };
        _thread.Start();
    }

    /// <summary>True on the loop's own thread: the only place the loop's state may be touched.</summary>
    public bool OnLoopThread => Thread.CurrentThread == _thread;

    /// <summary>Continuations that came from outside the loop's thread: awaits of something not agreed.</summary>
    public long ForeignResumptions => Interlocked.Read(ref _foreignResumptions);

    private long _foreignResumptions;

    /// <summary>Queues <paramref name="apply"/> as the next input: it runs on the loop's thread, then everything it made ready.</summary>
    public void Input(Action apply)
    {
        try
        {
            _inputs.Add(apply);
        }
        catch (InvalidOperationException)
        {
            // Stopped: the replica is being disposed, and the loop takes no more inputs.
        }
    }

    public override void Post(SendOrPostCallback d, object? state)
    {
        lock (_gate) _ready.Enqueue((d, state));
        if (OnLoopThread) return;
        long count = Interlocked.Increment(ref _foreignResumptions);
        if ((count & (count - 1)) == 0) _onForeignResumption(count); // the 1st, 2nd, 4th, 8th...: a loop that does it all the time does not flood the log
        Input(static () => { }); // wakes the loop's thread to run it
    }

    public override void Send(SendOrPostCallback d, object? state) =>
        throw new NotSupportedException("a Perpetual loop runs on its own thread only; post work to it (await) instead of sending it synchronously");

    public override SynchronizationContext CreateCopy() => this;

    private void Run()
    {
        SetSynchronizationContext(this);
        foreach (Action input in _inputs.GetConsumingEnumerable())
        {
            Guarded(input);
            RunReady();
        }
    }

    /// <summary>Runs continuations until none is ready: the loop waits on something that has not arrived.</summary>
    private void RunReady()
    {
        while (true)
        {
            (SendOrPostCallback Callback, object? State) next;
            lock (_gate)
            {
                if (!_ready.TryDequeue(out next)) return;
            }
            Guarded(() => next.Callback(next.State));
        }
    }

    /// <summary>What escapes an input or a continuation (an async void that threw) is reported; the thread goes on.</summary>
    private void Guarded(Action work)
    {
        try
        {
            work();
        }
        catch (Exception e)
        {
            _onFault(e);
        }
    }

    /// <summary>Runs <paramref name="last"/> as the final input, then stops the thread.</summary>
    public void Stop(Action last)
    {
        lock (_gate)
        {
            if (_stopped) return;
            _stopped = true;
        }
        Input(last);
        _inputs.CompleteAdding();
        if (!OnLoopThread) _thread.Join(TimeSpan.FromSeconds(5));
    }

    public void Dispose() => _inputs.Dispose();
}
