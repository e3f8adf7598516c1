using System.Diagnostics;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Runtime;

namespace Isis;

/// <summary>
/// Send and OrderedSend, the cheap multicasts: the arguments are encoded on the caller's thread into a
/// pooled array, the send is queued to the event loop (or run there at once when the window is
/// quiet), and flow control holds the caller (or its task) while this member has too many messages
/// not yet stable. SafeSend is in Group.SafeSend.cs, queries in Group.Query.cs.
/// </summary>
public sealed partial class Group
{
    /// <summary>
    /// Multicasts a message to the group: FIFO from this sender, delivered here at once (no network
    /// wait), non-durable (if this process and every process that received it fail, it may be
    /// lost). The arguments must match the parameter types of a handler registered for <paramref name="opcode"/>.
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    /// <remarks>Blocks while this member has <see cref="IsisOptions.MaxUnstableMessages"/> messages not yet stable (flow control).</remarks>
    public void Send(int opcode, params object?[] args) => Multicast(MessageKind.Send, nameof(Send), opcode, args);

    /// <summary>
    /// Multicasts a message in one total order across all senders of the group, consistent with each
    /// sender's own order: every member delivers all OrderedSends of a view in the same sequence.
    /// Non-durable like <see cref="Send"/>. Not delivered here at once: it waits for its place in the
    /// order (set by the oldest member of the view).
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    /// <remarks>Blocks while this member has <see cref="IsisOptions.MaxUnstableMessages"/> messages not yet stable (flow control).</remarks>
    public void OrderedSend(int opcode, params object?[] args) => Multicast(MessageKind.Ordered, nameof(OrderedSend), opcode, args);

    /// <summary>
    /// <see cref="Send"/> for asynchronous code: where Send would block a thread under flow control,
    /// the returned task waits instead. It completes once the message is handed to the protocol
    /// (it is then delivered here and sent, as with Send), at once while the window is open.
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    public Task SendAsync(int opcode, params object?[] args) => MulticastAsync(MessageKind.Send, nameof(SendAsync), opcode, args, CancellationToken.None);

    /// <summary>As <see cref="SendAsync(int, object[])"/>; cancelling <paramref name="cancellationToken"/> while the message waits for flow control drops it unsent.</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <param name="cancellationToken">Gives up waiting for flow control; the message is then not sent.</param>
    public Task SendAsync(int opcode, object?[] args, CancellationToken cancellationToken) => MulticastAsync(MessageKind.Send, nameof(SendAsync), opcode, args, cancellationToken);

    /// <summary><see cref="OrderedSend"/> for asynchronous code (see <see cref="SendAsync(int, object[])"/>).</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    public Task OrderedSendAsync(int opcode, params object?[] args) => MulticastAsync(MessageKind.Ordered, nameof(OrderedSendAsync), opcode, args, CancellationToken.None);

    /// <summary>As <see cref="OrderedSendAsync(int, object[])"/>; cancelling <paramref name="cancellationToken"/> while the message waits for flow control drops it unsent.</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <param name="cancellationToken">Gives up waiting for flow control; the message is then not sent.</param>
    public Task OrderedSendAsync(int opcode, object?[] args, CancellationToken cancellationToken) => MulticastAsync(MessageKind.Ordered, nameof(OrderedSendAsync), opcode, args, cancellationToken);

    /// <summary>
    /// Multicasts a message in causal order: every member delivers it only after every causal
    /// message its sender had delivered before sending it (a reply is never seen before the question
    /// it answers), and after the sender's own earlier causal messages. Causal order binds CausalSends
    /// and CausalQueries among themselves; concurrent ones may be delivered in different orders at
    /// different members. Delivered here at once; non-durable like <see cref="Send"/> (a Flush after
    /// it also waits for the causal messages delivered here before it to be stable).
    /// </summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    /// <remarks>Blocks while this member has <see cref="IsisOptions.MaxUnstableMessages"/> messages not yet stable (flow control).</remarks>
    public void CausalSend(int opcode, params object?[] args) => Multicast(MessageKind.CausalSend, nameof(CausalSend), opcode, args);

