using System.Net;
using System.Net.Sockets;
using Isis.Transport.Framing;

namespace Isis.Transport;

/// <summary>
/// Moves the core's packets over one IPv4 UDP socket: packets for a destination are batched into
/// datagrams (big ones fragmented) and sent on <see cref="Flush"/>. Received datagrams are parsed
/// and reassembled either by a dedicated thread that hands each packet to the callback given at
/// construction, or, for a transport made without a callback, by its owner's thread: the event
/// loop waits in <see cref="WaitReadable"/> and takes the packets with <see cref="ReceivePending"/>
/// itself, so a received message reaches the protocol without a thread hand-off.
/// </summary>
/// <remarks>
/// <para>Threading: <see cref="Enqueue"/>, <see cref="Flush"/>, <see cref="WaitReadable"/>,
/// <see cref="ReceivePending"/> and <see cref="Dispose"/> belong to one thread (the event loop);
/// <see cref="Wake"/> may be called from any thread. The callback runs on the receive thread, one
/// packet at a time.</para>
/// <para>Ownership of received memory: the <see cref="ReadOnlyMemory{T}"/> given to the callback is
/// not written again by the transport until the callback's consumer releases the packet's
/// <see cref="ReceiveSlab"/> (if it never does, never), so the callback may enqueue it to the
/// event loop; it must not write into it.</para>
/// <para>An exception thrown by the callback is a bug in the caller: it escapes the receive thread
/// and terminates the process, loudly, rather than silently losing packets.</para>
/// <para>Socket errors never throw: they are counted in <see cref="Counters"/>.</para>
/// </remarks>
internal sealed class UdpTransport : IPacketTransport
{
    /// <summary>A backoff after unexpected receive errors, so a broken socket cannot spin a core.</summary>
    private static readonly TimeSpan UnexpectedErrorBackoff = TimeSpan.FromMilliseconds(10);

    private static readonly TimeSpan DisposeJoinTimeout = TimeSpan.FromSeconds(5);

    private readonly Socket _socket;
    private readonly UdpTransportOptions _options;
    private readonly ReceivedPacketCallback? _onPacket;
    private readonly FragmentIdCounter _fragmentIds;
    private readonly DestinationBatches<Destination> _batches;
    private readonly TransportFaults? _faults;
    private readonly DatagramParser _parser;
    private readonly Thread? _receiveThread;
    private readonly byte[] _receiveBuffer = [];
    private readonly SocketAddress _receiveFrom = new(AddressFamily.InterNetwork);
    private readonly SocketAddress _ownAddress;
    private volatile bool _disposed;
    private readonly ManualResetEventSlim _disposedSignal = new(false);

    // IP multicast (owner-driven only): a second socket on the system's multicast port, joined to
    // the group addresses this process's groups use (counted: groups may share an address).
    private readonly Socket? _multicast;
    private readonly IPAddress _multicastInterface = IPAddress.Loopback;
    private readonly Dictionary<ulong, int> _joined = [];
    private readonly List<Socket> _waitList = new(2);
    private bool _mainReadable, _multicastReadable;

    private sealed class Destination(SocketAddress address, DatagramBatcher batcher) : BatchedDestination(batcher)
    {
        public readonly SocketAddress Address = address;
    }

    /// <summary>A transport whose owner receives: no thread of its own (see <see cref="ReceivePending"/>).</summary>
    /// <param name="bindTo">IPv4 address and port to bind; port 0 picks a free one.</param>
    /// <param name="options">Settings; null for the defaults.</param>
    public UdpTransport(IPEndPoint bindTo, UdpTransportOptions? options = null)
        : this(bindTo, options, null, receiveThread: false)
    {
    }

    /// <param name="bindTo">IPv4 address and port to bind; port 0 picks a free one.</param>
    /// <param name="onPacket">Called on the receive thread with (source endpoint, packet) for each packet received.</param>
    /// <param name="options">Settings; null for the defaults.</param>
    public UdpTransport(IPEndPoint bindTo, ReceivedPacketCallback onPacket, UdpTransportOptions? options = null)
        : this(bindTo, options, onPacket ?? throw new ArgumentNullException(nameof(onPacket)), receiveThread: true)
    {
    }

