using System.Net;
using System.Net.Sockets;
using BenchmarkDotNet.Attributes;

namespace Isis.Benchmarks;

/// <summary>
/// State transfer throughput on loopback (issue 14): a member holds a state of <see cref="StateMiB"/>
/// MiB and a new runtime joins its group; measured from Join to Join's return, which is when the
/// joiner has loaded the whole checkpoint (parts of <see cref="PartKiB"/> KiB, through
/// MakeChkpt/SendChkpt/LoadChkpt) and installed its first view. The baseline copies the same bytes
/// over a plain loopback TCP connection between two threads of this process: the floor any
/// transfer between two processes on this machine works against, measured in the same run.
/// </summary>
[InvocationCount(1)] // a group is joined once: each iteration is one join by a fresh runtime
public class StateTransferBenchmarks
{
    private IsisRuntime[] _members = [];
    private Group? _maker;
    private byte[] _state = [];
    private IsisRuntime? _joinerRuntime;
    private Group? _joiner;
    private long _loaded;
    private int _port;

    /// <summary>Size of the state.</summary>
    [Params(16, 64)]
    public int StateMiB { get; set; }

    /// <summary>Size of one SendChkpt part.</summary>
    [Params(64, 1024)]
    public int PartKiB { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _state = new byte[StateMiB << 20];
        new Random(1).NextBytes(_state);
        _members = Loopback.StartRuntimes(1);
        _port = _members[0].Options.MembershipServicePort;
        _maker = new Group(_members[0], "bench-state");
        int part = PartKiB << 10;
        _maker.MakeChkpt += (ChkptMaker)(_ =>
        {
            for (int offset = 0; offset < _state.Length; offset += part) _maker.SendChkpt(_state.AsMemory(offset, Math.Min(part, _state.Length - offset)).ToArray());
        });
        _maker.Join();
    }

    [IterationSetup(Target = nameof(JoinWithState))]
    public void StartJoiner()
    {
        _loaded = 0;
        _joinerRuntime = new IsisRuntime(new IsisOptions { MembershipServicePort = _port, MembershipDataDirectory = _members[0].Options.MembershipDataDirectory });
        _joinerRuntime.Start();
        _joiner = new Group(_joinerRuntime, "bench-state");
        _joiner.LoadChkpt += (Action<byte[]>)(bytes => _loaded += bytes.Length);
    }

    [IterationCleanup(Target = nameof(JoinWithState))]
    public void StopJoiner()
    {
        if (_loaded != _state.Length) throw new InvalidOperationException($"the joiner loaded {_loaded} of {_state.Length} bytes");
        _joinerRuntime!.Dispose();
    }

    /// <summary>A new member joins and loads the whole state.</summary>
    [Benchmark]
    public void JoinWithState() => _joiner!.Join();

    /// <summary>The same bytes over one loopback TCP connection, written and read in parts of the same size.</summary>
    [Benchmark(Baseline = true)]
    public void RawTcpLoopback()
    {
        using var listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        listener.Listen(1);
        int part = PartKiB << 10;
        var reader = Task.Run(() =>
        {
            using Socket accepted = listener.Accept();
            var buffer = new byte[part];
            long total = 0;
            int n;
            while ((n = accepted.Receive(buffer)) > 0) total += n;
            return total;
        });
        using (var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp))
        {
            client.Connect(listener.LocalEndPoint!);
            for (int offset = 0; offset < _state.Length; offset += part) client.Send(_state.AsSpan(offset, Math.Min(part, _state.Length - offset)));
            client.Shutdown(SocketShutdown.Send);
        }
        if (reader.GetAwaiter().GetResult() != _state.Length) throw new InvalidOperationException("the reader got fewer bytes");
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        Loopback.StopRuntimes(_members);
    }
}
