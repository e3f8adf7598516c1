using System.Collections.Concurrent;

namespace Isis.Runtime;

/// <summary>
/// One thread per group that runs the application's handlers one at a time, in the order the
/// protocol delivered (DESIGN.md section 4). The event loop only enqueues.
/// </summary>
internal sealed class DeliveryThread : IDisposable
{
    private readonly BlockingCollection<Action> _work = new();
    private readonly Thread _thread;

    public DeliveryThread(string groupName)
    {
        _thread = new Thread(Run) { IsBackground = true, Name = "isis-deliver-" + groupName };
        _thread.Start();
    }

    public bool IsCurrentThread => Thread.CurrentThread == _thread;

    public int Backlog => _work.Count;

    public void Enqueue(Action work)
    {
        if (!_work.IsAddingCompleted)
        {
            try { _work.Add(work); }
            catch (InvalidOperationException) { /* completed concurrently: the group is gone */ }
        }
    }

    private void Run()
    {
        foreach (Action work in _work.GetConsumingEnumerable()) work();
    }

    /// <summary>Lets the thread finish the queued work and stop; does not wait (safe on the event loop).</summary>
    public void Complete() => _work.CompleteAdding();

    /// <summary>Finishes the queued work, then stops (waits a bounded time unless called from the thread itself).</summary>
    public void Dispose()
    {
        _work.CompleteAdding();
        if (!IsCurrentThread) _thread.Join(TimeSpan.FromSeconds(5));
    }
}
