using System.Buffers;
using System.Buffers.Binary;
using System.Collections.Concurrent;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using Isis.Core.Framing;

namespace Isis.Transport;

/// <summary>
/// The TCP overlay, for networks that block UDP: the same packets as <see cref="UdpTransport"/>,
/// batched into the same datagram format, each datagram sent as one length-prefixed frame over a
/// TCP connection to the destination's listening port. Built on System.IO.Pipelines: per peer, the
/// loop writes frames into a pipe and a send thread drains it to the socket; per accepted
/// connection, a receive thread fills a pipe from the socket and takes whole frames off it.
/// </summary>
/// <remarks>
/// <para>A connection opens with a hello (a magic number and the sender's listening endpoint, whose
/// address must be the connection's own): packets are then attributed to that endpoint, as UDP
/// attributes them to the datagram's source.</para>
/// <para>Each process sends on the connection it opened to a peer and receives on the ones peers
/// opened to it. A broken connection is opened again at the next send; frames written into it are
/// lost, as UDP datagrams can be, and the protocol's sequence numbers repair (never duplicate) them.</para>
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

    /// <summary>Accepted connections beyond this many are closed at once and counted: each costs a thread, and peers need one each.</summary>
    public const int MaxInboundConnections = 1024;

    private readonly Socket _listener;
    private readonly FragmentIdCounter _fragmentIds;
    private readonly DatagramParser _parser;
    private readonly int _maxPacketSize;
    private readonly DestinationBatches<Peer> _batches;
    private readonly ConcurrentQueue<(ulong Source, byte[] Bytes, int Length)> _received = new();
    private readonly ManualResetEventSlim _signal = new(false, spinCount: 0);
    private readonly ConcurrentDictionary<Socket, byte> _inbound = new();
    private readonly ConcurrentDictionary<Socket, byte> _outbound = new();
    private readonly ReceivedPacketCallback? _onPacket;
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
    public TcpTransport(IPEndPoint bindTo, int maxPacketSize = FrameFormat.DefaultMaxPacketSize, ReceivedPacketCallback? onPacket = null)
    {
        _onPacket = onPacket;
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

    /// <summary>Connections opened (or tried) to peers so far.</summary>
    public long Dials => Interlocked.Read(ref _dials);

    // ---------------------------------------------------------------- sending (the driving thread)

    /// <summary>One destination: its batcher, and the connection (pipe and send loop) currently open to it.</summary>
    private sealed class Peer(ulong endpoint, DatagramBatcher batcher) : BatchedDestination(batcher)
    {
        public readonly ulong Endpoint = endpoint;
        public Connection? Connection;
        public long DialledAt = long.MinValue / 2;
    }

    /// <summary>An outbound connection: frames go into <see cref="Pipe"/>; its send loop connects and drains it.</summary>
    private sealed class Connection
    {
        public readonly Pipe Pipe = new(InlinePipe);
        public long Unsent;
        public volatile bool Broken;
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
    }

    private void SendCompleted(Peer peer)
    {
        DatagramBatcher batcher = peer.Batcher;
        if (batcher.CompletedCount == 0) return;
        if (peer.Connection is not { Broken: false } connection)
        {
            long now = MonotonicClock.NowMicros();
            if (now - peer.DialledAt < ReconnectBackoff)
            {
                // Broke a moment ago (refused, reset): do not spin up a connection per flush to a dead peer.
                Interlocked.Add(ref Counters.SendErrors, batcher.CompletedCount);
                batcher.ReleaseCompleted();
                return;
            }
            peer.DialledAt = now;
            Interlocked.Increment(ref _dials);
            connection = new Connection();
            peer.Connection = connection;
            ulong destination = peer.Endpoint;
            StartThread(() => SendLoop(destination, connection), $"isis-tcp-send:{EndpointConversions.ToIPEndPoint(destination).Port}");
        }
        PipeWriter writer = connection.Pipe.Writer;
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
        batcher.ReleaseCompleted();
        // The pipe never pauses its writer (its send loop bounds it through Unsent), so this completes at once.
        ValueTask<FlushResult> flushed = writer.FlushAsync();
        if (!flushed.IsCompletedSuccessfully || flushed.Result.IsCompleted) connection.Broken = true;
    }

    /// <summary>
    /// Pipes that never pause their writer (the loop must not block; <see cref="Connection.Unsent"/>
    /// bounds them) and complete their waits inline, so no continuation needs the thread pool.
    /// </summary>
    private static readonly PipeOptions InlinePipe = new(readerScheduler: PipeScheduler.Inline, writerScheduler: PipeScheduler.Inline,
        pauseWriterThreshold: 0, resumeWriterThreshold: 0, useSynchronizationContext: false);

    private static void StartThread(Action loop, string name) => new Thread(() => loop()) { IsBackground = true, Name = name }.Start();

    /// <summary>Connects, says hello, then drains the pipe into the socket until it breaks or the transport closes.</summary>
    private void SendLoop(ulong destination, Connection connection)
    {
        PipeReader reader = connection.Pipe.Reader;
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        _outbound.TryAdd(socket, 0);
        try
        {
            if (_disposed) return;
            socket.Connect(EndpointConversions.ToIPEndPoint(destination));
            Span<byte> hello = stackalloc byte[HelloSize];
            BinaryPrimitives.WriteUInt32LittleEndian(hello, HelloMagic);
            BinaryPrimitives.WriteUInt64LittleEndian(hello[4..], LocalEndpoint);
            socket.Send(hello);
            while (true)
            {
                ValueTask<ReadResult> pending = reader.ReadAsync();
                ReadResult read = pending.IsCompleted ? pending.Result : pending.AsTask().GetAwaiter().GetResult();
                foreach (ReadOnlyMemory<byte> segment in read.Buffer)
                {
                    int sent = 0;
                    while (sent < segment.Length) sent += socket.Send(segment.Span[sent..]);
                }
                Interlocked.Add(ref connection.Unsent, -read.Buffer.Length);
                reader.AdvanceTo(read.Buffer.End);
                if (read.IsCompleted) break;
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
        finally
        {
            connection.Broken = true;
            reader.Complete();
            _outbound.TryRemove(socket, out _);
            socket.Dispose();
        }
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
            if (_inbound.Count >= MaxInboundConnections)
            {
                CountHostile(); // a flood of connections: each would cost a thread
                accepted.Dispose();
                continue;
            }
            _inbound.TryAdd(accepted, 0);
            StartThread(() => ReceiveLoop(accepted), $"isis-tcp-recv:{LocalIPEndPoint.Port}");
        }
    }

    /// <summary>
    /// Fills a pipe from the socket, reads the hello, then takes whole frames off the pipe and
    /// queues each for the owner (or, in callback mode, parses it here); a connection that breaks
    /// the framing is closed and counted.
    /// </summary>
    private void ReceiveLoop(Socket socket)
    {
        var pipe = new Pipe(InlinePipe);
        (DatagramParser Parser, ReceivedPacketHandoff Handoff)? own = _onPacket == null ? null
            : (new DatagramParser(new FragmentReassembler(new ReassemblyLimits(), Counters.Framing), Counters.Framing), new ReceivedPacketHandoff(_onPacket));
        try
        {
            ulong source = 0;
            bool greeted = false;
            while (!_disposed)
            {
                Memory<byte> space = pipe.Writer.GetMemory(64 * 1024);
                int received = socket.Receive(space.Span);
                if (received == 0) return; // the peer closed
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
                }
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
            // Closing, or the peer went away: its next connection starts afresh.
        }
        finally
        {
            _inbound.TryRemove(socket, out _);
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
        foreach (Socket s in _inbound.Keys) s.Dispose();
        foreach (Socket s in _outbound.Keys) s.Dispose();
        foreach (Peer peer in _batches.All) peer.Connection?.Pipe.Writer.Complete();
        _batches.Clear();
        _signal.Set(); // a waiting owner returns
        while (_received.TryDequeue(out var frame)) ArrayPool<byte>.Shared.Return(frame.Bytes);
        _parser.Reassembler.Clear();
    }
}
