using Isis.Core.Collections;

namespace Isis.Collections;

/// <summary>
/// The callers of <c>WaitForAsync</c> still waiting, by issuer and then sequence number, so an
/// applied update wakes only the waits it answers (an issuer's updates join the history in its send
/// order, so every wait up to its sequence number), a view change settles the waits on issuers that
/// left, and a cancelled wait is removed at once. Nothing stays here once its answer is known.
/// </summary>
/// <remarks>Not thread-safe: the owner holds <c>gate</c> around every call; a cancellation takes it too.</remarks>
internal sealed class UpdateWaiters(Lock gate)
{
    private sealed class Waiter(UpdateId id)
    {
        public readonly UpdateId Id = id;
        public readonly TaskCompletionSource Done = new(TaskCreationOptions.RunContinuationsAsynchronously);
        public CancellationTokenRegistration Cancellation;
    }

    private readonly Dictionary<string, SortedDictionary<long, List<Waiter>>> _byIssuer = new(StringComparer.Ordinal);

    /// <summary>Waits in progress.</summary>
    public int Count { get; private set; }

    /// <summary>The issuers some caller waits on.</summary>
    public IEnumerable<string> Issuers => _byIssuer.Keys;

    /// <summary>A wait on <paramref name="id"/>, whose answer is not known yet; cancelling it removes it.</summary>
    public Task Add(UpdateId id, CancellationToken cancellationToken)
    {
        if (cancellationToken.IsCancellationRequested) return Task.FromCanceled(cancellationToken);
        var waiter = new Waiter(id);
        if (!_byIssuer.TryGetValue(id.Issuer, out SortedDictionary<long, List<Waiter>>? bySequence)) _byIssuer[id.Issuer] = bySequence = new();
        if (!bySequence.TryGetValue(id.Sequence, out List<Waiter>? list)) bySequence[id.Sequence] = list = new(1);
        list.Add(waiter);
        Count++;
        // Registered last: the callback (which may run at once on another thread) finds the waiter in place.
        if (cancellationToken.CanBeCanceled) waiter.Cancellation = cancellationToken.Register(() => Cancel(waiter, cancellationToken));
        return waiter.Done.Task;
    }

    private void Cancel(Waiter waiter, CancellationToken cancellationToken)
    {
        lock (gate)
        {
            if (!Remove(waiter)) return; // answered first
        }
        waiter.Done.TrySetCanceled(cancellationToken);
    }

    private bool Remove(Waiter waiter)
    {
        if (!_byIssuer.TryGetValue(waiter.Id.Issuer, out SortedDictionary<long, List<Waiter>>? bySequence) ||
            !bySequence.TryGetValue(waiter.Id.Sequence, out List<Waiter>? list) || !list.Remove(waiter))
        {
            return false;
        }
        if (list.Count == 0) bySequence.Remove(waiter.Id.Sequence);
        if (bySequence.Count == 0) _byIssuer.Remove(waiter.Id.Issuer);
        Count--;
        return true;
    }

    /// <summary>Update <paramref name="through"/> of <paramref name="issuer"/> is in the history, so are its earlier ones: their waits complete.</summary>
    public void Applied(string issuer, long through)
    {
        if (!_byIssuer.TryGetValue(issuer, out SortedDictionary<long, List<Waiter>>? bySequence)) return;
        while (bySequence.Count > 0)
        {
            KeyValuePair<long, List<Waiter>> first = bySequence.First();
            if (first.Key > through) break;
            bySequence.Remove(first.Key);
            foreach (Waiter waiter in first.Value) Finish(waiter, null);
        }
        if (bySequence.Count == 0) _byIssuer.Remove(issuer);
    }

    /// <summary>
    /// Settles the waits on <paramref name="issuer"/> whose fate is known now: an applied update's
    /// wait completes, a lost or unknown one's faults with <paramref name="failure"/>'s exception, a
    /// pending one's goes on.
    /// </summary>
    public void Settle(string issuer, Func<UpdateId, UpdateFate> fate, Func<UpdateId, UpdateFate, Exception> failure)
    {
        if (!_byIssuer.TryGetValue(issuer, out SortedDictionary<long, List<Waiter>>? bySequence)) return;
        foreach (long sequence in bySequence.Keys.ToList())
        {
            List<Waiter> list = bySequence[sequence];
            UpdateFate now = fate(list[0].Id);
            if (now == UpdateFate.Pending) continue;
            bySequence.Remove(sequence);
            foreach (Waiter waiter in list) Finish(waiter, now == UpdateFate.Applied ? null : failure(waiter.Id, now));
        }
        if (bySequence.Count == 0) _byIssuer.Remove(issuer);
    }

    private void Finish(Waiter waiter, Exception? outcome)
    {
        Count--;
        waiter.Cancellation.Unregister(); // never Dispose under the gate: it would wait for a cancellation that waits for the gate
        if (outcome == null) waiter.Done.TrySetResult();
        else waiter.Done.TrySetException(outcome);
    }
}
