using System.Buffers;
using System.Buffers.Binary;
using System.Collections.Concurrent;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using Isis.Transport.Framing;

namespace Isis.Transport;

/// <summary>
/// The TCP overlay, for networks that block UDP: the same packets as <see cref="UdpTransport"/>,
/// batched into the same datagram format, each datagram sent as one length-prefixed frame. Built on
/// System.IO.Pipelines: a process keeps at most one connection per peer, used both ways, with two
/// loops over it: the send loop drains the pipe the event loop writes frames into, and the receive
/// loop fills a pipe from the socket and takes whole frames off it.
/// </summary>
/// <remarks>
/// <para>The first of a pair to send dials; the other adopts the connection it accepted for its own
/// frames. A connection opens with a hello (a magic number and the dialler's listening endpoint,
/// whose address must be the connection's own): packets are then attributed to that endpoint, as
/// UDP attributes them to the datagram's source. When both dial at once, both ends keep the
/// connection the lower endpoint dialled and retire the other once it has sent what it held.</para>
/// <para>A broken connection is opened again at the next send; frames written into it are lost, as
/// UDP datagrams can be, and the protocol's sequence numbers repair (never duplicate) them.</para>
/// <para>A connection that carried nothing either way for <see cref="DefaultIdleTimeout"/> is retired
/// as a losing duplicate is (what it holds is sent, then both ends close it), and the next send
/// dials again. A large group's members talk to their tree neighbours only, but the tree changes
/// with every view (ranks move down when a member leaves): without this, the connections of a
/// long-lived member would pile up towards one per member.</para>
/// <para>Back-pressure: a peer's unsent bytes are bounded; a frame beyond the bound is dropped and
/// counted (<see cref="TransportCounters.SendErrors"/>) rather than stalling the loop.</para>
/// <para>Threading: as <see cref="IPacketTransport"/> says. The accept, send and receive loops run on
/// threads of their own with blocking socket calls, and the pipes complete inline: nothing here
/// waits for the thread pool, which an application may have blocked (a runtime starved of its
/// heartbeats would be expelled). They touch only the pipes, the received-frame queue and the counters.</para>
/// </remarks>
internal sealed class TcpTransport : IPacketTransport
{
    private const uint HelloMagic = 0x54534953; // "SIST" little-endian: "ISIS-TCP" hello
    private const int HelloSize = 4 + 8;
    private const int FrameHeaderSize = 4;

    /// <summary>Unsent bytes per peer beyond which frames are dropped (the receiver is not keeping up, or unreachable).</summary>
    public const long MaxUnsentBytesPerPeer = 16 * 1024 * 1024;

    /// <summary>A peer whose connection broke is not dialled again sooner than this (microseconds): frames meanwhile are dropped and counted, as to an unreachable UDP peer.</summary>
    public const long ReconnectBackoff = 50_000;

    /// <summary>A connection idle this long (microseconds) both ways is closed; the next send opens another.</summary>
    public const long DefaultIdleTimeout = 60_000_000;

    /// <summary>Accepted connections beyond this many open ones are closed at once and counted: each costs two threads, and peers need one each.</summary>
    public const int MaxConnections = 1024;

    private readonly Socket _listener;
    private readonly FragmentIdCounter _fragmentIds;
    private readonly DatagramParser _parser;
    private readonly int _maxPacketSize;
    private readonly DestinationBatches<Peer> _batches;
    private readonly ConcurrentQueue<(ulong Source, byte[] Bytes, int Length)> _received = new();
    private readonly ManualResetEventSlim _signal = new(false, spinCount: 0);
    private readonly ConcurrentDictionary<Socket, byte> _open = new();
    private readonly object _gate = new();
    private readonly Dictionary<ulong, Connection> _connections = new(); // under _gate: the connection each peer's frames go on
    private readonly ReceivedPacketCallback? _onPacket;
    private readonly long _idleTimeout;
    private long _nextIdleSweepAt;
    private long _idleClosed;
    private int _wakesPending;
    private long _dials;
    private volatile bool _disposed;

