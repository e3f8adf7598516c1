using System.Net;
using System.Net.Sockets;
using Isis.Core.Framing;

namespace Isis.Transport;

/// <summary>
/// Moves the core's packets over one IPv4 UDP socket: packets for a destination are batched into
/// datagrams (big ones fragmented) and sent on <see cref="Flush"/>; a dedicated thread receives,
/// parses and reassembles datagrams and hands each packet to the callback given at construction.
/// </summary>
/// <remarks>
/// <para>Threading: <see cref="Enqueue"/>, <see cref="Flush"/> and <see cref="Dispose"/> belong to one
/// thread (the event loop). The callback runs on the receive thread, one packet at a time.</para>
/// <para>Ownership of received memory: the <see cref="ReadOnlyMemory{T}"/> given to the callback is
/// not written again by the transport until the callback's consumer releases the packet's
/// <see cref="ReceiveSlab"/> (if it never does, never), so the callback may enqueue it to the
/// event loop; it must not write into it.</para>
/// <para>An exception thrown by the callback is a bug in the caller: it escapes the receive thread
/// and terminates the process, loudly, rather than silently losing packets.</para>
/// <para>Socket errors never throw: they are counted in <see cref="Counters"/>.</para>
/// </remarks>
internal sealed class UdpTransport : IDisposable
{
    /// <summary>A backoff after unexpected receive errors, so a broken socket cannot spin a core.</summary>
    private static readonly TimeSpan UnexpectedErrorBackoff = TimeSpan.FromMilliseconds(10);

    private static readonly TimeSpan DisposeJoinTimeout = TimeSpan.FromSeconds(5);

    private readonly Socket _socket;
    private readonly UdpTransportOptions _options;
    private readonly ReceivedPacketCallback _onPacket;
    private readonly FragmentIdCounter _fragmentIds;
    private readonly Dictionary<ulong, Destination> _destinations = [];
    private readonly List<Destination> _pending = [];
    private readonly TransportFaults? _faults;
    private readonly DatagramParser _parser;
    private readonly Thread _receiveThread;
    private volatile bool _disposed;
    private readonly ManualResetEventSlim _disposedSignal = new(false);

    private sealed class Destination(SocketAddress address, DatagramBatcher batcher)
    {
        public readonly SocketAddress Address = address;
        public readonly DatagramBatcher Batcher = batcher;
        public bool Pending;
    }

    /// <param name="bindTo">IPv4 address and port to bind; port 0 picks a free one.</param>
    /// <param name="onPacket">Called on the receive thread with (source endpoint, packet) for each packet received.</param>
    /// <param name="options">Settings; null for the defaults.</param>
    public UdpTransport(IPEndPoint bindTo, ReceivedPacketCallback onPacket, UdpTransportOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(bindTo);
        ArgumentNullException.ThrowIfNull(onPacket);
        if (bindTo.AddressFamily != AddressFamily.InterNetwork)
            throw new ArgumentException("Only IPv4 endpoints are supported.", nameof(bindTo));
        _options = options ?? new UdpTransportOptions();
        _options.Validate();
        _onPacket = onPacket;
        // A random start keeps a restarted process from reusing ids still half-assembled at receivers.
        _fragmentIds = new FragmentIdCounter((ulong)Random.Shared.NextInt64());
        _parser = new DatagramParser(new FragmentReassembler(_options.ToReassemblyLimits(), Counters.Framing), Counters.Framing);
        if (_options.Faults is { } faults) _faults = new TransportFaults(faults, Counters, SendNow);

        _socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        try
        {
            ConfigureSocket();
            _socket.Bind(bindTo);
        }
        catch
        {
            _socket.Dispose();
            throw;
        }
        LocalIPEndPoint = (IPEndPoint)_socket.LocalEndPoint!;
        LocalEndpoint = EndpointConversions.FromIPEndPoint(LocalIPEndPoint);

        _receiveThread = new Thread(ReceiveLoop)
        {
            IsBackground = true,
            Name = $"isis-udp-recv:{LocalIPEndPoint.Port}",
        };
        _receiveThread.Start();
    }

    /// <summary>The bound address as the core's endpoint number.</summary>
    public ulong LocalEndpoint { get; }

    /// <summary>The bound address (with the actual port when 0 was asked for).</summary>
    public IPEndPoint LocalIPEndPoint { get; }

    public TransportCounters Counters { get; } = new();

    public UdpTransportOptions Options => _options;

    /// <summary>True while the receive thread runs (until <see cref="Dispose"/>).</summary>
    public bool IsReceiving => _receiveThread.IsAlive;

    /// <summary>Datagrams the fault layer holds back, waiting to be sent by a later <see cref="Flush"/>.</summary>
    public int HeldFaultDatagrams => _faults?.HeldCount ?? 0;

    /// <summary>The receive buffer size the kernel granted (Linux reports double the bytes usable for data).</summary>
    public int ReceiveBufferSize => _socket.ReceiveBufferSize;

