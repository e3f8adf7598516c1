using Isis.Core.Identity;

namespace Isis.Simulation.Checking;

internal static partial class HistoryChecker
{
    /// <summary>
    /// GroupLocks (runs whose application holds the lock table: LockAcquired and LockReleased events):
    /// <list type="bullet">
    /// <item><b>Mutual exclusion.</b> While a process holds a lock (from its LockAcquired to its
    /// LockReleased, or until it crashes, is expelled or completes leaving the group, which end its
    /// hold at the next view), no other process acquires that lock.</item>
    /// <item><b>Fencing tokens grow.</b> Each acquisition of a lock carries a larger token than every
    /// earlier acquisition of it, whoever held it and whatever failed in between. Tokens start over
    /// only when the group's state does (a StateReset: every member that held the table had left).</item>
    /// </list>
    /// </summary>
    internal static void LockSafety(ReadOnlySpan<HistoryEvent> events, ViolationSink sink)
    {
        const string P = nameof(LockSafety);
        var holder = new Dictionary<(GroupId Group, string Lock), (NodeId Process, long Token, int Index)>();
        var highest = new Dictionary<(GroupId Group, string Lock), (long Token, int Index)>();
        for (int i = 0; i < events.Length; i++)
        {
            HistoryEvent e = events[i];
            switch (e.Kind)
            {
                case HistoryEventKind.LockAcquired:
                {
                    var key = (e.Group, e.Description!);
                    if (holder.TryGetValue(key, out var h) && h.Process != e.Process)
                    {
                        sink.Report(P, $"{e.Process} acquired lock '{key.Item2}' of g={e.Group} (token {e.LogIndex}) at {At(i, e)} while {h.Process} held it (token {h.Token}, since event #{h.Index})");
                    }
                    if (highest.TryGetValue(key, out var top) && e.LogIndex <= top.Token)
                    {
                        sink.Report(P, $"{e.Process} acquired lock '{key.Item2}' of g={e.Group} at {At(i, e)} with fencing token {e.LogIndex}, not above token {top.Token} granted at event #{top.Index}");
                    }
                    holder[key] = (e.Process, e.LogIndex, i);
                    if (!highest.TryGetValue(key, out top) || e.LogIndex > top.Token) highest[key] = (e.LogIndex, i);
                    break;
                }
                case HistoryEventKind.LockReleased:
                {
                    var key = (e.Group, e.Description!);
                    if (holder.TryGetValue(key, out var h) && h.Process == e.Process) holder.Remove(key);
                    break;
                }
                case HistoryEventKind.Crash or HistoryEventKind.Expel:
                    foreach (var key in holder.Where(kv => kv.Value.Process == e.Process).Select(kv => kv.Key).ToList()) holder.Remove(key);
                    break;
                case HistoryEventKind.LeaveCompleted:
                    foreach (var key in holder.Where(kv => kv.Value.Process == e.Process && kv.Key.Group == e.Group).Select(kv => kv.Key).ToList()) holder.Remove(key);
                    break;
                case HistoryEventKind.StateReset:
                    foreach (var key in highest.Keys.Where(k => k.Group == e.Group).ToList()) highest.Remove(key);
                    break;
            }
        }
    }
}
