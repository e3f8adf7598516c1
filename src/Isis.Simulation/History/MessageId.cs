using Isis.Core.Identity;

namespace Isis.Simulation;

/// <summary>
/// Identity of one multicast: sender incarnation, group, the view it was sent in, and a sequence
/// number. Sequence numbers start at 1 for every (sender, group, view), so FIFO order and "no gap"
/// can be checked without knowing anything else about the run.
/// </summary>
internal readonly record struct MessageId(NodeId Sender, GroupId Group, int ViewId, long Seq)
{
    public override string ToString() => $"[{Sender} g={Group} v{ViewId} seq {Seq}]";
}
