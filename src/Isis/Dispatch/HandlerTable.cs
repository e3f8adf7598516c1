using System.Collections.Frozen;
using Isis.Serialization;

namespace Isis.Dispatch;

/// <summary>
/// Handlers by opcode, with dispatch by exact signature. Registration may run on an application
/// thread while dispatch runs on the delivery thread: writers build a new immutable snapshot under
/// a lock and publish it, so dispatch never locks and never sees a half-made change.
/// </summary>
internal sealed class HandlerTable
{
    private readonly Lock _writeLock = new();
    private FrozenDictionary<int, HandlerEntry[]> _snapshot = FrozenDictionary<int, HandlerEntry[]>.Empty;

    /// <summary>Number of handlers registered for <paramref name="opcode"/>.</summary>
    public int Count(int opcode) => Volatile.Read(ref _snapshot).TryGetValue(opcode, out var entries) ? entries.Length : 0;

    /// <summary>
    /// Adds a handler of any delegate type and arity. Throws <see cref="ArgumentException"/> when its
    /// parameters could never be received (ref/out, pointers, object, interfaces, ...).
    /// </summary>
    public void Register(int opcode, Delegate handler)
    {
        var entry = HandlerEntry.Create(opcode, handler);
        lock (_writeLock)
        {
            var current = _snapshot;
            var entries = current.TryGetValue(opcode, out var existing) ? [.. existing, entry] : new[] { entry };
            Publish(current, opcode, entries);
        }
    }

    /// <summary>Removes the most recently registered occurrence of an equal delegate, like <c>-=</c>.</summary>
    public bool Unregister(int opcode, Delegate handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        lock (_writeLock)
        {
            var current = _snapshot;
            if (!current.TryGetValue(opcode, out var existing))
                return false;
            int index = Array.FindLastIndex(existing, e => e.Handler.Equals(handler));
            if (index < 0)
                return false;
            Publish(current, opcode, [.. existing[..index], .. existing[(index + 1)..]]);
            return true;
        }
    }

    private void Publish(FrozenDictionary<int, HandlerEntry[]> current, int opcode, HandlerEntry[] entries)
    {
        var next = new Dictionary<int, HandlerEntry[]>(current);
        if (entries.Length == 0)
            next.Remove(opcode);
        else
            next[opcode] = entries;
        Volatile.Write(ref _snapshot, next.ToFrozenDictionary());
    }

    // Dispatch runs on the group's one delivery thread; these are reused by every dispatch so the
    // steady state allocates nothing but the handlers' own argument values. A dispatch that finds
    // them taken (re-entered from a handler) falls back to fresh arrays.
    private readonly ArgumentInfo[] _argumentScratch = new ArgumentInfo[ArgumentCodec.MaxArguments];
    private readonly List<(HandlerEntry Entry, object?[] Values)> _callScratch = new();
    private readonly List<object?[]> _valueScratch = new();
    private bool _scratchInUse;

    /// <summary>Validates <paramref name="payload"/> and runs every handler whose signature matches. Never throws.</summary>
    public DispatchResult Dispatch(ReadOnlyMemory<byte> payload)
    {
        bool reuse = !_scratchInUse;
        _scratchInUse = true;
        try
        {
            if (!ArgumentCodec.TryReadHeader(payload, out int opcode, out var args, out var error, reuse ? _argumentScratch : null))
            {
                ArgumentCodec.TryPeekOpcode(payload, out opcode);
                return DispatchResult.Malformed(opcode, error!);
            }
            return Dispatch(opcode, args, reuse);
        }
        finally
        {
            if (reuse) _scratchInUse = false;
        }
    }

    /// <summary>
    /// Runs, in registration order, every handler for <paramref name="opcode"/> whose parameter types
    /// equal the argument types. All arguments are decoded before any handler runs, so a value that
    /// fails to decode leaves the replica untouched. Handler exceptions are returned, not thrown.
    /// </summary>
    public DispatchResult Dispatch(int opcode, in EncodedArguments args) => Dispatch(opcode, args, reuse: false);

    private DispatchResult Dispatch(int opcode, in EncodedArguments args, bool reuse)
    {
        if (!Volatile.Read(ref _snapshot).TryGetValue(opcode, out var entries))
            return DispatchResult.NoHandler(opcode);

        int matches = 0;
        foreach (var entry in entries)
        {
            if (entry.Matches(args))
                matches++;
        }
        if (matches == 0)
            return DispatchResult.Mismatch(opcode, MismatchMessage(opcode, args, entries));

        // Each handler gets its own decoded objects so one cannot change what the next one sees.
        var calls = reuse ? _callScratch : new List<(HandlerEntry Entry, object?[] Values)>(matches);
        calls.Clear();
        try
        {
            foreach (var entry in entries)
            {
                if (!entry.Matches(args))
                    continue;
                var values = ValuesFor(entry.Parameters.Length, calls.Count, reuse);
                for (int i = 0; i < values.Length; i++)
                {
                    if (!args.TryMaterialize(i, entry.Parameters[i], out values[i], out var error))
                        return DispatchResult.Malformed(opcode, error!);
                }
                calls.Add((entry, values));
            }

            for (int i = 0; i < calls.Count; i++)
            {
                try
                {
                    calls[i].Entry.Invoker(calls[i].Values);
                }
                catch (Exception e)
                {
                    // Stop here: this replica's state is now in doubt, and the group decides whether it leaves.
                    return DispatchResult.Threw(opcode, i, calls[i].Entry.Signature, e);
                }
            }
            return DispatchResult.Invoked(opcode, calls.Count);
        }
        finally
        {
            if (reuse)
            {
                // Reused arrays must not keep the application's objects alive.
                foreach (var call in calls) Array.Clear(call.Values);
                calls.Clear();
            }
        }
    }

    /// <summary>The argument array for the <paramref name="call"/>-th matching handler: a reused one of the right length, or a new one.</summary>
    private object?[] ValuesFor(int length, int call, bool reuse)
    {
        if (length == 0) return [];
        if (!reuse) return new object?[length];
        while (_valueScratch.Count <= call) _valueScratch.Add([]);
        if (_valueScratch[call].Length != length) _valueScratch[call] = new object?[length];
        return _valueScratch[call];
    }

    private static string MismatchMessage(int opcode, in EncodedArguments args, HandlerEntry[] entries)
    {
        var signatures = entries.Select(e => e.Signature).Distinct().ToArray();
        return $"opcode {opcode}: received {args.DescribeTypes()} but handlers are registered for {string.Join(" or ", signatures)}; " +
            "check that Send's arguments match the handler's parameter types";
    }
}
