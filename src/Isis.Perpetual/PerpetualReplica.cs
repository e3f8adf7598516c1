using System.Net;
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
/// One replica of a Perpetual service: the Byzantine fault-tolerant agreement with the service's
/// other replicas over UDP, and the application's loop, one long-running deterministic computation
/// (Perpetual-WS's programming model). The loop receives the requests the service agreed to
/// execute (<see cref="ReceiveRequestAsync"/>) and answers them (<see cref="SendReply"/>), calls
/// other services (<see cref="SendAsync"/>, <see cref="SendReceiveAsync"/>) and receives their
/// agreed replies (<see cref="ReceiveReplyAsync()"/>), and reads the agreed clock and random values
/// (<see cref="CurrentTime"/>, <see cref="Timestamp"/>, <see cref="Random"/>).
/// </summary>
/// <remarks>
/// <para><b>Determinism is the application's contract.</b> Every correct replica must make the same
/// calls and replies from the same inputs. The loop runs on a thread of its own, and its awaits
/// resume only between inputs, in the agreed order, whatever the timing of the threads: await only
/// this replica's operations. Awaiting anything else (Task.Delay, I/O, ConfigureAwait(false)) is
/// reported as a resumption from outside the agreed order; calling this replica's operations from
/// another thread throws. Do not read the machine's clock, random numbers, environment or files in
/// the loop. Use the agreed values instead.</para>
/// <para>A replica whose application diverges is detected by the others: the responder of its service
/// (the primary, which gathers its service's replies to a call) and a caller that receives a call or
/// reply unlike the f+1 agreed ones log it and count it (<see cref="DivergentMessages"/>).</para>
/// <para>Nothing is kept on disk: a replica that restarts rejoins by fetching the recent agreed
/// requests it missed from the others, with an empty application state.</para>
/// </remarks>
public sealed class PerpetualReplica : IDisposable
{
    private readonly PerpetualDeployment.Built _built;
    private readonly PbftReplica _protocol;
    private readonly NodeHost _host;
    private readonly DeterministicLoop _loop;
    private readonly ILogger _log;
    private readonly string _name;
    private readonly int _maxOutstanding;
    private readonly Action<NodeEvent>? _recorder;
    private readonly TaskCompletionSource _completion = new(TaskCreationOptions.RunContinuationsAsynchronously);

    // The loop's state: touched on the loop's thread only.
    private readonly Queue<PerpetualRequest> _requests = new();
    private readonly Queue<TaskCompletionSource<PerpetualRequest>> _requestWaiters = new();
    private readonly List<PerpetualReply> _replies = new(); // completed calls not yet received, in completion order
    private readonly Dictionary<long, PerpetualCall> _outstanding = new();
    private readonly Dictionary<long, TaskCompletionSource<PerpetualReply>> _callWaiters = new();
    private readonly Queue<TaskCompletionSource<PerpetualReply>> _replyWaiters = new();
    private readonly Queue<TaskCompletionSource> _sendWaiters = new();
    private long _callsIssued;
    private long _time;
    private ulong _seed;
    private Random? _random;
    private long _lastTimestamp;
    private bool _stopping;

