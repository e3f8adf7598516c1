using System.Collections;
using System.Collections.Immutable;
using System.Diagnostics.CodeAnalysis;

namespace Isis.Collections;

/// <summary>
/// A dictionary fully replicated across the members of a group (Tempest's replicated collections):
/// every member holds all of it and reads its own copy; updates are requests multicast to every
/// member, pending until the group merges them into the history in one order.
/// </summary>
/// <remarks>
/// <para><b>Reads.</b> The dictionary itself (<see cref="IReadOnlyDictionary{TKey, TValue}"/>) is the
/// <i>pessimistic</i> view: the merged history only, stable (every member passes through the same
/// states in the same order) but possibly stale. <see cref="Optimistic"/> also applies the pending
/// updates in the order they arrived here: more recent, but tentative (the merge may order them
/// otherwise). <see cref="WaitForAsync"/> reads after a given update.</para>
/// <para><b>Setup.</b> Construct it on the group before <see cref="Group.Join"/> (it registers the
/// group's handlers for request codes 31,000 to 31,002, its view handler and checkpoint handlers: a
/// joiner receives the history by state transfer, and <see cref="Group.PersistCheckpoints"/> keeps it
/// on disk). One collection per group, and the same options at every member. Keys and values are
/// sent as message arguments, so they must be types the group can send (primitives, strings,
/// collections of them, or MessagePack types).</para>
/// <para>How the order is agreed: see docs/architecture.md, "Replicated collections". What survives a
/// restart of every member is what <see cref="Group.PersistCheckpoints"/> saved; SafeSend's disk
/// durability does not apply to a collection (its updates travel by Send).</para>
/// </remarks>
/// <typeparam name="TKey">The key type.</typeparam>
/// <typeparam name="TValue">The value type.</typeparam>
public sealed class ReplicatedDictionary<TKey, TValue> : IReadOnlyDictionary<TKey, TValue> where TKey : notnull
{
    private const int SetCode = 31_001, RemoveCode = 31_002;
    private const int PartSize = 1_000;

    private readonly Group _group;
    private readonly OperationLog<Update> _log;
    private volatile ImmutableDictionary<TKey, TValue> _history = ImmutableDictionary<TKey, TValue>.Empty;

    /// <summary>One update: set a key, or remove it.</summary>
    private readonly record struct Update(bool Remove, TKey Key, TValue? Value);

    /// <summary>Creates the collection on <paramref name="group"/>, which must not be joined yet.</summary>
    /// <param name="group">The group whose members hold the collection.</param>
    /// <param name="options">How updates are ordered; the same at every member.</param>
    /// <exception cref="InvalidOperationException">The group is already joined, or holds another replicated collection.</exception>
    public ReplicatedDictionary(Group group, ReplicatedCollectionOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(group);
        _group = group;
        _log = OperationLog<Update>.Create(group, options, Apply, new Codec());
        _log.Repaired += e => Repaired?.Invoke(this, e);
        group.Handlers[SetCode] += (Action<string, long, TKey, TValue>)((issuer, seq, key, value) => _log.OnUpdate(issuer, seq, new Update(false, key, value)));
        group.Handlers[RemoveCode] += (Action<string, long, TKey>)((issuer, seq, key) => _log.OnUpdate(issuer, seq, new Update(true, key, default)));
        // The history as this member holds it at the cut (nothing is pending there: see OperationLog),
        // after where it ends, so the loader's positions are everyone's.
        group.MakeChkpt += (ChkptMaker)(_ => _log.MakeCheckpoint(() => _history, state =>
        {
            foreach (KeyValuePair<TKey, TValue>[] part in state.Chunk(PartSize)) group.SendChkpt(part);
        }));
        group.LoadChkpt += (Action<long, long>)((length, chain) =>
        {
            _history = ImmutableDictionary<TKey, TValue>.Empty;
            _log.OnCheckpointLoaded(length, chain);
        });
        group.LoadChkpt += (Action<KeyValuePair<TKey, TValue>[]>)(part => _history = _history.SetItems(part));
    }

    /// <summary>The group this collection lives on.</summary>
    public Group Group => _group;