    /// <summary>
    /// Adds a packet for <paramref name="destination"/>; it is copied, so the span may be reused at
    /// once. Sent on the next <see cref="Flush"/>, or earlier if many datagrams pile up.
    /// Packets over the maximum packet size are refused and counted.
    /// </summary>
    public void Enqueue(ulong destination, ReadOnlySpan<byte> packet)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (!_destinations.TryGetValue(destination, out Destination? d))
        {
            d = new Destination(EndpointConversions.ToSocketAddress(destination),
                new DatagramBatcher(_options.MaxDatagramSize, _fragmentIds, _options.MaxPacketSize));
            _destinations.Add(destination, d);
        }
        if (!d.Batcher.Add(packet))
        {
            Interlocked.Increment(ref Counters.OversizePacketsRefused);
            return;
        }
        Interlocked.Increment(ref Counters.PacketsEnqueued);
        if (!d.Pending)
        {
            d.Pending = true;
            _pending.Add(d);
        }
        if (d.Batcher.CompletedCount >= _options.EagerSendThreshold) SendCompleted(d, MonotonicClock.NowMicros());
    }

    /// <summary>Sends every pending datagram (one send call each), plus held fault-injected ones that are due.</summary>
    public void Flush()
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        long now = MonotonicClock.NowMicros();
        _faults?.ReleaseDue(now);
        foreach (Destination d in _pending)
        {
            d.Batcher.Seal();
            SendCompleted(d, now);
            d.Pending = false;
        }
        _pending.Clear();
    }

    /// <summary>Closes the socket and waits (briefly) for the receive thread to stop. Pending datagrams are dropped.</summary>
    public void Dispose()
    {
        if (_disposed) return;
        _disposed = true;
        _disposedSignal.Set();
        _socket.Dispose(); // wakes a blocked receive; the poll interval bounds the wait otherwise
        bool stopped = Thread.CurrentThread == _receiveThread || _receiveThread.Join(DisposeJoinTimeout);
        foreach (Destination d in _destinations.Values) d.Batcher.Reset();
        _destinations.Clear();
        _pending.Clear();
        // Only once the receive thread is gone may its reassembler be touched.
        if (stopped && Thread.CurrentThread != _receiveThread) _parser.Reassembler.Clear();
    }

    private void ConfigureSocket()
    {
        // Best effort: the kernel caps these (net.core.rmem_max / wmem_max) and that is fine.
        TrySetBufferSize(SocketOptionName.ReceiveBuffer, _options.ReceiveBufferSize);
        TrySetBufferSize(SocketOptionName.SendBuffer, _options.SendBufferSize);
        _socket.ReceiveTimeout = (int)Math.Ceiling(_options.ReceivePollInterval.TotalMilliseconds);
        if (OperatingSystem.IsWindows())
        {
            // SIO_UDP_CONNRESET off: otherwise an ICMP port unreachable makes later receives fail.
            const int SioUdpConnReset = unchecked((int)0x9800000C);
            _socket.IOControl(SioUdpConnReset, [0, 0, 0, 0], null);
        }
    }

    private void TrySetBufferSize(SocketOptionName option, int size)
    {
        try
        {
            _socket.SetSocketOption(SocketOptionLevel.Socket, option, size);
        }
        catch (SocketException)
        {
            // Keep the default size: a smaller buffer only means more drops under bursts.
        }
    }

    private void SendCompleted(Destination d, long nowMicros)
    {
        DatagramBatcher batcher = d.Batcher;
        for (int i = 0; i < batcher.CompletedCount; i++)
        {
            ReadOnlySpan<byte> datagram = batcher.GetCompleted(i).Span;
            if (_faults is null) SendNow(d.Address, datagram);
            else _faults.Send(d.Address, datagram, nowMicros);
        }
        batcher.ReleaseCompleted();
    }

    private void SendNow(SocketAddress destination, ReadOnlySpan<byte> datagram)
    {
        try
        {
            int sent = _socket.SendTo(datagram, SocketFlags.None, destination);
            Interlocked.Increment(ref Counters.DatagramsSent);
            Interlocked.Add(ref Counters.BytesSent, sent);
        }
        catch (SocketException e)
        {
            // Whatever the kind, UDP loses just this datagram; the protocol above recovers.
            Interlocked.Increment(ref Counters.SendErrors);
            Volatile.Write(ref Counters.LastSocketError, (int)e.SocketErrorCode);
        }
        catch (ObjectDisposedException)
        {
            Interlocked.Increment(ref Counters.SendErrors);
        }
    }

    private void ReceiveLoop()
    {
        // The largest possible UDP payload fits, so the kernel never truncates a datagram.
        byte[] buffer = GC.AllocateUninitializedArray<byte>(64 * 1024);
        var from = new SocketAddress(AddressFamily.InterNetwork);
        var handoff = new ReceivedPacketHandoff(_onPacket);

        while (!_disposed)
        {
            int received;
            try
            {
                received = _socket.ReceiveFrom(buffer, SocketFlags.None, from);
            }
            catch (SocketException e)
            {
                if (_disposed) return;
                switch (SocketErrors.Classify(e.SocketErrorCode))
                {
                    case SocketErrorKind.Idle:
                        _parser.Reassembler.EvictExpired(MonotonicClock.NowMicros());
                        continue;
                    case SocketErrorKind.Closed:
                        return;
                    case SocketErrorKind.Transient:
                        CountReceiveError(e);
                        continue;
                    default:
                        CountReceiveError(e);
                        _disposedSignal.Wait(UnexpectedErrorBackoff); // Dispose cuts the backoff short
                        continue;
                }
            }
            catch (ObjectDisposedException)
            {
                return;
            }

            Interlocked.Increment(ref Counters.DatagramsReceived);
            Interlocked.Add(ref Counters.BytesReceived, received);
            if (!EndpointConversions.TryFromSocketAddress(from, out ulong source))
            {
                Interlocked.Increment(ref Counters.ForeignDatagrams);
                continue;
            }
            int packets = _parser.Parse(source, buffer.AsSpan(0, received), MonotonicClock.NowMicros(), handoff);
            if (packets > 0) Interlocked.Add(ref Counters.PacketsReceived, packets);
        }
    }

    private void CountReceiveError(SocketException e)
    {
        Interlocked.Increment(ref Counters.ReceiveErrors);
        Volatile.Write(ref Counters.LastSocketError, (int)e.SocketErrorCode);
    }
}