    /// <param name="bindTo">IPv4 address and port to listen on; port 0 picks a free one.</param>
    /// <param name="maxPacketSize">Larger packets are refused and counted.</param>
    /// <param name="onPacket">
    /// Null: the owner reads (<see cref="WaitReadable"/>, <see cref="ReceivePending"/>). Otherwise each
    /// connection's receive loop parses its frames and hands every packet to this callback, as
    /// <see cref="UdpTransport"/>'s receive thread does (the membership replica's sockets).
    /// </param>
    /// <param name="idleTimeoutMicros">A connection idle this long both ways is closed (<see cref="DefaultIdleTimeout"/> unless a test says otherwise).</param>
    public TcpTransport(IPEndPoint bindTo, int maxPacketSize = FrameFormat.DefaultMaxPacketSize, ReceivedPacketCallback? onPacket = null,
        long idleTimeoutMicros = DefaultIdleTimeout)
    {
        _onPacket = onPacket;
        _idleTimeout = idleTimeoutMicros;
        ArgumentNullException.ThrowIfNull(bindTo);
        if (bindTo.AddressFamily != AddressFamily.InterNetwork) throw new ArgumentException("Only IPv4 endpoints are supported.", nameof(bindTo));
        _maxPacketSize = maxPacketSize;
        _fragmentIds = new FragmentIdCounter((ulong)Random.Shared.NextInt64());
        _batches = new DestinationBatches<Peer>(
            destination => new Peer(destination, new DatagramBatcher(FrameFormat.MaxUdpPayload, _fragmentIds, _maxPacketSize)),
            eagerSendThreshold: 64, Counters);
        _parser = new DatagramParser(new FragmentReassembler(new ReassemblyLimits(), Counters.Framing), Counters.Framing);
        _listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        try
        {
            // A restarted process takes its port back although connections of its last run linger in
            // TIME_WAIT. Only SO_REUSEADDR: .NET's ReuseAddress also sets SO_REUSEPORT on Linux, which
            // would let a second process listen on the same port (two membership replicas at one address).
            if (OperatingSystem.IsLinux()) _listener.SetRawSocketOption(1 /* SOL_SOCKET */, 2 /* SO_REUSEADDR */, BitConverter.GetBytes(1));
            _listener.Bind(bindTo);
            _listener.Listen(128);
        }
        catch
        {
            _listener.Dispose();
            throw;
        }
        LocalIPEndPoint = (IPEndPoint)_listener.LocalEndPoint!;
        LocalEndpoint = EndpointConversions.FromIPEndPoint(LocalIPEndPoint);
        StartThread(AcceptLoop, $"isis-tcp-accept:{LocalIPEndPoint.Port}");
    }

    public ulong LocalEndpoint { get; }

    public IPEndPoint LocalIPEndPoint { get; }

    public TransportCounters Counters { get; } = new();

    public bool IsReceiving => !_disposed;

    public long NextHeldDatagramDue => long.MaxValue;

    /// <summary>False: TCP connects pairs of processes; a group over the overlay is reached by one frame per member.</summary>
    public bool SupportsMulticast => false;

    public void JoinMulticast(ulong groupEndpoint) =>
        throw new InvalidOperationException("The TCP overlay has no IP multicast: check SupportsMulticast; a group over TCP is reached by unicast.");

    public void LeaveMulticast(ulong groupEndpoint) =>
        throw new InvalidOperationException("The TCP overlay has no IP multicast: check SupportsMulticast; a group over TCP is reached by unicast.");

    /// <summary>Connections opened (or tried) to peers so far.</summary>
    public long Dials => Interlocked.Read(ref _dials);

    /// <summary>Sockets open now (dialled or accepted, each counted once): with steady traffic both ways, one per peer.</summary>
    public int OpenConnections => _open.Count;

    /// <summary>
    /// Shuts every open connection down at once, as a network failure would (for tests): frames in
    /// flight are lost, both ends see the connection end, and the next send dials again.
    /// </summary>
    internal void BreakConnections()
    {
        foreach (Socket s in _open.Keys)
        {
            try
            {
                s.Shutdown(SocketShutdown.Both);
            }
            catch (Exception e) when (e is SocketException or ObjectDisposedException)
            {
                // Closing already.
            }
        }
    }

    // ---------------------------------------------------------------- connections

    /// <summary>
    /// One TCP connection to a peer, used both ways: the owner's frames go into
    /// <see cref="Outgoing"/> and its send loop drains them to the socket; its receive loop fills
    /// an incoming pipe from the socket and takes whole frames off it. Dialled by this process
    /// (it sent the hello) or accepted (the peer did).
    /// </summary>
    private sealed class Connection(Socket socket, ulong peer, bool dialled)
    {
        public readonly Socket Socket = socket;
        public readonly ulong Peer = peer;
        public readonly bool Dialled = dialled;
        public readonly Pipe Outgoing = new(InlinePipe);
        public long Unsent;

