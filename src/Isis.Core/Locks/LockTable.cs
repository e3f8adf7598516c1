using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Wire;

namespace Isis.Core.Locks;

/// <summary>What a member asks of a lock, in the group's uniform total order (SafeSend).</summary>
internal enum LockOperation : byte
{
    /// <summary>Wants the lock: granted now if free, else queued behind the earlier requests (FIFO).</summary>
    Request = 0,

    /// <summary>Gives back the lock it holds.</summary>
    Release = 1,

    /// <summary>Gives up a request (its TryLock timed out, or it was cancelled): removed from the queue, or released if it was granted meanwhile.</summary>
    Cancel = 2,
}

/// <summary>A lock given to a member's request, with its fencing token.</summary>
internal readonly record struct LockGrant(string Name, NodeId Holder, long Request, long Token);

/// <summary>
/// The replicated lock table of a group: every member applies the same operations in the same
/// uniform total order (SafeSend) and the same views at the same points of it, so every member
/// computes the same holders, queues and grants. Sans-IO and deterministic: the runtime's
/// GroupLocks and the simulator drive the same code.
/// </summary>
/// <remarks>
/// Each lock's fencing token grows by one with each grant and never goes back, across views and
/// state transfers: a resource that remembers the largest token it saw can refuse a holder whose
/// lock was taken from it (it failed, or was expelled while paused) and given to another. So a lock
/// once used keeps an entry (its name and token) for the group's life.
/// </remarks>
internal sealed class LockTable(ProtocolMutations mutations = ProtocolMutations.None)
{
    private sealed class Entry
    {
        public (NodeId Holder, long Request)? Held;
        public long Token;
        public readonly List<(NodeId Member, long Request)> Waiting = new();
    }

    private readonly SortedDictionary<string, Entry> _locks = new(StringComparer.Ordinal);

    /// <summary>The holder of <paramref name="name"/> and its token, or null if it is free.</summary>
    public (NodeId Holder, long Request, long Token)? HolderOf(string name) =>
        _locks.TryGetValue(name, out Entry? e) && e.Held is { } h ? (h.Holder, h.Request, e.Token) : null;

    /// <summary>Requests waiting for <paramref name="name"/>, oldest first.</summary>
    public int WaitingFor(string name) => _locks.TryGetValue(name, out Entry? e) ? e.Waiting.Count : 0;

    /// <summary>Applies one operation (delivered in the total order); returns the grants it causes.</summary>
    public List<LockGrant> Apply(LockOperation operation, string name, NodeId member, long request)
    {
        var grants = new List<LockGrant>();
        if (!_locks.TryGetValue(name, out Entry? e)) _locks[name] = e = new Entry();
        switch (operation)
        {
            case LockOperation.Request:
                if (e.Held == null && e.Waiting.Count == 0) Grant(name, e, member, request, grants);
                else e.Waiting.Add((member, request));
                break;
            case LockOperation.Release:
                // Only the holder's release counts: a late one (its hold already ended at a view change) changes nothing.
                if (e.Held is { } h && h.Holder == member) Next(name, e, grants);
                break;
            case LockOperation.Cancel:
                if (e.Held is { } held && held.Holder == member && held.Request == request) Next(name, e, grants);
                else e.Waiting.RemoveAll(w => w.Member == member && w.Request == request);
                break;
        }
        return grants;
    }

    /// <summary>
    /// A view is installed (at the same point of the order everywhere): the locks of members no
    /// longer in it are released and their requests dropped; returns the grants that causes.
    /// </summary>
    public List<LockGrant> OnView(IReadOnlyCollection<NodeId> members)
    {
        var grants = new List<LockGrant>();
        var alive = new HashSet<NodeId>(members);
        bool releaseAll = (mutations & ProtocolMutations.LockViewReleasesEveryone) != 0; // deliberate bug
        foreach (var (name, e) in _locks.ToList())
        {
            e.Waiting.RemoveAll(w => !alive.Contains(w.Member));
            if (e.Held is { } h && (releaseAll || !alive.Contains(h.Holder))) Next(name, e, grants);
            if ((mutations & ProtocolMutations.LockTokenPerView) != 0 && e.Held == null) e.Token = 0; // deliberate bug
        }
        return grants;
    }

    private void Next(string name, Entry e, List<LockGrant> grants)
    {
        e.Held = null;
        if (e.Waiting.Count == 0) return;
        var (member, request) = e.Waiting[0];
        e.Waiting.RemoveAt(0);
        Grant(name, e, member, request, grants);
    }

    private static void Grant(string name, Entry e, NodeId member, long request, List<LockGrant> grants)
    {
        e.Held = (member, request);
        e.Token++;
        grants.Add(new LockGrant(name, member, request, e.Token));
    }

    /// <summary>The whole table, for a joiner's state transfer.</summary>
    public byte[] Snapshot()
    {
        var w = new PacketWriter().BeginRecord();
        w.I32(_locks.Count);
        foreach (var (name, e) in _locks)
        {
            w.String(name).I64(e.Token).U8(e.Held == null ? (byte)0 : (byte)1);
            if (e.Held is { } h) w.Node(h.Holder).I64(h.Request);
            w.I32(e.Waiting.Count);
            foreach (var (member, request) in e.Waiting) w.Node(member).I64(request);
        }
        return w.FinishRecord();
    }

    /// <summary>Replaces the table with a snapshot another member made; false (and the table unchanged) if it is malformed.</summary>
    public bool Load(byte[] snapshot)
    {
        var r = new WireReader(snapshot);
        var loaded = new SortedDictionary<string, Entry>(StringComparer.Ordinal);
        int n = r.Count(14);
        for (int i = 0; i < n && r.Ok; i++)
        {
            string name = r.String(1024);
            var e = new Entry { Token = r.I64() };
            if (r.U8() == 1) e.Held = (r.Node(), r.I64());
            int waiting = r.Count(20);
            for (int k = 0; k < waiting && r.Ok; k++) e.Waiting.Add((r.Node(), r.I64()));
            loaded[name] = e;
        }
        if (!r.Complete) return false;
        _locks.Clear();
        foreach (var (name, e) in loaded) _locks[name] = e;
        return true;
    }
}
