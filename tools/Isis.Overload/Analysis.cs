namespace Isis.Overload;

/// <summary>
/// From the raw records to the report: each read classified fresh or stale against the writes
/// acknowledged before it was sent, the bins, and the time to converge after the overload.
/// </summary>
internal static class Analysis
{
    public static readonly string[] Definitions =
    [
        "Times are seconds on the parent's clock since the writer and the readers started (the warm-up's start).",
        "A write is acknowledged when the answer to its PUT reaches the parent: the update is then merged into the history of the writer's instance (SetAsync, then WaitForAsync). The writer sends one PUT at a time, value 1, 2, 3, ..., one per period.",
        "A read is stale if the value it returned is lower than the value of the newest write acknowledged before the read was sent (both on the parent's clock); fresh otherwise. A read not answered within the read time limit (or answered with an error) is failed: neither fresh nor stale. Stale % is stale / answered.",
        "Writes behind (of a stale read): the acknowledged writes it missed, those with a value above the one it returned, acknowledged before it was sent. Age: how long before the read was sent the first of them was acknowledged. Means and maxima are over the stale reads of the bin.",
        "A read belongs to the bin in which it was sent; a write to the bin in which it was acknowledged. Latency: from sending a read to its answer, over the answered reads.",
        "History gap: in each /stats round (the healthy instances asked first, then the starved one), the longest healthy history length minus the starved one's; a round catches up when the gap is zero or less. Repaired entries, late duplicates and dropped-malformed datagrams per bin are differences of the starved instance's counters between the last /stats answers before the bin's start and end.",
        "Time to converge (strict): from the overload's end to the later of (a) the send time of the first starved read after which every read sent to the starved replica was answered and fresh and (b) the first /stats round after which every round found no history gap; 0 if both held from the overload's end on. Not converged if the last read or the last round of the run was not.",
        "Time to converge (lenient): the same, counting as caught up a read answered less than the lag tolerance out of date (age below it) and a round whose history gap is at most the tolerance divided by the update period. It leaves out the one-write races every replica but the writer's shows in the steady state: a read can reach a replica a fraction of a millisecond after the writer's acknowledgment, before the merge that carries the write.",
    ];

    public static void Fill(OverloadReport report, OverloadOptions o, List<WriteRecord> writes, ReadRecord[] reads, List<StatsSample> stats, long missedPeriods)
    {
        report.Definitions = [.. Definitions];
        WriteRecord[] acked = [.. writes.Where(w => w.Acknowledged).OrderBy(w => w.Value)];
        double[] ackTimes = [.. acked.Select(w => w.Done)];
        long[] ackValues = [.. acked.Select(w => w.Value)];
        report.Writer = new WriterSummary
        {
            Attempted = writes.Count,
            Acknowledged = acked.Length,
            Failed = writes.Count - acked.Length,
            MissedPeriods = missedPeriods,
            LastAcknowledgedValue = acked.Length > 0 ? acked[^1].Value : 0,
        };

        var classified = reads.OrderBy(r => r.Sent).Select(r => (Read: r, Fresh: Classify(r, ackTimes, ackValues))).ToArray();
        var rounds = Rounds(stats, healthy: [0, 1], starved: 2); // instances 0 and 1 are healthy, 2 is starved (Experiment)
        StatsSample[] starvedSamples = [.. stats.Where(s => s.Instance == 2 && s.Stats != null).OrderBy(s => s.Done)];

        double bin = o.BinSeconds;
        // The phases end a few milliseconds past a bin's edge (stopping the stress takes time): the last bin takes them.
        int bins = Math.Max(1, (int)Math.Floor(report.MeasurementEnd / bin));
        for (int b = 0; b < bins; b++)
        {
            double start = b * bin, end = b == bins - 1 ? report.MeasurementEnd : (b + 1) * bin, mid = (start + end) / 2;
            var inBin = classified.Where(c => c.Read.Sent >= start && c.Read.Sent < end).ToArray();
            double[] writeMs = [.. acked.Where(w => w.Done >= start && w.Done < end).Select(w => (w.Done - w.Sent) * 1000)];
            var roundsInBin = rounds.Where(r => r.At >= start && r.At < end).ToArray();
            var row = new BinRow
            {
                Start = start,
                End = Math.Round(end, 3),
                Phase = mid < report.OverloadStart ? "warm-up" : mid < report.OverloadEnd ? "overload" : "after",
                Starved = Target(inBin.Where(c => c.Read.Starved)),
                Control = Target(inBin.Where(c => !c.Read.Starved)),
                WritesAcknowledged = writeMs.Length,
                WriteP50Ms = Math.Round(Percentile(writeMs, 0.5), 2),
                WriteMaxMs = Math.Round(writeMs.DefaultIfEmpty().Max(), 2),
                StatsRounds = roundsInBin.Length,
                MaxHistoryGap = roundsInBin.Where(r => r.Gap.HasValue).Select(r => r.Gap!.Value).DefaultIfEmpty(-1).Max(),
                StarvedStatsTimeouts = stats.Count(s => s.Instance == 2 && s.Stats == null && s.Sent >= start && s.Sent < end),
                Trailing = starvedSamples.Any(s => s.Done >= start && s.Done < end && s.Stats!.Collection.Trailing),
                RepairedEntries = Delta(starvedSamples, start, end, s => s.Collection.RepairedEntries),
                LateDuplicates = Delta(starvedSamples, start, end, s => s.Collection.LateDuplicates),
                DroppedMalformed = Delta(starvedSamples, start, end, s => s.Runtime?.DroppedMalformed),
            };
            report.Bins.Add(row);
        }
        report.AfterExclusion = Exclusion(report, classified, starvedSamples);
        report.Convergence = Converge(report, o, classified.Where(c => c.Read.Starved).ToArray(), rounds);
    }