        /// <summary>When a frame last went out or came in on it (microseconds, <see cref="MonotonicClock"/>).</summary>
        public long LastActive = MonotonicClock.NowMicros();

        /// <summary>Held while a batch of frames is written into <see cref="Outgoing"/>, and while the connection is retired.</summary>
        public readonly object SendGate = new();

        /// <summary>The socket failed or closed: the owner opens (or adopts) another.</summary>
        public volatile bool Broken;

        /// <summary>
        /// The peer's other connection to this process won (both dialled at once): nothing more is
        /// sent on this one; its send loop sends what it holds and shuts the socket's sending side,
        /// and its receive loop reads until the peer does the same.
        /// </summary>
        public volatile bool Retired;

        public bool Usable => !Broken && !Retired;
    }

    /// <summary>
    /// Of two connections between the same pair (both dialled at once), both ends keep the one
    /// the lower endpoint dialled, so each pair settles on one connection without a round trip.
    /// </summary>
    private bool Keeps(Connection candidate) => candidate.Dialled ? LocalEndpoint < candidate.Peer : candidate.Peer < LocalEndpoint;

    /// <summary>The connection frames to <paramref name="peer"/> go on now, if one is open.</summary>
    private Connection? Current(ulong peer)
    {
        lock (_gate) return _connections.TryGetValue(peer, out Connection? c) && c.Usable ? c : null;
    }

    /// <summary>
    /// Makes <paramref name="candidate"/> the connection to its peer unless a usable one that the
    /// pair keeps is already there; the one that loses is retired. Returns whether the candidate won.
    /// </summary>
    private bool Register(Connection candidate)
    {
        Connection? loser;
        lock (_gate)
        {
            if (_connections.TryGetValue(candidate.Peer, out Connection? existing) && existing.Usable)
            {
                // Both dialled at once: the pair's rule decides. Otherwise (the peer dialled again, or
                // restarted on the same port) the newer connection replaces an older one of the same kind.
                bool candidateWins = existing.Dialled == candidate.Dialled || Keeps(candidate);
                if (!candidateWins)
                {
                    loser = candidate;
                    goto retire;
                }
                loser = existing;
            }
            else
            {
                loser = null;
            }
            _connections[candidate.Peer] = candidate;
        }
        if (loser != null) Retire(loser);
        return true;

    retire:
        Retire(loser);
        return false;
    }

    private static void Retire(Connection c)
    {
        // Under the connection's send gate: a batch being written into it finishes first, and no
        // batch is written after (SendCompleted checks under the same gate), so the send loop's last
        // read, after it sees the flag, finds every frame the connection will ever get.
        lock (c.SendGate) c.Retired = true;
        c.Outgoing.Reader.CancelPendingRead(); // its send loop wakes, sends what it holds, and stops
    }

    /// <summary>A connection failed or closed: forget it (if still the peer's), so the next send dials or adopts another.</summary>
    private void Broke(Connection c)
    {
        c.Broken = true;
        lock (_gate)
        {
            if (_connections.TryGetValue(c.Peer, out Connection? current) && current == c) _connections.Remove(c.Peer);
        }
    }

    // ---------------------------------------------------------------- sending (the driving thread)

    /// <summary>One destination: its batcher, and the connection its frames went on last.</summary>
    private sealed class Peer(ulong endpoint, DatagramBatcher batcher) : BatchedDestination(batcher)
    {
        public readonly ulong Endpoint = endpoint;
        public Connection? Connection;
        public long DialledAt = long.MinValue / 2;
    }

