using System.Buffers.Binary;
using System.Collections.Concurrent;
using System.Text;
using Isis.Core.Durability;
using Isis.Runtime;
using Isis.Serialization;
using Microsoft.Extensions.Logging;

namespace Isis.Tests.Runtime;

/// <summary>
/// SafeSend logs damaged on disk while every member was down (a flipped byte, a torn last write):
/// the restarted group neither crashes nor replays anything that was not sent, moves the damaged
/// bytes aside, reports the damage, and recovers the longest intact history.
/// </summary>
public sealed class SafeSendLogDamageTests
{
    private const string GroupName = "ledger";
    private const int Values = 30;

    private sealed record Member(IsisRuntime Runtime, Group Group, ConcurrentQueue<int> Delivered);

    /// <summary>Starts one runtime per directory, joins them all together (a recovery needs every member of the last view) and waits for the full view.</summary>
    private static List<Member> Start(TestRuntimes runtimes, string[] directories, Func<int, ILoggerFactory?>? loggerFor = null)
    {
        var members = new List<Member>();
        var joins = new List<Task>();
        for (int i = 0; i < directories.Length; i++)
        {
            ILoggerFactory? logger = loggerFor?.Invoke(i);
            IsisRuntime r = runtimes.Start(o => o.LoggerFactory = logger);
            var g = new Group(r, GroupName);
            var delivered = new ConcurrentQueue<int>();
            g.Handlers[1] += (Action<int>)(n => delivered.Enqueue(n));
            g.SetSafeSendDurability(SafeSendDurability.Disk, directories[i]);
            joins.Add(g.JoinAsync());
            members.Add(new Member(r, g, delivered));
        }
        Assert.True(Task.WaitAll([.. joins], TimeSpan.FromSeconds(60)), "every member joined and holds the history");
        TestRuntimes.WaitUntil(() => members.All(m => m.Group.GetView()?.Members.Length == directories.Length), "the full view");
        return members;
    }

    /// <summary>The file of a member's log (one segment here: the first of its newest generation, which a copy or a recovery starts).</summary>
    private static string LogOf(string directory)
    {
        string log = Path.Combine(directory, GroupName + ".safelog");
        return HistoryLogFile.SegmentFiles(DurableFiles.System, log) is [.., var current] ? current.File : log;
    }

    private static string[] DamagedFiles(string directory) => Directory.GetFiles(directory, GroupName + ".safelog.damaged-*");

    /// <summary>The frames of a record file: where each starts and its record's length (the frame is 8 header bytes, then the record).</summary>
    private static List<(int Start, int Length)> Frames(byte[] file)
    {
        var frames = new List<(int, int)>();
        int at = 0;
        while (file.Length - at >= 8)
        {
            int length = BinaryPrimitives.ReadInt32LittleEndian(file.AsSpan(at));
            if (length < 0 || length > file.Length - at - 8) break;
            frames.Add((at, length));
            at += 8 + length;
        }
        Assert.Equal(file.Length, at); // the runtime left a whole log behind
        return frames;
    }

    /// <summary>What a log holds as history: the intact records of its segments, parsed.</summary>
    private static HistoryLogImage Image(string log) => HistoryLog.Read(HistoryLogFile.Inspect(log).Records);

    /// <summary>The int argument of a logged SafeSend's payload.</summary>
    private static int DecodeValue(byte[] payload)
    {
        Assert.True(ArgumentCodec.TryReadHeader(payload, out _, out EncodedArguments args, out string? error), error);
        Assert.True(args.TryMaterialize(0, typeof(int), out object? value, out error), error);
        return (int)value!;
    }

    /// <summary>Damage done to a log: the bytes from the first bad record on (what must be moved aside), where they start, and the file's length.</summary>
    private sealed record Damage(byte[] Bytes, long IntactLength, long FileLength)
    {
        /// <summary>How the runtime words it (HistoryLogFile).</summary>
        public string Wording(string log) => $"{log} is damaged after byte {IntactLength} of {FileLength}";
    }

    /// <summary>Flips one byte in the middle of the record <paramref name="fromEnd"/> records before the end.</summary>
    private static Damage FlipByteInRecord(string log, int fromEnd)
    {
        byte[] file = File.ReadAllBytes(log);
        (int start, int length) = Frames(file)[^fromEnd];
        file[start + 8 + length / 2] ^= 0x5A;
        File.WriteAllBytes(log, file);
        return new Damage(file[start..], start, file.Length);
    }

    /// <summary>Cuts the file in the middle of its last record, as a write torn by a crash would.</summary>
    private static Damage TearLastRecord(string log)
    {
        byte[] file = File.ReadAllBytes(log);
        (int start, int length) = Frames(file)[^1];
        int cut = start + 8 + length / 2;
        File.WriteAllBytes(log, file[..cut]);
        return new Damage(file[start..cut], start, cut);
    }