    /// <summary><see cref="CausalSend"/> for asynchronous code (see <see cref="SendAsync(int, object[])"/>).</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    public Task CausalSendAsync(int opcode, params object?[] args) => MulticastAsync(MessageKind.CausalSend, nameof(CausalSendAsync), opcode, args, CancellationToken.None);

    /// <summary>As <see cref="CausalSendAsync(int, object[])"/>; cancelling <paramref name="cancellationToken"/> while the message waits for flow control drops it unsent.</summary>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <param name="cancellationToken">Gives up waiting for flow control; the message is then not sent.</param>
    public Task CausalSendAsync(int opcode, object?[] args, CancellationToken cancellationToken) => MulticastAsync(MessageKind.CausalSend, nameof(CausalSendAsync), opcode, args, cancellationToken);

    /// <summary>
    /// Sends a message to one member of the group: delivered there only, FIFO with this member's
    /// other P2PSends, SubsetSends and Sends, and virtually synchronous like them (delivered in this
    /// view, before the next view, if the destination survives it; or nowhere). Delivered here at
    /// once when <paramref name="member"/> is this member.
    /// </summary>
    /// <param name="member">The destination: a member of the current view.</param>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="ArgumentException"><paramref name="member"/> is not in the current view.</exception>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    /// <remarks>
    /// Every member holds the message until it is stable, as for a Send (so a view change can hand it
    /// to the destination whoever fails): it costs a Send's traffic. Blocks under flow control as Send does.
    /// </remarks>
    public void P2PSend(Address member, int opcode, params object?[] args) =>
        Multicast(MessageKind.Subset, nameof(P2PSend), opcode, args, Destinations(nameof(P2PSend), [member]));

    /// <summary><see cref="P2PSend"/> for asynchronous code (see <see cref="SendAsync(int, object[])"/>).</summary>
    /// <param name="member">The destination: a member of the current view.</param>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="ArgumentException"><paramref name="member"/> is not in the current view.</exception>
    public Task P2PSendAsync(Address member, int opcode, params object?[] args) =>
        MulticastAsync(MessageKind.Subset, nameof(P2PSendAsync), opcode, args, CancellationToken.None, Destinations(nameof(P2PSendAsync), [member]));

    /// <summary>
    /// Sends a message to some members of the group: delivered at each of them only, in this
    /// member's FIFO order (with its Sends and P2PSends), and virtually synchronous: delivered in this
    /// view at every destination that survives it, or at none. Delivered here at once when this member is one of them.
    /// </summary>
    /// <param name="members">The destinations: members of the current view (duplicates count once).</param>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="ArgumentException"><paramref name="members"/> is empty or names a process not in the current view.</exception>
    /// <exception cref="IsisException">The group is not joined, the runtime shut down, or the message is too large.</exception>
    /// <remarks>Costs a Send's traffic (every member holds it until stable); blocks under flow control as Send does.</remarks>
    public void SubsetSend(IEnumerable<Address> members, int opcode, params object?[] args) =>
        Multicast(MessageKind.Subset, nameof(SubsetSend), opcode, args, Destinations(nameof(SubsetSend), members));

    /// <summary><see cref="SubsetSend"/> for asynchronous code (see <see cref="SendAsync(int, object[])"/>).</summary>
    /// <param name="members">The destinations: members of the current view.</param>
    /// <param name="opcode">The request code whose handlers receive the message.</param>
    /// <param name="args">The handler's arguments.</param>
    /// <exception cref="ArgumentException"><paramref name="members"/> is empty or names a process not in the current view.</exception>
    public Task SubsetSendAsync(IEnumerable<Address> members, int opcode, params object?[] args) =>
        MulticastAsync(MessageKind.Subset, nameof(SubsetSendAsync), opcode, args, CancellationToken.None, Destinations(nameof(SubsetSendAsync), members));