    private UdpTransport(IPEndPoint bindTo, UdpTransportOptions? options, ReceivedPacketCallback? onPacket, bool receiveThread)
    {
        ArgumentNullException.ThrowIfNull(bindTo);
        if (bindTo.AddressFamily != AddressFamily.InterNetwork)
            throw new ArgumentException("Only IPv4 endpoints are supported.", nameof(bindTo));
        _options = options ?? new UdpTransportOptions();
        _options.Validate();
        _onPacket = onPacket;
        // A random start keeps a restarted process from reusing ids still half-assembled at receivers.
        _fragmentIds = new FragmentIdCounter((ulong)Random.Shared.NextInt64());
        _batches = new DestinationBatches<Destination>(
            destination => new Destination(EndpointConversions.ToSocketAddress(destination), new DatagramBatcher(_options.MaxDatagramSize, _fragmentIds, _options.MaxPacketSize)),
            _options.EagerSendThreshold, Counters);
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
        _ownAddress = EndpointConversions.ToSocketAddress(LocalEndpoint);

        if (_options.MulticastPort > 0)
        {
            if (receiveThread) throw new ArgumentException("IP multicast is received by the transport's owner (the event loop), not by a receive thread.", nameof(options));
            _multicastInterface = _options.MulticastInterface ?? (bindTo.Address.Equals(IPAddress.Any) ? IPAddress.Loopback : bindTo.Address);
            try
            {
                _multicast = OpenMulticastSocket();
            }
            catch (SocketException e)
            {
                _socket.Dispose();
                throw new ArgumentException(
                    $"IP multicast could not be set up on interface {_multicastInterface} and port {_options.MulticastPort} ({e.SocketErrorCode}: {e.Message}). " +
                    "Set the multicast interface (IsisOptions.Multicast.Interface) to an IPv4 address of this machine, and the port to one no other program holds.", nameof(options), e);
            }
            catch
            {
                _socket.Dispose();
                throw;
            }
        }

        if (!receiveThread)
        {
            // The largest possible UDP payload fits, so the kernel never truncates a datagram.
            _receiveBuffer = GC.AllocateUninitializedArray<byte>(64 * 1024);
            return;
        }
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

    /// <summary>True while packets are received: the receive thread runs, or (owner-driven) until <see cref="Dispose"/>.</summary>
    public bool IsReceiving => _receiveThread?.IsAlive ?? !_disposed;

    /// <summary>Datagrams the fault layer holds back, waiting to be sent by a later <see cref="Flush"/>.</summary>
    public int HeldFaultDatagrams => _faults?.HeldCount ?? 0;

    /// <summary>The receive buffer size the kernel granted (Linux reports double the bytes usable for data).</summary>
    public int ReceiveBufferSize => _socket.ReceiveBufferSize;

    // ---------------------------------------------------------------- IP multicast

    /// <summary>True when made with a <see cref="UdpTransportOptions.MulticastPort"/>: datagrams to a group endpoint (a 224.0.0.0/4 address on that port) go out once and reach every process that joined it.</summary>
    public bool SupportsMulticast => _multicast != null;

    /// <summary>The group endpoints joined now (each once, however many groups share it).</summary>
    public IReadOnlyCollection<ulong> JoinedMulticast => _joined.Keys;

    /// <summary>
    /// Starts receiving datagrams sent to <paramref name="groupEndpoint"/>. Joins nest: the address
    /// is left when every join has been matched by a <see cref="LeaveMulticast"/>.
    /// </summary>
    public void JoinMulticast(ulong groupEndpoint)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        IPAddress group = CheckGroupEndpoint(groupEndpoint);
        _joined.TryGetValue(groupEndpoint, out int count);
        if (count == 0) _multicast!.SetSocketOption(SocketOptionLevel.IP, SocketOptionName.AddMembership, new MulticastOption(group, _multicastInterface));
        _joined[groupEndpoint] = count + 1;
    }

