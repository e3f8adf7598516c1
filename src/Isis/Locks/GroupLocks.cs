using System.Collections.Concurrent;
using Isis.Core.Identity;
using Isis.Core.Locks;

namespace Isis;

/// <summary>
/// Named locks over a group, as Isis2 and Vsync applications built them: <see cref="LockAsync"/>
/// and <see cref="Unlock"/>, granted first come first served, with a fencing token that grows with
/// each grant; a holder that fails (or is expelled) loses its locks at the next view.
/// </summary>
/// <remarks>
/// <para>
/// Every operation is a SafeSend of the group, so every member applies the same requests and
/// releases in one uniform total order and computes the same holders and tokens: a grant any member
/// saw (the holder may have acted on it, then failed) is known to every survivor, so no later holder
/// ever gets its token again. A resource that remembers the largest token it accepted can therefore
/// refuse a stale holder (one that was paused, expelled, and does not know it yet).
/// </para>
/// <para>
/// A member that leaves the group gives its locks back at the view that removes it, as one that
/// fails does: stop using what they guard before calling <see cref="Group.Leave()"/>.
/// </para>
/// <para>
/// An uncontended <see cref="Unlock"/> gives the lock back lazily: at once if another member waits
/// for it (or its request arrives), else with this member's next <see cref="LockAsync"/> (the
/// release and the new request travel in one SafeSend), or after a millisecond. So a member that
/// takes locks one after another pays one SafeSend per lock, and <see cref="HolderOf"/> may name it
/// for up to a millisecond after it unlocked.
/// </para>
/// <para>
/// Give the locks a group of their own, created before <see cref="Group.Join()"/>: a joiner receives
/// the lock table with its state transfer. A lock once used keeps its name and token for the group's
/// life. The table lives in the members' memory: if every member fails, the locks are free again
/// (their tokens start over), as a SafeSend history in memory would be.
/// </para>
/// </remarks>
public sealed class GroupLocks
{
    internal const int LockCode = 31_100;

    /// <summary>A release and the same member's next request, in one SafeSend: applied in that order.</summary>
    internal const int ReleaseThenRequestCode = 31_101;

    /// <summary>How long an uncontended release may wait for this member's next request to travel with.</summary>
    private static readonly TimeSpan ReleaseDeferral = TimeSpan.FromMilliseconds(1);

    private readonly Group _group;
    private readonly LockTable _table;
    private readonly Lock _gate = new();
    private readonly ConcurrentDictionary<long, (string Name, TaskCompletionSource<long> Granted)> _pending = new();
    private long _nextRequest;
    private readonly HashSet<string> _deferredReleases = new(StringComparer.Ordinal); // unlocked here, not yet sent (under _gate)
    private readonly Timer _releaseTimer;

    /// <summary>Puts a lock table on <paramref name="group"/>, which must not be joined yet and must hold no other.</summary>
    /// <param name="group">A group of its own for the locks.</param>
    /// <exception cref="InvalidOperationException">The group is joined already, or holds a lock table already.</exception>
    public GroupLocks(Group group)
    {
        ArgumentNullException.ThrowIfNull(group);
        if (group.GetView() != null) throw new InvalidOperationException($"Create the GroupLocks of group '{group.Name}' before Join(): a joiner receives the lock table when it joins.");
        if (group.Handlers[LockCode].Count > 0) throw new InvalidOperationException($"Group '{group.Name}' already holds a lock table; create one GroupLocks per group.");
        _group = group;
        _table = new LockTable(group.Runtime.Options.Mutations);
        group.Handlers[LockCode] += (Action<byte, string, ulong, uint, long>)OnOperation;
        group.Handlers[ReleaseThenRequestCode] += (Action<string, string, ulong, uint, long>)OnReleaseThenRequest;
        group.ViewHandlers += (ViewHandler)OnView;
        group.Departed += FailWaiting;
        _releaseTimer = new Timer(_ => SendDeferredReleases(), null, Timeout.Infinite, Timeout.Infinite);
        group.MakeChkpt += (ChkptMaker)(_ =>
        {
            byte[] snapshot;
            lock (_gate) snapshot = _table.Snapshot();
            group.SendChkpt(snapshot);
        });
        group.LoadChkpt += (Action<byte[]>)(snapshot =>
        {
            lock (_gate)
            {
                if (!_table.Load(snapshot)) throw new IsisException($"The lock table of group '{group.Name}' a member sent is malformed.");
            }
        });
    }

