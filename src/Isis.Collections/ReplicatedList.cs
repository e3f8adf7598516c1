using System.Collections;
using System.Collections.Immutable;

namespace Isis.Collections;

/// <summary>
/// An ordered list fully replicated across the members of a group: every member holds all of it and
/// reads its own copy; updates (add, insert, set, remove at an index) are requests multicast to every
/// member, pending until the group merges them into the history in one order.
/// </summary>
/// <remarks>
/// <para>The list itself (<see cref="IReadOnlyList{T}"/>) is the <i>pessimistic</i> view: the merged
/// history, the same sequence of states at every member. <see cref="Optimistic"/> also applies the
/// pending updates in the order they arrived here. An index is resolved when the update is merged,
/// against the history as it stands then: an index out of range at that point makes the update do
/// nothing, at every member alike.</para>
/// <para>Setup as for <see cref="ReplicatedDictionary{TKey, TValue}"/>: construct it before
/// <see cref="Group.Join"/>, one collection per group, the same options at every member.</para>
/// </remarks>
/// <typeparam name="T">The element type (one the group can send).</typeparam>
public sealed class ReplicatedList<T> : IReadOnlyList<T>
{
    private const int AddCode = 31_011, InsertCode = 31_012, SetCode = 31_013, RemoveAtCode = 31_014;
    private const int PartSize = 1_000;

    private readonly Group _group;
    private readonly OperationLog<Update> _log;
    private volatile ImmutableList<T> _history = ImmutableList<T>.Empty;

    private enum Kind : byte { Add, Insert, Set, RemoveAt }

    private readonly record struct Update(Kind Kind, int Index, T? Item);

    /// <summary>Creates the collection on <paramref name="group"/>, which must not be joined yet.</summary>
    /// <param name="group">The group whose members hold the collection.</param>
    /// <param name="options">How updates are ordered; the same at every member.</param>
    /// <exception cref="InvalidOperationException">The group is already joined, or holds another replicated collection.</exception>
    public ReplicatedList(Group group, ReplicatedCollectionOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(group);
        _group = group;
        _log = OperationLog<Update>.Create(group, options, Apply, new Codec());
        _log.Repaired += e => Repaired?.Invoke(this, e);
        group.Handlers[AddCode] += (Action<string, long, T>)((issuer, seq, item) => _log.OnUpdate(issuer, seq, new Update(Kind.Add, -1, item)));
        group.Handlers[InsertCode] += (Action<string, long, int, T>)((issuer, seq, index, item) => _log.OnUpdate(issuer, seq, new Update(Kind.Insert, index, item)));
        group.Handlers[SetCode] += (Action<string, long, int, T>)((issuer, seq, index, item) => _log.OnUpdate(issuer, seq, new Update(Kind.Set, index, item)));
        group.Handlers[RemoveAtCode] += (Action<string, long, int>)((issuer, seq, index) => _log.OnUpdate(issuer, seq, new Update(Kind.RemoveAt, index, default)));
        // The history as this member holds it at the cut (nothing is pending there: see OperationLog),
        // after where it ends, so the loader's positions are everyone's.
        group.MakeChkpt += (ChkptMaker)(_ => _log.MakeCheckpoint(() => _history, state =>
        {
            foreach (T[] part in state.Chunk(PartSize)) group.SendChkpt(part);
        }));
        group.LoadChkpt += (Action<long, long>)((length, chain) =>
        {
            _history = ImmutableList<T>.Empty;
            _log.OnCheckpointLoaded(length, chain);
        });
        group.LoadChkpt += (Action<T[]>)(part => _history = _history.AddRange(part));
    }

    /// <summary>The group this collection lives on.</summary>
    public Group Group => _group;

    /// <summary>Appends <paramref name="item"/> at every member.</summary>
    /// <param name="item">The element.</param>
    /// <returns>The update's id, for <see cref="WaitForAsync"/>.</returns>
    public ValueTask<OperationId> AddAsync(T item) => Issue(nameof(AddAsync), AddCode, item);

    /// <summary>Inserts <paramref name="item"/> at <paramref name="index"/> (resolved when merged; beyond the end, nothing).</summary>
    /// <param name="index">Where, in the history at merge time (0 to its count).</param>
    /// <param name="item">The element.</param>
    /// <returns>The update's id, for <see cref="WaitForAsync"/>.</returns>
    public ValueTask<OperationId> InsertAsync(int index, T item) => Issue(nameof(InsertAsync), InsertCode, index, item);

    /// <summary>Replaces the element at <paramref name="index"/> (resolved when merged; out of range, nothing).</summary>
    /// <param name="index">Which, in the history at merge time.</param>
    /// <param name="item">The new element.</param>
    /// <returns>The update's id, for <see cref="WaitForAsync"/>.</returns>
    public ValueTask<OperationId> SetAsync(int index, T item) => Issue(nameof(SetAsync), SetCode, index, item);

