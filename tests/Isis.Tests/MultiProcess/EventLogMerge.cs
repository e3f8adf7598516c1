using Isis.Simulation;

namespace Isis.Tests.MultiProcess;

/// <summary>
/// Merges the event logs of several real processes into one history for <c>HistoryChecker</c>.
/// </summary>
/// <remarks>
/// Each log is in its process's own order, stamped with wall-clock microseconds (shared by every
/// process on the machine). A plain sort by time is almost right, but not quite: the runtime hands
/// a batch's events (MessageSent among them) to the log only after the batch's datagrams are on
/// the wire, so another process can log the delivery a few microseconds before the sender logs the
/// send. The merge therefore takes the events in time order, keeps each process's own order, and
/// holds back a Deliver until the Send of its message has been taken (when some log has that
/// Send); a held-back event takes the time of the event before it, so times stay non-decreasing.
/// For the same reason a SafeSend's acceptor logs its SafeAccepted after its acceptance is on the
/// wire, so a SafeSend delivered on the normal path (not at a view's end) is also held back until
/// every SafeAccepted of that message that some log has was taken.
/// Nothing else is reordered, so every other property is checked on the order the processes saw.
/// </remarks>
internal static class EventLogMerge
{
    public sealed record Result(History History, int Reordered, long MaxShiftMicros);

    public static Result Merge(IReadOnlyList<History> logs)
    {
        var sent = new HashSet<MessageId>();
        var acceptsLeft = new Dictionary<MessageId, int>();
        int total = 0;
        foreach (History log in logs)
        {
            total += log.Count;
            foreach (HistoryEvent e in log.Events)
            {
                if (e.Kind == HistoryEventKind.Send) sent.Add(e.Message);
                if (e.Kind == HistoryEventKind.SafeAccepted) acceptsLeft[e.Message] = acceptsLeft.GetValueOrDefault(e.Message) + 1;
            }
        }

        var merged = new History(total + 1);
        var taken = new HashSet<MessageId>();
        int[] next = new int[logs.Count];
        long now = long.MinValue;
        int reordered = 0;
        long maxShift = 0;
        for (int n = 0; n < total; n++)
        {
            int pick = -1;
            int fallback = -1;
            for (int i = 0; i < logs.Count; i++)
            {
                if (next[i] >= logs[i].Count) continue;
                HistoryEvent head = logs[i][next[i]];
                if (fallback < 0 || head.Time < logs[fallback][next[fallback]].Time) fallback = i;
                bool blocked = head.Kind == HistoryEventKind.Deliver
                    && ((sent.Contains(head.Message) && !taken.Contains(head.Message))
                        || (head.Primitive == Isis.Core.Groups.MessageKind.Safe && !head.AtViewEnd && acceptsLeft.GetValueOrDefault(head.Message) > 0));
                if (!blocked && (pick < 0 || head.Time < logs[pick][next[pick]].Time)) pick = i;
            }
            // Every head blocked means deliveries waiting on each other's sends: a real violation;
            // take the earliest and let the checker report it.
            if (pick < 0) pick = fallback;
            HistoryEvent e = logs[pick][next[pick]++];
            if (pick != fallback) reordered++;
            if (e.Time < now)
            {
                maxShift = Math.Max(maxShift, now - e.Time);
                e = e with { Time = now };
            }
            now = e.Time;
            if (e.Kind == HistoryEventKind.Send) taken.Add(e.Message);
            if (e.Kind == HistoryEventKind.SafeAccepted) acceptsLeft[e.Message]--;
            merged.Add(e);
        }
        merged.RecordEnd(now == long.MinValue ? 0 : now);
        return new Result(merged, reordered, maxShift);
    }

    /// <summary>
    /// Reads a process's event log. A process killed (SIGKILL) while it wrote an event leaves that
    /// last line cut short, with no newline after it: that event never happened as far as anyone
    /// saw, so it is left out; every complete line is read (a malformed one still fails).
    /// </summary>
    public static History Read(string path)
    {
        string text = File.ReadAllText(path);
        int end = text.LastIndexOf('\n');
        using var reader = new StringReader(end < 0 ? "" : text[..(end + 1)]);
        return History.ReadJsonLines(reader);
    }
}
