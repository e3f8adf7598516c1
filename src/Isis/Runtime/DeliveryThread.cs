using System.Collections.Concurrent;
using Isis.Core.Common;
using Isis.Core.Identity;

namespace Isis.Runtime;

/// <summary>
/// A message waiting for its handlers: a copy of its payload in a pooled buffer (the core recycles
/// its own copy once the message is stable, which may be before the handlers run).
/// </summary>
internal readonly record struct PendingDelivery(NodeId Sender, byte[] Buffer, int Length, bool IsQuery, long QueryId);

/// <summary>
/// One thread per group that runs the application's handlers one at a time, in the order the
/// protocol delivered (DESIGN.md section 4). The event loop only enqueues.
/// </summary>
/// <remarks>
/// Messages are queued as structs and their buffers go back to the pool after dispatch, so the
/// steady-state delivery path allocates nothing; other work (view handlers, completions) is an
/// <see cref="Action"/> in the same queue, so everything runs in the order it was enqueued.
/// </remarks>
internal sealed class DeliveryThread : IDisposable
{
    private readonly ConcurrentQueue<(Action? Work, PendingDelivery Message)> _work = new();
    private readonly SemaphoreSlim _ready = new(0);
    private readonly Action<PendingDelivery> _dispatch;
    private readonly IBufferPool _pool;
    private readonly Thread _thread;
    private volatile bool _completed;

    public DeliveryThread(string groupName, Action<PendingDelivery> dispatch, IBufferPool pool)
    {
        _dispatch = dispatch;
        _pool = pool;
        _thread = new Thread(Run) { IsBackground = true, Name = "isis-deliver-" + groupName };
        _thread.Start();
    }

    public bool IsCurrentThread => Thread.CurrentThread == _thread;

    public int Backlog => _work.Count;

    public void Enqueue(Action work) => Add((work, default));

    /// <summary>Queues a message; its buffer returns to the pool after dispatch (or at once if the thread has stopped).</summary>
    public void Enqueue(in PendingDelivery message)
    {
        if (!Add((null, message))) _pool.Return(message.Buffer);
    }

    private bool Add((Action? Work, PendingDelivery Message) item)
    {
        if (_completed) return false; // the group is gone
        _work.Enqueue(item);
        _ready.Release();
        return true;
    }

    private void Run()
    {
        while (true)
        {
            _ready.Wait();
            if (!_work.TryDequeue(out var item)) break; // woken by Complete with nothing left
            if (item.Work != null)
            {
                item.Work();
                continue;
            }
            try
            {
                _dispatch(item.Message);
            }
            finally
            {
                _pool.Return(item.Message.Buffer);
            }
        }
    }

    /// <summary>Lets the thread finish the queued work and stop; does not wait (safe on the event loop).</summary>
    public void Complete()
    {
        if (_completed) return;
        _completed = true;
        _ready.Release(); // one extra wake-up finds the queue empty after the last item and ends the loop
    }

    /// <summary>Finishes the queued work, then stops (waits a bounded time unless called from the thread itself).</summary>
    public void Dispose()
    {
        Complete();
        if (!IsCurrentThread) _thread.Join(TimeSpan.FromSeconds(5));
    }
}