    /// <summary>Removes the element at <paramref name="index"/> (resolved when merged; out of range, nothing).</summary>
    /// <param name="index">Which, in the history at merge time.</param>
    /// <returns>The update's id, for <see cref="WaitForAsync"/>.</returns>
    public ValueTask<OperationId> RemoveAtAsync(int index) => Issue(nameof(RemoveAtAsync), RemoveAtCode, index);

    private async ValueTask<OperationId> Issue(string operation, int code, params object?[] args)
    {
        (OperationId id, Task sent) = _log.Issue(operation, code, args);
        await sent.ConfigureAwait(false);
        return id;
    }

    /// <summary>Completes once the update <paramref name="id"/> is merged into this member's history.</summary>
    /// <param name="id">An id an update of this collection returned.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task WaitForAsync(OperationId id, CancellationToken cancellationToken = default) => _log.WaitForAsync(id, cancellationToken);

    /// <summary>The optimistic view: the history with the pending updates applied in the order they arrived here (a snapshot).</summary>
    public IReadOnlyList<T> Optimistic => _log.Optimistic(() => _history, (history, pending) => pending.Aggregate(history, ApplyTo));

    /// <summary>Updates pending here: multicast, not yet merged into the history.</summary>
    public int PendingCount => _log.PendingCount;

    /// <summary>Updates in this member's history since the collection was created (each merged update takes the next position, the same at every member).</summary>
    public long MergedCount => _log.HistoryLength;

    /// <summary>
    /// This member's position in the collection's history (its group's name and <see cref="MergedCount"/>):
    /// send it in the <see cref="HistoryPosition.HeaderName"/> header of an answer that reads the
    /// collection, taken before the read, so <see cref="RedundantQueryClient"/> can tell a lagging replica's answer.
    /// </summary>
    public HistoryPosition Position => new(_group.Name, _log.HistoryLength);

    /// <summary>
    /// How old this member's reads may be: the time since its history last held everything a peer
    /// had merged (gossip tells it every <see cref="ReplicatedCollectionOptions.GossipInterval"/>;
    /// zero while it is the group's only member). A replica that is cut off or starved cannot see
    /// that its reads are stale, but this grows; a service checks it against a bound (a health check
    /// that turns Degraded past it) and stops serving reads it cannot vouch for.
    /// </summary>
    public TimeSpan Staleness => _log.Staleness;

    /// <summary>
    /// Raised (on the collection's gossip task) when a repair put updates into this member's history
    /// from a peer because its own handlers trailed (<see cref="ReplicatedCollectionOptions.GossipInterval"/>): the application may recompute what it derives from the list.
    /// </summary>
    public event EventHandler<HistoryRepairedEventArgs>? Repaired;

    /// <summary>What the collection did at this member: history, gossip and repairs.</summary>
    public ReplicatedCollectionStatistics Statistics => _log.Statistics;

    private void Apply(Update u) => _history = ApplyTo(_history, u);

    private static ImmutableList<T> ApplyTo(ImmutableList<T> list, Update u) => u.Kind switch
    {
        Kind.Add => list.Add(u.Item!),
        Kind.Insert when u.Index >= 0 && u.Index <= list.Count => list.Insert(u.Index, u.Item!),
        Kind.Set when u.Index >= 0 && u.Index < list.Count => list.SetItem(u.Index, u.Item!),
        Kind.RemoveAt when u.Index >= 0 && u.Index < list.Count => list.RemoveAt(u.Index),
        _ => list, // out of range at merge time: nothing, at every member alike
    };

    /// <summary>Updates in bulk (a repair): kinds, indices, elements.</summary>
    private sealed class Codec : IOperationCodec<Update>
    {
        public IList[] NewReplyLists() => [new List<byte[]>(), new List<int[]>(), new List<T?[]>()];

        public object[] Encode(IReadOnlyList<Update> ops) =>
            [ops.Select(u => (byte)u.Kind).ToArray(), ops.Select(u => u.Index).ToArray(), ops.Select(u => u.Item).ToArray()];

        public Update[]? Decode(IList[] lists, int index)
        {
            if (lists[0][index] is not byte[] kinds || lists[1][index] is not int[] indices || lists[2][index] is not T?[] items) return null;
            if (indices.Length != kinds.Length || items.Length != kinds.Length || kinds.Any(k => k > (byte)Kind.RemoveAt)) return null;
            return kinds.Select((kind, i) => new Update((Kind)kind, indices[i], items[i])).ToArray();
        }
    }

    // ---------------------------------------------------------------- IReadOnlyList: the history

    /// <inheritdoc />
    public T this[int index] => _history[index];

    /// <inheritdoc />
    public int Count => _history.Count;

    /// <inheritdoc />
    public IEnumerator<T> GetEnumerator() => _history.GetEnumerator();

    IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();
}