    private PerpetualReplica(PerpetualDeployment deployment, string service, int index, PerpetualOptions options, Action<NodeEvent>? recorder)
    {
        _recorder = recorder;
        _built = deployment.Build();
        BftService bft = _built.Service(service);
        if (index < 0 || index >= bft.N) throw new ArgumentOutOfRangeException(nameof(index), index, $"service {service} has replicas 0 to {bft.N - 1}");
        Service = service;
        Index = index;
        _name = $"{service}[{index}]";
        _maxOutstanding = options.MaxOutstandingCalls;
        _log = options.LoggerFactory?.CreateLogger("Isis.Perpetual") ?? new StandardErrorLogger(null);
        BftOptions protocolOptions = options.ToProtocol();
        _protocol = new PbftReplica(_built.Deployment, service, index, _built.KeysOf(bft.Replicas[index]), protocolOptions, NodeHost.Now());
        _loop = new DeterministicLoop(_name, count => PerpetualLog.ForeignResumption(_log, _name, count), e => PerpetualLog.LoopEnded(_log, e, _name, "an async void method or a continuation threw"));
        IPEndPoint bindTo = deployment.ReplicasOf(service)[index];
        try
        {
            _host = new NodeHost(_protocol, bindTo, OnEvent, _name, reason => PerpetualLog.Stopped(_log, _name, reason));
        }
        catch
        {
            _loop.Stop(static () => { });
            _loop.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Starts replica <paramref name="index"/> of <paramref name="service"/>: it listens at its
    /// endpoint in <paramref name="deployment"/>, agrees with the service's other replicas, and runs
    /// <paramref name="loop"/> on its deterministic scheduler. The loop may run for ever (a service)
    /// or end; <see cref="Completion"/> tells.
    /// </summary>
    /// <exception cref="ArgumentException">No such service in the deployment, or bad options.</exception>
    /// <exception cref="ArgumentOutOfRangeException">No such replica index.</exception>
    /// <exception cref="ArgumentException">The deployment holds another process's keys (<see cref="PerpetualDeployment(PerpetualKeys)"/>), or keys issued for another deployment.</exception>
    public static PerpetualReplica Start(PerpetualDeployment deployment, string service, int index, Func<PerpetualReplica, Task> loop, PerpetualOptions? options = null) =>
        Start(deployment, service, index, loop, options, recorder: null);

    /// <summary>
    /// <see cref="Start(PerpetualDeployment, string, int, Func{PerpetualReplica, Task}, PerpetualOptions?)"/>, and
    /// every request ordered, call completed, call made and reply sent goes to <paramref name="recorder"/>
    /// (on the protocol's or the loop's thread), for the checker (the multi-process tests).
    /// </summary>
    internal static PerpetualReplica Start(PerpetualDeployment deployment, string service, int index, Func<PerpetualReplica, Task> loop, PerpetualOptions? options, Action<NodeEvent>? recorder)
    {
        ArgumentNullException.ThrowIfNull(deployment);
        ArgumentNullException.ThrowIfNull(loop);
        var replica = new PerpetualReplica(deployment, service, index, options ?? new PerpetualOptions(), recorder);
        replica._loop.Input(() => replica.RunLoop(loop)); // the loop's first input, before any agreed event can arrive
        replica._host.Start();
        return replica;
    }

    /// <summary>The service this replica belongs to.</summary>
    public string Service { get; }

    /// <summary>This replica's index in its service (0 to 3f).</summary>
    public int Index { get; }

    /// <summary>Completes when the application's loop returns; faults with what it threw; is cancelled when the replica is disposed while the loop waits.</summary>
    public Task Completion => _completion.Task;

    /// <summary>The current view of the service's agreement (its primary is replica View mod n); it grows at each view change.</summary>
    public long View => _protocol.View;

    /// <summary>How many agreed requests and call outcomes this replica executed.</summary>
    public long Executed => _protocol.InputsExecuted;

    /// <summary>Calls and replies that differed from what f+1 replicas of their service agreed on (each also logged), seen by this replica as a caller or as its service's responder: a faulty replica or a nondeterministic application.</summary>
    public long DivergentMessages => _protocol.DivergentMessages;

    /// <summary>Packets dropped: not framed as ours, malformed, badly authenticated, from a principal with no business sending them, or replayed outside the window.</summary>
    public long DroppedPackets => _protocol.Dropped + _host.TransportDrops;

    /// <summary>The protocol's dropped packets by message kind, for the benchmark's diagnostics ("kind:count ...").</summary>
    internal string DroppedByKind => string.Join(' ', _protocol.DroppedByKind.Select((n, kind) => (n, kind)).Where(x => x.n > 0).Select(x => $"{(BftKind)x.kind}:{x.n}"));

    /// <summary>The times the loop resumed from an await outside the agreed order (each also logged): the application is not deterministic.</summary>
    public long ForeignResumptions => _loop.ForeignResumptions;

    /// <summary>
    /// The agreed clock: the time the service's primary stamped on the input the loop received last
    /// (a request or a reply), the same at every correct replica and never going back. Before the
    /// first input, the Unix epoch.
    /// </summary>
    public DateTimeOffset CurrentTime
    {
        get
        {
            ThrowIfNotOnLoop();
            return DateTimeOffset.UnixEpoch.AddTicks(_time * 10);
        }
    }

    /// <summary>An agreed timestamp, later than every one this replica's loop got before (at least <see cref="CurrentTime"/>).</summary>
    public DateTimeOffset Timestamp()
    {
        ThrowIfNotOnLoop();
        _lastTimestamp = Math.Max(_lastTimestamp + 1, _time * 10);
        return DateTimeOffset.UnixEpoch.AddTicks(_lastTimestamp);
    }

    /// <summary>
    /// Random numbers every correct replica draws alike: a generator seeded, at each input, from the
    /// agreed history (no client and no single replica chooses the seed). Draw from it in the loop only.
    /// </summary>
    public Random Random
    {
        get
        {
            ThrowIfNotOnLoop();
            return _random ??= new Random(unchecked((int)(_seed ^ (_seed >> 32))));
        }
    }

    /// <summary>
    /// Calls service <paramref name="target"/> with <paramref name="request"/> (MessagePack) and
    /// returns at once with the call, unless <see cref="PerpetualOptions.MaxOutstandingCalls"/> are
    /// outstanding (then it waits for one to complete). Receive the reply with
    /// <see cref="ReceiveReplyAsync(PerpetualCall)"/> or <see cref="ReceiveReplyAsync()"/>.
    /// <paramref name="timeout"/> (default: none) aborts the call at every replica alike if no reply
    /// was agreed on by then.
    /// </summary>
    /// <exception cref="ArgumentException">No such service, or the service calls itself.</exception>
    /// <exception cref="InvalidOperationException">Called from outside the replica's loop.</exception>
    public ValueTask<PerpetualCall> SendAsync<TRequest>(string target, TRequest request, TimeSpan timeout = default)
    {
        // Misuse throws here, not in the returned task: the loop sees it at the call.
        ThrowIfNotOnLoop();
        _built.Service(target);
        if (target == Service) throw new ArgumentException($"service {target} calls itself: do the work in its own loop instead", nameof(target));
        if (timeout < TimeSpan.Zero) throw new ArgumentOutOfRangeException(nameof(timeout), "a call's timeout is positive, or zero for none");
        byte[] payload = MessagePackSerializer.Serialize(request, PayloadSerializer.Options);
        return _outstanding.Count < _maxOutstanding ? ValueTask.FromResult(Issue(target, payload, timeout)) : IssueWhenBelowLimit(target, payload, timeout);
    }

    private async ValueTask<PerpetualCall> IssueWhenBelowLimit(string target, byte[] payload, TimeSpan timeout)
    {
        while (_outstanding.Count >= _maxOutstanding)
        {
            var slot = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            _sendWaiters.Enqueue(slot);
            await slot.Task;
        }
        return Issue(target, payload, timeout);
    }

    /// <summary>Gives the call its number (the protocol numbers calls alike: one after another, from the loop only) and hands it to the protocol.</summary>
    private PerpetualCall Issue(string target, byte[] payload, TimeSpan timeout)
    {
        long number = ++_callsIssued;
        var call = new PerpetualCall(target, number);
        _outstanding.Add(number, call);
        long micros = PerpetualOptions.Micros(timeout);
        _recorder?.Invoke(new PerpetualCalled(target, number, payload));
        _host.Post(now =>
        {
            long issued = _protocol.Call(target, payload, micros, now);
            if (issued != number) PerpetualLog.Problem(_log, _name, $"call {number} was issued to the protocol as {issued}: calls must be made from the loop only");
        });
        return call;
    }

    /// <summary>Calls <paramref name="target"/> and waits for the agreed outcome: <see cref="SendAsync"/> then <see cref="ReceiveReplyAsync(PerpetualCall)"/>.</summary>
    /// <exception cref="ArgumentException">No such service, or the service calls itself.</exception>
    /// <exception cref="InvalidOperationException">Called from outside the replica's loop.</exception>
    public async ValueTask<PerpetualReply> SendReceiveAsync<TRequest>(string target, TRequest request, TimeSpan timeout = default)
    {
        PerpetualCall call = await SendAsync(target, request, timeout);
        return await ReceiveReplyAsync(call);
    }

    /// <summary>
    /// The next call outcome, of any outstanding call that no one waits for by name, in the order
    /// the caller's replicas agreed on: a reply, or an abort (<see cref="PerpetualReply.Aborted"/>).
    /// </summary>
    /// <exception cref="InvalidOperationException">No call is outstanding that this could return (it would wait for ever), or called from outside the loop.</exception>
    public ValueTask<PerpetualReply> ReceiveReplyAsync()
    {
        ThrowIfNotOnLoop();
        if (_replies.Count > 0)
        {
            PerpetualReply first = _replies[0];
            _replies.RemoveAt(0);
            return ValueTask.FromResult(first);
        }
        if (_outstanding.Count - _callWaiters.Count <= _replyWaiters.Count)
            throw new InvalidOperationException("no call is outstanding whose reply this could receive: every outstanding call is awaited already (or none was sent); send a call first");
        return new ValueTask<PerpetualReply>(Waiter(_replyWaiters));
    }

    /// <summary>The agreed outcome of <paramref name="call"/>: its reply, or its abort (<see cref="PerpetualReply.Aborted"/>).</summary>
    /// <exception cref="InvalidOperationException">The call's outcome was received already, something else waits for it, or called from outside the loop.</exception>
    public ValueTask<PerpetualReply> ReceiveReplyAsync(PerpetualCall call)
    {
        ArgumentNullException.ThrowIfNull(call);
        ThrowIfNotOnLoop();
        int at = _replies.FindIndex(r => r.Call.Number == call.Number);
        if (at >= 0)
        {
            PerpetualReply reply = _replies[at];
            _replies.RemoveAt(at);
            return ValueTask.FromResult(reply);
        }
        if (!_outstanding.ContainsKey(call.Number)) throw new InvalidOperationException($"{call} is not outstanding at this replica: its outcome was received already (or it is not this replica's call)");
        if (_callWaiters.ContainsKey(call.Number)) throw new InvalidOperationException($"{call} is awaited already: receive each outcome once");
        var waiter = new TaskCompletionSource<PerpetualReply>(TaskCreationOptions.RunContinuationsAsynchronously);
        _callWaiters.Add(call.Number, waiter);
        return new ValueTask<PerpetualReply>(waiter.Task);
    }

    /// <summary>The next request the service agreed to execute, in the agreed order. Answer it with <see cref="SendReply"/>.</summary>
    /// <exception cref="InvalidOperationException">Called from outside the loop.</exception>
    public ValueTask<PerpetualRequest> ReceiveRequestAsync()
    {
        ThrowIfNotOnLoop();
        return _requests.TryDequeue(out PerpetualRequest? request) ? ValueTask.FromResult(request) : new ValueTask<PerpetualRequest>(Waiter(_requestWaiters));
    }

    /// <summary>
    /// Answers <paramref name="request"/> with <paramref name="reply"/> (MessagePack): to the
    /// client, which accepts it once f+1 replicas sent the same, or to every replica of the calling
    /// service. Any time after it was received, once.
    /// </summary>
    /// <exception cref="InvalidOperationException">Answered already, or called from outside the loop.</exception>
    public void SendReply<TReply>(TReply reply, PerpetualRequest request)
    {
        ArgumentNullException.ThrowIfNull(request);
        ThrowIfNotOnLoop();
        if (request.Answered) throw new InvalidOperationException($"{request} was answered already: answer each request once");
        request.Answered = true;
        byte[] payload = MessagePackSerializer.Serialize(reply, PayloadSerializer.Options);
        _recorder?.Invoke(new PerpetualAnswered(request.Caller, request.Number, payload));
        _host.Post(now =>
        {
            try
            {
                _protocol.Reply(request.Caller, request.Number, payload, now);
            }
            catch (InvalidOperationException e)
            {
                PerpetualLog.Problem(_log, _name, $"the reply to {request} was not sent: {e.Message} (the service kept no record of it: answer requests sooner)");
            }
        });
    }

    /// <summary>Stops the replica: the loop's pending waits are cancelled, and the replica leaves the agreement (as a crashed replica would).</summary>
    public void Dispose()
    {
        _host.Dispose();
        _loop.Stop(() =>
        {
            _stopping = true;
            foreach (var w in _requestWaiters) w.TrySetCanceled();
            foreach (var w in _replyWaiters) w.TrySetCanceled();
            foreach (var w in _callWaiters.Values) w.TrySetCanceled();
            foreach (var w in _sendWaiters) w.TrySetCanceled();
        });
        _completion.TrySetCanceled();
        if (!_loop.OnLoopThread) _loop.Dispose(); // disposed from its own loop, the thread is still reading its inputs: it ends on its own
    }

    /// <summary>The first input: runs the application's loop until its first wait, and watches how it ends.</summary>
    private void RunLoop(Func<PerpetualReplica, Task> loop)
    {
        Task task;
        try
        {
            task = loop(this);
        }
        catch (Exception e)
        {
            task = Task.FromException(e);
        }
        task.ContinueWith(t =>
        {
            if (t.IsCanceled || _stopping) _completion.TrySetCanceled();
            else if (t.Exception is { } e)
            {
                PerpetualLog.LoopEnded(_log, e.InnerException, _name, "it threw");
                _completion.TrySetException(e.InnerExceptions);
            }
            else _completion.TrySetResult();
        }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
    }

    /// <summary>The protocol's events, on its thread: each agreed one becomes the loop's next input.</summary>
    private void OnEvent(NodeEvent e, long time)
    {
        if (e is BftRequestOrdered or BftCallCompleted) _recorder?.Invoke(e);
        switch (e)
        {
            case BftRequestOrdered ordered:
                string from = _built.Names.GetValueOrDefault(ordered.Client, $"principal {ordered.Client}");
                var request = new PerpetualRequest(from, ordered.Client, ordered.Number, ordered.Operation);
                _loop.Input(() => OnRequest(request, ordered.Time, ordered.Seed));
                break;
            case BftCallCompleted completed:
                _loop.Input(() => OnCallCompleted(completed));
                break;
            case BftDivergence divergence:
                PerpetualLog.Divergence(_log, _name, divergence.PeerReplica, divergence.Peer, divergence.AsReply ? "a reply" : "its copy of a call", divergence.Number);
                break;
        }
    }

    private void Agreed(long time, ulong seed)
    {
        _time = Math.Max(_time, time);
        _seed = seed;
        _random = null;
    }

    private void OnRequest(PerpetualRequest request, long time, ulong seed)
    {
        Agreed(time, seed);
        if (_requestWaiters.TryDequeue(out var waiter)) waiter.TrySetResult(request);
        else _requests.Enqueue(request);
    }

    private void OnCallCompleted(BftCallCompleted completed)
    {
        Agreed(completed.Time, completed.Seed);
        if (!_outstanding.Remove(completed.Number, out PerpetualCall? call)) return; // not the loop's (cannot happen: the loop makes every call)
        var reply = new PerpetualReply(call, completed.Result);
        if (_callWaiters.Remove(call.Number, out var named)) named.TrySetResult(reply);
        else if (_replyWaiters.TryDequeue(out var any)) any.TrySetResult(reply);
        else _replies.Add(reply);
        if (_sendWaiters.TryDequeue(out var slot)) slot.TrySetResult();
    }

    private static Task<T> Waiter<T>(Queue<TaskCompletionSource<T>> queue)
    {
        var waiter = new TaskCompletionSource<T>(TaskCreationOptions.RunContinuationsAsynchronously);
        queue.Enqueue(waiter);
        return waiter.Task;
    }

    private void ThrowIfNotOnLoop()
    {
        if (!_loop.OnLoopThread)
            throw new InvalidOperationException($"Perpetual replica {_name}: its operations run on its loop only (the function given to Start, and what it awaits); another thread would make the replicas diverge");
    }
}