    /// <summary>The damaged bytes were moved to one file beside the log (exactly them, nothing lost); returns its path.</summary>
    private static string AssertMovedAside(string directory, Damage damage)
    {
        string damaged = Assert.Single(DamagedFiles(directory));
        byte[] aside = File.ReadAllBytes(damaged);
        Assert.NotEmpty(aside);
        Assert.Equal(damage.Bytes, aside);
        return damaged;
    }

    /// <summary>After recovery a log is whole again (no damaged tail) and holds exactly <paramref name="values"/>, in order.</summary>
    private static bool LogHolds(string log, int[] values)
    {
        byte[] file;
        using (var s = new FileStream(log, FileMode.Open, FileAccess.Read, FileShare.ReadWrite | FileShare.Delete))
        {
            file = new byte[s.Length];
            s.ReadExactly(file);
        }
        string copy = Path.GetTempFileName();
        try
        {
            File.WriteAllBytes(copy, file);
            (List<byte[]> records, long intact) = DurableRecordFile.Read(copy);
            HistoryLogImage image = HistoryLog.Read(records);
            return intact == file.Length && image.Unreadable == 0 && image.Entries.Select(e => DecodeValue(e.Payload.ToArray())).SequenceEqual(values);
        }
        finally
        {
            File.Delete(copy);
        }
    }

    /// <summary>Copies what is written to standard error while it is installed, and passes it on.</summary>
    private sealed class StandardErrorCapture : TextWriter
    {
        private readonly TextWriter _original = Console.Error;
        private readonly StringBuilder _text = new();

        public StandardErrorCapture() => Console.SetError(this);

        public override Encoding Encoding => _original.Encoding;

        public string Text
        {
            get
            {
                lock (_text) return _text.ToString();
            }
        }

        public override void Write(char value)
        {
            lock (_text) _text.Append(value);
            _original.Write(value);
        }

        public override void Write(string? value)
        {
            lock (_text) _text.Append(value);
            _original.Write(value);
        }

        protected override void Dispose(bool disposing)
        {
            Console.SetError(_original);
            base.Dispose(disposing);
        }
    }

    private sealed class CapturingLoggerFactory : ILoggerFactory
    {
        public ConcurrentQueue<(LogLevel Level, string Text)> Entries { get; } = new();

        public ILogger CreateLogger(string categoryName) => new Logger(Entries);

        public void AddProvider(ILoggerProvider provider)
        {
        }

        public void Dispose()
        {
        }

        private sealed class Logger(ConcurrentQueue<(LogLevel, string)> entries) : ILogger
        {
            public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

            public bool IsEnabled(LogLevel logLevel) => true;

