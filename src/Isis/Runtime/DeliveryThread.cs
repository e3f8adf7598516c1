using System.Collections.Concurrent;
using Isis.Core.Common;
using Isis.Core.Identity;

namespace Isis.Runtime;

/// <summary>
/// A message waiting for its handlers: a copy of its payload in a pooled buffer (the core recycles
/// its own copy once the message is stable, which may be before the handlers run).
/// </summary>
/// <param name="Sender">Who sent it.</param>
/// <param name="Buffer">The pooled copy of its payload (a query's without the query id).</param>
/// <param name="Length">The payload's length in <paramref name="Buffer"/>.</param>
/// <param name="IsQuery">A query request: the handlers reply.</param>
/// <param name="QueryId">The query's id at its requester.</param>
/// <param name="ViewId">The view it was delivered in (a deferred reply names it).</param>
/// <param name="Replayed">A SafeQuery of the durable history replayed to the handlers: its query ended long ago, so a reply goes nowhere.</param>
internal readonly record struct PendingDelivery(NodeId Sender, byte[] Buffer, int Length, bool IsQuery, long QueryId, int ViewId, bool Replayed = false);

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
    private int _sleeping; // 1 while the thread waits (or is about to) for work

    public DeliveryThread(string groupName, Action<PendingDelivery> dispatch, IBufferPool pool)
    {
        _dispatch = dispatch;
        _pool = pool;
        _thread = new Thread(Run) { IsBackground = true, Name = "isis-deliver-" + groupName };
        _thread.Start();
    }

    public bool IsCurrentThread => Thread.CurrentThread == _thread;

    public int Backlog => _work.Count;

    /// <summary>Queues work; false if the thread has stopped (the group is gone), and then the work never runs.</summary>
    public bool Enqueue(Action work) => Add((work, default));

    /// <summary>Queues a message; its buffer returns to the pool after dispatch (or at once if the thread has stopped).</summary>
    public void Enqueue(in PendingDelivery message)
    {
        if (!Add((null, message))) _pool.Return(message.Buffer);
    }

    private bool Add((Action? Work, PendingDelivery Message) item)
    {
        if (_completed) return false; // the group is gone
        _work.Enqueue(item);
        // Wake the thread only if it is (about to be) asleep: a semaphore release takes a lock, and
        // one per message contended with the thread's own waits (a profile of the Send path).
        if (Volatile.Read(ref _sleeping) == 1 && Interlocked.Exchange(ref _sleeping, 0) == 1) _ready.Release();
        return true;
    }

    private void Run()
    {
        while (true)
        {
            if (!_work.TryDequeue(out var item))
            {
                // Announce the sleep, then look again: a producer that enqueued before seeing the
                // announcement is found by this second look (both sides fence between their write
                // and their read), and one that enqueues after it sees it and wakes us.
                Interlocked.Exchange(ref _sleeping, 1);
                if (!_work.TryDequeue(out item))
                {
                    if (_completed) break;
                    _ready.Wait();
                    continue;
                }
                Volatile.Write(ref _sleeping, 0);
            }
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
        _ready.Release(); // wakes a sleeping thread, which finds the queue empty (after the last item) and ends
    }

    /// <summary>Finishes the queued work, then stops (waits a bounded time unless called from the thread itself).</summary>
    public void Dispose()
    {
        Complete();
        if (!IsCurrentThread) _thread.Join(TimeSpan.FromSeconds(5));
    }
}
