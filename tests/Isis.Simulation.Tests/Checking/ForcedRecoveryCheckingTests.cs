using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

/// <summary>
/// RecoveredHistory around a forced recovery, on histories built by hand: what a forced recovery
/// may lose (the SafeSends only given-up logs held, whichever incarnation of the log delivered them),
/// and that a replay before it is judged against the history as it stood then.
/// </summary>
public sealed class ForcedRecoveryCheckingTests
{
    private static readonly NodeId A1 = N(1, 1), A2 = N(1, 2), A3 = N(1, 3), B1 = N(2, 1), B2 = N(2, 2), B3 = N(2, 3);

    private sealed class Run
    {
        private long _time;
        private readonly Dictionary<NodeId, long> _seq = [];
        public History History { get; } = new();

        private long Tick() => _time += 10;

        public Run Install(int view, params NodeId[] members)
        {
            foreach (NodeId m in members) History.RecordViewInstall(Tick(), m, G, view, members);
            return this;
        }

        /// <summary>p SafeSends (phi 1) in view <paramref name="view"/>, and <paramref name="deliverers"/> deliver it.</summary>
        public MessageId SafeSend(NodeId p, int view, params NodeId[] deliverers)
        {
            long seq = _seq[p] = _seq.GetValueOrDefault(p) + 1;
            var m = new MessageId(p, G, view, seq);
            History.RecordSend(Tick(), m, HashOf(m), MessageKind.Safe, 1);
            History.RecordSafeAccepted(Tick(), p, m);
            foreach (NodeId q in deliverers) History.RecordDeliver(Tick(), q, view, m, HashOf(m), MessageKind.Safe);
            return m;
        }

        public Run Crash(params NodeId[] ps)
        {
            foreach (NodeId p in ps) History.RecordCrash(Tick(), p);
            return this;
        }

        public Run LogOpened(NodeId p, params NodeId[] earlier)
        {
            History.RecordLogOpened(Tick(), p, G, earlier);
            return this;
        }

        public Run Forced(NodeId at, long kept, params NodeId[] missing)
        {
            History.Add(new HistoryEvent(Tick(), at, HistoryEventKind.ForcedRecovery) { Group = G, LogIndex = kept, Members = missing });
            return this;
        }

        public Run Replay(NodeId p, params MessageId[] entries)
        {
            for (int i = 0; i < entries.Length; i++) History.RecordReplay(Tick(), p, G, i + 1, entries[i], HashOf(entries[i]));
            History.Add(new HistoryEvent(Tick(), p, HistoryEventKind.HistoryHeld) { Group = G, LogIndex = entries.Length });
            return this;
        }

        public IReadOnlyList<Violation> RecoveredHistory()
        {
            var sink = new ViolationSink();
            HistoryChecker.RecoveredHistory(History.AsSpan(), sink);
            return sink.ToResult(History.Count).Violations;
        }
    }

    [Fact]
    public void A_replay_before_a_forced_recovery_is_judged_against_the_history_it_replayed()
    {
        // A1 and B1 deliver m1 and come through v1. A2 (A1's log) delivers m2 alone in v3 and
        // crashes there; A3 (the same log) replays both. Then the operator forces the recovery at
        // B2 without A's incarnations, keeping one entry: m2 is given up with them. A3's replay came
        // before the force and held m2; it is complete, though the history since no longer has m2.
        var r = new Run().Install(1, A1, B1);
        MessageId m1 = r.SafeSend(A1, 1, A1, B1);
        r.Install(2, A1, B1).Crash(A1, B1)
            .LogOpened(A2, A1).Install(3, A2).Replay(A2, m1);
        MessageId m2 = r.SafeSend(A2, 3, A2);
        r.Crash(A2)
            .LogOpened(A3, A1, A2).Install(4, A3).Replay(A3, m1, m2).Crash(A3)
            .LogOpened(B2, B1).Install(5, B2).Forced(B2, 1, A1, A2, A3).Replay(B2, m1);
        Assert.Empty(r.RecoveredHistory());

        // The same, but A3's replay misses m2, which it should have held: still caught.
        var s = new Run().Install(1, A1, B1);
        m1 = s.SafeSend(A1, 1, A1, B1);
        s.Install(2, A1, B1).Crash(A1, B1)
            .LogOpened(A2, A1).Install(3, A2).Replay(A2, m1);
        m2 = s.SafeSend(A2, 3, A2);
        s.Crash(A2)
            .LogOpened(A3, A1, A2).Install(4, A3).Replay(A3, m1).Crash(A3)
            .LogOpened(B2, B1).Install(5, B2).Forced(B2, 1, A1, A2, A3).Replay(B2, m1);
        IReadOnlyList<Violation> v = s.RecoveredHistory();
        Assert.Contains(v, x => x.Description.Contains($"{m2}", StringComparison.Ordinal) && x.Description.Contains($"{A3} replayed", StringComparison.Ordinal));
    }

    /// <summary>
    /// A1 and B1 deliver m1 and come through v1; the first forced recovery (at B2) gives A1 up. A2,
    /// restarted on A1's disk (its log names A1), copies the history, then delivers m2 alone in v5
    /// and crashes. A second forced recovery at B3 keeps one entry: the core gives up every log that
    /// names a given-up incarnation, A2's included, so m2 is lost.
    /// </summary>
    private static (Run Run, MessageId Lost) SharedLog(bool a2WroteA1sLog)
    {
        var r = new Run().Install(1, A1, B1);
        MessageId m1 = r.SafeSend(A1, 1, A1, B1);
        r.Install(2, A1, B1).Crash(A1, B1)
            .LogOpened(B2, B1).Install(3, B2).Forced(B2, 1, A1).Replay(B2, m1);
        if (a2WroteA1sLog) r.LogOpened(A2, A1);
        else r.LogOpened(A2); // a wiped disk: a log of its own
        r.Install(4, B2, A2).Replay(A2, m1).Crash(B2).Install(5, A2);
        MessageId m2 = r.SafeSend(A2, 5, A2);
        r.Crash(A2)
            .LogOpened(B3, B1, B2).Install(6, B3).Forced(B3, 1).Replay(B3, m1);
        return (r, m2);
    }

    [Fact]
    public void What_a_later_incarnation_delivered_alone_on_a_given_up_log_may_be_lost()
    {
        Assert.Empty(SharedLog(a2WroteA1sLog: true).Run.RecoveredHistory());
    }

    [Fact]
    public void What_an_incarnation_with_a_log_of_its_own_delivered_alone_is_not_excused()
    {
        var (run, lost) = SharedLog(a2WroteA1sLog: false);
        IReadOnlyList<Violation> v = run.RecoveredHistory();
        Assert.Contains(v, x => x.Description.Contains($"SafeSend {lost}", StringComparison.Ordinal) && x.Description.Contains($"{B3} replayed", StringComparison.Ordinal));
    }
}
