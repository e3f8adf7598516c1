using Isis.Diagnostics;

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

    /// <summary>Event loop: the members' packets never opened with this process's key; it leaves the group (the core asked already).</summary>
    internal void OnKeyRejected(string reason)
    {
        Log.GroupKeyRejected(_runtime.Logger, Name, reason);
        _joined?.TrySetException(new IsisException($"Group '{Name}': {reason}"));
    }
}