    /// <summary>The destinations of a subset send, checked against the current view: a process outside it would never receive the message.</summary>
    private NodeId[] Destinations(string operation, IEnumerable<Address> members)
    {
        ArgumentNullException.ThrowIfNull(members);
        View view = GetView() ?? throw NotJoinedError(operation);
        var to = new List<NodeId>();
        foreach (Address a in members)
        {
            ArgumentNullException.ThrowIfNull(a, nameof(members));
            if (Array.IndexOf(view.Members, a) < 0)
            {
                throw new ArgumentException($"{operation}: {a} is not a member of group '{Name}' in its current view {view.ViewId}; address members of GetView().Members.", nameof(members));
            }
            if (!to.Contains(a.Node)) to.Add(a.Node);
        }
        if (to.Count == 0) throw new ArgumentException($"{operation} needs at least one destination; to reach every member use Send.", nameof(members));
        return [.. to];
    }

    // ---------------------------------------------------------------- the path to the event loop

    /// <summary>Send and OrderedSend: the arguments are encoded into a pooled array that the protocol holds until the message is stable, then reuses.</summary>
    // to: a subset send's destinations (null for the others).
    private void Multicast(MessageKind kind, string operation, int opcode, object?[]? args, NodeId[]? to = null)
    {
        using Activity? activity = StartMulticastActivity(kind, opcode);
        (EventLoop loop, byte[] array, int length) = EncodeMulticast(operation, opcode, args);
        PostSend(loop, kind, array.AsMemory(0, length), 0, Recycled(kind, array), to);
    }

    /// <summary>The pooled array the protocol recycles once the message is stable: for the kinds whose sender stream is their last holder (Send, subset sends); the others wait elsewhere too, so their array is left to the GC.</summary>
    private static byte[]? Recycled(MessageKind kind, byte[] array) => kind is MessageKind.Send or MessageKind.Subset ? array : null;

    private Activity? StartMulticastActivity(MessageKind kind, int opcode)
    {
        Activity? activity = _runtime.Instruments.Activities.StartActivity(kind switch
        {
            MessageKind.Send => "isis.send",
            MessageKind.CausalSend => "isis.causal_send",
            MessageKind.Subset => "isis.subset_send",
            _ => "isis.ordered_send",
        });
        activity?.SetTag("isis.group", Name);
        activity?.SetTag("isis.opcode", opcode);
        return activity;
    }

    /// <summary>Checks that the group can multicast and encodes the arguments into a pooled array (the caller owns it).</summary>
    private (EventLoop Loop, byte[] Array, int Length) EncodeMulticast(string operation, int opcode, object?[]? args)
    {
        EventLoop loop = _runtime.RunningLoop();
        if (_state is not (GroupState.Joining or GroupState.Joined)) throw NotJoinedError(operation);
        (byte[] array, int length) = _runtime.Encoder.Encode(opcode, args ?? [null]);
        if (length > _runtime.Options.MaxMessageSize)
        {
            _runtime.Buffers.Return(array);
            throw ExceptionFactory.MessageTooLarge(length, _runtime.Options.MaxMessageSize);
        }
        return (loop, array, length);
    }

    /// <summary>
    /// Encodes into the thread's pooled writer and copies out an exact array: for payloads that
    /// something besides the sender's stream holds (SafeSend, queries, replies), which therefore
    /// cannot be recycled, without the encoder's own growing buffer on top.
    /// </summary>
    private byte[] EncodeToArray(int opcode, object?[]? args)
    {
        (byte[] array, int length) = _runtime.Encoder.Encode(opcode, args ?? [null]);
        byte[] exact = array.AsSpan(0, length).ToArray();
        _runtime.Buffers.Return(array);
        return exact;
    }

    private void MulticastPayload(MessageKind kind, string operation, byte[] payload, int phi)
    {
        EventLoop loop = _runtime.RunningLoop();
        if (_state is not (GroupState.Joining or GroupState.Joined)) throw NotJoinedError(operation);
        if (payload.Length > _runtime.Options.MaxMessageSize) throw ExceptionFactory.MessageTooLarge(payload.Length, _runtime.Options.MaxMessageSize);
        PostSend(loop, kind, payload, phi, null);
    }

    private void PostSend(EventLoop loop, MessageKind kind, ReadOnlyMemory<byte> payload, int phi, byte[]? pooled, NodeId[]? to = null)
    {
        WaitForWindow();
        Interlocked.Increment(ref _queuedSends.Value);
        loop.PostSend(new QueuedSend(Id, _queuedSends, kind, payload, phi, pooled, to), mayRunInline: WindowQuiet);
    }

