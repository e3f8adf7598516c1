using Isis.Serialization;
using MessagePack;

namespace Isis.Perpetual;

/// <summary>
/// A request the service agreed to execute (<see cref="PerpetualReplica.ReceiveRequestAsync"/>):
/// every correct replica receives the same requests in the same order. Answer it once with
/// <see cref="PerpetualReplica.SendReply"/>.
/// </summary>
public sealed class PerpetualRequest
{
    private readonly byte[] _payload;

    internal PerpetualRequest(string from, int caller, long number, byte[] payload)
    {
        From = from;
        Caller = caller;
        Number = number;
        _payload = payload;
    }

    /// <summary>Who sent it: the name of the calling service, or of the unreplicated client.</summary>
    public string From { get; }

    /// <summary>The sender's number for it: with <see cref="From"/>, it names the request.</summary>
    public long Number { get; }

    internal int Caller { get; }

    internal bool Answered { get; set; }

    /// <summary>The request's MessagePack bytes.</summary>
    public ReadOnlyMemory<byte> Payload => _payload;

    /// <summary>The request, read as a <typeparamref name="T"/>.</summary>
    /// <exception cref="MessagePackSerializationException">The payload is not a <typeparamref name="T"/>.</exception>
    public T Read<T>() => MessagePackSerializer.Deserialize<T>(_payload, PayloadSerializer.Options);

    /// <inheritdoc/>
    public override string ToString() => $"request {Number} from {From}";
}

/// <summary>A call a replica's loop made (<see cref="PerpetualReplica.SendAsync"/>), not yet or already answered.</summary>
public sealed class PerpetualCall
{
    internal PerpetualCall(string target, long number)
    {
        Target = target;
        Number = number;
    }

    /// <summary>The service called.</summary>
    public string Target { get; }

    /// <summary>The call's number: every correct replica of the calling service gives the same call the same number.</summary>
    public long Number { get; }

    /// <inheritdoc/>
    public override string ToString() => $"call {Number} to {Target}";
}

/// <summary>
/// The outcome of a call, handed to every correct replica of the caller at the same point of its
/// order: the result f+1 replicas of the target sent alike (at least one of them correct), or an
/// abort once the call's timeout passed.
/// </summary>
public sealed class PerpetualReply
{
    private readonly byte[]? _payload;

    internal PerpetualReply(PerpetualCall call, byte[]? payload)
    {
        Call = call;
        _payload = payload;
    }

    /// <summary>The call this answers.</summary>
    public PerpetualCall Call { get; }

    /// <summary>True if the caller's replicas agreed to give up on the call (its timeout passed first); there is no result.</summary>
    public bool Aborted => _payload == null;

    /// <summary>The result's MessagePack bytes (empty if the call was aborted).</summary>
    public ReadOnlyMemory<byte> Payload => _payload;

    /// <summary>The result, read as a <typeparamref name="T"/>.</summary>
    /// <exception cref="PerpetualCallAbortedException">The call was aborted: there is no result.</exception>
    /// <exception cref="MessagePackSerializationException">The result is not a <typeparamref name="T"/>.</exception>
    public T Read<T>() => _payload is { } bytes
        ? MessagePackSerializer.Deserialize<T>(bytes, PayloadSerializer.Options)
        : throw new PerpetualCallAbortedException(Call);

    /// <inheritdoc/>
    public override string ToString() => Aborted ? $"{Call}: aborted" : $"{Call}: {_payload!.Length} bytes";
}

/// <summary>A call's replicas agreed to abort it (its timeout passed before an answer was ordered): it has no result.</summary>
public sealed class PerpetualCallAbortedException : Exception
{
    /// <summary>An exception for an aborted <paramref name="call"/>.</summary>
    public PerpetualCallAbortedException(PerpetualCall call)
        : base($"{call} was aborted: its timeout passed before the callers agreed on a reply. Every replica of the caller sees the same abort.")
    {
        Call = call;
    }

    /// <summary>The call that was aborted.</summary>
    public PerpetualCall Call { get; }
}