    /// <summary>
    /// Waits for <paramref name="name"/> and returns its fencing token once this member holds it.
    /// Requests are granted in the order the group delivers them (first come, first served); call
    /// <see cref="Unlock"/> when done.
    /// </summary>
    /// <param name="name">The lock's name.</param>
    /// <param name="cancellationToken">Gives up waiting: the request is withdrawn (and the lock given back if it was granted meanwhile).</param>
    /// <returns>The fencing token: larger than that of every earlier holder of the lock.</returns>
    /// <exception cref="IsisException">The group is not joined, or this member left it while waiting.</exception>
    public Task<long> LockAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        NodeId me = Me(nameof(LockAsync));
        long request = Interlocked.Increment(ref _nextRequest);
        var granted = new TaskCompletionSource<long>(TaskCreationOptions.RunContinuationsAsynchronously);
        _pending[request] = (name, granted);
        string? release;
        lock (_gate)
        {
            // A release waiting to be sent travels with this request: one SafeSend for both.
            release = _deferredReleases.FirstOrDefault();
            if (release != null) _deferredReleases.Remove(release);
        }
        Task sent = release == null ? Operate(LockOperation.Request, name, me, request)
            : _group.SafeSendAsync(ReleaseThenRequestCode, release, name, me.Endpoint, me.Incarnation, request);
        if (cancellationToken.CanBeCanceled)
        {
            CancellationTokenRegistration withdraw = cancellationToken.Register(() =>
            {
                // Withdrawn before the grant came: the group forgets the request (or, granted in
                // the meantime, takes the lock back) in its order.
                if (granted.TrySetCanceled(cancellationToken))
                {
                    _pending.TryRemove(request, out _);
                    _ = sent.ContinueWith(_ => Operate(LockOperation.Cancel, name, me, request), TaskScheduler.Default);
                }
            });
            _ = granted.Task.ContinueWith(_ => withdraw.Dispose(), TaskScheduler.Default);
        }
        // The caller waits for the grant alone (it cannot come before the request is delivered):
        // one hand-off from the delivery thread, not a second one through the send's completion.
        _ = sent.ContinueWith(t =>
        {
            if (!_pending.TryRemove(request, out _)) return; // never sent: nothing will grant it
            if (t.IsCanceled) granted.TrySetCanceled();
            else granted.TrySetException(t.Exception!.InnerExceptions);
        }, CancellationToken.None, TaskContinuationOptions.NotOnRanToCompletion | TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
        return granted.Task;
    }

    /// <summary>As <see cref="LockAsync"/>, giving up after <paramref name="timeout"/>.</summary>
    /// <param name="name">The lock's name.</param>
    /// <param name="timeout">How long to wait for it.</param>
    /// <returns>The fencing token, or null if the lock was not granted within <paramref name="timeout"/>.</returns>
    /// <exception cref="IsisException">The group is not joined, or this member left it while waiting.</exception>
    public async Task<long?> TryLockAsync(string name, TimeSpan timeout)
    {
        using var expire = new CancellationTokenSource(timeout);
        try
        {
            return await LockAsync(name, expire.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (expire.IsCancellationRequested)
        {
            return null;
        }
    }

    /// <summary>Gives back <paramref name="name"/>, which this member holds: the next request in line gets it.</summary>
    /// <param name="name">The lock's name.</param>
    /// <exception cref="InvalidOperationException">This member does not hold the lock.</exception>
    /// <exception cref="IsisException">The group is not joined.</exception>
    public void Unlock(string name)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        NodeId me = Me(nameof(Unlock));
        lock (_gate)
        {
            if (_table.HolderOf(name) is not { } held || held.Holder != me || _deferredReleases.Contains(name))
            {
                throw new InvalidOperationException($"This member does not hold lock '{name}' of group '{_group.Name}'; Unlock gives back a lock that LockAsync granted here.");
            }
            if (_table.WaitingFor(name) == 0)
            {
                // Nobody waits: the release may travel with this member's next request.
                _deferredReleases.Add(name);
                _releaseTimer.Change(ReleaseDeferral, Timeout.InfiniteTimeSpan);
                return;
            }
        }
        _ = Operate(LockOperation.Release, name, me, 0);
    }

    /// <summary>Sends the releases still waiting for a request to travel with (their time is up, or another member wants the lock).</summary>
    private void SendDeferredReleases(string? only = null)
    {
        List<string> due;
        lock (_gate)
        {
            due = [.. _deferredReleases.Where(n => only == null || n == only)];
            foreach (string n in due) _deferredReleases.Remove(n);
        }
        if (due.Count == 0 || _group.GetView() is not { } view || view.GetMyRank() < 0) return;
        NodeId me = view.Members[view.GetMyRank()].Node;
        foreach (string n in due) _ = Operate(LockOperation.Release, n, me, 0);
    }

    /// <summary>The member that holds <paramref name="name"/> and its fencing token, as this member's table has it now; null if the lock is free.</summary>
    /// <param name="name">The lock's name.</param>
    public (Address Holder, long FencingToken)? HolderOf(string name)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        lock (_gate) return _table.HolderOf(name) is { } h ? (new Address(h.Holder), h.Token) : null;
    }

