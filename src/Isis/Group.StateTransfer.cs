using Isis.Core.Durability;
using Isis.Core.Node;
using Isis.Diagnostics;
using Isis.Dispatch;
using Isis.Runtime;

namespace Isis;

/// <summary>
/// Makes this member's checkpoint of the group's state for members that join: call
/// <see cref="Group.SendChkpt"/> for each part of the state and <see cref="Group.EndOfChkpt"/> after the last.
/// </summary>
/// <param name="view">The view the joiners joined; the state to send is the state now, before any message of this view.</param>
public delegate void ChkptMaker(View view);

/// <summary>State transfer (Isis2's checkpoints): what a member sends a joiner, and how the joiner loads it.</summary>
/// <remarks>
/// <para>When processes join a group that has members, one member (the oldest that holds the state)
/// runs the <see cref="MakeChkpt"/> handlers on its delivery thread, at the point between the last
/// message of the previous view and the first of the new one: the state it sends is the state every
/// member has at that cut. Each <see cref="SendChkpt"/> is one part; the joiner's
/// <see cref="LoadChkpt"/> handlers receive the parts in order, picked by their argument types like
/// message handlers. Only then does the joiner see its first view (and <see cref="Join"/> return), and
/// then that view's messages, so its state equals the others' from the start.</para>
/// <para>Parts stream with flow control: <see cref="SendChkpt"/> blocks while about 4 MiB are in flight,
/// so a state of any size costs the maker a bounded amount of memory and never stalls the group (the
/// others go on delivering; this member's handlers resume once the checkpoint is made). The joiner
/// keeps the parts (in a temporary file beyond 16 MiB) until the last arrives: if the maker fails
/// midway, another member makes a new checkpoint and the parts received so far are dropped.</para>
/// <para>Before the parts, the runtime sends the lineage of the state (which start of the group's
/// state it descends from; the application never sees this part), so a joiner with a persistent
/// checkpoint of another lineage keeps it aside instead of overwriting it later.</para>
/// </remarks>
public sealed partial class Group
{
    /// <summary>The request code checkpoint parts are encoded with; LoadChkpt's handlers are picked by argument types alone.</summary>
    private const int CheckpointCode = 0;

    private readonly HandlerTable _loaders = new();
    private ChkptMaker? _makers;
    private CheckpointSpool? _spool; // the delivery thread's, while a checkpoint arrives
    private CheckpointSink? _making; // the delivery thread's: where the running MakeChkpt handlers' parts go, or null
    private bool _makingEnded;
    private long _stateBacklog;      // checkpoint bytes the protocol holds unacknowledged (published after each batch)
    private long _stateBytesPosted;  // checkpoint bytes handed to the event loop and not yet to the protocol
    private readonly ManualResetEventSlim _stateWindowOpen = new(true);

    /// <summary>
    /// The handlers that make this member's checkpoint for joiners: <c>g.MakeChkpt += (ChkptMaker)(v => { g.SendChkpt(...); g.EndOfChkpt(); })</c>.
    /// They run one after another on the delivery thread; <see cref="EndOfChkpt"/> is implied when the last returns.
    /// A maker that throws makes this member leave the group (its checkpoint is incomplete); the joiners then get one from another member.
    /// </summary>
    public ChkptMaker? MakeChkpt
    {
        get => Volatile.Read(ref _makers);
        set => Volatile.Write(ref _makers, value);
    }

    /// <summary>
    /// The handlers that load a checkpoint's parts at a joiner: <c>g.LoadChkpt += (Action&lt;string, int&gt;)((k, v) => state[k] = v)</c>.
    /// Any delegate type works; each part goes to the handlers whose parameter types match its arguments.
    /// </summary>
    public HandlerList LoadChkpt
    {
        get => new(_loaders, CheckpointCode);
        set
        {
            ArgumentNullException.ThrowIfNull(value);
            if (!ReferenceEquals(value.Table, _loaders))
            {
                throw new InvalidOperationException("LoadChkpt can only be extended with += or reduced with -=; register the delegate with g.LoadChkpt += handler.");
            }
        }
    }