    /// <summary>What the starved replica answered after the healthy instances had installed a view without it; null if they never did.</summary>
    private static AfterExclusion? Exclusion(OverloadReport report, (ReadRecord Read, (bool Stale, long Behind, double AgeMs)? Fresh)[] reads, StatsSample[] starvedSamples)
    {
        string starved = report.Instances.Count > 2 ? report.Instances[2].IsisAddress : "";
        ViewChange? first = report.ViewChanges.Where(v => v.Instance != 2 && !v.Members.Contains(starved)).OrderBy(v => v.At).FirstOrDefault();
        if (first == null) return null;
        var after = reads.Where(r => r.Read.Starved && r.Read.Sent >= first.At && r.Fresh.HasValue).ToArray();
        return new AfterExclusion
        {
            ExcludedAt = first.At,
            ReadsAnswered = after.Length,
            StaleReadsAnswered = after.Count(r => r.Fresh!.Value.Stale),
            LastReadAnsweredAt = after.Length > 0 ? Math.Round(after.Max(r => r.Read.Done), 3) : null,
            StatsAnswersStillInOldView = starvedSamples.Count(s => s.Sent >= first.At && s.Stats!.Running && s.Stats.ViewId < first.ViewId && s.Stats.Members.Contains(starved)),
        };
    }

    /// <summary>Null if failed; else (stale, writes behind, age in ms) against the writes acknowledged before the read was sent.</summary>
    private static (bool Stale, long Behind, double AgeMs)? Classify(ReadRecord r, double[] ackTimes, long[] ackValues)
    {
        if (!r.Answered) return null;
        int newest = UpperBound(ackTimes, r.Sent) - 1; // the last write acknowledged before the read left
        if (newest < 0 || r.Value >= ackValues[newest]) return (false, 0, 0);
        int firstMissed = UpperBound(ackValues, r.Value); // the first acknowledged write with a value above the one read
        return (true, newest - firstMissed + 1, (r.Sent - ackTimes[firstMissed]) * 1000);
    }

    private static TargetBin Target(IEnumerable<(ReadRecord Read, (bool Stale, long Behind, double AgeMs)? Fresh)> reads)
    {
        var all = reads.ToArray();
        var answered = all.Where(c => c.Fresh.HasValue).ToArray();
        var stale = answered.Where(c => c.Fresh!.Value.Stale).Select(c => c.Fresh!.Value).ToArray();
        double[] latency = [.. answered.Select(c => (c.Read.Done - c.Read.Sent) * 1000)];
        return new TargetBin
        {
            Reads = all.Length,
            Failed = all.Length - answered.Length,
            Answered = answered.Length,
            Stale = stale.Length,
            StalePercent = answered.Length == 0 ? 0 : Math.Round(100.0 * stale.Length / answered.Length, 2),
            MeanWritesBehind = stale.Length == 0 ? 0 : Math.Round(stale.Average(s => s.Behind), 2),
            MaxWritesBehind = stale.Length == 0 ? 0 : stale.Max(s => s.Behind),
            MeanAgeMs = stale.Length == 0 ? 0 : Math.Round(stale.Average(s => s.AgeMs), 1),
            MaxAgeMs = stale.Length == 0 ? 0 : Math.Round(stale.Max(s => s.AgeMs), 1),
            LatencyP50Ms = Math.Round(Percentile(latency, 0.5), 2),
            LatencyMaxMs = Math.Round(latency.DefaultIfEmpty().Max(), 2),
        };
    }

    /// <summary>A /stats round: when the starved instance answered (or was asked), and its history gap to the healthy ones (null if one did not answer).</summary>
    private readonly record struct Round(double At, long? Gap);

