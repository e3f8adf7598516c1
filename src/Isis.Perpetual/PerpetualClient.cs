using System.Collections.Concurrent;
using Isis.Core.Bft;
using Isis.Core.Node;
using Isis.Diagnostics;
using Isis.Perpetual.Runtime;
using Isis.Runtime;
using Isis.Serialization;
using MessagePack;
using Microsoft.Extensions.Logging;

namespace Isis.Perpetual;

/// <summary>
/// An unreplicated client of one Perpetual service (an ASP.NET front end, a console): it sends
/// requests and accepts a result once f+1 replicas sent the same one. At least one of those is
/// correct, and a correct replica sends only what the service agreed to. Thread-safe; requests may
/// be outstanding concurrently.
/// </summary>
/// <remarks>
/// A request is sent to the service's primary, then to every replica while no answer comes, until
/// f+1 replicas agree: it survives lost packets, crashed or lying replicas and view changes.
/// Replies that differ from the accepted one are logged and counted (<see cref="DivergentReplies"/>).
/// A client calls one service; a front end that calls several declares one client per service.
/// </remarks>
public sealed class PerpetualClient : IDisposable
{
    private readonly BftClient _protocol;
    private readonly NodeHost _host;
    private readonly ILogger _log;
    private readonly string _name;
    private readonly string _service;
    private readonly ConcurrentDictionary<long, TaskCompletionSource<byte[]>> _pending = new();
    private long _divergentSeen;
    private volatile bool _disposed;
    private readonly Action<NodeEvent>? _recorder;

    /// <summary>Starts client <paramref name="client"/> of <paramref name="deployment"/>, calling <paramref name="service"/>; it listens at its endpoint in the deployment.</summary>
    /// <exception cref="ArgumentException">No such client or service in the deployment, or bad options.</exception>
    /// <exception cref="ArgumentException">The deployment holds another process's keys (<see cref="PerpetualDeployment(PerpetualKeys)"/>), or keys issued for another deployment.</exception>
    public PerpetualClient(PerpetualDeployment deployment, string client, string service, PerpetualOptions? options = null)
        : this(deployment, client, service, options, recorder: null)
    {
    }

    /// <summary>A client whose requests sent and results accepted also go to <paramref name="recorder"/> (on the protocol's thread), for the checker (the multi-process tests).</summary>
    internal PerpetualClient(PerpetualDeployment deployment, string client, string service, PerpetualOptions? options, Action<NodeEvent>? recorder)
    {
        _recorder = recorder;
        ArgumentNullException.ThrowIfNull(deployment);
        options ??= new PerpetualOptions();
        PerpetualDeployment.Built built = deployment.Build();
        int principal = built.ClientPrincipal(client);
        built.Service(service);
        _name = client;
        _service = service;
        _log = options.LoggerFactory?.CreateLogger("Isis.Perpetual") ?? new StandardErrorLogger(null);
        _protocol = new BftClient(built.Deployment, service, built.KeysOf(principal), options.ToProtocol());
        var endpoint = Transport.EndpointConversions.ToIPEndPoint(built.Deployment.EndpointOf(principal));
        _host = new NodeHost(_protocol, endpoint, OnEvent, "client " + client, reason => PerpetualLog.Stopped(_log, _name, reason)).Start();
    }

    /// <summary>Replies that differed from the result accepted for the same request: a faulty replica or a nondeterministic service.</summary>
    public long DivergentReplies => _protocol.DivergentReplies;

    /// <summary>Requests sent and not yet answered.</summary>
    public int Outstanding => _pending.Count;

    /// <summary>
    /// Sends <paramref name="request"/> (MessagePack) to the service and returns the result f+1
    /// replicas agreed on, read as a <typeparamref name="TReply"/>.
    /// </summary>
    /// <remarks>
    /// Cancelling stops the wait, not the request: the service may still execute it (a request, once
    /// sent, is the service's to order). Retry with a request the service recognizes as the same if
    /// it must not execute twice.
    /// </remarks>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled, or the client was disposed while it waited.</exception>
    /// <exception cref="ObjectDisposedException">The client was disposed before.</exception>
    /// <exception cref="MessagePackSerializationException">The result is not a <typeparamref name="TReply"/>.</exception>
    public Task<TReply> InvokeAsync<TRequest, TReply>(TRequest request, CancellationToken cancellationToken = default)
    {
        ObjectDisposedException.ThrowIf(_disposed, this); // at the call, not in the task
        return Invoke<TReply>(MessagePackSerializer.Serialize(request, PayloadSerializer.Options, cancellationToken), cancellationToken);
    }

    private async Task<TReply> Invoke<TReply>(byte[] payload, CancellationToken cancellationToken)
    {
        var answer = new TaskCompletionSource<byte[]>(TaskCreationOptions.RunContinuationsAsynchronously);
        long number = 0;
        _host.Post(now =>
        {
            number = _protocol.Invoke(payload, now);
            _recorder?.Invoke(new PerpetualIssued(_protocol.Principal, number, payload));
            _pending[number] = answer;
        });
        using (cancellationToken.Register(() => answer.TrySetCanceled(cancellationToken)))
        {
            try
            {
                byte[] result = await answer.Task.ConfigureAwait(false);
                return MessagePackSerializer.Deserialize<TReply>(result, PayloadSerializer.Options, cancellationToken);
            }
            finally
            {
                _host.Post(_ => _pending.TryRemove(number, out TaskCompletionSource<byte[]>? _));
            }
        }
    }

    /// <summary>Stops the client; requests still waiting end with <see cref="OperationCanceledException"/>.</summary>
    public void Dispose()
    {
        _disposed = true;
        _host.Dispose();
        foreach (var waiter in _pending.Values) waiter.TrySetCanceled();
    }

    private void OnEvent(NodeEvent e, long time)
    {
        if (e is not BftReplyAccepted accepted) return;
        _recorder?.Invoke(accepted);
        if (_pending.TryRemove(accepted.Number, out TaskCompletionSource<byte[]>? waiter)) waiter.TrySetResult(accepted.Result);
        long divergent = _protocol.DivergentReplies;
        if (divergent > _divergentSeen)
        {
            _divergentSeen = divergent;
            PerpetualLog.ClientDivergence(_log, _name, _service, accepted.Number, divergent);
        }
    }
}
