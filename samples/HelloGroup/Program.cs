using System.Collections.Concurrent;
using System.Diagnostics;
using Isis;
using Microsoft.Extensions.Logging;
using Serilog;
using Serilog.Events;

// HelloGroup: a real group of member processes on this machine, with no configuration.
//
//   dotnet run --project samples/HelloGroup
//
// This process only orchestrates: it launches five member processes with no configuration. The
// first one founds the membership service, which then replicates itself onto the next members
// (3 replicas). They join group "hello", exchange Sends and print their views and delivery
// counts. Then the *first* member, the one that founded the service, is killed with SIGKILL: the
// survivors install a view without it and keep delivering, and a new member started afterwards
// still finds the service and joins. Exit code 0 means every step happened.
return args.Length > 0 && args[0] == "member"
    ? Member.Run(int.Parse(args[1]), int.Parse(args[2]))
    : Orchestrator.Run(args.Length > 0 ? int.Parse(args[0]) : 5);

internal static class Protocol
{
    public const int Greeting = 1;
    public const int PerRound = 1000;

    /// <summary>The runtime's warnings and errors (failures noticed, firewall drops, shutdowns) go to stderr through Serilog.</summary>
    public static IsisOptions Options() => new()
    {
        LoggerFactory = LoggerFactory.Create(b => b.AddSerilog(new LoggerConfiguration()
            .MinimumLevel.Warning()
            .WriteTo.Console(standardErrorFromLevel: LogEventLevel.Verbose, outputTemplate: "{Level:u3} {Message:lj}{NewLine}{Exception}")
            .CreateLogger(), dispose: true)),
    };
}

/// <summary>One member: joins, sends a round when asked, reports what it delivered.</summary>
internal static class Member
{
    public static int Run(int index, int groupSize)
    {
        IsisSystem.Start(Protocol.Options());
        var group = new Group("hello");
        var delivered = new ConcurrentDictionary<int, int>(); // sender index -> last number delivered
        int total = 0, sent = 0; // a sender numbers its messages 1, 2, 3, ...
        bool fifo = true;
        group.Handlers[Protocol.Greeting] += (Action<int, int>)((sender, n) =>
        {
            // A member that joined late starts wherever each sender was; from then on, one by one.
            if (delivered.TryGetValue(sender, out int last) && n != last + 1) fifo = false;
            delivered[sender] = n;
            Interlocked.Increment(ref total);
        });
        group.ViewHandlers += (ViewHandler)(v =>
        {
            string change = v.Leavers.Length > 0 ? $"; gone: {string.Join(", ", (object[])v.Leavers)}" : "";
            Console.WriteLine($"view {v.ViewId}: {v.Members.Length} members, my rank {v.GetMyRank()}{change}");
        });
        IsisSystem.Runtime.ShutDown += (_, e) => Console.WriteLine("shut down: " + e.Reason);
        if (IsisSystem.Runtime.HostsMembershipService) Console.WriteLine("founded the membership service (it replicates itself onto the next members)");
        group.Join();
        Console.WriteLine($"joined as {IsisSystem.Runtime.Address}");

        // Commands from the orchestrator, one per line, until it closes our input.
        string? line;
        while ((line = Console.ReadLine()) != null)
        {
            switch (line)
            {
                case "send":
                    for (int n = 0; n < Protocol.PerRound; n++) group.Send(Protocol.Greeting, index, ++sent);
                    break;
                case "report":
                    Console.WriteLine($"delivered {Volatile.Read(ref total)} messages from {delivered.Count} senders, FIFO {(fifo ? "ok" : "BROKEN")}");
                    break;
            }
        }
        IsisSystem.Shutdown();
        return 0;
    }
}

/// <summary>Runs the members as child processes, kills the first, and starts a new one.</summary>
internal static class Orchestrator
{
    private static readonly TimeSpan StepDeadline = TimeSpan.FromSeconds(30);

