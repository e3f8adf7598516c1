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
/// loop writes frames into a pipe and a send loop drains it to the socket; per accepted
/// connection, a receive loop reads frames from the socket's pipe and queues them for the owner.
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
/// <para>Threading: as <see cref="IPacketTransport"/> says; the accept, send and receive loops run
/// on the thread pool and only touch the pipes, the received-frame queue and the counters.</para>
/// </remarks>
internal sealed class TcpTransport : IPacketTransport
{
    private const uint HelloMagic = 0x54534953; // "SIST" little-endian: "ISIS-TCP" hello
    private const int HelloSize = 4 + 8;
    private const int FrameHeaderSize = 4;

    /// <summary>Unsent bytes per peer beyond which frames are dropped (the receiver is not keeping up, or unreachable).</summary>
    public const long MaxUnsentBytesPerPeer = 16 * 1024 * 1024;

    private readonly Socket _listener;
    private readonly FragmentIdCounter _fragmentIds;
    private readonly DatagramParser _parser;
    private readonly int _maxPacketSize;
    private readonly Dictionary<ulong, Peer> _peers = [];
    private readonly List<Peer> _pending = [];
    private readonly ConcurrentQueue<(ulong Source, byte[] Bytes, int Length)> _received = new();
    private readonly ManualResetEventSlim _signal = new(false, spinCount: 0);
    private readonly CancellationTokenSource _closing = new();
    private readonly ConcurrentDictionary<Socket, byte> _inbound = new();
    private int _wakesPending;
    private volatile bool _disposed;

    /// <param name="bindTo">IPv4 address and port to listen on; port 0 picks a free one.</param>
    /// <param name="maxPacketSize">Larger packets are refused and counted.</param>
    public TcpTransport(IPEndPoint bindTo, int maxPacketSize = FrameFormat.DefaultMaxPacketSize)
    {
        ArgumentNullException.ThrowIfNull(bindTo);
        if (bindTo.AddressFamily != AddressFamily.InterNetwork) throw new ArgumentException("Only IPv4 endpoints are supported.", nameof(bindTo));
        _maxPacketSize = maxPacketSize;
        _fragmentIds = new FragmentIdCounter((ulong)Random.Shared.NextInt64());
        _parser = new DatagramParser(new FragmentReassembler(new ReassemblyLimits(), Counters.Framing), Counters.Framing);
        _listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        try
        {
            // A restarted process takes its port back although connections of its last run linger in TIME_WAIT.
            _listener.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.ReuseAddress, true);
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
        _ = AcceptLoop();
    }

    public ulong LocalEndpoint { get; }

    public IPEndPoint LocalIPEndPoint { get; }

    public TransportCounters Counters { get; } = new();

    public bool IsReceiving => !_disposed;

    public long NextHeldDatagramDue => long.MaxValue;

    // ---------------------------------------------------------------- sending (the driving thread)

    /// <summary>One destination: its batcher, and the connection (pipe and send loop) currently open to it.</summary>
    private sealed class Peer(ulong endpoint, DatagramBatcher batcher)
    {
        public readonly ulong Endpoint = endpoint;
        public readonly DatagramBatcher Batcher = batcher;
        public bool Pending;
        public Connection? Connection;
    }

    /// <summary>An outbound connection: frames go into <see cref="Pipe"/>; its send loop connects and drains it.</summary>
    private sealed class Connection
    {
        public readonly Pipe Pipe = new(new PipeOptions(pauseWriterThreshold: 0, resumeWriterThreshold: 0, useSynchronizationContext: false));
        public long Unsent;
        public volatile bool Broken;
    }