    /// <summary>Undoes one <see cref="JoinMulticast"/>; the last one leaves the address.</summary>
    public void LeaveMulticast(ulong groupEndpoint)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        IPAddress group = CheckGroupEndpoint(groupEndpoint);
        if (!_joined.TryGetValue(groupEndpoint, out int count)) throw new InvalidOperationException($"{EndpointConversions.ToIPEndPoint(groupEndpoint)} was not joined.");
        if (count > 1)
        {
            _joined[groupEndpoint] = count - 1;
            return;
        }
        _joined.Remove(groupEndpoint);
        _multicast!.SetSocketOption(SocketOptionLevel.IP, SocketOptionName.DropMembership, new MulticastOption(group, _multicastInterface));
    }

    private IPAddress CheckGroupEndpoint(ulong groupEndpoint)
    {
        if (_multicast == null) throw new InvalidOperationException("This transport was made without a multicast port (UdpTransportOptions.MulticastPort), so it cannot join group addresses.");
        IPEndPoint ep = EndpointConversions.ToIPEndPoint(groupEndpoint);
        if (!Core.Identity.EndpointCodec.IsMulticast(groupEndpoint)) throw new ArgumentException($"{ep.Address} is not an IPv4 multicast address (224.0.0.0/4).", nameof(groupEndpoint));
        if (ep.Port != _options.MulticastPort) throw new ArgumentException($"Group endpoints use the multicast port {_options.MulticastPort}, not {ep.Port}.", nameof(groupEndpoint));
        return ep.Address;
    }

    /// <summary>
    /// The socket multicast arrives on: the system's multicast port, bound by every process of the
    /// host (SO_REUSEADDR; not .NET's ReuseAddress, which also sets SO_REUSEPORT and would spread
    /// unicast to that port across processes). On Linux, IP_MULTICAST_ALL off: it receives the
    /// addresses this socket joined, not every address any socket of the host joined. The unicast
    /// socket sends the multicast (so receivers see the sender's own endpoint as the source), from
    /// the pinned interface, looped back to the other processes of this host.
    /// </summary>
    /// <summary>The hop limit the kernel puts on this socket's multicast datagrams (tests read it back).</summary>
    internal int MulticastHopLimit => (int)_socket.GetSocketOption(SocketOptionLevel.IP, SocketOptionName.MulticastTimeToLive)!;

    private Socket OpenMulticastSocket()
    {
        _socket.SetSocketOption(SocketOptionLevel.IP, SocketOptionName.MulticastInterface, _multicastInterface.GetAddressBytes());
        _socket.SetSocketOption(SocketOptionLevel.IP, SocketOptionName.MulticastLoopback, true);
        _socket.SetSocketOption(SocketOptionLevel.IP, SocketOptionName.MulticastTimeToLive, _options.MulticastTimeToLive);
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        try
        {
            if (OperatingSystem.IsLinux())
            {
                socket.SetRawSocketOption(1 /* SOL_SOCKET */, 2 /* SO_REUSEADDR */, BitConverter.GetBytes(1));
                socket.SetRawSocketOption(0 /* IPPROTO_IP */, 49 /* IP_MULTICAST_ALL */, BitConverter.GetBytes(0));
            }
            else
            {
                socket.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.ReuseAddress, true);
            }
            try
            {
                socket.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.ReceiveBuffer, _options.ReceiveBufferSize);
            }
            catch (SocketException)
            {
                // Keep the default size, as for the unicast socket.
            }
            socket.Bind(new IPEndPoint(IPAddress.Any, _options.MulticastPort));
            return socket;
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Adds a packet for <paramref name="destination"/>; it is copied, so the span may be reused at
    /// once. Sent on the next <see cref="Flush"/>, or earlier if many datagrams pile up.
    /// Packets over the maximum packet size are refused and counted.
    /// </summary>
    public void Enqueue(ulong destination, ReadOnlySpan<byte> packet)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (_batches.Add(destination, packet) is { } full) SendCompleted(full, MonotonicClock.NowMicros());
    }

    /// <summary>Sends every pending datagram (one send call each), plus held fault-injected ones that are due.</summary>
    public void Flush()
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        long now = MonotonicClock.NowMicros();
        _faults?.ReleaseDue(now);
        _batches.Flush((Transport: this, Now: now), static (d, s) => s.Transport.SendCompleted(d, s.Now));
    }

    /// <summary>Closes the socket and waits (briefly) for the receive thread to stop. Pending datagrams are dropped.</summary>
    public void Dispose()
    {
        if (_disposed) return;
        _disposed = true;
        _disposedSignal.Set();
        _socket.Dispose(); // wakes a blocked receive; the poll interval bounds the wait otherwise
        _multicast?.Dispose();
        bool stopped = _receiveThread == null || Thread.CurrentThread == _receiveThread || _receiveThread.Join(DisposeJoinTimeout);
        _batches.Clear();
        // Only once the receive thread is gone may its reassembler be touched.
        if (stopped && Thread.CurrentThread != _receiveThread) _parser.Reassembler.Clear();
    }

    // ---------------------------------------------------------------- owner-driven receive

    /// <summary>The one-byte datagram <see cref="Wake"/> sends this socket from itself.</summary>
    private const byte WakeByte = 0x5A;

    /// <summary>
    /// Waits until a datagram is waiting (true) or <paramref name="timeoutMicros"/> passed (false),
    /// rounded up to whole milliseconds (the resolution of poll(2)): a wait that rounded down would
    /// return before the caller's deadline and spin. Negative: wait without a limit.
    /// </summary>
    public bool WaitReadable(long timeoutMicros)
    {
        if (_disposed) return false;
        int micros = timeoutMicros < 0 ? -1 : (int)Math.Min(int.MaxValue - 1000, (timeoutMicros + 999) / 1000 * 1000);
        try
        {
            if (_multicast == null) return _mainReadable = _socket.Poll(micros, SelectMode.SelectRead);
            _waitList.Clear();
            _waitList.Add(_socket);
            _waitList.Add(_multicast);
            Socket.Select(_waitList, null, null, micros);
            _mainReadable = _waitList.Contains(_socket);
            _multicastReadable = _waitList.Contains(_multicast);
            return _mainReadable || _multicastReadable;
        }
        catch (SocketException e)
        {
            CountReceiveError(e);
            _disposedSignal.Wait(UnexpectedErrorBackoff); // a broken socket must not spin a core
            return false;
        }
        catch (ObjectDisposedException)
        {
            return false;
        }
    }

    /// <summary>
    /// Receives up to <paramref name="maxReads"/> waiting datagrams without blocking, handing
    /// each packet to <paramref name="visitor"/> (its span is valid only during the call). After
    /// <see cref="WaitReadable"/> returned true, pass <paramref name="readable"/>: the first datagram
    /// is then read even if empty (an empty datagram reads as "nothing waiting", and would make the
    /// next wait return at once, forever). Returns the datagrams read, wakes included.
    /// </summary>
    public int ReceivePending(IPacketVisitor visitor, int maxReads, bool readable)
    {
        bool mainReadable = readable && (_multicast == null || _mainReadable);
        bool multicastReadable = readable && _multicastReadable;
        _mainReadable = _multicastReadable = false;
        int read = Drain(_socket, visitor, maxReads, mainReadable, multicast: false);
        if (_multicast != null && read < maxReads) read += Drain(_multicast, visitor, maxReads - read, multicastReadable, multicast: true);
        return read;
    }

    /// <summary>Reads up to <paramref name="maxReads"/> waiting datagrams from one socket (the first even if empty when <paramref name="readable"/>).</summary>
    private int Drain(Socket socket, IPacketVisitor visitor, int maxReads, bool readable, bool multicast)
    {
        int read = 0;
        while (read < maxReads && !_disposed)
        {
            if (!(readable && read == 0))
            {
                try
                {
                    if (socket.Available == 0) break;
                }
                catch (Exception e) when (e is SocketException or ObjectDisposedException)
                {
                    break;
                }
            }
            int received;
            try
            {
                received = socket.ReceiveFrom(_receiveBuffer, SocketFlags.None, _receiveFrom);
            }
            catch (SocketException e)
            {
                if (SocketErrors.Classify(e.SocketErrorCode) == SocketErrorKind.Closed) break;
                CountReceiveError(e);
                read++;
                continue;
            }
            catch (ObjectDisposedException)
            {
                break;
            }
            read++;
            if (!EndpointConversions.TryFromSocketAddress(_receiveFrom, out ulong source))
            {
                Interlocked.Increment(ref Counters.DatagramsReceived);
                Interlocked.Increment(ref Counters.ForeignDatagrams);
                continue;
            }
            if (source == LocalEndpoint)
            {
                if (multicast)
                {
                    Interlocked.Increment(ref Counters.MulticastEchoes);
                    continue;
                }
                if (received == 1 && _receiveBuffer[0] == WakeByte)
                {
                    Interlocked.Increment(ref Counters.Wakes);
                    continue;
                }
            }
            Interlocked.Increment(ref Counters.DatagramsReceived);
            if (multicast) Interlocked.Increment(ref Counters.MulticastDatagramsReceived);
            Interlocked.Add(ref Counters.BytesReceived, received);
            int packets = _parser.Parse(source, _receiveBuffer.AsSpan(0, received), MonotonicClock.NowMicros(), visitor);
            if (packets > 0) Interlocked.Add(ref Counters.PacketsReceived, packets);
        }
        return read;
    }

    /// <summary>
    /// Makes a <see cref="WaitReadable"/> in progress (or the next one) return: sends this socket a
    /// one-byte datagram from itself, which <see cref="ReceivePending"/> recognizes and skips. Any thread.
    /// </summary>
    public void Wake()
    {
        try
        {
            _socket.SendTo([WakeByte], SocketFlags.None, _ownAddress);
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException)
        {
            // Closed, or the buffer is full: either way the loop is awake or has data to read.
        }
    }

    /// <summary>Drops fragments whose packet did not complete in time (owner-driven transports; the receive thread does it when idle).</summary>
    public void EvictExpiredFragments() => _parser.Reassembler.EvictExpired(MonotonicClock.NowMicros());

    /// <summary>When the next fault-delayed datagram is due, in <see cref="MonotonicClock"/> microseconds (long.MaxValue: none).</summary>
    public long NextHeldDatagramDue => _faults?.NextDue ?? long.MaxValue;

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
        var handoff = new ReceivedPacketHandoff(_onPacket!);

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