    public static int Run(int members)
    {
        Console.WriteLine($"HelloGroup: starting {members} member processes; the membership service runs inside them");
        var children = new List<Child>();
        try
        {
            // The first member alone, so it is the one that founds the service; then the others.
            children.Add(new Child(1, members));
            Step("the first member joins and founds the membership service", () => children[0].LastViewSize == 1 && children[0].Founded);
            for (int i = 2; i <= members; i++) children.Add(new Child(i, members));
            Step("every member installs a view of all " + members, () => children.All(c => c.LastViewSize == members));

            foreach (Child c in children) c.Tell("send");
            int roundOne = members * Protocol.PerRound;
            Step($"every member delivers all {roundOne} messages", () => children.All(c => c.Ask("report").Delivered >= roundOne));

            Child victim = children[0];
            Console.WriteLine($"HelloGroup: killing member {victim.Index} (pid {victim.Pid}), which founded the membership service, with SIGKILL");
            victim.Kill();
            var survivors = children.Skip(1).ToList();
            Step("the survivors install a view without it", () => survivors.All(c => c.LastViewSize == members - 1));

            foreach (Child c in survivors) c.Tell("send");
            int expected = roundOne + (members - 1) * Protocol.PerRound;
            Step("the survivors keep delivering", () => survivors.All(c => c.Ask("report").Delivered >= expected));

            var newcomer = new Child(members + 1, members);
            children.Add(newcomer);
            survivors.Add(newcomer);
            Step("a new member finds the service without the first one and joins", () => survivors.All(c => c.LastViewSize == members));
            foreach (Child c in survivors) c.Tell("send");
            // The newcomer delivers what was sent after it joined: this round.
            Step("every member delivers the new round", () => survivors.All(c => c.Ask("report").Delivered >= (c == newcomer ? 0 : expected) + members * Protocol.PerRound));
            if (survivors.Any(c => !c.FifoOk)) throw new InvalidOperationException("a member reported a FIFO violation");

            foreach (Child c in survivors) c.Close();
            Step("the members leave and exit", () => survivors.All(c => c.HasExited));
            Console.WriteLine("HelloGroup: done: views agreed, every message delivered in FIFO order, the first member's loss survived");
            return 0;
        }
        catch (Exception e)
        {
            Console.Error.WriteLine("HelloGroup FAILED: " + e.Message);
            return 1;
        }
        finally
        {
            foreach (Child c in children) c.Kill();
        }
    }

    private static void Step(string what, Func<bool> done)
    {
        var clock = Stopwatch.StartNew();
        while (!done())
        {
            if (clock.Elapsed > StepDeadline) throw new TimeoutException($"not within {StepDeadline.TotalSeconds} s: {what}");
            Thread.Sleep(100);
        }
        Console.WriteLine($"HelloGroup: {what} ({clock.ElapsedMilliseconds} ms)");
    }

    /// <summary>A member process: its output is echoed with a prefix and parsed for views and reports.</summary>
    private sealed class Child
    {
        private readonly Process _process;
        private volatile int _lastViewSize;
        private volatile int _delivered;
        private volatile bool _fifoOk = true;
        private volatile bool _founded;

        public Child(int index, int groupSize)
        {
            Index = index;
            var start = new ProcessStartInfo(Environment.ProcessPath!, $"member {index} {groupSize}")
            {
                RedirectStandardInput = true,
                RedirectStandardOutput = true,
                UseShellExecute = false,
            };
            // When started through "dotnet HelloGroup.dll", ProcessPath is the dotnet host.
            if (Path.GetFileNameWithoutExtension(Environment.ProcessPath!) == "dotnet")
            {
                start.Arguments = $"\"{typeof(Child).Assembly.Location}\" member {index} {groupSize}";
            }
            _process = Process.Start(start)!;
            _process.OutputDataReceived += (_, e) => OnLine(e.Data);
            _process.BeginOutputReadLine();
        }

        public int Index { get; }

        public int Pid => _process.Id;

        public int LastViewSize => _lastViewSize;

        public bool FifoOk => _fifoOk;

        public bool Founded => _founded;

        public bool HasExited => _process.HasExited;

        private void OnLine(string? line)
        {
            if (line == null) return;
            if (!line.StartsWith("delivered ", StringComparison.Ordinal)) Console.WriteLine($"[member {Index}] {line}");
            if (line.StartsWith("founded ", StringComparison.Ordinal)) _founded = true;
            if (line.StartsWith("view ", StringComparison.Ordinal))
            {
                // "view 7: 4 members, ..."
                string[] words = line.Split(' ');
                _lastViewSize = int.Parse(words[2]);
            }
            else if (line.StartsWith("delivered ", StringComparison.Ordinal))
            {
                string[] words = line.Split(' ');
                int delivered = int.Parse(words[1]);
                if (delivered != _delivered) Console.WriteLine($"[member {Index}] {line}");
                _delivered = delivered;
                _fifoOk = line.EndsWith("FIFO ok", StringComparison.Ordinal);
            }
        }

        public void Tell(string command)
        {
            _process.StandardInput.WriteLine(command);
            _process.StandardInput.Flush();
        }

        /// <summary>Asks for a report; the answer arrives asynchronously, so this returns the latest one.</summary>
        public (int Delivered, bool Fifo) Ask(string command)
        {
            if (!_process.HasExited) Tell(command);
            return (_delivered, _fifoOk);
        }

        public void Close() => _process.StandardInput.Close();

        public void Kill()
        {
            if (!_process.HasExited) _process.Kill(); // SIGKILL on Linux
        }
    }
}