    /// <summary>
    /// Typed, asynchronous state transfer, for code that keeps its state in objects: <paramref name="make"/>
    /// streams this member's state as parts of type <typeparamref name="TPart"/> (a primitive, a collection,
    /// or a MessagePack type), and <paramref name="load"/> applies each part at a joiner, in order,
    /// before its first view. The same mechanism as <see cref="MakeChkpt"/> and <see cref="LoadChkpt"/>
    /// (it adds one handler to each): <paramref name="make"/> is enumerated at the join's cut, on the
    /// delivery thread, with flow control between parts.
    /// </summary>
    /// <typeparam name="TPart">What one part of the state is.</typeparam>
    /// <param name="make">Yields the state now (before any message of <c>view</c>), part by part.</param>
    /// <param name="load">Applies one part at a joiner.</param>
    /// <example>
    /// <code>
    /// g.UseCheckpoint&lt;KeyValuePair&lt;string, int&gt;[]&gt;(view => Batches(stock, 1000), batch => { foreach (var (k, v) in batch) stock[k] = v; return ValueTask.CompletedTask; });
    /// </code>
    /// </example>
    public void UseCheckpoint<TPart>(Func<View, IAsyncEnumerable<TPart>> make, Func<TPart, ValueTask> load)
    {
        ArgumentNullException.ThrowIfNull(make);
        ArgumentNullException.ThrowIfNull(load);
        MakeChkpt += view =>
        {
            IAsyncEnumerator<TPart> parts = make(view).GetAsyncEnumerator();
            try
            {
                // The delivery thread waits: nothing after the cut may run before the state is taken.
                while (Wait(parts.MoveNextAsync())) SendChkpt(parts.Current);
            }
            finally
            {
                Wait(parts.DisposeAsync());
            }
        };
        LoadChkpt += (Action<TPart>)(part => Wait(load(part)));
    }

    private static T Wait<T>(ValueTask<T> task) => task.IsCompletedSuccessfully ? task.Result : task.AsTask().GetAwaiter().GetResult();

    private static void Wait(ValueTask task)
    {
        if (!task.IsCompletedSuccessfully) task.AsTask().GetAwaiter().GetResult();
    }

    /// <summary>Sends one part of the checkpoint to the joiners; only from a <see cref="MakeChkpt"/> handler.</summary>
    /// <param name="args">The part: arguments a <see cref="LoadChkpt"/> handler takes.</param>
    /// <exception cref="InvalidOperationException">Called outside a MakeChkpt handler, or after <see cref="EndOfChkpt"/>.</exception>
    /// <exception cref="IsisException">The part is larger than <see cref="IsisOptions.MaxMessageSize"/>.</exception>
    /// <remarks>Blocks while about 4 MiB of the checkpoint are in flight (flow control).</remarks>
    public void SendChkpt(params object?[] args)
    {
        CheckpointSink sink = CheckMaking(nameof(SendChkpt));
        byte[] part = EncodeToArray(CheckpointCode, args);
        if (part.Length > _runtime.Options.MaxMessageSize) throw ExceptionFactory.MessageTooLarge(part.Length, _runtime.Options.MaxMessageSize);
        sink.Add(part);
    }

    /// <summary>Ends the checkpoint (implied when the MakeChkpt handlers return); only from a <see cref="MakeChkpt"/> handler.</summary>
    /// <exception cref="InvalidOperationException">Called outside a MakeChkpt handler, or twice.</exception>
    public void EndOfChkpt()
    {
        CheckpointSink sink = CheckMaking(nameof(EndOfChkpt));
        _makingEnded = true;
        sink.End();
    }

    private CheckpointSink CheckMaking(string operation)
    {
        if (_delivery?.IsCurrentThread != true || _making == null)
        {
            throw new InvalidOperationException($"{operation} sends a part of this member's checkpoint, so it works only inside a MakeChkpt handler of group '{Name}' " +
                                                "(register one with g.MakeChkpt += (ChkptMaker)(view => ...)); the runtime calls it when processes join.");
        }
        if (_makingEnded) throw new InvalidOperationException($"{operation} after EndOfChkpt in group '{Name}': the checkpoint is already complete.");
        return _making;
    }

    /// <summary>Where the parts of a checkpoint being made go: to the joiners (state transfer) or to a file (a persistent checkpoint).</summary>
    private abstract class CheckpointSink
    {
        public abstract void Add(byte[] part);

        public abstract void End();
    }

    /// <summary>Streams the parts to the joiners of the cut, waiting on the protocol's window between parts.</summary>
    private sealed class TransferSink(Group group, int cut) : CheckpointSink
    {
        public override void Add(byte[] part)
        {
            group.PostStateChunk(cut, part, last: false);
            group.WaitForStateWindow();
        }

        public override void End() => group.PostStateChunk(cut, [], last: true);
    }

    private void PostStateChunk(int cut, byte[] part, bool last)
    {
        if (!_runtime.IsRunning) return;
        EventLoop loop = _runtime.RunningLoop();
        Interlocked.Add(ref _stateBytesPosted, part.Length);
        loop.Post(() =>
        {
            loop.Node.SendStateChunk(Id, cut, part, last, loop.Now);
            Interlocked.Add(ref _stateBytesPosted, -part.Length);
        });
    }