    /// <summary>Requests waiting for <paramref name="name"/> in this member's table (tests).</summary>
    internal int WaitingFor(string name)
    {
        lock (_gate) return _table.WaitingFor(name);
    }

    private NodeId Me(string operation)
    {
        View view = _group.GetView() ?? throw new IsisException($"GroupLocks.{operation}: join group '{_group.Name}' first (Join()).");
        return view.Members[view.GetMyRank()].Node;
    }

    private Task Operate(LockOperation operation, string name, NodeId me, long request) =>
        _group.SafeSendAsync(LockCode, (byte)operation, name, me.Endpoint, me.Incarnation, request);

    /// <summary>An operation in the group's order (delivery thread).</summary>
    private void OnOperation(byte operation, string name, ulong endpoint, uint incarnation, long request)
    {
        if (!Enum.IsDefined((LockOperation)operation)) throw new IsisException($"Lock table of group '{_group.Name}': unknown operation {operation}.");
        var member = new NodeId(endpoint, incarnation);
        List<LockGrant> grants;
        bool wantedFromMe;
        lock (_gate)
        {
            grants = _table.Apply((LockOperation)operation, name, member, request);
            // Another member now waits for a lock this member unlocked and has not given back yet.
            wantedFromMe = operation == (byte)LockOperation.Request && _deferredReleases.Contains(name) && _table.WaitingFor(name) > 0;
        }
        Hand(grants);
        if (wantedFromMe) SendDeferredReleases(name);
    }

    /// <summary>A member's release and its next request, applied in that order (delivery thread).</summary>
    private void OnReleaseThenRequest(string released, string name, ulong endpoint, uint incarnation, long request)
    {
        OnOperation((byte)LockOperation.Release, released, endpoint, incarnation, 0);
        OnOperation((byte)LockOperation.Request, name, endpoint, incarnation, request);
    }

    /// <summary>A view (delivery thread, at the same point of the order everywhere): the locks of members that left go to the next in line.</summary>
    private void OnView(View view)
    {
        List<LockGrant> grants;
        lock (_gate) grants = _table.OnView([.. view.Members.Select(m => m.Node)]);
        Hand(grants);
        if (view.GetMyRank() < 0) FailWaiting(new IsisException($"This member left group '{_group.Name}'."));
    }

    /// <summary>This member is out of the group: no request of its will be granted (and the view that removed it released its locks).</summary>
    private void FailWaiting(Exception why)
    {
        lock (_gate) _deferredReleases.Clear();
        foreach (var (request, (name, granted)) in _pending)
        {
            if (_pending.TryRemove(request, out _)) granted.TrySetException(new IsisException($"Lock '{name}' of group '{_group.Name}' will not be granted: {why.Message}", why));
        }
    }

    /// <summary>
    /// Completes this member's requests that were granted; once it is leaving the group, fails them
    /// instead (the view that removes it gives the lock to the next in line).
    /// </summary>
    private void Hand(List<LockGrant> grants)
    {
        if (grants.Count == 0 || _group.GetView() is not { } view || view.GetMyRank() < 0) return;
        NodeId me = view.Members[view.GetMyRank()].Node;
        foreach (LockGrant g in grants)
        {
            if (g.Holder != me || !_pending.TryRemove(g.Request, out var waiter)) continue;
            if (_group.IsLeaving) waiter.Granted.TrySetException(new IsisException($"This member is leaving group '{_group.Name}': lock '{g.Name}' goes to the next in line."));
            else waiter.Granted.TrySetResult(g.Token);
        }
    }
}