            public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter) =>
                entries.Enqueue((logLevel, formatter(state, exception)));
        }
    }

    /// <summary>Runs a 3-member group that SafeSends 1..Values, then crashes every member at once; returns the delivery order.</summary>
    private static int[] SendThenCrashAll(TestRuntimes runtimes, string[] directories)
    {
        List<Member> before = Start(runtimes, directories);
        for (int n = 1; n <= Values; n++) before[n % before.Count].Group.SafeSend(1, n); // each returns once delivered: logged by every acceptor (phi = all)
        TestRuntimes.WaitUntil(() => before.All(m => m.Delivered.Count == Values), "every member's handler ran for every SafeSend");
        int[] order = before[0].Delivered.ToArray();
        Assert.All(before, m => Assert.Equal(order, m.Delivered.ToArray()));
        Assert.Equal(Enumerable.Range(1, Values), order.Order());
        foreach (Member m in before.AsEnumerable().Reverse()) m.Runtime.Crash();
        // Every log ends with the whole history in the same last view: the precondition for what follows.
        HistoryLogImage[] images = directories.Select(d => Image(LogOf(d))).ToArray();
        Assert.All(images, image => Assert.Equal(order, image.Entries.Select(e => DecodeValue(e.Payload.ToArray()))));
        Assert.All(images, image => Assert.Equal(images[0].LastView!.Key, image.LastView!.Key));
        return order;
    }

    [Fact]
    public void A_flipped_byte_and_a_torn_write_in_two_logs_are_moved_aside_and_reported_and_the_intact_log_brings_back_every_SafeSend()
    {
        string root = Directory.CreateTempSubdirectory("isis-safelog-damage-").FullName;
        try
        {
            string[] dirs = Enumerable.Range(0, 3).Select(i => Path.Combine(root, "member" + i)).ToArray();
            using var runtimes = new TestRuntimes();
            int[] sent = SendThenCrashAll(runtimes, dirs);

            // Member 0: a byte flipped inside the third-last record. Member 1: its last record torn. Member 2: intact.
            string[] damagedLogs = [LogOf(dirs[0]), LogOf(dirs[1])]; // the files the reports name (a recovery then starts a new generation)
            Damage flipped = FlipByteInRecord(damagedLogs[0], fromEnd: 3);
            Damage torn = TearLastRecord(damagedLogs[1]);
            Assert.Equal(Values - 3, Image(LogOf(dirs[0])).Entries.Count);
            Assert.Equal(Values - 1, Image(LogOf(dirs[1])).Entries.Count);

            var logger = new CapturingLoggerFactory();
            List<Member> after;
            string stderr;
            using (var capture = new StandardErrorCapture())
            {
                // Member 0 logs to an ILogger; members 1 and 2 configure none, so problems go to standard error.
                after = Start(runtimes, dirs, i => i == 0 ? logger : null);
                TestRuntimes.WaitUntil(() => after.All(m => m.Delivered.Count >= Values), "the restarted group replays the history");
                stderr = capture.Text;
            }

            // Every acknowledged SafeSend is back, in the original order, at every member, and nothing else.
            Assert.All(after, m => Assert.Equal(sent, m.Delivered.ToArray()));
            Assert.All(after, m => Assert.True(m.Runtime.IsRunning, m.Runtime.ShutdownReason));

            // The damaged bytes were moved aside (exactly the bytes from the first bad record on), not thrown away.
            string aside0 = AssertMovedAside(dirs[0], flipped);
            string aside1 = AssertMovedAside(dirs[1], torn);
            Assert.Empty(DamagedFiles(dirs[2]));

            // Reported: at Error level to the logger configured, to standard error where none is.
            Assert.Contains(logger.Entries, e => e.Level == LogLevel.Error && e.Text.Contains(flipped.Wording(damagedLogs[0])) && e.Text.Contains(aside0));
            Assert.Contains(torn.Wording(damagedLogs[1]), stderr);
            Assert.Contains(aside1, stderr);
            Assert.Contains($"Group '{GroupName}'", stderr);
            Assert.DoesNotContain(damagedLogs[0], stderr); // member 0 has a logger: nothing of it on standard error
            Assert.DoesNotContain(LogOf(dirs[2]) + " is damaged", stderr);

            // The damaged logs were rebuilt from the intact one: every log is whole and holds the whole history.
            TestRuntimes.WaitUntil(() => dirs.All(d => LogHolds(LogOf(d), sent)), "every member's log holds the recovered history");
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    [Fact]
    public void When_every_log_is_damaged_the_group_recovers_the_longest_intact_prefix_and_replays_nothing_else()
    {
        string root = Directory.CreateTempSubdirectory("isis-safelog-damage-").FullName;
        try
        {
            string[] dirs = Enumerable.Range(0, 3).Select(i => Path.Combine(root, "member" + i)).ToArray();
            using var runtimes = new TestRuntimes();
            int[] sent = SendThenCrashAll(runtimes, dirs);

            // Three different damages; member 1 keeps the most (all but its last record).
            string[] damagedLogs = dirs.Select(LogOf).ToArray(); // the files the reports name (a recovery then starts a new generation)
            Damage[] damage = [FlipByteInRecord(damagedLogs[0], fromEnd: 5), TearLastRecord(damagedLogs[1]), FlipByteInRecord(damagedLogs[2], fromEnd: 2)];
            int[] intact = dirs.Select(d => Image(LogOf(d)).Entries.Count).ToArray();
            Assert.Equal([Values - 5, Values - 1, Values - 2], intact);
            int[] expected = sent[..intact.Max()];

            var logger = new CapturingLoggerFactory();
            List<Member> after = Start(runtimes, dirs, _ => logger);
            TestRuntimes.WaitUntil(() => after.All(m => m.Delivered.Count >= expected.Length), "the restarted group replays what survived");

            // The longest intact history comes back, at every member, in order; nothing damaged or made up is replayed.
            Assert.All(after, m => Assert.Equal(expected, m.Delivered.ToArray()));
            Assert.All(after, m => Assert.True(m.Runtime.IsRunning, m.Runtime.ShutdownReason));
            for (int i = 0; i < dirs.Length; i++)
            {
                string aside = AssertMovedAside(dirs[i], damage[i]);
                Assert.Contains(logger.Entries, e => e.Level == LogLevel.Error && e.Text.Contains(damage[i].Wording(damagedLogs[i])) && e.Text.Contains(aside));
            }
            TestRuntimes.WaitUntil(() => dirs.All(d => LogHolds(LogOf(d), expected)), "every member's log holds the recovered history");

            // The group goes on: a new SafeSend follows the recovered history everywhere, in memory and on disk.
            after[2].Group.SafeSend(1, 1000);
            int[] now = [.. expected, 1000];
            TestRuntimes.WaitUntil(() => after.All(m => m.Delivered.Count == now.Length), "the new SafeSend is delivered");
            Assert.All(after, m => Assert.Equal(now, m.Delivered.ToArray()));
            TestRuntimes.WaitUntil(() => dirs.All(d => LogHolds(LogOf(d), now)), "every member logged the new SafeSend");
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }
}
