using System.Diagnostics;
using Isis.Core.Groups;
using Isis.Core.Node;
using Isis.Runtime;

namespace Isis;

/// <summary>The core's events about this group, from the event loop: one switch, here, over their kinds.</summary>
public sealed partial class Group
{
    /// <summary>
    /// Hands one event of the core about this group to the part of the group it concerns. Runs on the
    /// event loop, in the order the core produced its events (the runtime looked the group up once).
    /// </summary>
    internal void OnCoreEvent(GroupEvent e, EventLoop loop)
    {
        switch (e)
        {
            case MessageDelivered d:
                OnDelivered(d.Sender, d.Kind, d.Payload.Span, d.ViewId, d.Seq);
                if (d.Kind == MessageKind.Safe && d.Sender == loop.Node.Self) OnOwnSafeDelivered();
                break;
            case ViewInstalled v:
                using (Activity? a = _runtime.Instruments.Activities.StartActivity("isis.view_change"))
                {
                    a?.SetTag("isis.group", Name);
                    a?.SetTag("isis.view.id", v.View.Id);
                    a?.SetTag("isis.view.members", v.View.Members.Length);
                }
                OnViewInstalled(v.View);
                break;
            case GroupLeft l: OnLeft(l.Terminated, l.FinalViewId); break;
            case FlushCompleted f: OnFlushCompleted(f.Token); break;
            case QueryCompleted q: OnQueryCompleted(q); break;
            case Core.Clients.ClientRequestArrived r: OnClientRequest(r, loop); break;
            case StateRequested r: OnStateRequested(r); break;
            case StateChunkReceived c: OnStateChunk(c.Chunk); break;
            case StateReceived: OnStateReceived(); break;
            case StateTransferAborted a: OnStateAborted(a.Reason); break;
            case StateReset r: OnStateReset(r.CutViewId, r.Origin); break;
            case GroupKeyRejected k: OnKeyRejected(k.Reason); break;
            case GroupKeyRotated k: OnKeyRotated(k.ViewId, k.Fingerprint); break;
            case HistoryReplayed h: OnReplayed(h.Entry); break;
            case CheckpointRestored c: OnCheckpointRestored(c.Checkpoint); break;
            case CheckpointReadRequested r: OnCheckpointReadRequested(r, loop); break;
            case CheckpointChunkReceived c: OnCheckpointChunk(c, loop); break;
            case HistoryReady h:
                OnHistoryPosition(h.Lineage, h.Entries, h.Digest);
                OnHistoryReady(h.Lineage);
                CompleteForcedRecovery(h.Entries);
                break;
            case HistoryRecoveredWithout r: OnRecoveredWithout(r); break;
            case HistoryNotice n:
                _runtime.ReportHistoryProblem(Name, n.Kind == HistoryNoticeKind.Waiting ? DescribeWaiting(n.Text) : n.Text, error: n.Kind != HistoryNoticeKind.Waiting);
                break;
            // The others (MessageSent, SafeAccepted, MulticastAddressChanged, GroupKeyRetired,
            // HistoryTrimmed, SlowRepliersReported) are for the event log, the loop or the runtime's log.
        }
    }
}