    public void Enqueue(ulong destination, ReadOnlySpan<byte> packet)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (_batches.Add(destination, packet) is { } full) SendCompleted(full);
    }

    public void Flush()
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        _batches.Flush(this, static (peer, transport) => transport.SendCompleted(peer));
        RetireIdle();
    }

    /// <summary>
    /// Retires the connections idle both ways for longer than the idle timeout (looked for at most
    /// ten times per timeout): each sends what it holds and closes, and the peer's next send, or
    /// ours, dials another.
    /// </summary>
    private void RetireIdle()
    {
        long now = MonotonicClock.NowMicros();
        if (now < _nextIdleSweepAt) return;
        _nextIdleSweepAt = now + Math.Max(1_000, _idleTimeout / 10);
        List<Connection>? idle = null;
        lock (_gate)
        {
            foreach (Connection c in _connections.Values)
            {
                if (c.Usable && now - Volatile.Read(ref c.LastActive) > _idleTimeout) (idle ??= []).Add(c);
            }
            if (idle == null) return;
            foreach (Connection c in idle) _connections.Remove(c.Peer);
        }
        foreach (Connection c in idle)
        {
            Interlocked.Increment(ref _idleClosed);
            Retire(c);
        }
    }

    /// <summary>Connections closed because they were idle.</summary>
    public long IdleClosed => Interlocked.Read(ref _idleClosed);

    private void SendCompleted(Peer peer)
    {
        DatagramBatcher batcher = peer.Batcher;
        if (batcher.CompletedCount == 0) return;
        // A connection may be retired (the pair keeps another) at any moment: a batch goes into one
        // that is usable while the batch is written, or into the one that replaced it.
        for (int attempt = 0; attempt < 3; attempt++)
        {
            if (peer.Connection is not { Usable: true })
            {
                // A connection retired here leaves by its own send loop; its pipe is not written again.
                peer.Connection = Current(peer.Endpoint) ?? Dial(peer);
                if (peer.Connection == null) break; // broke a moment ago (refused, reset): not one dial per flush to a dead peer
            }
            Connection connection = peer.Connection;
            lock (connection.SendGate)
            {
                if (!connection.Usable) continue;
                WriteFrames(connection, batcher);
            }
            batcher.ReleaseCompleted();
            return;
        }
        Interlocked.Add(ref Counters.SendErrors, batcher.CompletedCount);
        batcher.ReleaseCompleted();
    }

    /// <summary>Writes the batcher's completed datagrams into the connection's pipe as frames (under its send gate).</summary>
    private void WriteFrames(Connection connection, DatagramBatcher batcher)
    {
        PipeWriter writer = connection.Outgoing.Writer;
        Volatile.Write(ref connection.LastActive, MonotonicClock.NowMicros());
        for (int i = 0; i < batcher.CompletedCount; i++)
        {
            ReadOnlySpan<byte> datagram = batcher.GetCompleted(i).Span;
            if (Interlocked.Read(ref connection.Unsent) + datagram.Length > MaxUnsentBytesPerPeer)
            {
                Interlocked.Increment(ref Counters.SendErrors); // dropped: the peer is not keeping up
                continue;
            }
            Span<byte> frame = writer.GetSpan(FrameHeaderSize + datagram.Length);
            BinaryPrimitives.WriteInt32LittleEndian(frame, datagram.Length);
            datagram.CopyTo(frame[FrameHeaderSize..]);
            writer.Advance(FrameHeaderSize + datagram.Length);
            Interlocked.Add(ref connection.Unsent, FrameHeaderSize + datagram.Length);
            Interlocked.Increment(ref Counters.DatagramsSent);
            Interlocked.Add(ref Counters.BytesSent, datagram.Length);
        }
        // The pipe never pauses its writer (its send loop bounds it through Unsent), so this completes at once.
        ValueTask<FlushResult> flushed = writer.FlushAsync();
        if (!flushed.IsCompletedSuccessfully || flushed.Result.IsCompleted) Broke(connection);
    }

    /// <summary>Opens a connection to the peer (its send loop connects); null while the peer is in its reconnect back-off.</summary>
    private Connection? Dial(Peer peer)
    {
        long now = MonotonicClock.NowMicros();
        if (now - peer.DialledAt < ReconnectBackoff) return null;
        peer.DialledAt = now;
        Interlocked.Increment(ref _dials);
        var connection = new Connection(new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true }, peer.Endpoint, dialled: true);
        _open.TryAdd(connection.Socket, 0);
        if (!Register(connection))
        {
            // An accepted one that the pair keeps came first: this socket never connects, so it is
            // closed here (it was counted open, and nothing else would ever close it).
            _open.TryRemove(connection.Socket, out _);
            connection.Socket.Dispose();
            return Current(peer.Endpoint);
        }
        StartThread(() => DialAndSend(connection), $"isis-tcp-send:{EndpointConversions.ToIPEndPoint(peer.Endpoint).Port}");
        return connection;
    }

    /// <summary>
    /// Pipes that never pause their writer (the loop must not block; <see cref="Connection.Unsent"/>
    /// bounds them) and complete their waits inline, so no continuation needs the thread pool.
    /// </summary>
    private static readonly PipeOptions InlinePipe = new(readerScheduler: PipeScheduler.Inline, writerScheduler: PipeScheduler.Inline,
        pauseWriterThreshold: 0, resumeWriterThreshold: 0, useSynchronizationContext: false);

    private static void StartThread(Action loop, string name) => new Thread(() => loop()) { IsBackground = true, Name = name }.Start();

    /// <summary>A dialled connection: connects, says hello, starts its receive loop, then is its send loop.</summary>
    private void DialAndSend(Connection connection)
    {
        try
        {
            if (_disposed) return;
            connection.Socket.Connect(EndpointConversions.ToIPEndPoint(connection.Peer));
            Span<byte> hello = stackalloc byte[HelloSize];
            BinaryPrimitives.WriteUInt32LittleEndian(hello, HelloMagic);
            BinaryPrimitives.WriteUInt64LittleEndian(hello[4..], LocalEndpoint);
            connection.Socket.Send(hello);
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException)
        {
            if (e is SocketException se && !_disposed)
            {
                Interlocked.Increment(ref Counters.SendErrors);
                Volatile.Write(ref Counters.LastSocketError, (int)se.SocketErrorCode);
            }
            Close(connection);
            return;
        }
        StartThread(() => ReceiveLoop(connection.Socket, connection), $"isis-tcp-recv:{LocalIPEndPoint.Port}");
        SendLoop(connection);
    }

    /// <summary>Drains the connection's outgoing pipe into the socket until it breaks, is retired, or the transport closes.</summary>
    private void SendLoop(Connection connection)
    {
        PipeReader reader = connection.Outgoing.Reader;
        try
        {
            while (true)
            {
                ValueTask<ReadResult> pending = reader.ReadAsync();
                ReadResult read = pending.IsCompleted ? pending.Result : pending.AsTask().GetAwaiter().GetResult();
                foreach (ReadOnlyMemory<byte> segment in read.Buffer)
                {
                    int sent = 0;
                    while (sent < segment.Length) sent += connection.Socket.Send(segment.Span[sent..]);
                }
                Interlocked.Add(ref connection.Unsent, -read.Buffer.Length);
                reader.AdvanceTo(read.Buffer.End);
                if (read.IsCompleted || _disposed || connection.Broken) break;
                if (connection.Retired)
                {
                    // The pair keeps the other connection. Frames written after the read above but
                    // before the flag was set are still in the pipe (none come after it): send them;
                    // then tell the peer nothing more comes (its receive loop ends), and keep reading
                    // until it does the same.
                    if (reader.TryRead(out ReadResult rest))
                    {
                        foreach (ReadOnlyMemory<byte> segment in rest.Buffer)
                        {
                            int sent = 0;
                            while (sent < segment.Length) sent += connection.Socket.Send(segment.Span[sent..]);
                        }
                        Interlocked.Add(ref connection.Unsent, -rest.Buffer.Length);
                        reader.AdvanceTo(rest.Buffer.End);
                    }
                    connection.Socket.Shutdown(SocketShutdown.Send);
                    reader.Complete();
                    return;
                }
            }
        }
        catch (SocketException e)
        {
            // Refused, reset, unreachable: this connection is lost; the next send opens another.
            if (!_disposed)
            {
                Interlocked.Increment(ref Counters.SendErrors);
                Volatile.Write(ref Counters.LastSocketError, (int)e.SocketErrorCode);
            }
        }
        catch (ObjectDisposedException)
        {
            // Closing.
        }
        Close(connection);
    }

    /// <summary>Forgets a connection and closes its socket (which ends its other loop).</summary>
    private void Close(Connection connection)
    {
        Broke(connection);
        connection.Outgoing.Reader.Complete();
        _open.TryRemove(connection.Socket, out _);
        connection.Socket.Dispose();
    }

    // ---------------------------------------------------------------- receiving

    private void AcceptLoop()
    {
        while (!_disposed)
        {
            Socket accepted;
            try
            {
                accepted = _listener.Accept();
            }
            catch (ObjectDisposedException)
            {
                return;
            }
            catch (SocketException e)
            {
                if (_disposed) return;
                Interlocked.Increment(ref Counters.ReceiveErrors);
                Volatile.Write(ref Counters.LastSocketError, (int)e.SocketErrorCode);
                continue;
            }
            if (_open.Count >= MaxConnections)
            {
                CountHostile(); // a flood of connections: each would cost a thread
                accepted.Dispose();
                continue;
            }
            accepted.NoDelay = true;
            _open.TryAdd(accepted, 0);
            StartThread(() => ReceiveLoop(accepted, null), $"isis-tcp-recv:{LocalIPEndPoint.Port}");
        }
    }

    /// <summary>
    /// Fills a pipe from the socket and takes whole frames off it, queueing each for the owner (or,
    /// in callback mode, parsing it here). An accepted connection first reads the hello, which names
    /// the peer; it then becomes the peer's connection both ways unless the pair keeps another, and
    /// its send loop starts. A connection that breaks the framing is closed and counted.
    /// </summary>
    /// <param name="socket">The connection's socket.</param>
    /// <param name="dialled">The dialled connection this socket belongs to; null for an accepted socket (not yet greeted).</param>
    private void ReceiveLoop(Socket socket, Connection? dialled)
    {
        var pipe = new Pipe(InlinePipe);
        (DatagramParser Parser, ReceivedPacketHandoff Handoff)? own = _onPacket == null ? null
            : (new DatagramParser(new FragmentReassembler(new ReassemblyLimits(), Counters.Framing), Counters.Framing), new ReceivedPacketHandoff(_onPacket));
        Connection? connection = dialled;
        try
        {
            ulong source = dialled?.Peer ?? 0;
            bool greeted = dialled != null;
            while (!_disposed)
            {
                Memory<byte> space = pipe.Writer.GetMemory(64 * 1024);
                int received = socket.Receive(space.Span);
                if (received == 0) return; // the peer closed (or shut its sending side: it keeps another connection)
                pipe.Writer.Advance(received);
                _ = pipe.Writer.FlushAsync(); // completes at once: the writer never pauses
                if (!pipe.Reader.TryRead(out ReadResult read)) continue;
                ReadOnlySequence<byte> buffer = read.Buffer;
                if (!greeted && buffer.Length >= HelloSize)
                {
                    if (!TryReadHello(buffer.Slice(0, HelloSize), socket, out source))
                    {
                        CountHostile();
                        return;
                    }
                    greeted = true;
                    buffer = buffer.Slice(HelloSize);
                    connection = new Connection(socket, source, dialled: false);
                    if (Register(connection))
                    {
                        Connection sending = connection;
                        StartThread(() => SendLoop(sending), $"isis-tcp-send:{EndpointConversions.ToIPEndPoint(source).Port}");
                    }
                }
                if (connection != null) Volatile.Write(ref connection.LastActive, MonotonicClock.NowMicros());
                while (greeted && TryReadFrame(ref buffer, out ReadOnlySequence<byte> frame))
                {
                    byte[] bytes = ArrayPool<byte>.Shared.Rent(Math.Max(1, (int)frame.Length));
                    frame.CopyTo(bytes);
                    if (own != null)
                    {
                        // Callback mode: this connection's own parser and hand-off (neither is shared between threads).
                        try
                        {
                            Interlocked.Increment(ref Counters.DatagramsReceived);
                            Interlocked.Add(ref Counters.BytesReceived, frame.Length);
                            int packets = own.Value.Parser.Parse(source, bytes.AsSpan(0, (int)frame.Length), MonotonicClock.NowMicros(), own.Value.Handoff);
                            if (packets > 0) Interlocked.Add(ref Counters.PacketsReceived, packets);
                        }
                        finally
                        {
                            ArrayPool<byte>.Shared.Return(bytes);
                        }
                        continue;
                    }
                    _received.Enqueue((source, bytes, (int)frame.Length));
                    _signal.Set();
                }
                if (greeted && buffer.Length >= FrameHeaderSize && FrameLength(buffer) is < 0 or > FrameFormat.MaxUdpPayload)
                {
                    CountHostile();
                    return;
                }
                pipe.Reader.AdvanceTo(buffer.Start, buffer.End);
            }
        }
        catch (Exception e) when (e is ObjectDisposedException or SocketException)
        {
            // Closing, or the peer went away: the next send opens (or adopts) another connection.
        }
        finally
        {
            if (connection != null)
            {
                Broke(connection);
                connection.Outgoing.Reader.CancelPendingRead(); // its send loop (if any) wakes, sees it broken, and ends
            }
            _open.TryRemove(socket, out _);
            socket.Dispose();
            pipe.Writer.Complete();
            pipe.Reader.Complete();
        }
    }

    private void CountHostile()
    {
        Interlocked.Increment(ref Counters.DatagramsReceived);
        Interlocked.Increment(ref Counters.Framing.MalformedDatagrams);
    }

    /// <summary>The hello names the sender's listening endpoint; its address must be the one the connection comes from.</summary>
    private static bool TryReadHello(ReadOnlySequence<byte> hello, Socket socket, out ulong source)
    {
        Span<byte> bytes = stackalloc byte[HelloSize];
        hello.CopyTo(bytes);
        source = BinaryPrimitives.ReadUInt64LittleEndian(bytes[4..]);
        if (BinaryPrimitives.ReadUInt32LittleEndian(bytes) != HelloMagic || source == 0) return false;
        return socket.RemoteEndPoint is IPEndPoint remote && EndpointConversions.ToIPEndPoint(source).Address.Equals(remote.Address);
    }

    private static int FrameLength(ReadOnlySequence<byte> buffer)
    {
        Span<byte> header = stackalloc byte[FrameHeaderSize];
        buffer.Slice(0, FrameHeaderSize).CopyTo(header);
        return BinaryPrimitives.ReadInt32LittleEndian(header);
    }

    /// <summary>Takes one whole frame off the front of <paramref name="buffer"/>; false if it is incomplete or its length is impossible (the caller checks which).</summary>
    private static bool TryReadFrame(ref ReadOnlySequence<byte> buffer, out ReadOnlySequence<byte> frame)
    {
        frame = default;
        if (buffer.Length < FrameHeaderSize) return false;
        int length = FrameLength(buffer);
        if (length is < 0 or > FrameFormat.MaxUdpPayload) return false;
        if (buffer.Length < FrameHeaderSize + length) return false;
        frame = buffer.Slice(FrameHeaderSize, length);
        buffer = buffer.Slice(FrameHeaderSize + length);
        return true;
    }

    // ---------------------------------------------------------------- the owner's side

    public bool WaitReadable(long timeoutMicros)
    {
        if (_disposed) return false;
        if (!_received.IsEmpty || Volatile.Read(ref _wakesPending) > 0) return true;
        _signal.Reset();
        if (!_received.IsEmpty || Volatile.Read(ref _wakesPending) > 0) return true; // arrived before the reset
        int ms = timeoutMicros < 0 ? -1 : (int)Math.Min(int.MaxValue, (timeoutMicros + 999) / 1000);
        try
        {
            _signal.Wait(ms);
        }
        catch (ObjectDisposedException)
        {
            return false;
        }
        return !_disposed && (!_received.IsEmpty || Volatile.Read(ref _wakesPending) > 0);
    }

    public int ReceivePending(IPacketVisitor visitor, int maxReads, bool readable)
    {
        if (_disposed) return 0;
        int read = Interlocked.Exchange(ref _wakesPending, 0);
        if (read > 0) Interlocked.Add(ref Counters.Wakes, read);
        while (read < maxReads && _received.TryDequeue(out var frame))
        {
            read++;
            Interlocked.Increment(ref Counters.DatagramsReceived);
            Interlocked.Add(ref Counters.BytesReceived, frame.Length);
            try
            {
                int packets = _parser.Parse(frame.Source, frame.Bytes.AsSpan(0, frame.Length), MonotonicClock.NowMicros(), visitor);
                if (packets > 0) Interlocked.Add(ref Counters.PacketsReceived, packets);
            }
            finally
            {
                ArrayPool<byte>.Shared.Return(frame.Bytes);
            }
        }
        return read;
    }

    public void Wake()
    {
        if (_disposed) return;
        Interlocked.Increment(ref _wakesPending);
        _signal.Set();
    }

    public void EvictExpiredFragments() => _parser.Reassembler.EvictExpired(MonotonicClock.NowMicros());

    public void Dispose()
    {
        if (_disposed) return;
        _disposed = true;
        _listener.Dispose();
        foreach (Socket s in _open.Keys) s.Dispose();
        lock (_gate)
        {
            foreach (Connection c in _connections.Values) c.Outgoing.Reader.CancelPendingRead(); // idle send loops wake and end
        }
        foreach (Peer peer in _batches.All) peer.Connection?.Outgoing.Writer.Complete();
        _batches.Clear();
        _signal.Set(); // a waiting owner returns
        while (_received.TryDequeue(out var frame)) ArrayPool<byte>.Shared.Return(frame.Bytes);
        _parser.Reassembler.Clear();
    }
}