    public void Enqueue(ulong destination, ReadOnlySpan<byte> packet)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (!_peers.TryGetValue(destination, out Peer? peer))
        {
            peer = new Peer(destination, new DatagramBatcher(FrameFormat.MaxUdpPayload, _fragmentIds, _maxPacketSize));
            _peers.Add(destination, peer);
        }
        if (!peer.Batcher.Add(packet))
        {
            Interlocked.Increment(ref Counters.OversizePacketsRefused);
            return;
        }
        Interlocked.Increment(ref Counters.PacketsEnqueued);
        if (!peer.Pending)
        {
            peer.Pending = true;
            _pending.Add(peer);
        }
        if (peer.Batcher.CompletedCount >= 64) SendCompleted(peer);
    }

    public void Flush()
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        foreach (Peer peer in _pending)
        {
            peer.Batcher.Seal();
            SendCompleted(peer);
            peer.Pending = false;
        }
        _pending.Clear();
    }

    private void SendCompleted(Peer peer)
    {
        DatagramBatcher batcher = peer.Batcher;
        if (batcher.CompletedCount == 0) return;
        if (peer.Connection is not { Broken: false } connection)
        {
            connection = new Connection();
            peer.Connection = connection;
            _ = SendLoop(peer.Endpoint, connection);
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

    /// <summary>Connects, says hello, then drains the pipe into the socket until it breaks or the transport closes.</summary>
    private async Task SendLoop(ulong destination, Connection connection)
    {
        PipeReader reader = connection.Pipe.Reader;
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try
        {
            await socket.ConnectAsync(EndpointConversions.ToIPEndPoint(destination), _closing.Token).ConfigureAwait(false);
            byte[] hello = new byte[HelloSize];
            BinaryPrimitives.WriteUInt32LittleEndian(hello, HelloMagic);
            BinaryPrimitives.WriteUInt64LittleEndian(hello.AsSpan(4), LocalEndpoint);
            await socket.SendAsync(hello, SocketFlags.None, _closing.Token).ConfigureAwait(false);
            while (true)
            {
                ReadResult read = await reader.ReadAsync(_closing.Token).ConfigureAwait(false);
                foreach (ReadOnlyMemory<byte> segment in read.Buffer)
                {
                    int sent = 0;
                    while (sent < segment.Length) sent += await socket.SendAsync(segment[sent..], SocketFlags.None, _closing.Token).ConfigureAwait(false);
                }
                Interlocked.Add(ref connection.Unsent, -read.Buffer.Length);
                reader.AdvanceTo(read.Buffer.End);
                if (read.IsCompleted) break;
            }
        }
        catch (SocketException e)
        {
            // Refused, reset, unreachable: this connection is lost; the next send opens another.
            Interlocked.Increment(ref Counters.SendErrors);
            Volatile.Write(ref Counters.LastSocketError, (int)e.SocketErrorCode);
        }
        catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException or IOException)
        {
            // Closing, or the connection broke under us.
        }
        finally
        {
            connection.Broken = true;
            await reader.CompleteAsync().ConfigureAwait(false);
        }
    }

    // ---------------------------------------------------------------- receiving

    private async Task AcceptLoop()
    {
        while (!_disposed)
        {
            Socket accepted;
            try
            {
                accepted = await _listener.AcceptAsync(_closing.Token).ConfigureAwait(false);
            }
            catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException)
            {
                return;
            }
            catch (SocketException e)
            {
                Interlocked.Increment(ref Counters.ReceiveErrors);
                Volatile.Write(ref Counters.LastSocketError, (int)e.SocketErrorCode);
                continue;
            }
            _ = ReceiveLoop(accepted);
        }
    }

    /// <summary>Reads the hello, then frames, queueing each for the owner; a connection that breaks the framing is closed and counted.</summary>
    private async Task ReceiveLoop(Socket socket)
    {
        _inbound.TryAdd(socket, 0);
        var stream = new NetworkStream(socket, ownsSocket: true);
        PipeReader reader = PipeReader.Create(stream);
        try
        {
            ulong source = 0;
            bool greeted = false;
            while (true)
            {
                ReadResult read = await reader.ReadAsync(_closing.Token).ConfigureAwait(false);
                ReadOnlySequence<byte> buffer = read.Buffer;
                if (!greeted)
                {
                    if (buffer.Length >= HelloSize)
                    {
                        if (!TryReadHello(buffer.Slice(0, HelloSize), socket, out source))
                        {
                            CountHostile();
                            return;
                        }
                        greeted = true;
                        buffer = buffer.Slice(HelloSize);
                    }
                }
                while (greeted && TryReadFrame(ref buffer, out ReadOnlySequence<byte> frame))
                {
                    byte[] bytes = ArrayPool<byte>.Shared.Rent(Math.Max(1, (int)frame.Length));
                    frame.CopyTo(bytes);
                    _received.Enqueue((source, bytes, (int)frame.Length));
                    _signal.Set();
                }
                if (greeted && buffer.Length >= FrameHeaderSize && FrameLength(buffer) is < 0 or > FrameFormat.MaxUdpPayload)
                {
                    CountHostile();
                    return;
                }
                reader.AdvanceTo(buffer.Start, buffer.End);
                if (read.IsCompleted) return;
            }
        }
        catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException or IOException or SocketException)
        {
            // Closing, or the peer went away: its next connection starts afresh.
        }
        finally
        {
            _inbound.TryRemove(socket, out _);
            await reader.CompleteAsync().ConfigureAwait(false);
            await stream.DisposeAsync().ConfigureAwait(false);
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
        _closing.Cancel();
        _listener.Dispose();
        foreach (Socket s in _inbound.Keys) s.Dispose();
        foreach (Peer peer in _peers.Values)
        {
            peer.Connection?.Pipe.Writer.Complete();
            peer.Batcher.Reset();
        }
        _peers.Clear();
        _pending.Clear();
        _signal.Set(); // a waiting owner returns
        while (_received.TryDequeue(out var frame)) ArrayPool<byte>.Shared.Return(frame.Bytes);
        _parser.Reassembler.Clear();
    }
}