    /// <summary>Sets <paramref name="key"/> to <paramref name="value"/> at every member; completes once the update is multicast (pending).</summary>
    /// <param name="key">The key.</param>
    /// <param name="value">The value.</param>
    /// <returns>The update's id, for <see cref="WaitForAsync"/>.</returns>
    /// <exception cref="InvalidOperationException">The group is not joined yet.</exception>
    public async ValueTask<OperationId> SetAsync(TKey key, TValue value)
    {
        (OperationId id, Task sent) = _log.Issue(nameof(SetAsync), SetCode, key, value);
        await sent.ConfigureAwait(false);
        return id;
    }

    /// <summary>Removes <paramref name="key"/> at every member (nothing if it is absent when the update is merged).</summary>
    /// <param name="key">The key.</param>
    /// <returns>The update's id, for <see cref="WaitForAsync"/>.</returns>
    /// <exception cref="InvalidOperationException">The group is not joined yet.</exception>
    public async ValueTask<OperationId> RemoveAsync(TKey key)
    {
        (OperationId id, Task sent) = _log.Issue(nameof(RemoveAsync), RemoveCode, key);
        await sent.ConfigureAwait(false);
        return id;
    }

    /// <summary>Completes once the update <paramref name="id"/> is merged into this member's history: a pessimistic read after it sees it.</summary>
    /// <param name="id">An id an update of this collection returned.</param>
    /// <param name="cancellationToken">Stops waiting.</param>
    public Task WaitForAsync(OperationId id, CancellationToken cancellationToken = default) => _log.WaitForAsync(id, cancellationToken);

    /// <summary>
    /// The optimistic view: the history with the pending updates applied in the order they arrived
    /// here. A snapshot: it does not change under the caller.
    /// </summary>
    public IReadOnlyDictionary<TKey, TValue> Optimistic => _log.Optimistic(() => _history, (history, pending) =>
    {
        ImmutableDictionary<TKey, TValue>.Builder merged = history.ToBuilder();
        foreach (Update u in pending) ApplyTo(merged, u);
        return merged.ToImmutable();
    });

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
    /// from a peer because its own handlers trailed (<see cref="ReplicatedCollectionOptions.GossipInterval"/>): the application may recompute what it derives from the collection.
    /// </summary>
    public event EventHandler<HistoryRepairedEventArgs>? Repaired;

    /// <summary>What the collection did at this member: history, gossip and repairs.</summary>
    public ReplicatedCollectionStatistics Statistics => _log.Statistics;

    private void Apply(Update u) => _history = u.Remove ? _history.Remove(u.Key) : _history.SetItem(u.Key, u.Value!);

    private static void ApplyTo(ImmutableDictionary<TKey, TValue>.Builder state, Update u)
    {
        if (u.Remove) state.Remove(u.Key);
        else state[u.Key] = u.Value!;
    }

    /// <summary>Updates in bulk (a repair): which remove, the keys, the values.</summary>
    private sealed class Codec : IOperationCodec<Update>
    {
        public IList[] NewReplyLists() => [new List<bool[]>(), new List<TKey[]>(), new List<TValue?[]>()];

        public object[] Encode(IReadOnlyList<Update> ops) =>
            [ops.Select(u => u.Remove).ToArray(), ops.Select(u => u.Key).ToArray(), ops.Select(u => u.Value).ToArray()];

        public Update[]? Decode(IList[] lists, int index)
        {
            if (lists[0][index] is not bool[] removes || lists[1][index] is not TKey[] keys || lists[2][index] is not TValue?[] values) return null;
            if (keys.Length != removes.Length || values.Length != removes.Length) return null;
            return removes.Select((remove, i) => new Update(remove, keys[i], values[i])).ToArray();
        }
    }

    // ---------------------------------------------------------------- IReadOnlyDictionary: the history

    /// <inheritdoc />
    public TValue this[TKey key] => _history[key];

    /// <inheritdoc />
    public IEnumerable<TKey> Keys => _history.Keys;

    /// <inheritdoc />
    public IEnumerable<TValue> Values => _history.Values;

    /// <inheritdoc />
    public int Count => _history.Count;

    /// <inheritdoc />
    public bool ContainsKey(TKey key) => _history.ContainsKey(key);

    /// <inheritdoc />
    public bool TryGetValue(TKey key, [MaybeNullWhen(false)] out TValue value) => _history.TryGetValue(key, out value);

    /// <inheritdoc />
    public IEnumerator<KeyValuePair<TKey, TValue>> GetEnumerator() => _history.GetEnumerator();

    IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();
}