    /// <summary>Waits while the checkpoint bytes in flight fill the protocol's window (or until the group or runtime is gone: the transfer is over then).</summary>
    private void WaitForStateWindow()
    {
        long window = _runtime.StateWindowBytes;
        while (Interlocked.Read(ref _stateBacklog) + Interlocked.Read(ref _stateBytesPosted) >= window && _runtime.IsRunning && _state is GroupState.Joined or GroupState.Joining)
        {
            _stateWindowOpen.Reset();
            if (Interlocked.Read(ref _stateBacklog) + Interlocked.Read(ref _stateBytesPosted) < window) break;
            _stateWindowOpen.Wait(TimeSpan.FromMilliseconds(50));
        }
    }

    /// <summary>Event loop: publishes the checkpoint bytes the protocol holds; wakes a waiting maker.</summary>
    internal void PublishStateBacklog(long bytes)
    {
        Interlocked.Exchange(ref _stateBacklog, bytes);
        if (bytes < _runtime.StateWindowBytes) _stateWindowOpen.Set();
    }

    // ---------------------------------------------------------------- events (event loop thread; the work runs on the delivery thread, in order)

    internal void OnStateRequested(StateRequested request) => _delivery?.Enqueue(() => MakeCheckpoint(request.CutViewId));

    internal void OnStateChunk(byte[] chunk) => _delivery?.Enqueue(() => (_spool ??= new CheckpointSpool()).Add(chunk));

    internal void OnStateAborted(string reason) => _delivery?.Enqueue(() =>
    {
        _spool?.Dispose();
        _spool = null;
        Log.StateTransferRestarted(_runtime.Logger, Name, reason);
    });

    internal void OnStateReceived() => _delivery?.Enqueue(LoadCheckpoint);

    private void MakeCheckpoint(int cut)
    {
        // First the lineage of this state, so the joiners know which start of the state they receive.
        PostStateChunk(cut, StateTransferHeaderPart(), last: false);
        Exception? failed = RunMakers(new TransferSink(this, cut));
        if (failed == null) return;
        // A partial checkpoint would give the joiners a state nobody has: leave instead, so
        // another member makes theirs.
        _runtime.CountHandlerException();
        Log.HandlerThrew(_runtime.Logger, failed, Name, "a MakeChkpt handler threw, so this member's checkpoint is incomplete; it leaves the group and another member makes the joiners' checkpoint");
        if (_runtime.IsRunning)
        {
            try { _ = LeaveWithoutSaving(); }
            catch (IsisException) { /* already leaving or shut down */ }
        }
    }

    /// <summary>Runs the MakeChkpt handlers with their parts going to <paramref name="sink"/> (delivery thread); returns what a handler threw, if one did.</summary>
    private Exception? RunMakers(CheckpointSink sink)
    {
        View view = _view ?? throw new InvalidOperationException("a checkpoint is made only after a view");
        _making = sink;
        _makingEnded = false;
        try
        {
            if (ClientSessionsPart() is { } sessions) sink.Add(sessions); // first: the joiner runs no client request twice
            ChkptMaker? makers = MakeChkpt;
            if (makers != null)
            {
                foreach (ChkptMaker maker in makers.GetInvocationList().Cast<ChkptMaker>()) maker(view);
            }
            if (!_makingEnded) EndOfChkpt();
            return null;
        }
        catch (Exception e)
        {
            return e;
        }
        finally
        {
            _making = null;
        }
    }

    private void LoadCheckpoint()
    {
        CheckpointSpool? spool = _spool;
        _spool = null;
        using (spool)
        {
            IEnumerable<ReadOnlyMemory<byte>> parts = spool?.Parts() ?? [];
            // The maker's first part names the state's lineage (a maker of an earlier version sends
            // none: unknown). It is taken before the parts load, so a checkpoint of this member's
            // that holds another lineage is aside before anything could overwrite it.
            bool header = StateTransferHeader.TryRead(parts.FirstOrDefault().Span, out Lineage? lineage);
            TakeTransferredLineage(lineage);
            LoadParts(header ? parts.Skip(1) : parts);
        }
    }

    /// <summary>Hands each part of a checkpoint to the LoadChkpt handlers, in order (delivery thread).</summary>
    private void LoadParts(IEnumerable<ReadOnlyMemory<byte>> parts)
    {
        foreach (ReadOnlyMemory<byte> part in parts)
        {
            if (TryLoadClientSessions(part.Span)) continue;
            DispatchResult result = _loaders.Dispatch(part);
            switch (result.Outcome)
            {
                case DispatchOutcome.Invoked:
                    break;
                case DispatchOutcome.HandlerThrew:
                    OnHandlerException(result.Exception!);
                    break;
                default:
                    _runtime.CountMismatch();
                    Log.CheckpointPartUnmatched(_runtime.Logger, Name, result.Message ?? result.Outcome.ToString());
                    break;
            }
        }
    }
}