    private Task MulticastAsync(MessageKind kind, string operation, int opcode, object?[]? args, CancellationToken cancellationToken, NodeId[]? to = null)
    {
        if (cancellationToken.IsCancellationRequested) return Task.FromCanceled(cancellationToken);
        using Activity? activity = StartMulticastActivity(kind, opcode);
        (EventLoop loop, byte[] array, int length) = EncodeMulticast(operation, opcode, args);
        byte[]? pooled = Recycled(kind, array);
        if (Interlocked.Read(ref _asyncWaiting) == 0 && !WindowFull)
        {
            Interlocked.Increment(ref _queuedSends.Value);
            loop.PostSend(new QueuedSend(Id, _queuedSends, kind, array.AsMemory(0, length), 0, pooled, to), mayRunInline: WindowQuiet);
            return Task.CompletedTask;
        }
        // Behind flow control: wait in line. The line is taken before this call returns, so this
        // sender's messages keep the order it issued them in, whatever it awaits, and a blocking
        // Send issued after this one waits behind it too.
        Interlocked.Increment(ref _asyncWaiting);
        return SendInLineAsync(_sendLine.WaitAsync(cancellationToken), kind, array, length, pooled, to, cancellationToken);
    }

    private async Task SendInLineAsync(Task inLine, MessageKind kind, byte[] array, int length, byte[]? pooled, NodeId[]? to, CancellationToken cancellationToken)
    {
        bool holdsLine = false;
        try
        {
            await inLine.ConfigureAwait(false);
            holdsLine = true;
            while (WindowFull)
            {
                TaskCompletionSource opened = _windowOpened ?? Interlocked.CompareExchange(ref _windowOpened, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously), null) ?? _windowOpened!;
                if (!WindowFull) break; // it opened while we registered
                try
                {
                    await opened.Task.WaitAsync(TimeSpan.FromMilliseconds(50), cancellationToken).ConfigureAwait(false);
                }
                catch (TimeoutException)
                {
                    // Look again (and notice a runtime that stopped meanwhile).
                }
                _runtime.RunningLoop();
            }
            EventLoop loop = _runtime.RunningLoop();
            Interlocked.Increment(ref _queuedSends.Value);
            loop.PostSend(new QueuedSend(Id, _queuedSends, kind, array.AsMemory(0, length), 0, pooled, to), mayRunInline: WindowQuiet);
            pooled = null; // the protocol owns it now
        }
        finally
        {
            if (pooled != null) _runtime.Buffers.Return(pooled); // never sent: the array is still ours
            if (holdsLine) _sendLine.Release();
            // The last one in line lets blocking senders go.
            if (Interlocked.Decrement(ref _asyncWaiting) == 0) _windowOpen.Set();
        }
    }

    /// <summary>
    /// Few messages of this member are unstable: it is not streaming, so a Send may run on the
    /// caller's thread (see <see cref="EventLoop.PostSend"/>). In a stream the window fills, and the
    /// loop batching the Sends into few datagrams is worth more than one hand-off.
    /// </summary>
    private bool WindowQuiet => Interlocked.Read(ref _queuedSends.Value) + Interlocked.Read(ref _window) < _runtime.Options.MaxUnstableMessages / 4;

    private bool WindowFull => Interlocked.Read(ref _queuedSends.Value) + Interlocked.Read(ref _window) >= _runtime.Options.MaxUnstableMessages;

    private void WaitForWindow()
    {
        // Behind flow control, or behind asynchronous Sends of this member still waiting in line.
        while (WindowFull || Interlocked.Read(ref _asyncWaiting) > 0)
        {
            // A handler of this group blocking here would hold up nothing the window needs
            // (stability advances on the event loop), so waiting is safe on any thread.
            _windowOpen.Reset();
            if (!WindowFull && Interlocked.Read(ref _asyncWaiting) == 0) break;
            _windowOpen.Wait(TimeSpan.FromMilliseconds(50));
            _runtime.RunningLoop();
        }
    }
}
