using System.Collections.Concurrent;
using Isis.Core.Security;
using Isis.Diagnostics;
using Isis.Runtime;

namespace Isis;

/// <summary>Per-group security (DESIGN.md section 3): a key that encrypts and authenticates the group's traffic.</summary>
public sealed partial class Group
{
    private byte[]? _key;

    /// <summary>
    /// Protects this group's traffic between members with a 256-bit key: every packet is encrypted
    /// and authenticated with AES-256-GCM, checked before anything reads it, and packets that do not
    /// open with the key (forged, replayed, or from a process with another key) are dropped and
    /// counted. Every member must set the same key before <see cref="Join"/>; a process that joins
    /// with another key, or none, is refused (its Join fails with the reason).
    /// </summary>
    /// <param name="key">32 bytes; keep them secret (for example in a file only the service's account can read).</param>
    /// <exception cref="ArgumentException">The key is not 32 bytes.</exception>
    /// <exception cref="InvalidOperationException">The group is already joined.</exception>
    public void SetKey(ReadOnlySpan<byte> key)
    {
        if (key.Length != 32) throw new ArgumentException($"A group key is 32 bytes (AES-256); this one has {key.Length}. Generate one with RandomNumberGenerator.GetBytes(32).", nameof(key));
        lock (_gate)
        {
            if (_state != GroupState.New) throw new InvalidOperationException($"SetKey must come before Join: group '{Name}' is already {_state.ToString().ToLowerInvariant()}, and its members use the key it joined with.");
            _key = key.ToArray();
        }
    }

    // Key rotations under way at this member, by the new key's fingerprint (hex): the key, and who waits.
    private readonly ConcurrentDictionary<string, (byte[] Key, TaskCompletionSource Done)> _rotations = new();

    /// <summary>
    /// Moves the group to a new 256-bit key, through a view change: call it at every member with the
    /// same new key (from your secret store: the key never travels over the network). Each member
    /// says that it holds the key; once every member of the view has, the group installs a new view
    /// (same members) in which everything is sealed with the new key, and the old key stops opening
    /// packets at the view change after that. Returns once this member uses the new key. A process
    /// that joins later must <see cref="SetKey"/> the new key; the key is also what persistent
    /// checkpoints store from then on.
    /// </summary>
    /// <param name="newKey">32 bytes, the same at every member.</param>
    /// <exception cref="ArgumentException">The key is not 32 bytes.</exception>
    /// <exception cref="InvalidOperationException">The group has no key (set one with SetKey before Join), or called from a handler (it would wait for the view change it delivers).</exception>
    /// <exception cref="IsisException">The group is not joined.</exception>
    public void RotateKey(ReadOnlySpan<byte> newKey)
    {
        if (_delivery?.IsCurrentThread == true) throw ExceptionFactory.BlockingInHandler(Name, nameof(RotateKey));
        RotateKeyAsync(newKey.ToArray()).GetAwaiter().GetResult();
    }

    /// <summary>The asynchronous form of <see cref="RotateKey"/>: completes once this member uses the new key.</summary>
    /// <param name="newKey">32 bytes, the same at every member.</param>
    /// <param name="cancellationToken">Stops waiting (the rotation itself goes on).</param>
    public Task RotateKeyAsync(ReadOnlyMemory<byte> newKey, CancellationToken cancellationToken = default)
    {
        if (newKey.Length != 32) throw new ArgumentException($"A group key is 32 bytes (AES-256); this one has {newKey.Length}. Generate one with RandomNumberGenerator.GetBytes(32).", nameof(newKey));
        if (_key == null)
        {
            throw new InvalidOperationException($"Group '{Name}' has no key to rotate: its traffic is not sealed. Set one with SetKey before Join; RotateKey then moves the group to a new one.");
        }
        if (_state != GroupState.Joined) throw NotJoinedError(nameof(RotateKey));
        byte[] key = newKey.ToArray();
        string fingerprint = Convert.ToHexString(PacketSealer.Fingerprint(key));
        if (Convert.ToHexString(PacketSealer.Fingerprint(_key)) == fingerprint) return Task.CompletedTask;
        var rotation = _rotations.GetOrAdd(fingerprint, _ => (key, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously)));
        EventLoop loop = _runtime.RunningLoop();
        loop.Post(() => loop.Node.StageGroupKey(Name, key, loop.Now));
        return StopWaitingWhenCancelled(rotation.Done.Task, cancellationToken);
    }

    /// <summary>Event loop: the group moved to the key named by <paramref name="fingerprint"/>.</summary>
    internal void OnKeyRotated(int viewId, byte[] fingerprint)
    {
        string hex = Convert.ToHexString(fingerprint);
        if (_rotations.TryRemove(hex, out var rotation))
        {
            _key = rotation.Key; // what persistent checkpoints store from now on
            rotation.Done.TrySetResult();
        }
        Log.GroupKeyRotated(_runtime.Logger, Name, hex, viewId);
    }

    /// <summary>The group is gone here: rotations that waited fail with <paramref name="reason"/>.</summary>
    private void FailRotations(Exception reason)
    {
        foreach (string fingerprint in _rotations.Keys)
        {
            if (_rotations.TryRemove(fingerprint, out var rotation)) rotation.Done.TrySetException(reason);
        }
    }

    /// <summary>Event loop: the members' packets never opened with this process's key; it leaves the group (the core asked already).</summary>
    internal void OnKeyRejected(string reason)
    {
        Log.GroupKeyRejected(_runtime.Logger, Name, reason);
        _joined?.TrySetException(new IsisException($"Group '{Name}': {reason}"));
    }
}