    private static Round[] Rounds(List<StatsSample> stats, int[] healthy, int starved) =>
    [
        .. stats.GroupBy(s => s.Round).OrderBy(g => g.Key).Select(g =>
        {
            StatsSample? s = g.Where(x => x.Instance == starved).Cast<StatsSample?>().FirstOrDefault();
            long[] h = [.. g.Where(x => healthy.Contains(x.Instance) && x.Stats != null).Select(x => x.Stats!.Collection.HistoryLength)];
            double at = s is { } x ? x.Done : g.Max(y => y.Done);
            long? gap = s is { Stats: { } st } && h.Length > 0 ? h.Max() - st.Collection.HistoryLength : null;
            return new Round(at, gap);
        }),
    ];

    private static Convergence Converge(OverloadReport report, OverloadOptions o, (ReadRecord Read, (bool Stale, long Behind, double AgeMs)? Fresh)[] starvedReads, Round[] rounds)
    {
        double end = report.OverloadEnd;
        var c = new Convergence { LagToleranceMs = o.LagToleranceMs };
        int lastStale = Array.FindLastIndex(starvedReads, r => r.Fresh is { Stale: true });
        int lastFailed = Array.FindLastIndex(starvedReads, r => !r.Fresh.HasValue);
        if (lastStale >= 0) c.LastStaleReadSent = Math.Round(starvedReads[lastStale].Read.Sent, 3);
        if (lastFailed >= 0) c.LastFailedReadSent = Math.Round(starvedReads[lastFailed].Read.Sent, 3);
        c.StaleReadsAfterOverload = starvedReads.Count(r => r.Read.Sent >= end && r.Fresh is { Stale: true });
        c.FailedReadsAfterOverload = starvedReads.Count(r => r.Read.Sent >= end && !r.Fresh.HasValue);
        c.Strict = Settle(end, starvedReads, r => r.Fresh is { Stale: false }, rounds, gap => gap <= 0);
        long entries = o.LagToleranceMs / o.UpdateMs;
        c.Lenient = Settle(end, starvedReads, r => r.Fresh is { } f && f.AgeMs < o.LagToleranceMs, rounds, gap => gap <= entries);
        return c;
    }

    /// <summary>The first read, and the first round, of the tail in which every one is caught up (clamped to the overload's end).</summary>
    private static Settled Settle(double end, (ReadRecord Read, (bool Stale, long Behind, double AgeMs)? Fresh)[] reads,
        Func<(ReadRecord Read, (bool Stale, long Behind, double AgeMs)? Fresh), bool> readCaughtUp, Round[] rounds, Func<long, bool> gapCaughtUp)
    {
        var s = new Settled();
        int lastBad = Array.FindLastIndex(reads, r => !readCaughtUp(r));
        if (reads.Length > 0 && lastBad < reads.Length - 1)
        {
            double from = lastBad < 0 ? 0 : reads[lastBad + 1].Read.Sent;
            s.ReadsAfter = Math.Round(Math.Max(0, from - end), 3);
        }
        int lastBehind = Array.FindLastIndex(rounds, r => r.Gap is not { } g || !gapCaughtUp(g));
        if (rounds.Length > 0 && lastBehind < rounds.Length - 1)
        {
            double from = lastBehind < 0 ? 0 : rounds[lastBehind + 1].At;
            s.HistoryAfter = Math.Round(Math.Max(0, from - end), 3);
        }
        s.Converged = s.ReadsAfter.HasValue && s.HistoryAfter.HasValue;
        if (s.Converged) s.After = Math.Max(s.ReadsAfter!.Value, s.HistoryAfter!.Value);
        return s;
    }

    /// <summary>
    /// A counter's growth over [start, end): the last answer before end minus the last answer before
    /// start (or the first in the bin); answers without the counter (a runtime already shut down) are left out.
    /// </summary>
    private static long Delta(StatsSample[] samples, double start, double end, Func<InstanceStats, long?> counter)
    {
        (double Done, long Value)[] upToEnd = [.. samples.Where(s => s.Done < end && counter(s.Stats!).HasValue).Select(s => (s.Done, counter(s.Stats!)!.Value))];
        if (upToEnd.Length == 0) return 0;
        (double, long Value)[] before = [.. upToEnd.Where(s => s.Done < start)];
        return upToEnd[^1].Value - (before.Length > 0 ? before[^1].Value : upToEnd[0].Value);
    }

    private static int UpperBound<T>(T[] sorted, T value) where T : IComparable<T>
    {
        int lo = 0, hi = sorted.Length;
        while (lo < hi)
        {
            int mid = (lo + hi) / 2;
            if (sorted[mid].CompareTo(value) <= 0) lo = mid + 1;
            else hi = mid;
        }
        return lo;
    }

    private static double Percentile(double[] values, double q)
    {
        if (values.Length == 0) return 0;
        double[] v = [.. values.Order()];
        return v[Math.Min(v.Length - 1, (int)(q * v.Length))];
    }
}
